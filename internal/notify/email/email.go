// Package email is the email sink type (type: email): one message per
// notification through an SMTP submission server (docs/delivery.md,
// "### email"). It owns the smtp block, its check and defaults, and the
// sending (Sink).
package email

import (
	"cmp"
	"errors"
	"slices"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/notify"
)

// PortDefault is smtp.port when a sink does not set it: 587, submission.
const PortDefault = 587

// Settings are the keys of an email sink.
type Settings struct {
	// SMTP configures the server and the addresses. Required.
	SMTP *SMTP `yaml:"smtp"`
}

// SMTP configures an email sink.
type SMTP struct {
	// Host is the SMTP server. Required.
	Host string `yaml:"host"`
	// Port is the submission port. Defaults to 587.
	Port int `yaml:"port"`
	// Username and Password authenticate (AUTH PLAIN, only over TLS);
	// write the password as ${ENV_VAR}. Defaults to no authentication.
	Username string `yaml:"username"`
	Password string `yaml:"password"`
	// From is the sender address. Required.
	From string `yaml:"from"`
	// To lists the recipients. Required.
	To []string `yaml:"to"`
	// StartTLS is required, optional or none. Defaults to required.
	StartTLS string `yaml:"starttls"`
}

func init() {
	notify.Register("email", Decode, func(_ *config.Sink, st Settings, _ notify.Env) (notify.Sink, error) {
		m := st.SMTP
		return New(Options{Host: m.Host, Port: m.Port, Username: m.Username, Password: m.Password,
			From: m.From, To: m.To, StartTLS: m.StartTLS})
	})
}

// Decode reads and checks the smtp block of an email sink, defaulting
// smtp.port to 587 and smtp.starttls to required.
func Decode(s *config.Sink) (Settings, error) {
	var st Settings
	if err := s.DecodeBlock(&st); err != nil {
		return st, err
	}
	m := st.SMTP
	if m == nil {
		return st, s.Errorf("smtp", "is required for an email sink (host, from, to)")
	}
	var errs []error
	bad := func(k, format string, args ...any) { errs = append(errs, s.Errorf("smtp."+k, format, args...)) }
	if m.Host == "" {
		bad("host", "is required")
	}
	if m.From == "" {
		bad("from", "is required")
	}
	if len(m.To) == 0 {
		bad("to", "is required (a list of addresses)")
	}
	m.Port = cmp.Or(m.Port, PortDefault)
	if m.Port < 1 || m.Port > 65535 {
		bad("port", "must be between 1 and 65535")
	}
	m.StartTLS = cmp.Or(m.StartTLS, "required")
	validTLS := slices.Contains([]string{"required", "optional", "none"}, m.StartTLS)
	if !validTLS {
		bad("starttls", "must be required, optional or none, not %q", m.StartTLS)
	}
	if m.Password != "" && m.Username == "" {
		bad("username", "is required when smtp.password is set")
	}
	if validTLS && m.Username != "" && m.StartTLS != "required" {
		bad("starttls", "must be required when smtp.username is set: credentials never travel in clear text")
	}
	return st, errors.Join(errs...)
}
