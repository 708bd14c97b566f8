// Package metrics holds lookout's Prometheus instruments: counters,
// histograms and scrape-time database gauges, all named lookout_*.
//
// Every process builds its own *Metrics with New, on a private registry
// (never the global default one), and hands it to the services through
// their Config structs. A nil *Metrics is valid and records nothing, so
// services, tools and tests that do not care pass nil.
//
// Labels are kept to a low, bounded cardinality: connector, sink, status,
// host, model, step, decision, kind, outcome, component and table —
// fixed vocabularies and names of the operator's configuration, never
// record, change, run or notification ids, and never a source or watch
// name: with many small sources (100,000 on one syncer) a series per
// source multiplied by a histogram's buckets made scrapes of hundreds of
// megabytes. What a source did is in SQL (sync_runs, sync_run_hours and
// the report_* views); the only series per source are the two opt-in
// database gauges of PerSourceGauges.
//
// The run instruments are labelled by the source's connector, which the
// syncer gives with every run (and InitConnector for the series at zero);
// a run of a source the syncer no longer has counts under connector
// "unknown".
package metrics

import (
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Components of lookout_claims_expired_total.
const (
	ComponentSyncer    = "syncer"    // a source lease taken over from a replica that let it expire
	ComponentEvaluator = "evaluator" // claimed changes whose lease expired before the commit
	ComponentDelivery  = "delivery"  // a notification lease taken over from a replica that let it expire
	ComponentTasks     = "tasks"     // a task claim recovered after it expired (executor crashed, syncer died)
)

// Limits of lookout_rate_limit_waits_total.
const (
	LimitSource  = "source"  // the source's own rate_limit
	LimitHost    = "host"    // the host's shared budget (host_limits)
	LimitBlocked = "blocked" // the host asked us to wait (Retry-After, X-RateLimit-Reset)
)

// Buckets of the histograms, in seconds.
var (
	runBuckets     = []float64{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600}
	modelBuckets   = []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120}
	lagBuckets     = []float64{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 6 * 3600, 86400}
	deliverBuckets = []float64{0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}
	lateBuckets    = []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300, 900, 3600}
)

// Metrics is one process's set of instruments and its registry.
type Metrics struct {
	reg *prometheus.Registry

	pollsStarted      *prometheus.CounterVec
	pollsFinished     *prometheus.CounterVec
	runDuration       *prometheus.HistogramVec
	lateness          prometheus.Histogram
	recordsChanged    *prometheus.CounterVec
	claimsExpired     *prometheus.CounterVec
	rateLimitWaits    *prometheus.CounterVec
	upstreamResponses *prometheus.CounterVec
	hostBlocks        *prometheus.CounterVec
	decisions         *prometheus.CounterVec
	changesWaiting    *prometheus.CounterVec
	failed            failures
	duplicates        prometheus.Counter
	decisionLag       prometheus.Histogram
	modelCalls        *prometheus.CounterVec
	modelTokens       *prometheus.CounterVec
	modelLatency      *prometheus.HistogramVec
	deliveries        *prometheus.CounterVec
	taskRuns          *prometheus.CounterVec
	taskDuration      prometheus.Histogram
	deliveryDuration  *prometheus.HistogramVec
	alerts            *prometheus.CounterVec
	configReloads     *prometheus.CounterVec
	configLastReload  prometheus.Gauge
	configVersion     prometheus.Gauge
	hooks             webhooks
	pruned            pruned
}

