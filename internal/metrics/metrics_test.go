package metrics

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/lookout-dev/lookout/internal/pgtest"
)

func scrape(t *testing.T, m *Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler(nil).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("scrape = %d: %s", rec.Code, rec.Body)
	}
	return rec.Body.String()
}

// value returns the value of series in a scrape.
func value(t *testing.T, body, series string) float64 {
	t.Helper()
	for _, l := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(l, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", l, err)
			}
			return f
		}
	}
	t.Fatalf("scrape lacks %s", series)
	return 0
}

func wantLines(t *testing.T, body string, lines ...string) {
	t.Helper()
	for _, l := range lines {
		if !strings.Contains(body, "\n"+l+"\n") {
			t.Errorf("scrape lacks %q", l)
		}
	}
}

func TestNilMetricsRecordNothing(t *testing.T) {
	t.Parallel()
	var m *Metrics
	// None of these may panic.
	m.InitConnector("file")
	m.InitSink("k")
	m.PollStarted("file")
	m.PollFinished("s", "file", "succeeded", time.Second)
	m.RecordsChanged("file", 1, 2, 3)
	m.ClaimsExpired(ComponentSyncer, 1)
	m.RateLimitWait("h", LimitHost)
	m.UpstreamResponse("h", 200)
	m.HostBlocked("h")
	m.Decision("filter", "notify")
	m.DuplicatesSuppressed(1)
	m.DecisionLag(time.Second)
	m.TaskRun("completed", time.Second)
	m.WebhookDelivery(DeliveryStored, time.Second)
	m.WebhookProcessed("created", 1)
	m.WebhookRepaired(1)
	m.ModelCall("m", "ok", 1, 1, time.Second)
	m.Delivery("k", "delivered", time.Second)
	m.Alert("stale")
	m.CollectDatabase(nil, SourceGauges, nil, 0)
	if code := func() int {
		rec := httptest.NewRecorder()
		m.Handler(nil).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		return rec.Code
	}(); code != http.StatusNotFound {
		t.Errorf("nil handler = %d, want 404", code)
	}
}

func TestInstruments(t *testing.T) {
	t.Parallel()
	m := New()
	m.InitConnector("file")
	m.PollStarted("file")
	m.PollFinished("tasks", "file", "succeeded", 1500*time.Millisecond)
	m.RecordsChanged("file", 3, 0, 1)
	m.InitConnector("file")
	m.PollStarted("file")
	m.PollFinished("notes", "file", "failed", 500*time.Millisecond)
	m.PollStarted(ConnectorUnknown) // a source the caller no longer has
	m.Decision("filter", "notify")
	m.DuplicatesSuppressed(2)
	m.DecisionLag(3 * time.Second)
	m.UpstreamResponse("api.example.com", 200)
	m.UpstreamResponse("api.example.com", 429)
	m.UpstreamResponse("api.example.com", 503)
	m.UpstreamResponse("api.example.com", 0)
	m.ModelCall("llama3.2", "ok", 120, 30, 800*time.Millisecond)
	m.ClaimsExpired(ComponentDelivery, 2)
	m.ClaimsExpired(ComponentDelivery, 0)
	body := scrape(t, m)
	wantLines(t, body,
		// Two sources of one connector count in the connector's series.
		`lookout_polls_started_total{connector="file"} 2`,
		`lookout_polls_started_total{connector="unknown"} 1`,
		`lookout_polls_finished_total{connector="file",status="succeeded"} 1`,
		`lookout_polls_finished_total{connector="file",status="failed"} 1`,
		`lookout_run_duration_seconds_sum{connector="file"} 2`,
		`lookout_run_duration_seconds_count{connector="file"} 2`,
		`lookout_records_changed_total{connector="file",kind="created"} 3`,
		`lookout_records_changed_total{connector="file",kind="updated"} 0`,
		`lookout_records_changed_total{connector="file",kind="deleted"} 1`,
		`lookout_decisions_total{decision="notify",step="filter"} 1`,
		`lookout_duplicates_suppressed_total 2`,
		`lookout_change_decision_lag_seconds_sum 3`,
		`lookout_upstream_responses_total{code_class="2xx",host="api.example.com"} 1`,
		`lookout_upstream_responses_total{code_class="429",host="api.example.com"} 1`,
		`lookout_upstream_responses_total{code_class="5xx",host="api.example.com"} 1`,
		`lookout_upstream_responses_total{code_class="error",host="api.example.com"} 1`,
		`lookout_model_calls_total{model="llama3.2",outcome="ok"} 1`,
		`lookout_model_tokens_total{kind="prompt",model="llama3.2"} 120`,
		`lookout_model_tokens_total{kind="output",model="llama3.2"} 30`,
		`lookout_model_latency_seconds_count{model="llama3.2"} 1`,
		`lookout_claims_expired_total{component="delivery"} 2`,
	)
	if strings.Contains(body, `source="`) {
		t.Errorf("a series carries a source label")
	}
	if f := m.Failures(); f.Runs["notes"] != 1 || len(f.Runs) != 1 {
		t.Errorf("Failures().Runs = %v, want notes: 1", f.Runs)
	}
	if !strings.Contains(body, "go_goroutines") || !strings.Contains(body, "process_") {
		t.Errorf("scrape lacks the Go runtime and process collectors")
	}
	// Two registries do not share series: tests (and processes) in parallel
	// never see each other's counts.
	other := New()
	if n := testutil.ToFloat64(other.pollsStarted.WithLabelValues("file")); n != 0 {
		t.Errorf("a fresh Metrics sees %v runs", n)
	}
}

