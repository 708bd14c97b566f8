package config

import (
	"cmp"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/lookout-dev/lookout/internal/normalize"
	"github.com/lookout-dev/lookout/internal/schedule"
	"github.com/robfig/cron/v3"
)

// Defaults for settings that neither a source nor lookout.yaml sets.
const (
	EveryDefault             = 5 * time.Minute
	TimeoutDefault           = 30 * time.Second
	OllamaHostDefault        = "http://127.0.0.1:11434"
	OllamaModelDefault       = "llama3.2"
	OllamaTimeoutDefault     = 60 * time.Second
	OllamaConcurrency        = 2
	SinkTimeoutDefault       = 10 * time.Second
	SinkMaxAttemptsDefault   = 8
	SinkConcurrencyDefault   = 4
	DeliveryLeaseDefault     = 2 * time.Minute
	DeliveryBatchDefault     = 100
	DeliveryPollDefault      = time.Second
	RetryMinDefault          = time.Second
	RetryMaxDefault          = time.Hour
	SyncerLeaseDefault       = 5 * time.Minute
	SyncerConcurrency        = 1000
	SyncerPollDefault        = time.Second
	BatchSizeDefault         = 500
	EvaluatorLeaseDefault    = 2 * time.Minute
	CatchUpIntervalDefault   = 30 * time.Second
	EvaluatorAttempsDefault  = 10
	OllamaRateDefault        = 5.0
	HoldBackoffMinDefault    = 30 * time.Second
	HoldBackoffMaxDefault    = 15 * time.Minute
	DigestTTLDefault         = time.Minute
	ReasonMaxCharsDefault    = 200
	MaxFailuresDefault       = 20
	BackoffMinDefault        = 30 * time.Second
	BackoffMaxDefault        = time.Hour
	MaxWaitDefault           = 30 * time.Second
	RunTimeoutDefault        = time.Hour
	RollupEveryDefault       = 5 * time.Minute
	StuckAfterDefault        = 30 * time.Minute
	RetentionBatchDefault    = 5000
	RetentionIntervalDefault = time.Hour
	// The retention windows applied when lookout.yaml does not name the
	// table (0 written out keeps a table's rows forever).
	RetentionChangesDefault             = 720 * time.Hour  // 30 days
	RetentionEvaluationsDefault         = 720 * time.Hour  // 30 days
	RetentionSyncRunsDefault            = 720 * time.Hour  // 30 days
	RetentionNotificationsDefault       = 2160 * time.Hour // 90 days
	RetentionModelCallsDefault          = 2160 * time.Hour // 90 days
	RetentionTaskRunsDefault            = 2160 * time.Hour // 90 days
	RetentionInboundEventsDefault       = 720 * time.Hour  // 30 days
	RetentionIdempotencyKeysDefault     = 24 * time.Hour   // idempotency.TTLDefault
	RetentionDefinitionDeletionsDefault = 720 * time.Hour  // 30 days
	RetentionSignInLinksDefault         = 720 * time.Hour  // 30 days
	RetentionAuditLogDefault            = 8760 * time.Hour // 365 days
	RetentionModelBudgetsDefault        = 2160 * time.Hour // 90 days
	RetentionBriefingsDefault           = 2160 * time.Hour // 90 days
	RetentionVerdictsDefault            = 2160 * time.Hour // 90 days
	RetentionDriftEmbeddingsDefault     = 8760 * time.Hour // 365 days
	RetentionSyncRunHoursDefault        = 720 * time.Hour  // 30 days
	RetentionActivityHourTotalsDefault  = 2160 * time.Hour // 90 days
	EvaluatorWorkersDefault             = 2
	MaxDeleteFractionDefault            = 0.5
	// MinGuardedDeletes is the fewest deletions the deletion guard
	// (max_delete_fraction) ever refuses: a run that deletes one or two
	// records of a small source is not a mass deletion.
	MinGuardedDeletes = 3
)

// Bounds of digest.summarize.
const (
	// SummarizeMaxItemsDefault is digest.summarize.max_items unless set.
	SummarizeMaxItemsDefault = 20
	// SummarizeMaxItemsLimit is the largest digest.summarize.max_items.
	SummarizeMaxItemsLimit = 100
)

// OllamaOptionDefaults are the model options every call carries unless the
// configuration sets them: a temperature of 0 and a fixed seed make a
// verdict reproducible.
var OllamaOptionDefaults = map[string]any{"temperature": 0, "seed": 42}

// HostRateLimitDefault is the budget of a host that lookout.yaml's hosts
// does not list.
var HostRateLimitDefault = RateLimit{PerSecond: 2, Burst: 4}

// FollowRedirectsModes are the values of a source's follow_redirects.
var FollowRedirectsModes = []string{"same_origin", "any", "none"}

