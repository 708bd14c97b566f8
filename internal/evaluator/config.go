package evaluator

import (
	"time"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/metrics"
	"github.com/lookout-dev/lookout/internal/modelspec"
)

// Config are the evaluator's typed settings. New uses them as given; the
// defaults below are the ones the config loader applies to lookout.yaml,
// and FromConfig carries its values over.
type Config struct {
	// Sources are the sources whose watches are evaluated (sources/*.yaml).
	// Defaults to none.
	Sources []*config.Source
	// Sinks are lookout.yaml's sinks, whose templates render the
	// notifications. Defaults to none (the built-in templates).
	Sinks map[string]*config.Sink
	// Model are the model settings of watches with an ask (ollama).
	Model modelspec.Config
	// Owner identifies this replica in leases. Defaults to hostname:pid.
	Owner string
	// Lease is how long a claim on a batch of changes lasts
	// (evaluator.lease). Defaults to 2m.
	Lease time.Duration
	// BatchSize is how many changes are claimed at once
	// (evaluator.batch_size). Defaults to 500.
	BatchSize int
	// CatchUpInterval is the slow timer that drains the changes table even
	// without notifications (evaluator.catch_up_interval). Defaults to 30s.
	CatchUpInterval time.Duration
	// MaxAttempts is how often a change is retried before it is recorded
	// as failed (evaluator.max_attempts). Defaults to 10.
	MaxAttempts int
	// Workers is how many batches are evaluated at once
	// (evaluator.workers). Defaults to 2.
	Workers int
	// OnBatch, when set, is called after each committed batch with the
	// number of notifications it created (the delivery wake-up).
	OnBatch func(notifications int)
	// Trace, when set, is called after the claim transaction of each batch
	// committed, with the batch's timeline (BatchTrace): the benchmark's
	// per-step latency of (3). Defaults to nil: no timeline is kept.
	Trace func(BatchTrace)
	// Metrics records decisions, duplicates, change-to-decision lag and
	// model calls. Defaults to nil: nothing is recorded.
	Metrics *metrics.Metrics
	// Now is the clock of the notifications' calendar: the end of a digest
	// watch's period (a cron in its time zone) that a notification is held
	// until (digest_due_at), and the payload's created_at. The model
	// budgets' days have their own clock, Model.Now. Defaults to time.Now.
	Now func() time.Time
}

// FromConfig returns the evaluator settings of a loaded configuration
// directory: its sources, sinks and lookout.yaml's evaluator and ollama
// blocks, with the defaults the loader applied. Owner, OnBatch, Trace and
// Metrics are left for the caller.
func FromConfig(cfg *config.Config) Config {
	g := &cfg.Global
	return Config{
		Sources:         cfg.Sources,
		Sinks:           g.Sinks,
		Model:           modelspec.FromConfig(g.Ollama),
		Lease:           g.Evaluator.Lease,
		BatchSize:       g.Evaluator.BatchSize,
		CatchUpInterval: g.Evaluator.CatchUpInterval,
		MaxAttempts:     g.Evaluator.MaxAttempts,
		Workers:         g.Evaluator.Workers,
	}
}

// source returns the configured source called name, or nil.
func (e *Evaluator) source(name string) *config.Source { return e.index.source(name) }