// The names, units and help texts follow the Prometheus conventions.
func TestMetricsLint(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	m := New()
	m.CollectDatabase(pool, SourceGauges|OutboxGauges|PerSourceGauges, []string{"log"}, 0)
	m.InitConnector("file")
	m.InitSink("log")
	m.PollFinished("tasks", "file", "succeeded", time.Second)
	m.DecisionLag(time.Second)
	m.ModelCall("llama3.2", "ok", 1, 1, time.Second)
	m.Delivery("log", "delivered", time.Second)
	m.RateLimitWait("h", LimitHost)
	m.UpstreamResponse("h", 200)
	m.HostBlocked("h")
	m.Decision("filter", "notify")
	m.DuplicatesSuppressed(1)
	m.TaskRun("completed", time.Second)
	m.WebhookDelivery(DeliveryStored, time.Second)
	m.WebhookProcessed("created", 1)
	m.WebhookRepaired(1)
	m.ClaimsExpired(ComponentSyncer, 1)
	m.Alert("stale")
	problems, err := testutil.GatherAndLint(m.Registry())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		if strings.HasPrefix(p.Metric, "lookout_") {
			t.Errorf("%s: %s", p.Metric, p.Text)
		}
	}
}

func TestCodeClass(t *testing.T) {
	t.Parallel()
	for code, want := range map[int]string{200: "2xx", 204: "2xx", 304: "3xx", 404: "4xx", 429: "429", 500: "5xx", 503: "5xx", 0: "error", 700: "error"} {
		if got := CodeClass(code); got != want {
			t.Errorf("CodeClass(%d) = %q, want %q", code, got, want)
		}
	}
}

func TestDatabaseGauges(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	for _, sql := range []string{
		`INSERT INTO sources (name, connector, config_hash, next_run_at, last_success_at) VALUES
		    ('due', 'file', 'h', now() - interval '1 minute', '2026-01-02T03:04:05Z'),
		    ('later', 'file', 'h', now() + interval '1 hour', NULL),
		    ('leased', 'file', 'h', now() - interval '1 minute', NULL)`,
		`INSERT INTO sources (name, connector, config_hash, status) VALUES ('off', 'file', 'h', 'paused')`,
		`INSERT INTO sources (name, connector, config_hash, next_run_at, created_at, last_success_at, failure_count) VALUES
		    ('feed', 'rss', 'h', now() + interval '1 hour', now() - interval '3 hours', now() - interval '2 hours', 4),
		    ('fine', 'rss', 'h', now() + interval '1 hour', now() - interval '3 hours', now() - interval '1 minute', 0)`,
		`INSERT INTO sources (name, connector, config_hash, status, created_at, failure_count) VALUES
		    ('broken', 'rss', 'h', 'disabled', now() - interval '30 days', 9)`,
		`UPDATE sources SET lease_owner = 'gone', lease_expires_at = now() - interval '1 second' WHERE name = 'due'`,
		`UPDATE sources SET lease_owner = 'alive', lease_expires_at = now() + interval '1 hour' WHERE name = 'leased'`,
		`INSERT INTO sync_runs (source, owner) VALUES ('leased', 'alive')`,
		`INSERT INTO changes (source, record_id, kind, version, record, created_at) VALUES
		    ('due', 'a', 'created', 1, '{}', now() - interval '90 seconds'),
		    ('due', 'b', 'created', 1, '{}', now())`,
		`INSERT INTO changes (source, record_id, kind, version, record, eval_status) VALUES ('due', 'c', 'created', 1, '{}', 'done')`,
		`UPDATE changes SET eval_owner = 'gone', eval_lease_expires_at = now() - interval '1 second' WHERE record_id = 'b'`,
		`INSERT INTO notifications (dedupe_key, source, record_id, watch, sink, title, payload, status, lease_owner, lease_expires_at) VALUES
		    ('k1', 'due', 'a', 'w', 'log', 't', '{}', 'pending', 'gone', now() - interval '1 second'),
		    ('k2', 'due', 'a', 'w', 'log', 't', '{}', 'pending', NULL, NULL),
		    ('k3', 'due', 'a', 'w', 'hook', 't', '{}', 'dead', NULL, NULL),
		    ('k4', 'due', 'a', 'w', 'hook', 't', '{}', 'delivered', NULL, NULL)`,
	} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	m := New()
	m.CollectDatabase(pool, SourceGauges|OutboxGauges, []string{"log", "hook", "quiet"}, 0)
	body := scrape(t, m)
	wantLines(t, body,
		`lookout_database_up 1`,
		`lookout_sources{status="active"} 5`,
		`lookout_sources{status="paused"} 1`,
		`lookout_sources{status="disabled"} 1`,
		// Active sources only: the disabled one's failures are not counted.
		`lookout_sources_failing{connector="rss"} 1`,
		`lookout_sources_failing{connector="file"} 0`,
		`lookout_sources_due 1`,
		`lookout_sync_runs_running 1`,
		`lookout_expired_leases{component="syncer"} 1`,
		`lookout_expired_leases{component="evaluator"} 1`,
		`lookout_expired_leases{component="delivery"} 1`,
		`lookout_pending_changes 2`,
		`lookout_pending_notifications{sink="log"} 2`,
		`lookout_pending_notifications{sink="hook"} 0`,
		`lookout_pending_notifications{sink="quiet"} 0`,
		`lookout_dead_notifications{sink="hook"} 1`,
		`lookout_held_notifications{sink="log"} 0`,
	)
	// feed's last success is 2 h old; the disabled source's 30 days do
	// not count.
	if age := value(t, body, `lookout_longest_without_success_seconds{connector="rss"}`); age < 7199 || age > 7800 {
		t.Errorf("rss longest without success = %v, want about 7200", age)
	}
	if age := value(t, body, `lookout_longest_without_success_seconds{connector="file"}`); age < 0 || age > 600 {
		t.Errorf("file longest without success = %v, want about 0 (registered now)", age)
	}
	if strings.Contains(body, "lookout_source_") {
		t.Errorf("per-source gauges served without PerSourceGauges")
	}
	if age := value(t, body, "lookout_oldest_pending_change_age_seconds"); age < 89 || age > 600 {
		t.Errorf("oldest pending change age = %v, want about 90s", age)
	}

	per := New()
	per.CollectDatabase(pool, SourceGauges|PerSourceGauges, nil, 0)
	body = scrape(t, per)
	wantLines(t, body,
		`lookout_source_consecutive_failures{source="feed"} 4`,
		`lookout_source_consecutive_failures{source="fine"} 0`,
		`lookout_source_consecutive_failures{source="later"} 0`,
	)
	if got, want := value(t, body, `lookout_source_last_success_timestamp_seconds{source="due"}`), float64(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).Unix()); got != want {
		t.Errorf("last success = %v, want %v", got, want)
	}
	for _, s := range []string{`{source="broken"}`, `{source="off"}`, `lookout_source_last_success_timestamp_seconds{source="later"}`} {
		if strings.Contains(body, s) {
			t.Errorf("the scrape has %s: only active sources have per-source gauges, and a last success only when there is one", s)
		}
	}
}