// New returns a set of instruments on a fresh registry that also carries
// the Go runtime and process collectors.
func New() *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry()}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		v := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
		m.reg.MustRegister(v)
		return v
	}
	histogram := func(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
		v := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels)
		m.reg.MustRegister(v)
		return v
	}
	m.pollsStarted = counter("lookout_polls_started_total",
		"Runs of sources started (claimed by this replica), by the sources' connector.", "connector")
	m.pollsFinished = counter("lookout_polls_finished_total",
		"Runs of sources finished, by connector and outcome: succeeded, not_modified, failed, deferred, abandoned (lease lost).", "connector", "status")
	m.runDuration = histogram("lookout_run_duration_seconds",
		"Duration of runs, claim to recorded outcome, by the sources' connector.", runBuckets, "connector")
	m.lateness = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "lookout_schedule_lateness_seconds",
		Help:    "How late runs started: the claim minus the time the source was due (next_run_at, a run-now request, or the expiry of a taken-over lease).",
		Buckets: lateBuckets})
	m.reg.MustRegister(m.lateness)
	m.recordsChanged = counter("lookout_records_changed_total",
		"Changes written to the change log, by the sources' connector and kind: created, updated, deleted.", "connector", "kind")
	m.claimsExpired = counter("lookout_claims_expired_total",
		"Leases that expired before their holder finished: syncer (source taken over), evaluator (changes lost before commit), delivery (notification taken over).", "component")
	m.rateLimitWaits = counter("lookout_rate_limit_waits_total",
		"Requests that waited for a budget before being sent, by limit: source, host, blocked.", "host", "limit")
	m.upstreamResponses = counter("lookout_upstream_responses_total",
		"Responses of upstream hosts, by class: 2xx, 3xx, 4xx, 429, 5xx, or error (no response).", "host", "code_class")
	m.hostBlocks = counter("lookout_host_blocks_total",
		"Times a host asked us to stop sending (429/503 with Retry-After, X-RateLimit-Remaining: 0).", "host")
	m.decisions = counter("lookout_decisions_total",
		"Decisions of (change, watch) pairs, by the step that decided and the decision.", "step", "decision")
	m.changesWaiting = counter("lookout_changes_waiting_total",
		"Claims of changes put back unevaluated because a watch of their source cannot be built by this evaluator (eval_error says why).")
	m.duplicates = prometheus.NewCounter(prometheus.CounterOpts{Name: "lookout_duplicates_suppressed_total",
		Help: "Notifications not written because their dedupe key (or dedupe window) had already notified."})
	m.decisionLag = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "lookout_change_decision_lag_seconds",
		Help:    "Time from a change's commit (changes.created_at) to its evaluation (changes.evaluated_at), both database clock.",
		Buckets: lagBuckets})
	m.reg.MustRegister(m.duplicates, m.decisionLag)
	m.modelCalls = counter("lookout_model_calls_total",
		"Requests to the model server, by outcome: ok, malformed, error, timeout.", "model", "outcome")
	m.modelTokens = counter("lookout_model_tokens_total",
		"Tokens the model server reported, by kind: prompt, output.", "model", "kind")
	m.modelLatency = histogram("lookout_model_latency_seconds",
		"Latency of requests to the model server.", modelBuckets, "model")
	m.taskRuns = counter("lookout_task_runs_total",
		"Attempts of task watches that ended, by status: completed, failed, released (retried later), lost (the visible claim did not stick), expired.", "status")
	m.taskDuration = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "lookout_task_run_duration_seconds",
		Help: "Duration of task executions, executor start to its answer.", Buckets: runBuckets})
	m.reg.MustRegister(m.taskDuration)
	m.deliveries = counter("lookout_notifications_delivered_total",
		"Delivery attempts, by outcome: delivered, retry, dead.", "sink", "status")
	m.deliveryDuration = histogram("lookout_delivery_duration_seconds",
		"Duration of one delivery attempt to a sink.", deliverBuckets, "sink")
	m.alerts = counter("lookout_alerts_total",
		"Alerts the watchdog raised (one per problem, whatever the number of sinks), by kind: stale, stuck, dead_letters, disabled, webhook_silent.", "kind")
	m.initConfig(counter)
	m.initWebhooks(counter)
	m.initPruned(counter)
	m.initZeros()
	m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// The closed label sets of the counters: their series exist at zero from
// the first scrape (initZeros), so that a dashboard's rate() or sum() of
// them reads 0 before the first event instead of "No data".
var (
	zeroComponents = []string{ComponentSyncer, ComponentEvaluator, ComponentDelivery, ComponentTasks}
	// zeroSteps and zeroDecisions are evaluations.step and
	// evaluations.decision's CHECK lists (migration 1).
	zeroSteps        = []string{"filter", "cache", "model", "budget", "error", "dedupe"}
	zeroDecisions    = []string{"notify", "skip", "duplicate", "hold", "error"}
	zeroTaskStatuses = []string{"completed", "failed", "released", "lost", "expired"}
	zeroAlertKinds   = []string{"stale", "stuck", "dead_letters", "disabled", "webhook_silent"}
	zeroHookOutcomes = []string{"stored", "ignored", "duplicate", "rejected", "malformed", "too_large", "unknown_source", "error"}
	zeroProcessed    = []string{"created", "updated", "unchanged", "deleted", "stale", "ignored", "failed"}
)

