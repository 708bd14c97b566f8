package config

import (
	"cmp"
	"strings"
	"time"
)

// Defaults of the ollama.drift block.
const (
	DriftThresholdDefault  = 0.1
	DriftMinSamplesDefault = 20
	DriftBatchDefault      = 32
	DriftBatchMax          = 256
	DriftEveryDefault      = time.Minute
	DriftTimeoutDefault    = 30 * time.Second
)

// Drift turns on the drift report of model outputs (docs/semantic.md,
// "Drift of model outputs"): the reason of every model decision (a
// watch's verdict, a task review's score) is embedded through Ollama's
// /api/embed in the evaluator deployment, and each watch's week is
// compared with a baseline week. Off unless the block is written.
type Drift struct {
	// EmbedModel is the Ollama embedding model (nomic-embed-text,
	// all-minilm, ...). Required.
	EmbedModel string `yaml:"embed_model"`
	// BaselineWeek pins the week every other week is compared with: a
	// date (YYYY-MM-DD) in that ISO week, read in UTC. Defaults to each
	// watch's first week with at least min_samples embeddings.
	BaselineWeek string `yaml:"baseline_week"`
	// Threshold is the cosine distance between a week's centroid and the
	// baseline's above which the week is drifted and alerted, in (0, 2].
	// Defaults to 0.1.
	Threshold float64 `yaml:"threshold"`
	// MinSamples is how many embeddings a week needs to be compared (and
	// to be a baseline). Defaults to 20.
	MinSamples int `yaml:"min_samples"`
	// Batch is how many reasons one /api/embed request carries, 1 to 256.
	// Defaults to 32.
	Batch int `yaml:"batch"`
	// Every is how often the evaluator's drift service embeds what is
	// pending and checks the weeks, at least 1s. Defaults to 1m.
	Every time.Duration `yaml:"every"`
	// Timeout bounds one /api/embed request. Defaults to 30s.
	Timeout time.Duration `yaml:"timeout"`
	// Notify lists the sinks a drift alert goes to. Defaults to
	// alerts.notify.
	Notify []string `yaml:"notify"`

	baseline time.Time
}

// Baseline returns the Monday 00:00 UTC of baseline_week, or the zero
// time when it is not set.
func (d *Drift) Baseline() time.Time { return d.baseline }

// WeekStart returns the Monday 00:00 UTC of t's ISO week.
func WeekStart(t time.Time) time.Time {
	t = t.UTC()
	d := time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
	return d.AddDate(0, 0, -((int(d.Weekday()) + 6) % 7))
}

func (d *Drift) applyDefaults(g *Global) []error {
	var errs []error
	if strings.TrimSpace(d.EmbedModel) == "" {
		errs = append(errs, g.Errorf("ollama.drift.embed_model", "is required: name the Ollama embedding model (e.g. nomic-embed-text), or remove ollama.drift to turn drift off"))
	}
	if d.BaselineWeek != "" {
		t, err := time.Parse(time.DateOnly, d.BaselineWeek)
		if err != nil {
			errs = append(errs, g.Errorf("ollama.drift.baseline_week", "must be a date (YYYY-MM-DD) in the baseline week, not %q", d.BaselineWeek))
		} else {
			d.baseline = WeekStart(t)
		}
	}
	if d.Threshold == 0 && !g.written("ollama.drift.threshold") {
		d.Threshold = DriftThresholdDefault
	}
	if d.Threshold <= 0 || d.Threshold > 2 {
		errs = append(errs, g.Errorf("ollama.drift.threshold", "must be a cosine distance in (0, 2], not %g", d.Threshold))
	}
	if d.MinSamples == 0 && !g.written("ollama.drift.min_samples") {
		d.MinSamples = DriftMinSamplesDefault
	}
	if d.MinSamples < 1 {
		errs = append(errs, g.Errorf("ollama.drift.min_samples", "must be >= 1, not %d", d.MinSamples))
	}
	if d.Batch == 0 && !g.written("ollama.drift.batch") {
		d.Batch = DriftBatchDefault
	}
	if d.Batch < 1 || d.Batch > DriftBatchMax {
		errs = append(errs, g.Errorf("ollama.drift.batch", "must be between 1 and %d, not %d", DriftBatchMax, d.Batch))
	}
	d.Every = cmp.Or(d.Every, DriftEveryDefault)
	if d.Every < time.Second {
		errs = append(errs, g.Errorf("ollama.drift.every", "must be at least 1s, not %s", d.Every))
	}
	d.Timeout = cmp.Or(d.Timeout, DriftTimeoutDefault)
	if d.Timeout < 0 {
		errs = append(errs, g.Errorf("ollama.drift.timeout", "must be positive"))
	}
	if len(d.Notify) == 0 {
		d.Notify = append([]string(nil), g.Alerts.Notify...)
		return errs // alerts.notify is checked where it is set
	}
	return append(errs, g.checkSinkNames("ollama.drift.notify", d.Notify)...)
}
