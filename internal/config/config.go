// Package config loads lookout's configuration directory: lookout.yaml for
// global settings and sources/*.yaml, one source per file.
//
// Decoding is strict: an unknown key, a value of the wrong type or a missing
// required key is an error that names the file, the line and the key path,
// for example
//
//	sources/acme.yaml:12: rate_limit.per_second must be > 0
//
// Secrets are written as ${ENV_VAR} references and expanded at load time;
// the expanded values are never logged or stored in the database.
package config

import (
	"encoding/json"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/lookout-dev/lookout/internal/egress"
	"github.com/lookout-dev/lookout/internal/normalize"
	"github.com/lookout-dev/lookout/internal/redact"
	"go.yaml.in/yaml/v3"
)

// Config is a loaded, validated configuration directory.
type Config struct {
	// Dir is the directory the configuration was loaded from.
	Dir string
	// Global holds lookout.yaml.
	Global Global
	// Sources holds sources/*.yaml, sorted by name.
	Sources []*Source
}

// Source returns the source called name, or nil.
func (c *Config) Source(name string) *Source {
	for _, s := range c.Sources {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// Global is lookout.yaml.
type Global struct {
	// Ollama is the model server used by watches with an ask.
	Ollama Ollama `yaml:"ollama"`
	// Sinks are the named notification channels watches refer to.
	// Defaults to a single sink "log" of type log.
	Sinks map[string]*Sink `yaml:"sinks"`
	// Defaults apply to every source that does not set the value itself.
	Defaults Defaults `yaml:"defaults"`
	// Hosts are request budgets per upstream host, shared by every source
	// that calls the host and by every syncer replica (the budget lives in
	// the host_limits table). Keys are a host name ("api.github.com") or
	// host:port ("127.0.0.1:8080"); a host not listed gets
	// defaults.host_rate_limit.
	Hosts map[string]*RateLimit `yaml:"hosts"`
	// Syncer tunes the syncer daemon.
	Syncer Syncer `yaml:"syncer"`
	// Evaluator tunes the evaluator daemon.
	Evaluator Evaluator `yaml:"evaluator"`
	// Delivery tunes the notification deliverer of the evaluator daemon.
	Delivery Delivery `yaml:"delivery"`
	// Retention prunes old history in batches: evaluated changes, finished
	// sync runs, evaluations, finished notifications and model calls older
	// than their window. Pending work is never pruned. On by default, with
	// a window per table (30 days of changes, runs and evaluations, 90 of
	// notifications and model calls; docs/config.md#retention).
	Retention Retention `yaml:"retention"`
	// Egress is the policy on the addresses connectors and webhook and
	// Slack sinks may connect to, checked on the IP dialed after DNS.
	// Defaults to refusing link-local and cloud metadata addresses only.
	Egress Egress `yaml:"egress"`
	// Log selects the log format and level.
	Log Log `yaml:"log"`
	// Metrics selects what the Prometheus /metrics endpoints export beyond
	// their bounded series (docs/observability.md#metrics).
	Metrics Metrics `yaml:"metrics"`
	// Alerts configures the watchdog of the evaluator daemon: alerts about
	// stale sources, stuck runs, dead letters and disabled sources, sent
	// through sinks like notifications. See docs/observability.md.
	Alerts Alerts `yaml:"alerts"`
	// API configures the api deployment (docs/api.md): per-owner limits
	// and the egress of sources created through it.
	API API `yaml:"api"`
	// HTTP bounds how slowly clients may send requests to the api's
	// --listen server (/v1, /mcp, /admin and /ingest); the syncer's and
	// evaluator's servers (/metrics and probes, no bodies) keep the
	// defaults. Defaults as its fields say.
	HTTP HTTP `yaml:"http"`

	file     string
	lines    map[string]int
	redactor *redact.Redactor
	// uses is what the daemon reading the configuration uses of its
	// sources (LoadFor, SetUses).
	uses Uses
	// hostDefaultBuiltIn is set when defaults.host_rate_limit was not
	// written: loopback hosts then have no shared budget (HostLimit).
	hostDefaultBuiltIn bool
}

// Redactor hides the value of every ${ENV} reference expanded while
// loading the configuration directory (lookout.yaml and every source
// file), except values shorter than redact.MinLen bytes, in errors that
// are stored and in logs. Load makes it growable: the credentials of
// sources created through the API are added when a daemon opens them
// (definitions.Validator), so its logs and stored errors hide those too.
// It is nil (redacting nothing) for a Global that Load did not make.
func (g *Global) Redactor() *redact.Redactor { return g.redactor }

// Line returns the line of key path (e.g. "sinks.ops.url") in lookout.yaml,
// or of its nearest ancestor that is present, or 0.
func (g *Global) Line(path string) int {
	for p := path; p != ""; {
		if l, ok := g.lines[p]; ok {
			return l
		}
		i := lastSep(p)
		if i < 0 {
			break
		}
		p = p[:i]
	}
	return 0
}

// Ollama configures the model server.
type Ollama struct {
	// Host is the Ollama server URL. Defaults to http://127.0.0.1:11434.
	Host string `yaml:"host"`
	// Model is the model name watches use unless they set one. Defaults to "llama3.2".
	Model string `yaml:"model"`
	// Timeout bounds one model call. Defaults to 60s.
	Timeout time.Duration `yaml:"timeout"`
	// Concurrency bounds simultaneous model calls per evaluator. Defaults to 2.
	Concurrency int `yaml:"concurrency"`
	// Options are passed to the model (temperature, seed, num_predict, ...).
	// Keys left out default to temperature 0 and seed 42, so that a verdict
	// is reproducible. Defaults to {temperature: 0, seed: 42}.
	Options map[string]any `yaml:"options"`
	// RateLimit bounds model calls per second per evaluator. Defaults to
	// 5 per second with a burst of ollama.concurrency.
	RateLimit *RateLimit `yaml:"rate_limit"`
	// HoldBackoff spaces the retries of a change held because the model
	// failed (on_model_error: hold): min after the first failure, doubling
	// up to max. Defaults to {min: 30s, max: 15m}.
	HoldBackoff *Backoff `yaml:"hold_backoff"`
	// ReasonMaxChars bounds the reason the model may write (maxLength in the
	// answer's JSON schema): shorter reasons cost fewer output tokens.
	// Defaults to 200.
	ReasonMaxChars int `yaml:"reason_max_chars"`
	// DigestTTL is how long a model digest read from /api/tags is trusted
	// before it is read again, so that an updated model is noticed.
	// Defaults to 1m.
	DigestTTL time.Duration `yaml:"digest_ttl"`
	// Drift turns on the drift report of model outputs: embeddings of
	// every decision's reason, compared week by week (see Drift).
	// Defaults to off.
	Drift *Drift `yaml:"drift"`
}

// Backoff is exponential backoff with jitter between Min and Max; where it
// is used says its defaults (syncer.backoff: 30s..1h, ollama.hold_backoff:
// 30s..15m).
type Backoff struct {
	// Min is the first wait.
	Min time.Duration `yaml:"min"`
	// Max caps the wait.
	Max time.Duration `yaml:"max"`
}

// Sink is one notification channel: the keys every sink has, and the
// keys of its type kept raw. Each sink type owns the schema of its keys
// (url:, smtp:, command: ...): its package under internal/notify registers
// it (notify.Register) and reads them with DecodeBlock; config asks the
// registry to check them (see SinkRegistry).
type Sink struct {
	// Type names the sink's type: log, webhook, slack, email, command, or
	// another registered one. Required.
	Type string `yaml:"type"`
	// Timeout bounds one delivery attempt; a sink that does not answer in
	// time fails the attempt, which is retried. Defaults to 10s.
	Timeout time.Duration `yaml:"timeout"`
	// MaxAttempts is the number of tries before a notification is dead. Defaults to 8.
	MaxAttempts int `yaml:"max_attempts"`
	// Concurrency is how many deliveries to this sink one evaluator runs at
	// once. Defaults to 4.
	Concurrency int `yaml:"concurrency"`
	// Title and Body are text/template templates for the message, over
	// .Record, .Change, .Verdict, .Watch and .Source (see docs/delivery.md).
	// A watch's own title/body win. Defaults to "[watch] record title" and
	// the reason, link and change summary.
	Title string `yaml:"title"`
	Body  string `yaml:"body"`

	name   string
	global *Global
	// block holds the keys of the sink that are not the fields above:
	// those of its type, decoded by the type's package (DecodeBlock).
	block *yaml.Node
}

// Name is the sink's key in lookout.yaml.
func (s *Sink) Name() string { return s.name }

// Errorf returns an *Error at the line of the sink's key field (e.g.
// "title") in lookout.yaml; field "" is the sink itself.
func (s *Sink) Errorf(field, format string, args ...any) error {
	key := "sinks." + s.name
	if field != "" {
		key += "." + field
	}
	g := s.global
	if g == nil {
		g = &Global{}
	}
	return g.Errorf(key, format, args...)
}

// Delivery tunes the deliverer, which claims due notifications per sink
// and sends them.
type Delivery struct {
	// Lease is how long a claimed notification stays with one evaluator
	// before another may take it over; it must exceed every sink timeout.
	// Defaults to 2m.
	Lease time.Duration `yaml:"lease"`
	// BatchSize is how many notifications of one sink are claimed at once
	// until the lane has shown its pace; a lane that sends faster claims up
	// to 8 times as many (docs/delivery.md). Defaults to 100.
	BatchSize int `yaml:"batch_size"`
	// PollInterval is the slow timer that finds retries coming due.
	// Defaults to 1s.
	PollInterval time.Duration `yaml:"poll_interval"`
	// RetryMin is the wait after a first failed attempt; each further
	// failure doubles it, with jitter. Defaults to 1s.
	RetryMin time.Duration `yaml:"retry_min"`
	// RetryMax caps the wait between attempts. Defaults to 1h.
	RetryMax time.Duration `yaml:"retry_max"`
}

// Defaults are source settings applied where a source is silent.
type Defaults struct {
	// Every is the polling interval. Defaults to 5m.
	Every time.Duration `yaml:"every"`
	// Jitter spreads runs of sources with one interval. Defaults to 10% of every.
	Jitter *time.Duration `yaml:"jitter"`
	// RateLimit is the per-source request budget. Defaults to 1/s, burst 1.
	RateLimit RateLimit `yaml:"rate_limit"`
	// HostRateLimit is the request budget of an upstream host that hosts
	// does not list, shared by all sources and replicas calling it (per
	// credential when requests carry one). Defaults to 2/s, burst 4, and
	// to no budget for loopback hosts (localhost, 127.0.0.0/8, ::1), which
	// are one's own services.
	HostRateLimit RateLimit `yaml:"host_rate_limit"`
	// Timeout bounds one request. Defaults to 30s.
	Timeout time.Duration `yaml:"timeout"`
	// MaxFailures disables a source after that many consecutive failed runs,
	// for sources whose stop block does not set max_failures; 0 never
	// disables. Defaults to 20.
	MaxFailures *int `yaml:"max_failures"`
	// Notify lists the sinks used by watches that name none. Defaults to [log].
	Notify []string `yaml:"notify"`
	// StuckAfter is the stuck_after of sources that do not set it.
	// Defaults to 30m.
	StuckAfter time.Duration `yaml:"stuck_after"`
}

// Retention bounds how long history is kept. Each window is a duration
// (720h is 30 days); a key left out takes its default, and 0 written out
// keeps that table's rows forever. The history tables are partitioned by
// week: a week's partition past the window is dropped whole unless it
// holds pending work, so rows are kept between the window and a week
// more. The evaluator daemon prunes every interval (one replica at a
// time); `evaluator prune` prunes once. See docs/config.md#retention.
type Retention struct {
	// Changes: evaluated changes created longer ago than this are pruned;
	// pending ones never are. The records table keeps every record's
	// current state. Defaults to 720h (30 days).
	Changes time.Duration `yaml:"changes"`
	// SyncRuns: finished runs started longer ago than this are pruned; a
	// running run and each source's latest run never are. Defaults to 720h
	// (30 days).
	SyncRuns time.Duration `yaml:"sync_runs"`
	// Evaluations: evaluations of changes created longer ago than this are
	// pruned, except those of changes still pending. Defaults to 720h (30
	// days).
	Evaluations time.Duration `yaml:"evaluations"`
	// Notifications: delivered, digested and dead notifications created
	// longer ago than this are pruned with their dedupe keys (a dedupe:
	// record key stays); pending and held ones never are. Must be at least
	// every watch's dedupe window. Defaults to 2160h (90 days), or the
	// longest dedupe window when that is longer.
	Notifications time.Duration `yaml:"notifications"`
	// ModelCalls: model calls older than this are pruned (cached verdicts
	// stay). At least 24h, since budgets count the current day's calls.
	// Defaults to 2160h (90 days).
	ModelCalls time.Duration `yaml:"model_calls"`
	// DeliveryAttempts: delivery attempts (delivery_attempts, the history
	// of each notification's attempts) that started longer ago than this
	// are pruned. Defaults to retention.notifications as written, else
	// 2160h (90 days), so that the attempts go with their notifications.
	DeliveryAttempts time.Duration `yaml:"delivery_attempts"`
	// TaskRuns: task runs that finished longer ago than this and are over
	// for good (completed, failed, or released, lost or expired with no
	// retry due, the tool showing their state) are pruned, with their
	// idempotency keys; an attempt in progress, a run waiting for its
	// retry or a tool write still due never are. Defaults to 2160h (90
	// days).
	TaskRuns time.Duration `yaml:"task_runs"`
	// InboundEvents: webhook deliveries received longer ago than this and
	// processed are pruned (their delivery ids with them); an event not yet
	// processed never is. At least 24h, so that a provider's redelivery
	// still finds its delivery id. Defaults to 720h (30 days).
	InboundEvents time.Duration `yaml:"inbound_events"`
	// IdempotencyKeys: Idempotency-Key answers older than this are pruned.
	// At least 24h, the window in which a retry gets the first answer.
	// Defaults to 24h.
	IdempotencyKeys time.Duration `yaml:"idempotency_keys"`
	// DefinitionDeletions: the records of deleted sources and watches
	// older than this are pruned (a daemon that was behind them loads the
	// definitions whole). Defaults to 720h (30 days).
	DefinitionDeletions time.Duration `yaml:"definition_deletions"`
	// SignInLinks: sign-in links of /me that expired, or were used,
	// longer ago than this are pruned (a link lasts an hour at most and
	// opens /me once). Defaults to 720h (30 days).
	SignInLinks time.Duration `yaml:"sign_in_links"`
	// AuditLog: audit entries older than this are pruned. Defaults to
	// 8760h (365 days).
	AuditLog time.Duration `yaml:"audit_log"`
	// ModelBudgets: the model budgets' days that ended longer ago than
	// this are pruned; the current UTC day never is. Defaults to 2160h (90
	// days).
	ModelBudgets time.Duration `yaml:"model_budgets"`
	// Briefings: cached digest briefings last written or used longer ago
	// than this are pruned; one being written never is. Defaults to 2160h
	// (90 days).
	Briefings time.Duration `yaml:"briefings"`
	// Verdicts: cached model verdicts made and last used longer ago than
	// this are pruned (the same question is then asked again). Defaults to
	// 2160h (90 days).
	Verdicts time.Duration `yaml:"verdicts"`
	// DriftEmbeddings: embedded decisions of the drift report whose model
	// call is older than this are pruned (a pending one never is); keep it
	// longer than the age of a pinned ollama.drift.baseline_week. Defaults
	// to 8760h (365 days).
	DriftEmbeddings time.Duration `yaml:"drift_embeddings"`
	// SyncRunHours: the quiet runs' hourly rollups of hours that ended
	// longer ago than this are pruned. At least 24h; the current hour is
	// never pruned. Defaults to 720h (30 days).
	SyncRunHours time.Duration `yaml:"sync_run_hours"`
	// ActivityHourTotals: the admin page's hourly totals of hours that
	// ended longer ago than this are pruned. At least 48h (the overview
	// reads the last 24 hours). Defaults to 2160h (90 days).
	ActivityHourTotals time.Duration `yaml:"activity_hour_totals"`
	// BatchSize is the most rows one DELETE removes; each batch is its own
	// short transaction. Defaults to 5000.
	BatchSize int `yaml:"batch_size"`
	// Interval is how often the evaluator daemon keeps the partitions and
	// prunes. Defaults to 1h.
	Interval time.Duration `yaml:"interval"`
}

// Enabled reports whether any window is set.
func (r Retention) Enabled() bool {
	for _, w := range r.Windows() {
		if w.Window > 0 {
			return true
		}
	}
	return false
}

// RetentionWindow is one table's retention window.
type RetentionWindow struct {
	// Key is the table and the key under retention: (sync_runs, ...).
	Key    string
	Window time.Duration
}

// Windows lists every window, in the order of the keys in
// docs/config.md#retention.
func (r Retention) Windows() []RetentionWindow {
	return []RetentionWindow{{"changes", r.Changes}, {"sync_runs", r.SyncRuns}, {"evaluations", r.Evaluations},
		{"notifications", r.Notifications}, {"delivery_attempts", r.DeliveryAttempts}, {"model_calls", r.ModelCalls}, {"task_runs", r.TaskRuns},
		{"inbound_events", r.InboundEvents}, {"idempotency_keys", r.IdempotencyKeys},
		{"definition_deletions", r.DefinitionDeletions}, {"sign_in_links", r.SignInLinks}, {"audit_log", r.AuditLog}, {"model_budgets", r.ModelBudgets},
		{"briefings", r.Briefings}, {"verdicts", r.Verdicts}, {"drift_embeddings", r.DriftEmbeddings}, {"sync_run_hours", r.SyncRunHours},
		{"activity_hour_totals", r.ActivityHourTotals}}
}

// Syncer tunes the syncer.
type Syncer struct {
	// Lease is how long a claim on a source lasts before another replica may
	// take it over. Defaults to 5m.
	Lease time.Duration `yaml:"lease"`
	// Concurrency is the most runs one replica has in flight at once; a
	// run waiting on its upstream holds a goroutine, not a database
	// connection. Defaults to 1000.
	Concurrency int `yaml:"concurrency"`
	// PollInterval is the longest the syncer sleeps when no source is due
	// (it wakes when the next one falls due). Defaults to 1s.
	PollInterval time.Duration `yaml:"poll_interval"`
	// BatchSize is the number of items written per transaction. Defaults to 500.
	BatchSize int `yaml:"batch_size"`
	// Backoff spaces the runs of a failing source: min after the first
	// failure, doubling per consecutive failure up to max, with jitter.
	// Defaults to min 30s, max 1h.
	Backoff Backoff `yaml:"backoff"`
	// MaxWait is the longest one request waits inside a run for its
	// source's or its host's budget, or for a host block (Retry-After) to
	// end; a longer wait defers the run to that time, to resume from its
	// cursor. Defaults to 30s.
	MaxWait time.Duration `yaml:"max_wait"`
	// RunTimeout bounds one run of a source; a run still going then is
	// cancelled and counts as a failure. Defaults to 1h.
	RunTimeout time.Duration `yaml:"run_timeout"`
	// RollupEvery is how often a replica adds the quiet runs it counted in
	// memory to sync_run_hours (and when it stops). Longer writes less
	// (one row version per source and flush instead of per run); a
	// replica killed without stopping loses the counts of at most that
	// long (not the runs, whose source rows are committed). Between 1s
	// and 1h; defaults to 5m.
	RollupEvery time.Duration `yaml:"rollup_every"`
	// TasksInterval is how often the task runner's maintenance runs:
	// expired task claims recovered, agents' reports finished, failed
	// writes to the tool retried (docs/tasks.md#recovery). At least 1s.
	// Defaults to 15s.
	TasksInterval time.Duration `yaml:"tasks_interval"`
	// TasksGrace is how long after a task claim expired its recovery
	// waits (its holder may be writing its end), and how long a finished
	// run's write to the tool is left to its own replica before any
	// replica retries it. Defaults to 30s.
	TasksGrace time.Duration `yaml:"tasks_grace"`
}

// Evaluator tunes the evaluator.
type Evaluator struct {
	// Lease is how long a claim on a batch of changes lasts. Defaults to 2m.
	Lease time.Duration `yaml:"lease"`
	// Workers is how many batches one replica evaluates at once, so that
	// Go's work on one batch overlaps PostgreSQL's on another. Defaults to 2.
	Workers int `yaml:"workers"`
	// BatchSize is how many changes are claimed at once. Defaults to 500.
	BatchSize int `yaml:"batch_size"`
	// CatchUpInterval is the slow timer that drains the changes table even
	// without notifications. Defaults to 30s.
	CatchUpInterval time.Duration `yaml:"catch_up_interval"`
	// MaxAttempts is how often a change is retried before it is recorded as
	// failed. Defaults to 10.
	MaxAttempts int `yaml:"max_attempts"`
}

// API configures the api deployment (docs/api.md#configuration).
type API struct {
	// Limits bound what one owner may have.
	Limits APILimits `yaml:"limits"`
	// AllowPrivate lets sources and webhooks created through the API reach
	// loopback and private addresses (10/8, 172.16/12, 192.168/16, ...);
	// they are untrusted input, so this is refused unless set. Link-local
	// and metadata addresses stay refused. Defaults to false.
	AllowPrivate bool `yaml:"allow_private"`
}

// HTTP bounds the requests of the --listen servers (docs/deploy.md#slow-clients).
// Responses are never bounded: event streams last as long as they need.
type HTTP struct {
	// HeaderTimeout bounds reading a request's headers. Defaults to 10s.
	HeaderTimeout time.Duration `yaml:"header_timeout"`
	// BodyGrace and BodyMinRate bound reading a request's body: it must
	// arrive within body_grace plus one second per body_min_rate bytes
	// read, so a large body passes at that rate or faster and a trickle
	// is cut after about body_grace (the connection is closed). Default
	// 10s and 65536 (bytes a second).
	BodyGrace   time.Duration `yaml:"body_grace"`
	BodyMinRate int64         `yaml:"body_min_rate"`
	// IdleTimeout closes a keep-alive connection idle for this long.
	// Defaults to 2m.
	IdleTimeout time.Duration `yaml:"idle_timeout"`
}

// Defaults of the http block.
const (
	HTTPHeaderTimeoutDefault = 10 * time.Second
	HTTPBodyGraceDefault     = 10 * time.Second
	HTTPBodyMinRateDefault   = 64 << 10
	HTTPIdleTimeoutDefault   = 2 * time.Minute
)

// APILimits are per-owner limits; 0 takes the default, -1 is no limit.
type APILimits struct {
	// Watches one owner may have. Defaults to 100.
	Watches int `yaml:"watches"`
	// Sources one owner may create. Defaults to 20.
	Sources int `yaml:"sources"`
	// ModelCallsPerDay one owner's watches may make (UTC day). Defaults to 1000.
	ModelCallsPerDay int `yaml:"model_calls_per_day"`
}

// Egress limits where outbound HTTP requests may connect (docs/config.md#egress).
// Link-local addresses (169.254.0.0/16, fe80::/10) and cloud metadata
// endpoints are always refused unless Allow lists them.
type Egress struct {
	// DenyPrivate also refuses loopback, private (10/8, 172.16/12,
	// 192.168/16, fc00::/7) and shared (100.64/10) addresses. Defaults to
	// false.
	DenyPrivate bool `yaml:"deny_private"`
	// Allow lists addresses or CIDR prefixes (10.1.2.0/24, 127.0.0.1)
	// allowed whatever the other rules say. Defaults to none.
	Allow []string `yaml:"allow"`
}

// Policy returns the egress policy: Allow as prefixes (a bare address is a
// /32 or /128); entries that do not parse are left out (validation reports
// them).
func (e Egress) Policy() egress.Policy {
	p := egress.Policy{DenyPrivate: e.DenyPrivate}
	for _, a := range e.Allow {
		if pre, err := parsePrefix(a); err == nil {
			p.Allow = append(p.Allow, pre)
		}
	}
	return p
}

func parsePrefix(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		return p.Masked(), err
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// Metrics configures the Prometheus instruments of the daemons.
type Metrics struct {
	// PerSource adds two gauges per active source to the syncer's
	// /metrics, read from the sources table at every scrape:
	// lookout_source_last_success_timestamp_seconds{source} and
	// lookout_source_consecutive_failures{source} (200,000 series at
	// 100,000 sources, on every syncer replica). Read at start: a reload
	// does not change it. Defaults to false: no series carries a source
	// name, and their number does not grow with the sources.
	PerSource bool `yaml:"per_source"`
}

// Log selects the log output.
type Log struct {
	// Format is json or text. Defaults to text.
	Format string `yaml:"format"`
	// Level is debug, info, warn or error. Defaults to info.
	Level string `yaml:"level"`
}

// RateLimit is a token bucket.
type RateLimit struct {
	// PerSecond is the sustained request rate.
	PerSecond float64 `yaml:"per_second"`
	// Burst is the bucket size. Defaults to 1.
	Burst int `yaml:"burst"`
}

// Source is one sources/*.yaml file.
type Source struct {
	// Name identifies the source in SQL and logs. Required; letters, digits, '-', '_' and '.'.
	Name string `yaml:"name"`
	// Connector is the connector type (file, http, ...). Required.
	Connector string `yaml:"connector"`
	// Every is the polling interval. Defaults to defaults.every.
	Every time.Duration `yaml:"every"`
	// Jitter spreads the runs: an every source's run is moved by a random
	// amount within ±jitter/2 around its slot (every apart on average), a
	// cron slot is delayed by up to jitter. Defaults to defaults.jitter.
	Jitter *time.Duration `yaml:"jitter"`
	// Cron is a cron expression used instead of every.
	Cron string `yaml:"cron"`
	// Timezone is the IANA zone for cron. Defaults to UTC.
	Timezone string `yaml:"timezone"`
	// Adaptive lets the interval move between min and max with activity.
	Adaptive *Adaptive `yaml:"adaptive"`
	// RateLimit is this source's request budget. Defaults to defaults.rate_limit.
	RateLimit *RateLimit `yaml:"rate_limit"`
	// Timeout bounds one request. Defaults to defaults.timeout.
	Timeout time.Duration `yaml:"timeout"`
	// FollowRedirects is what HTTP connectors do with a redirect:
	// same_origin follows redirects to the same scheme, host and port and
	// fails the run on one to another origin; any follows every redirect
	// but sends the source's configured headers (and credentials) only to
	// the origin of its URL; none follows no redirect. Defaults to
	// same_origin.
	FollowRedirects string `yaml:"follow_redirects"`
	// MaxDeleteFraction is the deletion guard of a snapshot source: a run
	// that would delete more than this fraction of the source's live
	// records (and at least MinGuardedDeletes of them) fails and deletes
	// nothing. 1 turns the guard off. Between 0 and 1. Defaults to 0.5.
	MaxDeleteFraction *float64 `yaml:"max_delete_fraction"`
	// StaleAfter is how long the source may go without a successful run
	// before the watchdog alerts that it is stale. Defaults to
	// alerts.stale_after, else three times the source's longest interval
	// (every, adaptive.max, or the longest gap of its cron schedule), and
	// at least 5m.
	StaleAfter time.Duration `yaml:"stale_after"`
	// StuckAfter is how long a run of this source, or one of its changes or
	// notifications, may wait or run before report_stuck lists it (stored
	// in sources.stuck_after_seconds). Defaults to defaults.stuck_after.
	StuckAfter time.Duration `yaml:"stuck_after"`
	// Stop ends polling: after a time, when an expression over the last run
	// is true, or after max_failures consecutive failures. Never nil after
	// loading. Defaults to max_failures from defaults.max_failures.
	Stop *Stop `yaml:"stop"`
	// Fields maps raw items to normalized records with expressions over
	// `item`. Unset fields use the item's key of the same name.
	Fields Fields `yaml:"fields"`
	// Volatile lists normalized field paths (e.g. extra.views) left out of
	// the content hash, so that their changes do not count as changes.
	Volatile []string `yaml:"volatile"`
	// Webhook makes the source webhook-first: deliveries to the api's
	// /ingest/{source} are mirrored as they come, and the poll runs every
	// webhook.reconcile_every to repair missed events (docs/webhooks.md).
	// Defaults to none: the source is polled on its schedule.
	Webhook *Webhook `yaml:"webhook"`
	// Watches are the conditions the evaluator checks on every change.
	Watches []*Watch `yaml:"watches"`
	// Tasks are the source's task watches: records claimed, executed
	// once and moved to a terminal state in the tool, by the syncer's task
	// runner (docs/tasks.md). Defaults to none.
	Tasks []*Task `yaml:"tasks"`

	// Block is the connector's own block, the key named by Connector
	// (http: for connector: http), kept raw with its positions: the
	// connector decodes it (DecodeBlock), applies its defaults and validates
	// it. Nil when the file has no such block.
	Block *yaml.Node `yaml:"-"`

	// File is the path the source was loaded from, relative to the config dir.
	Path string `yaml:"-"`
	// Definition is the source as written, as JSON (a source file's keys,
	// its connector block and watches included), with its ${ENV}
	// references unexpanded: what the definitions tables store. It is
	// canonical, as encoding/json writes a decoded value (objects' keys
	// sorted, no spaces), at every depth: a watch's JSON within it is its
	// canonical form (definitions.Split hashes it as it is).
	Definition json.RawMessage `yaml:"-"`
	// Hash identifies this source's configuration (stored in sources.config_hash).
	Hash string `yaml:"-"`

	lines map[string]int
	// noLines: the lines are not the file's (see ForgetLines).
	noLines bool
	// typed selects the key paths sent as JSON (ParseSent), where a
	// number or a boolean is not a string; nil for files.
	typed func(path string) bool
	// others are the blocks of other registered connectors the file sets.
	others []string
	// released: Block and Definition were dropped (Release).
	released bool
}

// ForgetLines marks a source parsed from its stored definition (JSON,
// not its file): its errors then name the file and the key without a
// line, since the definition's lines are not the file's.
func (s *Source) ForgetLines() { s.noLines = true }

// written reports whether the document wrote key path itself (not only an
// ancestor): an explicit zero is then a value, not "use the default".
func (s *Source) written(path string) bool {
	_, ok := s.lines[path]
	return ok
}

// written reports whether lookout.yaml wrote key path itself.
func (g *Global) written(path string) bool {
	_, ok := g.lines[path]
	return ok
}

// Line returns the line of key path (e.g. "http.url") in the source file,
// or of its nearest ancestor that is present, or 1; 0 after ForgetLines.
func (s *Source) Line(path string) int {
	if s.noLines {
		return 0
	}
	for p := path; p != ""; {
		if l, ok := s.lines[p]; ok {
			return l
		}
		i := lastSep(p)
		if i < 0 {
			break
		}
		p = p[:i]
	}
	return 1
}

// Adaptive bounds the adaptive interval: shorter after runs that saw
// changes, longer while nothing changes, never outside [min, max].
type Adaptive struct {
	// Min is the shortest interval. Required.
	Min time.Duration `yaml:"min"`
	// Max is the longest interval. Required.
	Max time.Duration `yaml:"max"`
}

// Stop holds a source's stop conditions.
type Stop struct {
	// After is an RFC 3339 time after which the source is completed and
	// not polled again. Defaults to none.
	After *time.Time `yaml:"after"`
	// When is an expression over `run` (the last run's counters and status)
	// and `source`; when true after a run the source is completed.
	// Defaults to none.
	When string `yaml:"when"`
	// MaxFailures disables the source after that many consecutive failed
	// runs; 0 never disables. Defaults to defaults.max_failures.
	MaxFailures *int `yaml:"max_failures"`
}

// Fields are expressions over `item` producing the normalized fields.
type Fields struct {
	ID        string            `yaml:"id"`
	Title     string            `yaml:"title"`
	Body      string            `yaml:"body"`
	URL       string            `yaml:"url"`
	Author    string            `yaml:"author"`
	Status    string            `yaml:"status"`
	Labels    string            `yaml:"labels"`
	CreatedAt string            `yaml:"created_at"`
	UpdatedAt string            `yaml:"updated_at"`
	Extra     map[string]string `yaml:"extra"`
}

// Exprs returns the mapping as the normalize package takes it.
func (f Fields) Exprs() normalize.FieldExprs {
	return normalize.FieldExprs{
		ID: f.ID, Title: f.Title, Body: f.Body, URL: f.URL, Author: f.Author, Status: f.Status,
		Labels: f.Labels, CreatedAt: f.CreatedAt, UpdatedAt: f.UpdatedAt, Extra: f.Extra,
	}
}

// Watch is a condition over changes of a source.
type Watch struct {
	// Name identifies the watch within its source. Required.
	Name string `yaml:"name"`
	// When is a deterministic expression over record, previous, change and
	// source. Defaults to "true".
	When string `yaml:"when"`
	// Ask is an optional natural-language condition checked by the model
	// for changes that passed When.
	Ask string `yaml:"ask"`
	// Examples and CounterExamples steer the model.
	Examples        []string `yaml:"examples"`
	CounterExamples []string `yaml:"counter_examples"`
	// Model overrides the model settings of lookout.yaml for this watch.
	Model *WatchModel `yaml:"model"`
	// OnModelError is hold, notify or skip. Defaults to hold.
	OnModelError string `yaml:"on_model_error"`
	// Budget bounds model use per day.
	Budget *Budget `yaml:"budget"`
	// Notify lists sink names. Defaults to defaults.notify, unless the
	// watch has a webhook of its own (then to none).
	Notify []string `yaml:"notify"`
	// Webhook is the watch's own webhook, for watches created through the
	// API: each notification is POSTed to its URL, signed the Standard
	// Webhooks way with a secret lookout generated (the API returns it
	// once and stores it sealed). Source files declare webhook sinks
	// instead. Defaults to none.
	Webhook *WatchWebhook `yaml:"webhook"`
	// Channel is the watch's own notification URL (a url sink's channel:
	// ntfy, Discord, Telegram, Gotify, generic, Teams, Mattermost,
	// Rocket.Chat, Google Chat, Zulip, Pushover, Matrix), for watches created through the
	// API: the API stores the URL sealed and shows it with its secrets
	// redacted. Source files declare url sinks instead. Defaults to none.
	Channel *WatchChannel `yaml:"channel"`
	// Dedupe is version (once per record version, the default), record
	// (once per record ever) or a duration such as 1h (at most once per
	// window per record).
	Dedupe string `yaml:"dedupe"`
	// Digest collects matches and sends one summary per schedule.
	Digest *Digest `yaml:"digest"`
	// Urgency is the urgency of notifications decided without a model.
	// Defaults to medium.
	Urgency string `yaml:"urgency"`
	// Title and Body are text/template templates overriding the sink's.
	Title string `yaml:"title"`
	Body  string `yaml:"body"`
}

// OwnWebhookSink is the sink name of the notifications sent to a watch's
// own webhook (notifications.sink). It is not a valid name of a sink of
// lookout.yaml, so it never collides with one.
const OwnWebhookSink = "@webhook"

// OwnChannelSink is the sink name of the notifications sent to a watch's
// own channel (notifications.sink); like OwnWebhookSink it cannot be the
// name of a sink of lookout.yaml.
const OwnChannelSink = "@channel"

// WatchChannel is a watch's own channel.
type WatchChannel struct {
	// URL is the notification URL with its secrets replaced by
	// [REDACTED], as the API shows it (ntfy://[REDACTED]@ntfy.sh/[REDACTED]).
	// Required.
	URL string `yaml:"url"`
	// Secret is the whole URL sealed ("${sealed:...}"), set by the API;
	// the deliverer opens it with LOOKOUT_SECRET_KEY. Required.
	Secret string `yaml:"secret"`
}

// WatchWebhook is a watch's own webhook.
type WatchWebhook struct {
	// URL receives a POST of each notification's payload (http or https).
	// Required.
	URL string `yaml:"url"`
	// Secret is the sealed signing secret ("${sealed:...}"), set by the
	// API when it creates the webhook; the deliverer opens it with
	// LOOKOUT_SECRET_KEY. Required.
	Secret string `yaml:"secret"`
}

// Sinks are the sinks the watch's notifications go to: Notify,
// OwnWebhookSink when the watch has a webhook of its own and
// OwnChannelSink when it has a channel of its own.
func (w *Watch) Sinks() []string {
	if w.Webhook == nil && w.Channel == nil {
		return w.Notify
	}
	out := slices.Clip(w.Notify)
	if w.Webhook != nil {
		out = append(out, OwnWebhookSink)
	}
	if w.Channel != nil {
		out = append(out, OwnChannelSink)
	}
	return out
}

// WatchModel overrides model settings for one watch.
type WatchModel struct {
	// Name is the Ollama model. Defaults to ollama.model.
	Name string `yaml:"name"`
	// Timeout bounds one call. Defaults to ollama.timeout.
	Timeout time.Duration `yaml:"timeout"`
	// Options are merged over ollama.options key by key. Defaults to none.
	Options map[string]any `yaml:"options"`
}

// Budget bounds model use of a watch per UTC day. When a limit is reached
// the watch's on_model_error policy applies until the next UTC midnight.
type Budget struct {
	// CallsPerDay caps model calls (each attempt counts). Defaults to 0, no limit.
	CallsPerDay int `yaml:"calls_per_day"`
	// TokensPerDay caps prompt plus output tokens. Defaults to 0, no limit.
	TokensPerDay int `yaml:"tokens_per_day"`
}

// Digest sends one summary per cron schedule instead of one message per
// match.
type Digest struct {
	// Cron is a five-field cron expression (or @daily, @hourly, ...): a
	// summary is sent at each tick for the matches since the previous one.
	// Required.
	Cron string `yaml:"cron"`
	// Timezone is the IANA zone the cron expression is read in. Defaults to UTC.
	Timezone string `yaml:"timezone"`
	// Title and Body are text/template templates for the summary, over
	// .Watch, .Source, .Sink, .Count, .DueAt and .Items (see
	// docs/delivery.md). Defaults to "[watch] N matches" and one line per
	// match.
	Title string `yaml:"title"`
	Body  string `yaml:"body"`
	// Summarize has the model write a short briefing of the period's
	// matches, sent with the digest (docs/delivery.md#briefings).
	// Defaults to none: the plain list.
	Summarize *Summarize `yaml:"summarize"`
}

// Summarize asks the model for a briefing of a digest's items at its cron
// time: a headline and the items that matter, every sentence citing the
// records it is about (one that cites none is dropped). On any failure
// the plain digest goes out, saying why the summary is missing.
type Summarize struct {
	// Ask says, in natural language, what matters to the reader; the
	// model picks and explains items by it. Required.
	Ask string `yaml:"ask"`
	// MaxItems bounds the items shown to the model (the most urgent
	// first); the others are listed below the briefing. Between 1 and
	// SummarizeMaxItemsLimit. Defaults to 20.
	MaxItems int `yaml:"max_items"`
	// Model overrides ollama.model, ollama.timeout and ollama.options
	// (merged key by key) for the briefing. Defaults to lookout.yaml's.
	Model *WatchModel `yaml:"model"`
}

func lastSep(p string) int {
	for i := len(p) - 1; i >= 0; i-- {
		if p[i] == '.' || p[i] == '[' {
			return i
		}
	}
	return -1
}