// initZeros makes the series of the counters' closed label sets exist at
// zero. Open sets (a connector, a sink, a model, a host) are made by
// InitConnector and InitSink when the process learns them.
func (m *Metrics) initZeros() {
	for _, c := range zeroComponents {
		m.claimsExpired.WithLabelValues(c)
	}
	for _, st := range zeroSteps {
		for _, d := range zeroDecisions {
			m.decisions.WithLabelValues(st, d)
		}
	}
	m.changesWaiting.WithLabelValues()
	for _, st := range zeroTaskStatuses {
		m.taskRuns.WithLabelValues(st)
	}
	for _, k := range zeroAlertKinds {
		m.alerts.WithLabelValues(k)
	}
	for _, o := range zeroHookOutcomes {
		m.hooks.deliveries.WithLabelValues(o)
	}
	for _, o := range zeroProcessed {
		m.hooks.processed.WithLabelValues(o)
	}
}

// Registry is the registry the instruments live in, for further
// collectors (see DBCollector).
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the registry in the Prometheus text (or OpenMetrics)
// format. A collector that fails (the database gauges when the database is
// down) is logged and left out; the rest is still served.
func (m *Metrics) Handler(logger *slog.Logger) http.Handler {
	if m == nil {
		return http.NotFoundHandler()
	}
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		ErrorLog:          slogPrinter{logger},
		ErrorHandling:     promhttp.ContinueOnError,
		Registry:          m.reg,
		EnableOpenMetrics: true,
		Timeout:           10 * time.Second,
	})
}

type slogPrinter struct{ l *slog.Logger }

func (p slogPrinter) Println(v ...any) {
	if p.l != nil {
		p.l.Warn("serve metrics", "error", fmt.Sprint(v...))
	}
}

// ConnectorUnknown is the connector label of runs of a source whose
// connector the caller does not know (a source no longer built).
const ConnectorUnknown = "unknown"

// InitConnector makes the run series of connector exist (at zero) before
// the first run of one of its sources, so that rate() and absent() work
// from the first scrape. The instruments keep nothing per source: the
// callers name the connector of each run (a syncer of 100,000 sources
// held a map of them here, 160 bytes a source).
func (m *Metrics) InitConnector(connector string) {
	if m == nil {
		return
	}
	m.pollsStarted.WithLabelValues(connector)
	for _, st := range []string{"succeeded", "failed"} {
		m.pollsFinished.WithLabelValues(connector, st)
	}
	for _, k := range []string{"created", "updated", "deleted"} {
		m.recordsChanged.WithLabelValues(connector, k)
	}
}

// InitSink makes the sink's delivery series exist (at zero).
func (m *Metrics) InitSink(sink string) {
	if m == nil {
		return
	}
	for _, st := range []string{"delivered", "retry", "dead"} {
		m.deliveries.WithLabelValues(sink, st)
	}
}

// PollStarted counts a claimed run of a source of connector.
func (m *Metrics) PollStarted(connector string) {
	if m == nil {
		return
	}
	m.pollsStarted.WithLabelValues(connector).Inc()
}

// PollFinished counts a run's outcome and observes its duration, under
// the source's connector conn; a failed run is also remembered by source
// for Failures.
func (m *Metrics) PollFinished(source, conn, status string, d time.Duration) {
	if m == nil {
		return
	}
	m.pollsFinished.WithLabelValues(conn, status).Inc()
	if status == "failed" {
		m.failed.add(func(f *Failures) { f.Runs[source]++ })
	}
	m.runDuration.WithLabelValues(conn).Observe(d.Seconds())
}

// ScheduleLateness observes how late a run started (its claim minus the
// time its source was due).
func (m *Metrics) ScheduleLateness(d time.Duration) {
	if m == nil {
		return
	}
	m.lateness.Observe(max(d, 0).Seconds())
}

// RecordsChanged counts the changes a run (or webhook events) of a
// source of connector conn wrote.
func (m *Metrics) RecordsChanged(conn string, created, updated, deleted int) {
	if m == nil || created+updated+deleted == 0 {
		return
	}
	for kind, n := range map[string]int{"created": created, "updated": updated, "deleted": deleted} {
		if n > 0 {
			m.recordsChanged.WithLabelValues(conn, kind).Add(float64(n))
		}
	}
}

// ClaimsExpired counts n expired leases of component (ComponentSyncer, ...).
func (m *Metrics) ClaimsExpired(component string, n int) {
	if m == nil || n <= 0 {
		return
	}
	m.claimsExpired.WithLabelValues(component).Add(float64(n))
}

