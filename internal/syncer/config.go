package syncer

import (
	"net/http"
	"time"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/egress"
	"github.com/lookout-dev/lookout/internal/metrics"
	"github.com/lookout-dev/lookout/internal/redact"
	"github.com/lookout-dev/lookout/internal/schedule"
)

// Config are the syncer's typed settings. New uses them as given; the
// defaults below are the ones the config loader applies to lookout.yaml,
// and FromConfig carries its values over.
type Config struct {
	// Dir is the configuration directory; connectors resolve relative
	// paths against it. Defaults to the current directory.
	Dir string
	// Sources are the sources to run (sources/*.yaml). Defaults to none.
	Sources []*config.Source
	// HostLimit returns the request budget of an upstream host (host or
	// host:port), shared by every source and replica calling it: lookout.yaml's
	// hosts entry, else defaults.host_rate_limit. Required when New is given
	// a pool.
	HostLimit func(host string) config.RateLimit
	// Owner identifies this replica in leases. Defaults to hostname:pid.
	Owner string
	// Lease is how long a claim on a source lasts before another replica
	// may take it over (syncer.lease). Defaults to 5m.
	Lease time.Duration
	// Concurrency is the most runs one replica has in flight at once
	// (syncer.concurrency). A run starts as soon as a slot is free; a
	// quiet run frees its slot when its fetch ends. Defaults to 1000.
	Concurrency int
	// PollInterval is the longest the syncer sleeps when no source is
	// due: it wakes when the next source falls due, and at least this
	// often to see run-now requests and expired leases
	// (syncer.poll_interval). Defaults to 1s.
	PollInterval time.Duration
	// BatchSize is the number of items written per transaction
	// (syncer.batch_size). Defaults to 500.
	BatchSize int
	// Backoff spaces the runs of a failing source (syncer.backoff).
	// Defaults to min 30s, max 1h.
	Backoff schedule.Backoff
	// MaxWait is the longest one request waits inside a run for a budget
	// or a host block before the run is deferred (syncer.max_wait).
	// Defaults to 30s.
	MaxWait time.Duration
	// RunTimeout bounds one run of a source (syncer.run_timeout).
	// Defaults to 1h.
	RunTimeout time.Duration
	// RollupEvery is how often a replica adds the quiet runs it counted
	// to sync_run_hours (syncer.rollup_every); it also does when it stops
	// and when RunDue ends. The loader's default is 5m; New takes zero as
	// one second.
	RollupEvery time.Duration
	// Now is the clock of schedules, leases and host budgets. Defaults to
	// time.Now.
	Now func() time.Time
	// Transport is the base HTTP transport. Defaults to a clone of
	// http.DefaultTransport that dials through Egress.
	Transport http.RoundTripper
	// Egress is the policy on the addresses sources may connect to
	// (egress). Defaults to the zero policy: link-local and metadata
	// addresses refused, everything else allowed.
	Egress *egress.Policy
	// UntrustedEgress is the policy of sources created through the API
	// (definitions managed by api): their URLs are users' input, so
	// loopback and private addresses are refused unless api.allow_private
	// is set, and the operator's egress.allow does not apply. Defaults to
	// refusing loopback, private, link-local and metadata addresses.
	UntrustedEgress *egress.Policy
	// Redactor hides configured secrets in the run errors stored in
	// sync_runs and sources (the ${ENV} values of the configuration).
	// Defaults to nil: nothing is redacted.
	Redactor *redact.Redactor
	// Metrics records runs, changes, rate-limit waits and upstream
	// responses. Defaults to nil: nothing is recorded.
	Metrics *metrics.Metrics
	// AfterRun is called after every run of a source that succeeded or
	// was not modified, once the records it mirrored are committed: the
	// task runner's pass (docs/tasks.md). It must return at once. Defaults
	// to nil: nothing is called.
	AfterRun func(source string, runID int64)
}

// FromConfig returns the syncer settings of a loaded configuration
// directory: its sources and lookout.yaml's syncer and hosts blocks, with
// the defaults the loader applied, its egress policy and its secrets'
// redactor. Owner, Now, Transport and Metrics are left for the caller.
func FromConfig(cfg *config.Config) Config {
	g := &cfg.Global
	policy := g.Egress.Policy()
	untrusted := egress.Untrusted(g.API.AllowPrivate)
	return Config{
		Egress:          &policy,
		UntrustedEgress: &untrusted,
		Redactor:        g.Redactor(),
		Dir:             cfg.Dir,
		Sources:         cfg.Sources,
		HostLimit:       g.HostLimit,
		Lease:           g.Syncer.Lease,
		Concurrency:     g.Syncer.Concurrency,
		PollInterval:    g.Syncer.PollInterval,
		BatchSize:       g.Syncer.BatchSize,
		Backoff:         schedule.Backoff{Min: g.Syncer.Backoff.Min, Max: g.Syncer.Backoff.Max},
		MaxWait:         g.Syncer.MaxWait,
		RunTimeout:      g.Syncer.RunTimeout,
		RollupEvery:     g.Syncer.RollupEvery,
	}
}
