package email

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"strconv"
	"strings"
	"time"

	"github.com/lookout-dev/lookout/internal/notify"
	mail "github.com/wneessen/go-mail"
)

// Options configure an email sink.
type Options struct {
	// Host and Port name the SMTP submission server. Port defaults to 587.
	Host string
	Port int
	// Username and Password authenticate with AUTH PLAIN, which is only
	// ever sent over TLS. Empty means no authentication.
	Username, Password string
	// From and To are the envelope and header addresses.
	From string
	To   []string
	// StartTLS is required (default), optional or none.
	StartTLS string
	// TLSConfig replaces the TLS settings (tests trust their own CA with
	// it). Defaults to the system roots with ServerName Host.
	TLSConfig *tls.Config
	// Timeout bounds one delivery when the context has no deadline.
	// Defaults to 30s.
	Timeout time.Duration
}

// Sink sends one message per notification over SMTP: a text/plain
// part and a text/html alternative, with the dedupe key in the
// X-Lookout-Dedupe-Key header and a Message-ID derived from it, so a repeat
// after a crash carries the same Message-ID and mail clients can fold it.
type Sink struct {
	opts   Options
	policy mail.TLSPolicy
}

var _ notify.Sink = (*Sink)(nil)

// New returns an email sink.
func New(o Options) (*Sink, error) {
	if o.Host == "" || o.From == "" || len(o.To) == 0 {
		return nil, errors.New("an email sink needs smtp host, from and to")
	}
	o.Port = cmp.Or(o.Port, 587)
	o.Timeout = cmp.Or(o.Timeout, 30*time.Second)
	s := &Sink{opts: o}
	switch cmp.Or(o.StartTLS, "required") {
	case "required":
		s.policy = mail.TLSMandatory
	case "optional":
		s.policy = mail.TLSOpportunistic
	case "none":
		s.policy = mail.NoTLS
		if o.Username != "" {
			return nil, errors.New("smtp starttls none with a username would send the password in clear text")
		}
	default:
		return nil, fmt.Errorf("smtp starttls %q must be required, optional or none", o.StartTLS)
	}
	// Check the addresses now, not at the first delivery.
	m := mail.NewMsg()
	if err := m.From(o.From); err != nil {
		return nil, fmt.Errorf("smtp from %q: %w", o.From, err)
	}
	if err := m.To(o.To...); err != nil {
		return nil, fmt.Errorf("smtp to %q: %w", o.To, err)
	}
	return s, nil
}

// Message builds the mail for n.
func (s *Sink) Message(n *notify.Notification) (*mail.Msg, error) {
	m := mail.NewMsg()
	if err := m.From(s.opts.From); err != nil {
		return nil, &notify.PermanentError{Err: fmt.Errorf("smtp from: %w", err)}
	}
	if err := m.To(s.opts.To...); err != nil {
		return nil, &notify.PermanentError{Err: fmt.Errorf("smtp to: %w", err)}
	}
	m.Subject(n.Title)
	m.SetDate()
	m.SetMessageIDWithValue(MessageID(n.DedupeKey, n.Sink, s.opts.From))
	m.SetGenHeader(mail.Header("Auto-Submitted"), "auto-generated")
	m.SetGenHeader(mail.Header(notify.HeaderDedupeKey), n.DedupeKey)
	m.SetGenHeader(mail.Header(notify.HeaderDelivery), n.DeliveryID)
	m.SetGenHeader(mail.Header(notify.HeaderNotification), strconv.FormatInt(n.ID, 10))
	m.SetGenHeader(mail.Header("X-Lookout-Urgency"), n.Urgency)
	if n.Urgency == "high" {
		m.SetGenHeader(mail.Header("Importance"), "high")
	}
	m.SetBodyString(mail.TypeTextPlain, emailText(n))
	html, err := emailHTML(n)
	if err != nil {
		return nil, &notify.PermanentError{Err: err}
	}
	m.AddAlternativeString(mail.TypeTextHTML, html)
	return m, nil
}

// MessageID is the Message-ID (without angle brackets) of the mail for a
// dedupe key and sink: the same for every attempt.
func MessageID(dedupeKey, sink, from string) string {
	sum := sha256.Sum256([]byte(sink + "\x00" + dedupeKey))
	domain := "lookout.invalid"
	if _, d, ok := strings.Cut(from, "@"); ok && d != "" {
		domain = strings.Trim(d, "<> ")
	}
	return "lookout." + hex.EncodeToString(sum[:12]) + "@" + domain
}