// RateLimitWait counts a request to host that waited for limit
// (LimitSource, LimitHost, LimitBlocked).
func (m *Metrics) RateLimitWait(host, limit string) {
	if m == nil {
		return
	}
	m.rateLimitWaits.WithLabelValues(host, limit).Inc()
}

// UpstreamResponse counts a response of host with status code; code 0
// means no response (a transport error or a timeout).
func (m *Metrics) UpstreamResponse(host string, code int) {
	if m == nil {
		return
	}
	m.upstreamResponses.WithLabelValues(host, CodeClass(code)).Inc()
}

// CodeClass is the code_class label of an HTTP status: "2xx" .. "5xx",
// "429" on its own (it is the one rate-limit alerts watch), and "error"
// for 0 (no response).
func CodeClass(code int) string {
	switch {
	case code == http.StatusTooManyRequests:
		return "429"
	case code >= 100 && code < 600:
		return strconv.Itoa(code/100) + "xx"
	default:
		return "error"
	}
}

// HostBlocked counts a host asking us to stop sending for a while.
func (m *Metrics) HostBlocked(host string) {
	if m == nil {
		return
	}
	m.hostBlocks.WithLabelValues(host).Inc()
}

// Decision counts one (change, watch) decision by the step that decided
// and the decision (which source and watch: the evaluations table).
func (m *Metrics) Decision(step, decision string) {
	if m == nil {
		return
	}
	m.decisions.WithLabelValues(step, decision).Inc()
	if decision == "error" || decision == "hold" {
		m.failed.add(func(f *Failures) { f.Evaluations++ })
	}
}

// ChangesWaiting counts n claimed changes put back unevaluated because a
// watch of their source cannot be built; a once command counts them as
// failed evaluations.
func (m *Metrics) ChangesWaiting(n int) {
	if m == nil || n <= 0 {
		return
	}
	m.changesWaiting.WithLabelValues().Add(float64(n))
	m.failed.add(func(f *Failures) { f.Evaluations += n })
}

// DuplicatesSuppressed counts n notifications suppressed as duplicates
// (per source and watch: report_duplicates_suppressed).
func (m *Metrics) DuplicatesSuppressed(n int) {
	if m == nil || n <= 0 {
		return
	}
	m.duplicates.Add(float64(n))
}

// DecisionLag observes the time from a change's commit to its evaluation.
func (m *Metrics) DecisionLag(lag time.Duration) {
	if m == nil {
		return
	}
	m.decisionLag.Observe(max(lag, 0).Seconds())
}

// ModelCall counts one request to the model server: its outcome, tokens
// and latency.
func (m *Metrics) ModelCall(model, outcome string, promptTokens, outputTokens int, latency time.Duration) {
	if m == nil {
		return
	}
	m.modelCalls.WithLabelValues(model, outcome).Inc()
	if promptTokens > 0 {
		m.modelTokens.WithLabelValues(model, "prompt").Add(float64(promptTokens))
	}
	if outputTokens > 0 {
		m.modelTokens.WithLabelValues(model, "output").Add(float64(outputTokens))
	}
	if latency > 0 {
		m.modelLatency.WithLabelValues(model).Observe(latency.Seconds())
	}
}

// Delivery counts one delivery attempt to sink with its outcome
// (delivered, retry, dead) and duration.
func (m *Metrics) Delivery(sink, status string, d time.Duration) {
	if m == nil {
		return
	}
	m.deliveries.WithLabelValues(sink, status).Inc()
	if status == "retry" || status == "dead" {
		m.failed.add(func(f *Failures) { f.Deliveries++ })
	}
	m.deliveryDuration.WithLabelValues(sink).Observe(d.Seconds())
}

// TaskRun counts an attempt of a task watch that ended with status and,
// when it executed, its execution time d (0 when nothing ran); which
// source and task: report_task_runs.
func (m *Metrics) TaskRun(status string, d time.Duration) {
	if m == nil {
		return
	}
	m.taskRuns.WithLabelValues(status).Inc()
	if d > 0 {
		m.taskDuration.Observe(d.Seconds())
	}
}

// Alert counts an alert the watchdog raised, by kind.
func (m *Metrics) Alert(kind string) {
	if m == nil {
		return
	}
	m.alerts.WithLabelValues(kind).Inc()
}