// FollowRedirectsDefault is follow_redirects when a source does not set it.
const FollowRedirectsDefault = "same_origin"

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`)

// MaxNameLength is the longest name of a source or a watch, in
// characters: 200.
const MaxNameLength = 200

func (g *Global) applyDefaults() []error {
	var errs []error
	g.Ollama.Host = cmp.Or(g.Ollama.Host, OllamaHostDefault)
	g.Ollama.Model = cmp.Or(g.Ollama.Model, OllamaModelDefault)
	g.Ollama.Timeout = cmp.Or(g.Ollama.Timeout, OllamaTimeoutDefault)
	g.Ollama.Concurrency = cmp.Or(g.Ollama.Concurrency, OllamaConcurrency)
	errs = append(errs, g.Ollama.applyDefaults(g)...)
	errs = append(errs, g.applyDeliveryDefaults()...)
	errs = append(errs, g.applySourceDefaults()...)
	errs = append(errs, g.Retention.applyDefaults(g)...)
	errs = append(errs, g.applyDefaultNotify()...)
	errs = append(errs, g.applyDaemonDefaults()...)
	errs = append(errs, g.Alerts.applyDefaults(g)...)
	if g.Ollama.Drift != nil {
		errs = append(errs, g.Ollama.Drift.applyDefaults(g)...)
	}
	errs = append(errs, g.API.Limits.applyDefaults(g)...)
	errs = append(errs, g.applyHTTPDefaults()...)
	if g.Evaluator.Lease <= g.Ollama.Timeout {
		errs = append(errs, g.Errorf("evaluator.lease", "(%s) must exceed ollama.timeout (%s): a claim on a change must outlive a model call", g.Evaluator.Lease, g.Ollama.Timeout))
	}
	return errs
}

// applyDeliveryDefaults checks the sinks (a log sink when none is
// declared) and the delivery block, and fills their defaults.
func (g *Global) applyDeliveryDefaults() []error {
	var errs []error
	if len(g.Sinks) == 0 {
		g.Sinks = map[string]*Sink{"log": {Type: "log"}}
	}
	for _, name := range sinkNames(g) {
		s := g.Sinks[name]
		if s == nil {
			s = &Sink{}
			g.Sinks[name] = s
		}
		s.name, s.global = name, g
		key := "sinks." + name
		if !nameRE.MatchString(name) {
			errs = append(errs, g.Errorf(key, "is not a valid sink name (letters, digits, '-', '_', '.')"))
		}
		errs = append(errs, g.validateSink(key, s)...)
	}
	dl := &g.Delivery
	dl.Lease = cmp.Or(dl.Lease, DeliveryLeaseDefault)
	dl.BatchSize = cmp.Or(dl.BatchSize, DeliveryBatchDefault)
	dl.PollInterval = cmp.Or(dl.PollInterval, DeliveryPollDefault)
	dl.RetryMin = cmp.Or(dl.RetryMin, RetryMinDefault)
	dl.RetryMax = cmp.Or(dl.RetryMax, RetryMaxDefault)
	if dl.Lease < 0 {
		errs = append(errs, g.Errorf("delivery.lease", "must be positive"))
	}
	if dl.BatchSize < 1 || dl.BatchSize > 10000 {
		errs = append(errs, g.Errorf("delivery.batch_size", "must be between 1 and 10000"))
	}
	if dl.PollInterval < 0 {
		errs = append(errs, g.Errorf("delivery.poll_interval", "must be positive"))
	}
	if dl.RetryMin < 0 {
		errs = append(errs, g.Errorf("delivery.retry_min", "must be positive"))
	}
	if dl.RetryMax < dl.RetryMin {
		errs = append(errs, g.Errorf("delivery.retry_max", "must not be less than delivery.retry_min (%s)", dl.RetryMin))
	}
	for _, name := range sinkNames(g) {
		if s := g.Sinks[name]; s.Timeout > 0 && dl.Lease <= s.Timeout {
			errs = append(errs, g.Errorf("delivery.lease", "(%s) must exceed sinks.%s.timeout (%s): a delivery may not outlive its claim", dl.Lease, name, s.Timeout))
		}
	}
	return errs
}

// applySourceDefaults checks the defaults every source inherits and the
// per-host rate limits, and fills the built-in ones.
func (g *Global) applySourceDefaults() []error {
	var errs []error
	d := &g.Defaults
	// A bad default is reported here, against lookout.yaml, and replaced by
	// the built-in one, so that no source inherits it and reports it as
	// its own.
	if d.Every < 0 {
		errs = append(errs, g.Errorf("defaults.every", "must be positive"))
		d.Every = EveryDefault
	}
	if d.Jitter != nil && *d.Jitter < 0 {
		errs = append(errs, g.Errorf("defaults.jitter", "must not be negative"))
		d.Jitter = nil
	}
	if d.Timeout < 0 {
		errs = append(errs, g.Errorf("defaults.timeout", "must be positive"))
		d.Timeout = TimeoutDefault
	}
	d.Every = cmp.Or(d.Every, EveryDefault)
	d.Timeout = cmp.Or(d.Timeout, TimeoutDefault)
	// A burst of 0 written lets no request through, ever: it is an
	// error, not the default.
	for _, key := range []string{"defaults.rate_limit.burst", "defaults.host_rate_limit.burst"} {
		if g.written(key) && ((key == "defaults.rate_limit.burst" && d.RateLimit.Burst == 0) ||
			(key == "defaults.host_rate_limit.burst" && d.HostRateLimit.Burst == 0)) {
			errs = append(errs, g.Errorf(key, "must be >= 1"))
		}
	}
	if d.RateLimit.PerSecond == 0 {
		d.RateLimit.PerSecond = 1
	}
	d.RateLimit.Burst = cmp.Or(d.RateLimit.Burst, 1)
	if d.RateLimit.PerSecond < 0 || d.RateLimit.Burst < 1 {
		errs = append(errs, g.Errorf("defaults.rate_limit", "needs per_second > 0 and burst >= 1"))
	}
	if d.HostRateLimit.PerSecond == 0 {
		g.hostDefaultBuiltIn = true
		d.HostRateLimit.PerSecond = HostRateLimitDefault.PerSecond
		d.HostRateLimit.Burst = cmp.Or(d.HostRateLimit.Burst, HostRateLimitDefault.Burst)
	}
	d.HostRateLimit.Burst = cmp.Or(d.HostRateLimit.Burst, 1)
	if d.HostRateLimit.PerSecond < 0 || d.HostRateLimit.Burst < 1 {
		errs = append(errs, g.Errorf("defaults.host_rate_limit", "needs per_second > 0 and burst >= 1"))
	}
	if d.MaxFailures == nil {
		n := MaxFailuresDefault
		d.MaxFailures = &n
	} else if *d.MaxFailures < 0 {
		errs = append(errs, g.Errorf("defaults.max_failures", "must not be negative (0 never disables)"))
	}
	for host, rl := range g.Hosts {
		key := "hosts." + host
		if lower := strings.ToLower(host); lower != host {
			delete(g.Hosts, host)
			g.Hosts[lower] = rl
		}
		if host == "" || strings.ContainsAny(host, "/ ") || strings.Contains(host, "://") {
			errs = append(errs, g.Errorf(key, "must be a host name or host:port, without scheme or path"))
		}
		if rl == nil || rl.PerSecond <= 0 {
			errs = append(errs, g.Errorf(key+".per_second", "must be > 0"))
			continue
		}
		if rl.Burst < 0 || (rl.Burst == 0 && g.written(key+".burst")) {
			errs = append(errs, g.Errorf(key+".burst", "must be >= 1"))
		}
		rl.Burst = cmp.Or(rl.Burst, 1)
	}
	d.StuckAfter = cmp.Or(d.StuckAfter, StuckAfterDefault)
	if d.StuckAfter < time.Second {
		errs = append(errs, g.Errorf("defaults.stuck_after", "must be at least 1s"))
	}
	return errs
}

// applyDefaultNotify picks the sinks a watch naming none notifies: the
// only sink, or log among several, and checks the names written.
func (g *Global) applyDefaultNotify() []error {
	var errs []error
	d := &g.Defaults
	if len(d.Notify) == 0 {
		for name := range g.Sinks {
			d.Notify = append(d.Notify, name)
		}
		slices.Sort(d.Notify)
		if len(d.Notify) > 1 {
			d.Notify = d.Notify[:0]
			if _, ok := g.Sinks["log"]; ok {
				d.Notify = []string{"log"}
			}
		}
	}
	for _, n := range d.Notify {
		if g.Sinks[n] == nil {
			errs = append(errs, g.Errorf("defaults.notify", "names sink %q, which lookout.yaml does not declare", n))
		}
	}
	return errs
}

// applyDaemonDefaults checks and fills the syncer, evaluator and log blocks.
func (g *Global) applyDaemonDefaults() []error {
	var errs []error
	g.Syncer.Lease = cmp.Or(g.Syncer.Lease, SyncerLeaseDefault)
	g.Syncer.Concurrency = cmp.Or(g.Syncer.Concurrency, SyncerConcurrency)
	g.Syncer.PollInterval = cmp.Or(g.Syncer.PollInterval, SyncerPollDefault)
	g.Syncer.BatchSize = cmp.Or(g.Syncer.BatchSize, BatchSizeDefault)
	g.Syncer.Backoff.Min = cmp.Or(g.Syncer.Backoff.Min, BackoffMinDefault)
	g.Syncer.Backoff.Max = cmp.Or(g.Syncer.Backoff.Max, max(BackoffMaxDefault, g.Syncer.Backoff.Min))
	g.Syncer.MaxWait = cmp.Or(g.Syncer.MaxWait, MaxWaitDefault)
	g.Syncer.RunTimeout = cmp.Or(g.Syncer.RunTimeout, RunTimeoutDefault)
	if g.Syncer.TasksInterval != 0 && g.Syncer.TasksInterval < time.Second {
		errs = append(errs, g.Errorf("syncer.tasks_interval", "must be at least 1s, not %s", g.Syncer.TasksInterval))
	}
	if g.Syncer.TasksGrace < 0 {
		errs = append(errs, g.Errorf("syncer.tasks_grace", "must not be negative"))
	}
	g.Syncer.TasksInterval = cmp.Or(g.Syncer.TasksInterval, TasksIntervalDefault)
	g.Syncer.TasksGrace = cmp.Or(g.Syncer.TasksGrace, TasksGraceDefault)
	if g.Syncer.Backoff.Min < 0 || g.Syncer.Backoff.Max < g.Syncer.Backoff.Min {
		errs = append(errs, g.Errorf("syncer.backoff", "needs 0 < min <= max"))
	}
	if g.Syncer.MaxWait < 0 {
		errs = append(errs, g.Errorf("syncer.max_wait", "must not be negative"))
	}
	if g.Syncer.RunTimeout < 0 {
		errs = append(errs, g.Errorf("syncer.run_timeout", "must not be negative"))
	}
	if g.Syncer.RollupEvery < 0 || (g.Syncer.RollupEvery > 0 && g.Syncer.RollupEvery < time.Second) || g.Syncer.RollupEvery > time.Hour {
		errs = append(errs, g.Errorf("syncer.rollup_every", "must be between 1s and 1h (how long quiet-run counts wait in memory before sync_run_hours)"))
	}
	g.Syncer.RollupEvery = cmp.Or(g.Syncer.RollupEvery, RollupEveryDefault)
	g.Evaluator.Lease = cmp.Or(g.Evaluator.Lease, EvaluatorLeaseDefault)
	g.Evaluator.BatchSize = cmp.Or(g.Evaluator.BatchSize, BatchSizeDefault)
	g.Evaluator.Workers = cmp.Or(g.Evaluator.Workers, EvaluatorWorkersDefault)
	if g.Evaluator.Workers < 1 || g.Evaluator.Workers > 64 {
		errs = append(errs, g.Errorf("evaluator.workers", "must be between 1 and 64"))
	}
	g.Evaluator.CatchUpInterval = cmp.Or(g.Evaluator.CatchUpInterval, CatchUpIntervalDefault)
	g.Evaluator.MaxAttempts = cmp.Or(g.Evaluator.MaxAttempts, EvaluatorAttempsDefault)
	g.Log.Format = cmp.Or(g.Log.Format, "text")
	g.Log.Level = cmp.Or(g.Log.Level, "info")
	if g.Log.Format != "text" && g.Log.Format != "json" {
		errs = append(errs, g.Errorf("log.format", "must be text or json, not %q", g.Log.Format))
	}
	if !slices.Contains([]string{"debug", "info", "warn", "error"}, g.Log.Level) {
		errs = append(errs, g.Errorf("log.level", "must be debug, info, warn or error, not %q", g.Log.Level))
	}
	if g.Syncer.BatchSize < 1 || g.Syncer.BatchSize > 10000 {
		errs = append(errs, g.Errorf("syncer.batch_size", "must be between 1 and 10000"))
	}
	return errs
}

// applyHTTPDefaults checks and fills the http block (the servers' slow
// client bounds) and the egress allow list.
func (g *Global) applyHTTPDefaults() []error {
	var errs []error
	for _, d := range []struct {
		key string
		v   *time.Duration
		def time.Duration
	}{{"http.header_timeout", &g.HTTP.HeaderTimeout, HTTPHeaderTimeoutDefault}, {"http.body_grace", &g.HTTP.BodyGrace, HTTPBodyGraceDefault},
		{"http.idle_timeout", &g.HTTP.IdleTimeout, HTTPIdleTimeoutDefault}} {
		if *d.v < 0 {
			errs = append(errs, g.Errorf(d.key, "must be positive"))
		}
		*d.v = cmp.Or(*d.v, d.def)
	}
	if g.HTTP.BodyMinRate < 0 {
		errs = append(errs, g.Errorf("http.body_min_rate", "must be positive (bytes a second)"))
	}
	g.HTTP.BodyMinRate = cmp.Or(g.HTTP.BodyMinRate, HTTPBodyMinRateDefault)
	for i, a := range g.Egress.Allow {
		if _, err := parsePrefix(a); err != nil {
			errs = append(errs, g.Errorf(fmt.Sprintf("egress.allow[%d]", i), "must be an IP address or a CIDR prefix (10.1.2.0/24), not %q", a))
		}
	}
	return errs
}

func (o *Ollama) applyDefaults(g *Global) []error {
	var errs []error
	if u, err := url.Parse(o.Host); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		errs = append(errs, g.Errorf("ollama.host", "must be an http:// or https:// URL, not %q", o.Host))
	}
	if o.Timeout < 0 {
		errs = append(errs, g.Errorf("ollama.timeout", "must be positive"))
	}
	if o.Concurrency < 1 {
		errs = append(errs, g.Errorf("ollama.concurrency", "must be >= 1"))
	}
	if o.Options == nil {
		o.Options = map[string]any{}
	}
	for k, v := range OllamaOptionDefaults {
		if _, ok := o.Options[k]; !ok {
			o.Options[k] = v
		}
	}
	if o.RateLimit == nil {
		o.RateLimit = &RateLimit{PerSecond: OllamaRateDefault, Burst: max(o.Concurrency, 1)}
	} else {
		if o.RateLimit.PerSecond <= 0 {
			errs = append(errs, g.Errorf("ollama.rate_limit.per_second", "must be > 0"))
		}
		if o.RateLimit.Burst == 0 && g.written("ollama.rate_limit.burst") {
			o.RateLimit.Burst = -1 // refused below, not defaulted
		}
		o.RateLimit.Burst = cmp.Or(o.RateLimit.Burst, max(o.Concurrency, 1))
		if o.RateLimit.Burst < 1 {
			errs = append(errs, g.Errorf("ollama.rate_limit.burst", "must be >= 1"))
		}
	}
	if o.HoldBackoff == nil {
		o.HoldBackoff = &Backoff{Min: HoldBackoffMinDefault, Max: HoldBackoffMaxDefault}
	} else if b := o.HoldBackoff; b.Min <= 0 || b.Max <= 0 {
		errs = append(errs, g.Errorf("ollama.hold_backoff", "needs min and max, both positive"))
	} else if b.Min > b.Max {
		errs = append(errs, g.Errorf("ollama.hold_backoff.min", "must not exceed ollama.hold_backoff.max"))
	}
	if o.DigestTTL < 0 {
		errs = append(errs, g.Errorf("ollama.digest_ttl", "must not be negative"))
	}
	o.DigestTTL = cmp.Or(o.DigestTTL, DigestTTLDefault)
	o.ReasonMaxChars = cmp.Or(o.ReasonMaxChars, ReasonMaxCharsDefault)
	if o.ReasonMaxChars < 10 || o.ReasonMaxChars > 2000 {
		errs = append(errs, g.Errorf("ollama.reason_max_chars", "must be between 10 and 2000, not %d", o.ReasonMaxChars))
	}
	return errs
}

// validate applies defaults from g and checks the source. Expressions are
// compiled later, by the packages that run them, with errors located here.
func (s *Source) validate(g *Global) []error {
	errs, known := s.validateIdentity()
	errs = append(errs, s.validateSchedule(g)...)
	errs = append(errs, s.validateLimits(g)...)
	errs = append(errs, s.validateMapping()...)
	// The evaluator's side (UsesWatches) never builds a connector, and its
	// block keeps its ${ENV} references unexpanded.
	if s.Block != nil && known && connectorRegistry != nil && (g == nil || g.uses != UsesWatches) {
		if err := connectorRegistry.Check(s); err != nil {
			errs = append(errs, err)
		}
	}

	errs = append(errs, s.validateTasks()...)

	seen := map[string]bool{}
	for i, w := range s.Watches {
		errs = append(errs, s.validateWatch(g, w, fmt.Sprintf("watches[%d]", i), seen)...)
	}
	return errs
}

// validateIdentity checks the source's name and connector, and says
// whether the connector is one the registry knows.
func (s *Source) validateIdentity() (errs []error, known bool) {
	bad := func(key, format string, args ...any) { errs = append(errs, s.Errorf(key, format, args...)) }
	switch {
	case s.Name == "":
		bad("name", "is required")
	case len(s.Name) > MaxNameLength:
		bad("name", "is %d characters long; a name has at most %d", len(s.Name), MaxNameLength)
	case !nameRE.MatchString(s.Name):
		bad("name", "%q is not a valid name (letters, digits, '-', '_', '.')", s.Name)
	}
	names := connectorNames()
	known = connectorRegistry == nil || slices.Contains(names, s.Connector)
	switch {
	case s.Connector == "" && names == nil:
		bad("connector", "is required")
	case s.Connector == "":
		bad("connector", "is required (one of %s)", strings.Join(names, ", "))
	case !known:
		bad("connector", "%q is not known (known: %s)", s.Connector, strings.Join(names, ", "))
	default:
		if s.Block == nil {
			bad("connector", "%q needs a %s: block", s.Connector, s.Connector)
		}
		for _, name := range s.others {
			bad(name, "block is set but the connector is %q", s.Connector)
		}
	}
	return errs, known
}

// validateSchedule checks every, cron, jitter, timezone, adaptive and the
// webhook block, and fills their defaults from g (in that order: the
// jitter's default depends on the interval).
func (s *Source) validateSchedule(g *Global) []error {
	var errs []error
	bad := func(key, format string, args ...any) { errs = append(errs, s.Errorf(key, format, args...)) }

	if s.Cron != "" && s.Every != 0 {
		bad("cron", "and every are exclusive: set one schedule")
	}
	if w := s.Webhook; w != nil {
		errs = append(errs, w.check(s)...)
		switch {
		case s.Every != 0:
			bad("every", "is replaced by webhook.reconcile_every on a webhook source: set one schedule")
		case s.Cron != "":
			bad("cron", "is replaced by webhook.reconcile_every on a webhook source: set one schedule")
		case s.Adaptive != nil:
			bad("adaptive", "does not apply to a webhook source (it polls every webhook.reconcile_every)")
		}
		if w.Provider == WebhookGitHub && s.Connector != "" && s.Connector != "github" {
			bad("webhook.provider", "github needs connector: github (its events are mapped by the github connector), not %q", s.Connector)
		}
		if s.Cron == "" {
			s.Every = w.ReconcileEvery
		}
	}
	if s.Every < 0 {
		bad("every", "must be positive")
	}
	if s.Cron == "" {
		s.Every = cmp.Or(s.Every, g.Defaults.Every)
	}
	if s.Jitter == nil {
		if g.Defaults.Jitter != nil {
			s.Jitter = g.Defaults.Jitter
		} else {
			j := s.Every / 10
			s.Jitter = &j
		}
	}
	if *s.Jitter < 0 {
		bad("jitter", "must not be negative")
	}
	s.Timezone = cmp.Or(s.Timezone, "UTC")
	_, tzErr := time.LoadLocation(s.Timezone)
	if tzErr != nil {
		bad("timezone", "%q is not a known time zone", s.Timezone)
	}
	if a := s.Adaptive; a != nil {
		if a.Min <= 0 || a.Max <= 0 {
			bad("adaptive", "needs min and max, both positive")
		} else if a.Min > a.Max {
			bad("adaptive.min", "must not exceed adaptive.max")
		}
		if s.Cron != "" {
			bad("adaptive", "needs an every schedule, not cron")
		}
	}
	if s.Cron != "" && tzErr == nil {
		if _, err := schedule.New(schedule.Spec{Cron: s.Cron, Timezone: s.Timezone}); err != nil {
			bad("cron", "%s", strings.TrimPrefix(err.Error(), "cron "))
		}
	}
	return errs
}

// validateLimits checks the politeness and safety limits (rate limit,
// timeout, redirects, deletion guard, staleness, stop conditions) and
// fills their defaults from g.
func (s *Source) validateLimits(g *Global) []error {
	var errs []error
	bad := func(key, format string, args ...any) { errs = append(errs, s.Errorf(key, format, args...)) }

	if s.RateLimit == nil {
		rl := g.Defaults.RateLimit
		s.RateLimit = &rl
	} else {
		if s.RateLimit.PerSecond <= 0 {
			bad("rate_limit.per_second", "must be > 0")
		}
		if s.RateLimit.Burst < 0 || (s.RateLimit.Burst == 0 && s.written("rate_limit.burst")) {
			bad("rate_limit.burst", "must be >= 1")
		}
		s.RateLimit.Burst = cmp.Or(s.RateLimit.Burst, 1)
	}
	if s.Timeout < 0 {
		bad("timeout", "must be positive")
	}
	s.Timeout = cmp.Or(s.Timeout, g.Defaults.Timeout)
	s.FollowRedirects = cmp.Or(s.FollowRedirects, FollowRedirectsDefault)
	if !slices.Contains(FollowRedirectsModes, s.FollowRedirects) {
		bad("follow_redirects", "must be one of %s, not %q", strings.Join(FollowRedirectsModes, ", "), s.FollowRedirects)
	}
	if s.MaxDeleteFraction == nil {
		f := MaxDeleteFractionDefault
		s.MaxDeleteFraction = &f
	} else if f := *s.MaxDeleteFraction; !(f >= 0 && f <= 1) {
		bad("max_delete_fraction", "must be between 0 and 1 (1 turns the deletion guard off), not %v", f)
	}
	if s.StaleAfter < 0 {
		bad("stale_after", "must be positive")
	}
	if s.StuckAfter < 0 || (s.StuckAfter > 0 && s.StuckAfter < time.Second) {
		bad("stuck_after", "must be at least 1s")
	}
	s.StuckAfter = cmp.Or(s.StuckAfter, g.Defaults.StuckAfter)
	if s.Stop == nil {
		s.Stop = &Stop{}
	}
	if s.Stop.MaxFailures == nil {
		n := MaxFailuresDefault
		if g.Defaults.MaxFailures != nil {
			n = *g.Defaults.MaxFailures
		}
		s.Stop.MaxFailures = &n
	} else if *s.Stop.MaxFailures < 0 {
		bad("stop.max_failures", "must not be negative (0 never disables)")
	}
	return errs
}

// validateMapping compiles the field mapping and stop.when as the syncer
// does, so that a check lists their problems with the others.
func (s *Source) validateMapping() []error {
	var errs []error
	bad := func(key, format string, args ...any) { errs = append(errs, s.Errorf(key, format, args...)) }

	_, err := normalize.NewMapper(s.Fields.Exprs(), s.Volatile)
	for _, p := range normalize.Problems(err) {
		var ke *normalize.KeyError
		if errors.As(p, &ke) {
			bad(ke.Key, "%v", ke.Err)
		} else {
			bad("volatile", "%v", p)
		}
	}
	s.Stop.When = strings.TrimSpace(s.Stop.When)
	if s.Stop.When != "" {
		_, err := normalize.CompileStopWhen(s.Stop.When)
		errs = append(errs, s.exprErrors("stop.when", err)...)
	}

	return errs
}

// validateWatch checks one watch at key (watches[i]) and fills its
// defaults; seen holds the names of the source's watches before it.
func (s *Source) validateWatch(g *Global, w *Watch, key string, seen map[string]bool) []error {
	var errs []error
	bad := func(key, format string, args ...any) { errs = append(errs, s.Errorf(key, format, args...)) }

	if w == nil {
		bad(key, "is empty")
		return errs
	}
	switch {
	case w.Name == "":
		bad(key+".name", "is required")
	case len(w.Name) > MaxNameLength:
		bad(key+".name", "is %d characters long; a name has at most %d", len(w.Name), MaxNameLength)
	case !nameRE.MatchString(w.Name):
		bad(key+".name", "%q is not a valid name (letters, digits, '-', '_', '.')", w.Name)
	case seen[w.Name]:
		bad(key+".name", "%q is used by another watch of this source", w.Name)
	}
	seen[w.Name] = true
	w.When = cmp.Or(strings.TrimSpace(w.When), "true")
	_, err := normalize.CompileWhen(w.When, s.Fields.Exprs())
	errs = append(errs, s.exprErrors(key+".when", err)...)
	errs = append(errs, s.validateWatchTargets(g, w, key)...)
	w.OnModelError = cmp.Or(w.OnModelError, "hold")
	if !slices.Contains([]string{"hold", "notify", "skip"}, w.OnModelError) {
		bad(key+".on_model_error", "must be hold, notify or skip, not %q", w.OnModelError)
	}
	errs = append(errs, s.validateSemantic(g, w, key)...)
	w.Urgency = cmp.Or(w.Urgency, "medium")
	if !slices.Contains([]string{"low", "medium", "high"}, w.Urgency) {
		bad(key+".urgency", "must be low, medium or high, not %q", w.Urgency)
	}
	w.Dedupe = cmp.Or(w.Dedupe, "version")
	if w.Dedupe != "version" && w.Dedupe != "record" {
		if d, err := time.ParseDuration(w.Dedupe); err != nil || d <= 0 {
			bad(key+".dedupe", "must be version, record or a positive duration such as 1h, not %q", w.Dedupe)
		}
	}
	seenSink := map[string]bool{}
	for j, n := range w.Notify {
		if seenSink[n] {
			bad(fmt.Sprintf("%s.notify[%d]", key, j), "names sink %q twice", n)
		}
		seenSink[n] = true
	}
	if w.Digest != nil {
		errs = append(errs, s.validateDigest(w.Digest, key)...)
	}
	return errs
}

// validateWatchTargets checks where a watch's notifications go: its sinks
// (the defaults when it names none), its own channel or its own webhook.
func (s *Source) validateWatchTargets(g *Global, w *Watch, key string) []error {
	var errs []error
	bad := func(key, format string, args ...any) { errs = append(errs, s.Errorf(key, format, args...)) }

	if len(w.Notify) == 0 && w.Webhook == nil && w.Channel == nil {
		w.Notify = g.Defaults.Notify
	}
	if c := w.Channel; c != nil {
		if c.URL == "" {
			bad(key+".channel.url", "is missing: lookout sets it when the channel is created through the API")
		}
		if c.Secret == "" {
			bad(key+".channel.secret", "is missing: lookout sets it when the channel is created through the API")
		}
		if w.Digest != nil {
			bad(key+".channel", "cannot be combined with digest: a digest goes to the sinks named in notify")
		}
	}
	if h := w.Webhook; h != nil {
		if u, err := url.Parse(h.URL); err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
			bad(key+".webhook.url", "must be an absolute http or https URL, like https://hooks.example.com/lookout")
		}
		if h.Secret == "" {
			bad(key+".webhook.secret", "is missing: lookout sets it when the webhook is created through the API")
		}
		if w.Digest != nil {
			bad(key+".webhook", "cannot be combined with digest: a digest goes to the sinks named in notify")
		}
	}
	for j, n := range w.Notify {
		if g.Sinks[n] == nil {
			bad(fmt.Sprintf("%s.notify[%d]", key, j), "names sink %q, which lookout.yaml does not declare (declared: %s)", n, strings.Join(sinkNames(g), ", "))
		}
	}
	return errs
}

// validateDigest checks a watch's digest block and fills its defaults.
func (s *Source) validateDigest(dg *Digest, key string) []error {
	var errs []error
	bad := func(key, format string, args ...any) { errs = append(errs, s.Errorf(key, format, args...)) }

	dg.Timezone = cmp.Or(dg.Timezone, "UTC")
	if _, err := time.LoadLocation(dg.Timezone); err != nil {
		bad(key+".digest.timezone", "%q is not a known time zone", dg.Timezone)
	}
	switch {
	case dg.Cron == "":
		bad(key+".digest.cron", "is required (e.g. \"0 8 * * *\" for 08:00 daily)")
	default:
		if _, err := ParseCron(dg.Cron); err != nil {
			bad(key+".digest.cron", "%v", err)
		}
	}
	if sm := dg.Summarize; sm != nil {
		sm.Ask = strings.TrimSpace(sm.Ask)
		if sm.Ask == "" {
			bad(key+".digest.summarize.ask", "is required: say what matters to the reader (e.g. \"messages from my team that need an answer today\")")
		}
		sm.MaxItems = cmp.Or(sm.MaxItems, SummarizeMaxItemsDefault)
		if sm.MaxItems < 1 || sm.MaxItems > SummarizeMaxItemsLimit {
			bad(key+".digest.summarize.max_items", "must be between 1 and %d, not %d", SummarizeMaxItemsLimit, sm.MaxItems)
		}
		if m := sm.Model; m != nil && m.Timeout < 0 {
			bad(key+".digest.summarize.model.timeout", "must be positive")
		}
	}
	return errs
}

// CheckWebhookSecret says what is wrong with a Standard Webhooks secret,
// or "". The value is a secret: it says what is wrong, never what it is.
func CheckWebhookSecret(secret string) string {
	if enc, ok := strings.CutPrefix(secret, "whsec_"); ok {
		if key, err := base64.RawStdEncoding.DecodeString(strings.TrimRight(enc, "=")); err != nil || len(key) == 0 {
			return "starts with whsec_ but the rest is not a standard base64 key (Standard Webhooks secrets are whsec_ followed by the base64 of 24 to 64 random bytes)"
		}
	}
	return ""
}

// exprErrors locates the problems of an expression (see
// normalize.CompileWhen) at key, one *Error each.
func (s *Source) exprErrors(key string, err error) []error {
	var errs []error
	for _, p := range normalize.Problems(err) {
		errs = append(errs, s.Errorf(key, ": %v", p))
	}
	return errs
}

// HostLimit returns the request budget of host (host or host:port, as in
// a URL): the hosts entry for host:port, else for the host name without
// the port, else the budget a linked connector declared for the host
// (connectors.RegisterHostLimit: api.notion.com), else
// defaults.host_rate_limit — except for a loopback host when
// defaults.host_rate_limit is not written: the zero RateLimit, no shared
// budget.
func (g *Global) HostLimit(host string) RateLimit {
	host = strings.ToLower(host)
	if rl := g.Hosts[host]; rl != nil {
		return *rl
	}
	name := host
	if n, _, err := net.SplitHostPort(host); err == nil {
		name = n
		if rl := g.Hosts[name]; rl != nil {
			return *rl
		}
	}
	if hl, ok := connectorRegistry.(HostLimiter); ok {
		if rl, ok := hl.HostLimit(host); ok {
			return rl
		}
		if name, _, err := net.SplitHostPort(host); err == nil {
			if rl, ok := hl.HostLimit(name); ok {
				return rl
			}
		}
	}
	if g.hostDefaultBuiltIn && IsLoopback(name) {
		return RateLimit{} // one's own machine: nobody else's service to protect
	}
	return g.Defaults.HostRateLimit
}

// IsLoopback reports whether host (a name or an IP, without port) is this
// machine: localhost (and *.localhost), 127.0.0.0/8 or ::1.
func IsLoopback(host string) bool {
	host = strings.TrimSuffix(strings.Trim(host, "[]"), ".")
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// validateSink applies a sink's defaults, checks the keys every sink has,
// and has the sink registry (when linked) check the keys of its type.
func (g *Global) validateSink(key string, s *Sink) []error {
	var errs []error
	bad := func(k, format string, args ...any) { errs = append(errs, g.Errorf(key+"."+k, format, args...)) }
	s.Timeout = cmp.Or(s.Timeout, SinkTimeoutDefault)
	s.MaxAttempts = cmp.Or(s.MaxAttempts, SinkMaxAttemptsDefault)
	s.Concurrency = cmp.Or(s.Concurrency, SinkConcurrencyDefault)
	if s.Timeout < 0 {
		bad("timeout", "must be positive")
	}
	if s.MaxAttempts < 1 {
		bad("max_attempts", "must be >= 1")
	}
	if s.Concurrency < 1 || s.Concurrency > 256 {
		bad("concurrency", "must be between 1 and 256")
	}
	kinds := sinkKinds()
	switch {
	case s.Type == "" && len(kinds) == 0:
		bad("type", "is required")
	case s.Type == "":
		bad("type", "is required (one of %s)", strings.Join(kinds, ", "))
	case len(kinds) == 0:
		// No sink type linked: the keys of the type stay unchecked.
	case !slices.Contains(kinds, s.Type):
		bad("type", "%q is not a sink type (known: %s)", s.Type, strings.Join(kinds, ", "))
	default:
		errs = append(errs, flatten([]error{sinkRegistry.Check(s)})...)
	}
	return errs
}

// ParseCron parses a five-field cron expression or a descriptor such as
// @daily, the syntax of digest.cron.
func ParseCron(spec string) (cron.Schedule, error) {
	if strings.HasPrefix(spec, "TZ=") || strings.HasPrefix(spec, "CRON_TZ=") {
		return nil, fmt.Errorf("%q: set the time zone with the timezone key, not in the expression", spec)
	}
	sched, err := schedule.ParseCron(spec)
	if err != nil {
		return nil, fmt.Errorf("%q is not a cron expression (minute hour day-of-month month day-of-week, or @daily, @hourly, @every 1h): %w", spec, err)
	}
	return sched, nil
}

// DedupeWindow returns the window of a duration dedupe policy, or 0.
func (w *Watch) DedupeWindow() time.Duration {
	d, err := time.ParseDuration(w.Dedupe)
	if err != nil {
		return 0
	}
	return d
}

func sinkNames(g *Global) []string {
	names := make([]string, 0, len(g.Sinks))
	for n := range g.Sinks {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// validateSemantic checks the model settings of watch w (at key path key).
func (s *Source) validateSemantic(g *Global, w *Watch, key string) []error {
	var errs []error
	bad := func(k, format string, args ...any) { errs = append(errs, s.Errorf(key+k, format, args...)) }
	w.Ask = strings.TrimSpace(w.Ask)
	if w.Ask == "" {
		switch {
		case len(w.Examples) > 0:
			bad(".examples", "need an ask: examples steer the model, which only a watch with an ask uses")
		case len(w.CounterExamples) > 0:
			bad(".counter_examples", "need an ask: counter-examples steer the model, which only a watch with an ask uses")
		case w.Model != nil:
			bad(".model", "is set but the watch has no ask")
		case w.Budget != nil && (w.Digest == nil || w.Digest.Summarize == nil):
			bad(".budget", "is set but the watch has no ask and no digest.summarize")
		}
	}
	for i, ex := range w.Examples {
		if strings.TrimSpace(ex) == "" {
			bad(fmt.Sprintf(".examples[%d]", i), "is empty")
		}
	}
	for i, ex := range w.CounterExamples {
		if strings.TrimSpace(ex) == "" {
			bad(fmt.Sprintf(".counter_examples[%d]", i), "is empty")
		}
	}
	if m := w.Model; m != nil {
		if m.Timeout < 0 {
			bad(".model.timeout", "must be positive")
		} else if m.Timeout > 0 && g.Evaluator.Lease > 0 && m.Timeout >= g.Evaluator.Lease {
			bad(".model.timeout", "(%s) must be shorter than evaluator.lease (%s): a claim on a change must outlive a model call", m.Timeout, g.Evaluator.Lease)
		}
	}
	if b := w.Budget; b != nil {
		if b.CallsPerDay < 0 {
			bad(".budget.calls_per_day", "must not be negative")
		}
		if b.TokensPerDay < 0 {
			bad(".budget.tokens_per_day", "must not be negative")
		}
	}
	return errs
}

// Defaults of api.limits.
const (
	APIWatchesDefault          = 100
	APISourcesDefault          = 20
	APIModelCallsPerDayDefault = 1000
)

// applyDefaults applies the api.limits defaults (0 takes the default, -1
// is no limit).
func (l *APILimits) applyDefaults(g *Global) []error {
	var errs []error
	for _, f := range []struct {
		key string
		v   *int
		def int
	}{{"watches", &l.Watches, APIWatchesDefault}, {"sources", &l.Sources, APISourcesDefault},
		{"model_calls_per_day", &l.ModelCallsPerDay, APIModelCallsPerDayDefault}} {
		switch {
		case *f.v == 0:
			*f.v = f.def
		case *f.v < -1:
			errs = append(errs, g.Errorf("api.limits."+f.key, "must be positive, or -1 for no limit"))
		}
	}
	return errs
}

// applyDefaults applies the retention defaults and checks the windows.
func (r *Retention) applyDefaults(g *Global) []error {
	var errs []error
	for _, w := range []struct {
		key string
		d   *time.Duration
		def time.Duration
	}{{"changes", &r.Changes, RetentionChangesDefault}, {"sync_runs", &r.SyncRuns, RetentionSyncRunsDefault},
		{"evaluations", &r.Evaluations, RetentionEvaluationsDefault},
		{"notifications", &r.Notifications, RetentionNotificationsDefault},
		{"model_calls", &r.ModelCalls, RetentionModelCallsDefault},
		{"task_runs", &r.TaskRuns, RetentionTaskRunsDefault},
		{"inbound_events", &r.InboundEvents, RetentionInboundEventsDefault},
		{"idempotency_keys", &r.IdempotencyKeys, RetentionIdempotencyKeysDefault},
		{"definition_deletions", &r.DefinitionDeletions, RetentionDefinitionDeletionsDefault},
		{"sign_in_links", &r.SignInLinks, RetentionSignInLinksDefault},
		// delivery_attempts defaults to notifications' window (below).
		{"delivery_attempts", &r.DeliveryAttempts, RetentionNotificationsDefault},
		{"audit_log", &r.AuditLog, RetentionAuditLogDefault},
		{"model_budgets", &r.ModelBudgets, RetentionModelBudgetsDefault},
		{"briefings", &r.Briefings, RetentionBriefingsDefault},
		{"verdicts", &r.Verdicts, RetentionVerdictsDefault},
		{"drift_embeddings", &r.DriftEmbeddings, RetentionDriftEmbeddingsDefault},
		{"sync_run_hours", &r.SyncRunHours, RetentionSyncRunHoursDefault},
		{"activity_hour_totals", &r.ActivityHourTotals, RetentionActivityHourTotalsDefault}} {
		if _, set := g.lines["retention."+w.key]; !set {
			*w.d = w.def
		}
		if *w.d < 0 {
			errs = append(errs, g.Errorf("retention."+w.key, "must not be negative (0 keeps rows forever)"))
		}
	}
	if _, set := g.lines["retention.delivery_attempts"]; !set {
		r.DeliveryAttempts = r.Notifications // the attempts go with their notifications
	}
	if r.ModelCalls > 0 && r.ModelCalls < 24*time.Hour {
		errs = append(errs, g.Errorf("retention.model_calls", "(%s) must be at least 24h: watch budgets count the current day's calls", r.ModelCalls))
	}
	for _, m := range []struct {
		key       string
		d, min    time.Duration
		minS, why string
	}{
		{"inbound_events", r.InboundEvents, 24 * time.Hour, "24h", "a provider's redelivery must still find its delivery id"},
		{"idempotency_keys", r.IdempotencyKeys, RetentionIdempotencyKeysDefault, "24h", "a retry within 24h gets the first answer"},
		{"sync_run_hours", r.SyncRunHours, 24 * time.Hour, "24h", "runs still roll up into the hours of the last day"},
		{"activity_hour_totals", r.ActivityHourTotals, 48 * time.Hour, "48h", "the admin overview reads the last 24 hours"},
	} {
		if m.d > 0 && m.d < m.min {
			errs = append(errs, g.Errorf("retention."+m.key, "(%s) must be at least %s: %s", m.d, m.minS, m.why))
		}
	}
	r.BatchSize = cmp.Or(r.BatchSize, RetentionBatchDefault)
	if r.BatchSize < 1 || r.BatchSize > 100000 {
		errs = append(errs, g.Errorf("retention.batch_size", "must be between 1 and 100000"))
	}
	r.Interval = cmp.Or(r.Interval, RetentionIntervalDefault)
	if r.Interval < time.Second {
		errs = append(errs, g.Errorf("retention.interval", "must be at least 1s"))
	}
	return errs
}

// validateRetention checks retention.notifications against the dedupe
// windows of the watches: a notification pruned inside its watch's window
// could no longer suppress a duplicate.
func (g *Global) validateRetention(sources []*Source) []error {
	keep := g.Retention.Notifications
	if keep <= 0 {
		return nil
	}
	if _, set := g.lines["retention.notifications"]; !set {
		// The default window stretches to the longest dedupe window.
		for _, s := range sources {
			for _, w := range s.Watches {
				g.Retention.Notifications = max(g.Retention.Notifications, w.DedupeWindow())
			}
		}
		return nil
	}
	var errs []error
	for _, s := range sources {
		for i, w := range s.Watches {
			if win := w.DedupeWindow(); win > keep {
				errs = append(errs, g.Errorf("retention.notifications",
					"(%s) must be at least the dedupe window of watch %s of %s (%s, watches[%d].dedupe): a pruned notification no longer suppresses duplicates",
					keep, w.Name, s.Path, win, i))
			}
		}
	}
	return errs
}
