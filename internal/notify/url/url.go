// Package url is the url sink type (type: url): notifications sent to a
// chat or push service named by a notification URL in the shoutrrr format
// (docs/delivery.md, "### url"), such as ntfy://ntfy.sh/topic or
// discord://token@id. shoutrrr (github.com/nicholas-fedor/shoutrrr)
// parses and checks the URL with each service's own configuration; lookout
// builds the request from it (internal/notify/channel) and sends it
// itself (Sink), through the
// egress policy, so that the outbox's rules hold: one request per attempt,
// 429 and 5xx retried (Retry-After and the services' retry_after), other
// 4xx dead at once. It owns the key url.
package url

import (
	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/notify"
	"github.com/lookout-dev/lookout/internal/notify/channel"
)

// Settings are the keys of a url sink.
type Settings struct {
	// URL is the notification URL (discord://, gotify://, ntfy://,
	// telegram://); it holds credentials: write it as ${ENV_VAR}.
	// Required.
	URL string `yaml:"url"`
}

func init() {
	notify.Register("url", Decode, func(s *config.Sink, st Settings, env notify.Env) (notify.Sink, error) {
		sink, err := New(Options{URL: st.URL, Concurrency: s.Concurrency, Egress: env.Egress})
		if err != nil {
			return nil, s.Errorf("url", "%v", err)
		}
		// The URL's credentials are hidden wherever the configuration's
		// secrets are: logs and stored errors.
		env.Redactor.Add(sink.Channel().Secrets()...)
		return sink, nil
	})
}

// Decode reads and checks the url key of a url sink: required, and a
// notification URL of a known channel with what that channel needs
// (checked offline, by shoutrrr's parser of the service).
func Decode(s *config.Sink) (Settings, error) {
	var st Settings
	if err := s.DecodeBlock(&st); err != nil {
		return st, err
	}
	if st.URL == "" {
		return st, s.Errorf("url", "is required for a url sink: a notification URL such as ntfy://ntfy.sh/<topic>")
	}
	if _, err := channel.Parse(st.URL); err != nil {
		return st, s.Errorf("url", "%v", err)
	}
	return st, nil
}
