package modelspec

import (
	"cmp"
	"maps"
	"time"

	"github.com/lookout-dev/lookout/internal/config"
)

// Config are the model settings: lookout.yaml's ollama block. NewClient
// and NewQuestion use them as given; the defaults below are the ones the
// config loader applies, and FromConfig carries its values over.
type Config struct {
	// Host is the Ollama server URL. Defaults to http://127.0.0.1:11434.
	Host string
	// Model is the model name watches use unless they set one. Defaults to "llama3.2".
	Model string
	// Timeout bounds one model call. Defaults to 60s.
	Timeout time.Duration
	// Concurrency bounds simultaneous model calls per evaluator. Defaults to 2.
	Concurrency int
	// Options are passed to the model with every call. Defaults to
	// {temperature: 0, seed: 42}.
	Options map[string]any
	// PerSecond and Burst bound model calls per evaluator. Default to 5
	// per second with a burst of Concurrency.
	PerSecond float64
	Burst     int
	// HoldMin and HoldMax space the retries of a change held because the
	// model failed: HoldMin after the first failure, doubling up to
	// HoldMax. Default to 30s and 15m.
	HoldMin, HoldMax time.Duration
	// ReasonMaxChars bounds the reason the model may write. Defaults to 200.
	ReasonMaxChars int
	// DigestTTL is how long a model digest read from /api/tags is trusted.
	// Defaults to 1m.
	DigestTTL time.Duration
	// Now is the calendar of the watches' daily budgets (model_budgets):
	// the UTC day a call counts against, and the midnight an exhausted
	// budget resets at. Defaults to time.Now.
	Now func() time.Time
}

// FromConfig returns the model settings of lookout.yaml's ollama block, as
// the config loader defaulted it.
func FromConfig(o config.Ollama) Config {
	c := Config{Host: o.Host, Model: o.Model, Timeout: o.Timeout, Concurrency: o.Concurrency,
		Options: o.Options, ReasonMaxChars: o.ReasonMaxChars, DigestTTL: o.DigestTTL}
	if rl := o.RateLimit; rl != nil {
		c.PerSecond, c.Burst = rl.PerSecond, rl.Burst
	}
	if b := o.HoldBackoff; b != nil {
		c.HoldMin, c.HoldMax = b.Min, b.Max
	}
	return c
}

// Resolve is resolve, for the questions built outside this package (a
// task review's criteria, internal/semantic).
func (o Config) Resolve(m *config.WatchModel) (model string, timeout time.Duration, options map[string]any, err error) {
	return o.resolve(m)
}

// resolve gives the model, timeout and options a question asks with: o's
// defaults, overridden by m (a watch's or a digest's model block, nil for
// none), the options checked against Ollama's types (NormalizeOptions).
func (o Config) resolve(m *config.WatchModel) (model string, timeout time.Duration, options map[string]any, err error) {
	model, timeout = o.Model, o.Timeout
	opts := maps.Clone(o.Options)
	if opts == nil {
		opts = map[string]any{}
	}
	if m != nil {
		model = cmp.Or(m.Name, model)
		timeout = cmp.Or(m.Timeout, timeout)
		maps.Copy(opts, m.Options)
	}
	if options, err = NormalizeOptions(opts); err != nil {
		return "", 0, nil, err
	}
	return model, timeout, options, nil
}