// Deliver sends the mail. A permanent SMTP answer (5xx) makes the row dead
// at once; temporary answers (4xx), connection and TLS problems are
// retried.
func (s *Sink) Deliver(ctx context.Context, n *notify.Notification) error {
	msg, err := s.Message(n)
	if err != nil {
		return err
	}
	timeout := s.opts.Timeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = max(time.Until(dl), time.Millisecond)
	}
	tlsConf := s.opts.TLSConfig
	if tlsConf == nil {
		tlsConf = &tls.Config{ServerName: s.opts.Host, MinVersion: tls.VersionTLS12}
	}
	opts := []mail.Option{
		mail.WithPort(s.opts.Port), mail.WithTLSPolicy(s.policy), mail.WithTLSConfig(tlsConf),
		mail.WithTimeout(timeout),
	}
	if s.opts.Username != "" {
		opts = append(opts, mail.WithSMTPAuth(mail.SMTPAuthPlain),
			mail.WithUsername(s.opts.Username), mail.WithPassword(s.opts.Password))
	}
	c, err := mail.NewClient(s.opts.Host, opts...)
	if err != nil {
		return &notify.PermanentError{Err: fmt.Errorf("smtp client: %w", err)}
	}
	conn, err := c.DialToSMTPClientWithContext(ctx)
	if err != nil {
		return fmt.Errorf("smtp %s:%d: %w", s.opts.Host, s.opts.Port, err)
	}
	if err := c.SendWithSMTPClient(conn, msg); err != nil {
		_ = c.CloseWithSMTPClient(conn)
		var se *mail.SendError
		if errors.As(err, &se) && !se.IsTemp() && se.ErrorCode() >= 500 {
			return &notify.PermanentError{Err: fmt.Errorf("smtp %s rejected the message: %w", s.opts.Host, err)}
		}
		return fmt.Errorf("smtp %s: %w", s.opts.Host, err)
	}
	// The server accepted the message: a failing QUIT changes nothing.
	_ = c.CloseWithSMTPClient(conn)
	return nil
}

func emailText(n *notify.Notification) string {
	var b strings.Builder
	if body := strings.TrimSpace(n.Body); body != "" {
		b.WriteString(body)
		b.WriteString("\n")
	}
	if u := n.Payload.Record.URL; u != "" && !strings.Contains(n.Body, u) {
		b.WriteString("\n" + u + "\n")
	}
	fmt.Fprintf(&b, "\n-- \nlookout · %s/%s · urgency %s · %s\n", n.Source, n.Watch, n.Urgency, n.DedupeKey)
	return b.String()
}

var emailHTMLTemplate = template.Must(template.New("email").Parse(`<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>{{.Title}}</title></head>
<body style="font-family: sans-serif; line-height: 1.4">
<h2 style="margin: 0 0 .5em">{{if .URL}}<a href="{{.URL}}">{{.Title}}</a>{{else}}{{.Title}}{{end}}</h2>
{{range .Paragraphs}}<p style="white-space: pre-wrap; margin: 0 0 .8em">{{.}}</p>
{{end}}<p style="color: #666; font-size: smaller">lookout · {{.Source}}/{{.Watch}} · urgency <b>{{.Urgency}}</b>{{if .Reason}} · {{.Reason}}{{end}}<br><code>{{.DedupeKey}}</code></p>
</body></html>
`))

func emailHTML(n *notify.Notification) (string, error) {
	var paras []string
	for _, p := range strings.Split(strings.TrimSpace(n.Body), "\n\n") {
		if p = strings.TrimSpace(p); p != "" {
			paras = append(paras, p)
		}
	}
	u := n.Payload.Record.URL
	if n.Kind == notify.KindDigest {
		u = ""
	}
	var b bytes.Buffer
	err := emailHTMLTemplate.Execute(&b, map[string]any{
		"Title": n.Title, "URL": u, "Paragraphs": paras, "Source": n.Source, "Watch": n.Watch,
		"Urgency": n.Urgency, "Reason": n.Reason, "DedupeKey": n.DedupeKey,
	})
	if err != nil {
		return "", fmt.Errorf("render html part: %w", err)
	}
	return b.String(), nil
}