func TestDatabaseGaugesWhenDatabaseIsDown(t *testing.T) {
	t.Parallel()
	_, url := pgtest.Schema(t)
	pool := pgtest.PoolFor(t, url)
	m := New()
	m.CollectDatabase(pool, OutboxGauges, []string{"log"}, 0)
	pool.Close()
	body := scrape(t, m)
	wantLines(t, body, `lookout_database_up 0`)
	if strings.Contains(body, "lookout_pending_changes") {
		t.Errorf("gauges served without a database")
	}
}

// TestCountersAtZeroBeforeTheirFirstEvent: a fresh process's scrape has
// every counter a dashboard panel reads over a closed label set at 0, so
// that the panel shows 0 before the first event, not "No data".
func TestCountersAtZeroBeforeTheirFirstEvent(t *testing.T) {
	t.Parallel()
	m := New()
	body := scrape(t, m)
	want := []string{"lookout_changes_waiting_total 0"}
	for _, c := range []string{ComponentSyncer, ComponentEvaluator, ComponentDelivery, ComponentTasks} {
		want = append(want, `lookout_claims_expired_total{component="`+c+`"} 0`)
	}
	for _, d := range []string{"notify", "skip", "duplicate", "hold", "error"} {
		want = append(want, `lookout_decisions_total{decision="`+d+`",step="filter"} 0`, `lookout_decisions_total{decision="`+d+`",step="model"} 0`)
	}
	for _, k := range []string{"stale", "stuck", "dead_letters", "disabled", "webhook_silent"} {
		want = append(want, `lookout_alerts_total{kind="`+k+`"} 0`)
	}
	for _, st := range []string{"completed", "failed", "released", "lost", "expired"} {
		want = append(want, `lookout_task_runs_total{status="`+st+`"} 0`)
	}
	want = append(want, `lookout_webhook_deliveries_total{outcome="stored"} 0`, `lookout_webhook_events_processed_total{outcome="created"} 0`,
		"lookout_duplicates_suppressed_total 0")
	wantLines(t, body, want...)
	// A sink's and a connector's series exist once the process knows them.
	m.InitSink("hook")
	m.InitConnector("file")
	wantLines(t, scrape(t, m), `lookout_notifications_delivered_total{sink="hook",status="dead"} 0`,
		`lookout_polls_finished_total{connector="file",status="failed"} 0`)
}
