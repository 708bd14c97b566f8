// Package slack is the Slack sink type (type: slack): Block Kit messages
// posted to an incoming webhook (docs/delivery.md, "### slack"). It owns
// the keys url and headers; the sending is notify.SlackSink.
package slack

import (
	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/notify"
	"github.com/lookout-dev/lookout/internal/notify/webhook"
)

// Settings are the keys of a Slack sink.
type Settings struct {
	// URL is the incoming webhook (http or https). Required.
	URL string `yaml:"url"`
	// Headers are extra HTTP headers; values may use ${ENV}. Defaults to
	// none.
	Headers map[string]string `yaml:"headers"`
}

func init() {
	notify.Register("slack", Decode, func(s *config.Sink, st Settings, env notify.Env) (notify.Sink, error) {
		return notify.NewSlackSink(notify.SlackOptions{URL: st.URL, Headers: st.Headers, Concurrency: s.Concurrency, Egress: env.Egress})
	})
}

// Decode reads and checks the keys of a Slack sink.
func Decode(s *config.Sink) (Settings, error) {
	var st Settings
	if err := s.DecodeBlock(&st); err != nil {
		return st, err
	}
	return st, webhook.CheckURL(s, st.URL)
}
