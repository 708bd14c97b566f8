package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/lookout-dev/lookout/internal/cli"
	"github.com/lookout-dev/lookout/internal/evaluator"
	"github.com/lookout-dev/lookout/internal/health"
	"github.com/lookout-dev/lookout/internal/metrics"
	"github.com/lookout-dev/lookout/internal/notify"
	"github.com/lookout-dev/lookout/internal/syncer"
)

// scrape serves /metrics through the health server's handler, as
// Prometheus would see it.
func scrape(t *testing.T, m *metrics.Metrics) string {
	t.Helper()
	h := health.New(":0", m.Handler(nil), nil, slog.New(slog.DiscardHandler)).Handler()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /metrics = %d", rec.Code)
	}
	return rec.Body.String()
}

// series returns the value of one series of a scrape, or -1 when absent.
func series(body, name string) float64 {
	for _, l := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return -1
			}
			return f
		}
	}
	return -1
}

func wantSeries(t *testing.T, body string, want map[string]float64) {
	t.Helper()
	for name, v := range want {
		if got := series(body, name); got != v {
			t.Errorf("%s = %v, want %v", name, got, v)
		}
	}
}

// TestMetricsAfterPipeline runs syncer, evaluator and deliverer in-process
// with one set of metrics and checks what /metrics shows.
func TestMetricsAfterPipeline(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// urgent: every 5th of 20 (4 notifications); any: every change, once
	// per record ever (dedupe: record), so an edit is a duplicate.
	e.write("sources/tasks.yaml", tasksSource+"  - name: any\n    dedupe: record\n")
	e.write("data/a.jsonl", tasks(20, nil))
	ctx := context.Background()
	m := metrics.New()
	m.CollectDatabase(e.pool, metrics.SourceGauges|metrics.OutboxGauges, []string{"log", "rec"}, 0)

	sconf := syncer.FromConfig(e.config())
	sconf.Owner = "syncer-m"
	sconf.Metrics = m
	s, err := syncer.New(e.pool, sconf, e.log)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Register(ctx); err != nil {
		t.Fatal(err)
	}
	runDue := func() {
		t.Helper()
		if _, err := e.pool.Exec(ctx, `UPDATE sources SET next_run_at = now()`); err != nil {
			t.Fatal(err)
		}
		if _, err := s.RunDue(ctx); err != nil {
			t.Fatal(err)
		}
	}
	runDue()
	before := scrape(t, m)
	wantSeries(t, before, map[string]float64{
		`lookout_pending_changes`:                                           20,
		`lookout_polls_started_total{connector="file"}`:                     1,
		`lookout_polls_finished_total{connector="file",status="succeeded"}`: 1,
		`lookout_records_changed_total{connector="file",kind="created"}`:    20,
		`lookout_run_duration_seconds_count{connector="file"}`:              1,
		`lookout_sources_failing{connector="file"}`:                         0,
		`lookout_sources{status="active"}`:                                  1,
		`lookout_sync_runs_running`:                                         0,
		`lookout_database_up`:                                               1,
	})

	econf := evaluator.FromConfig(e.config())
	econf.Owner = "ev-m"
	econf.Metrics = m
	ev, err := evaluator.New(e.pool, econf, e.log)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := ev.Drain(ctx); err != nil || n != 20 {
		t.Fatalf("Drain = %d, %v", n, err)
	}
	wantSeries(t, scrape(t, m), map[string]float64{
		`lookout_pending_notifications{sink="log"}`: 24,
		`lookout_pending_changes`:                   0,
	})
	rec := &recorder{}
	cfg := e.config()
	dconf := notify.DelivererConfigFrom(&cfg.Global)
	dconf.Owner = "d-m"
	dconf.Metrics = m
	d := notify.NewDeliverer(e.pool, map[string]notify.Sink{"log": rec, "rec": rec}, dconf, e.log)
	if n, err := d.DeliverDue(ctx); err != nil || n != 24 {
		t.Fatalf("DeliverDue = %d, %v", n, err)
	}

	// An edit closes t-007: one updated change; "closed" notifies two
	// sinks, "any" already notified t-007: a duplicate suppressed.
	e.write("data/a.jsonl", tasks(20, func(i int) string {
		if i == 7 {
			return `{"id": "t-007", "title": "Task 7", "state": "done", "labels": ["x"]}`
		}
		return ""
	}))
	runDue()
	if n, err := ev.Drain(ctx); err != nil || n != 1 {
		t.Fatalf("Drain = %d, %v", n, err)
	}
	if _, err := d.DeliverDue(ctx); err != nil {
		t.Fatal(err)
	}

	body := scrape(t, m)
	wantSeries(t, body, map[string]float64{
		`lookout_polls_started_total{connector="file"}`:                     2,
		`lookout_polls_finished_total{connector="file",status="succeeded"}`: 2,
		`lookout_polls_finished_total{connector="file",status="failed"}`:    0,
		`lookout_records_changed_total{connector="file",kind="created"}`:    20,
		`lookout_records_changed_total{connector="file",kind="updated"}`:    1,
		// 21 changes × 3 watches, by step and decision: urgent notifies 4
		// and skips 17; closed skips the 20 created and notifies the
		// edit; any notifies the 20 created, its edit is a duplicate.
		`lookout_decisions_total{decision="notify",step="filter"}`:             4 + 1 + 20,
		`lookout_decisions_total{decision="skip",step="filter"}`:               17 + 20,
		`lookout_decisions_total{decision="duplicate",step="dedupe"}`:          1,
		`lookout_duplicates_suppressed_total`:                                  1,
		`lookout_change_decision_lag_seconds_count`:                            21,
		`lookout_notifications_delivered_total{sink="log",status="delivered"}`: 25,
		`lookout_notifications_delivered_total{sink="rec",status="delivered"}`: 1,
		`lookout_notifications_delivered_total{sink="log",status="dead"}`:      0,
		`lookout_pending_notifications{sink="log"}`:                            0,
		`lookout_dead_notifications{sink="rec"}`:                               0,
		`lookout_claims_expired_total{component="syncer"}`:                     0, // no takeover happened (the series is there at 0 from the first scrape)
	})
	if lag := series(body, `lookout_change_decision_lag_seconds_sum`); lag <= 0 || lag > 21*60 {
		t.Errorf("lag sum = %v s, want small and positive", lag)
	}
}

// TestMetricsOfUpstreamThrottling checks the rate-limit series: a 429
// with Retry-After defers the run, blocks the host and is counted.
func TestMetricsOfUpstreamThrottling(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	throttle := true
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if throttle {
			w.Header().Set("Retry-After", "3600")
			http.Error(w, "slow down", http.StatusTooManyRequests)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"data": [{"id": 1, "name": "a"}]}`)
	}))
	t.Cleanup(srv.Close)
	e := newEnv(t)
	e.write("sources/api.yaml", fmt.Sprintf("name: api\nconnector: http\nrate_limit: {per_second: 1000, burst: 10}\nhttp:\n  url: %s/items\n  items: body.data\nfields:\n  title: item.name\n", srv.URL))
	m := metrics.New()
	sconf := syncer.FromConfig(e.config())
	sconf.Owner = "syncer-t"
	sconf.Metrics = m
	s, err := syncer.New(e.pool, sconf, e.log)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := s.Register(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e.pool.Exec(ctx, `UPDATE sources SET next_run_at = now()`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RunDue(ctx); err != nil {
		t.Fatal(err)
	}
	host := strings.TrimPrefix(srv.URL, "http://")
	wantSeries(t, scrape(t, m), map[string]float64{
		`lookout_polls_finished_total{connector="http",status="deferred"}`:       1,
		`lookout_upstream_responses_total{code_class="429",host="` + host + `"}`: 1,
		`lookout_host_blocks_total{host="` + host + `"}`:                         1,
		`lookout_polls_finished_total{connector="http",status="succeeded"}`:      0,
		`lookout_upstream_responses_total{code_class="2xx",host="` + host + `"}`: -1,
		`lookout_rate_limit_waits_total{host="` + host + `",limit="blocked"}`:    -1,
		`lookout_records_changed_total{connector="http",kind="created"}`:         0,
	})

	// The host recovers and its block is lifted: the next run succeeds.
	mu.Lock()
	throttle = false
	mu.Unlock()
	if _, err := e.pool.Exec(ctx, `UPDATE host_limits SET blocked_until = NULL; UPDATE sources SET next_run_at = now()`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RunDue(ctx); err != nil {
		t.Fatal(err)
	}
	wantSeries(t, scrape(t, m), map[string]float64{
		`lookout_polls_finished_total{connector="http",status="succeeded"}`:      1,
		`lookout_upstream_responses_total{code_class="2xx",host="` + host + `"}`: 1,
		`lookout_records_changed_total{connector="http",kind="created"}`:         1,
	})
}

// logLines parses JSON log lines.
func logLines(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(buf.Bytes()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("log line is not JSON: %v\n%s", err, sc.Text())
		}
		out = append(out, m)
	}
	return out
}

func findLog(lines []map[string]any, msg string) map[string]any {
	for _, l := range lines {
		if l["msg"] == msg {
			return l
		}
	}
	return nil
}

// syncedBuffer is a goroutine-safe buffer for loggers.
type syncedBuffer struct {
	mu sync.Mutex
	bytes.Buffer
}

func (b *syncedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.Buffer.Write(p)
}

// TestLogFields checks the seed's log fields in the JSON format of
// --log-format json: a run carries source, run_id, claim, cursor_before
// and cursor_after; a decision carries change_id, decision, dedupe_key;
// a failure carries error. The text format carries the same keys.
func TestLogFields(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.write("sources/tasks.yaml", tasksSource)
	e.write("data/a.jsonl", tasks(5, nil))
	ctx := context.Background()
	cfg := e.config()
	buf := &syncedBuffer{}
	logger := (&cli.Env{Stderr: buf, LogFormat: "json"}).Logger(cfg, "syncer")

	sconf := syncer.FromConfig(cfg)
	sconf.Owner = "syncer-log"
	s, err := syncer.New(e.pool, sconf, logger)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Register(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e.pool.Exec(ctx, `UPDATE sources SET next_run_at = now()`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RunDue(ctx); err != nil {
		t.Fatal(err)
	}
	lines := logLines(t, &buf.Buffer)
	// "run started" is a DEBUG line (a quiet run logs nothing at INFO);
	// a run that changed something logs "run finished" at INFO.
	fin := findLog(lines, "run finished")
	if fin == nil || findLog(lines, "run started") != nil {
		t.Fatalf("want a run finished line and no run started line at INFO in:\n%s", buf.String())
	}
	for _, l := range []map[string]any{fin} {
		for _, k := range []string{"time", "level", "service", "source", "run_id", "claim", "cursor_before"} {
			if _, ok := l[k]; !ok {
				t.Errorf("%q lacks %s: %v", l["msg"], k, l)
			}
		}
		claim, _ := l["claim"].(map[string]any)
		if claim["owner"] != "syncer-log" || claim["expires_at"] == nil {
			t.Errorf("%q claim = %v, want owner and expires_at", l["msg"], l["claim"])
		}
		if l["source"] != "tasks" || l["service"] != "syncer" {
			t.Errorf("%q source/service = %v/%v", l["msg"], l["source"], l["service"])
		}
	}
	if _, ok := fin["cursor_after"].(map[string]any); !ok {
		t.Errorf("run finished cursor_after = %#v, want the cursor as a JSON object", fin["cursor_after"])
	}
	if fin["status"] != "succeeded" || fin["created"] != float64(5) {
		t.Errorf("run finished = %v", fin)
	}

	// A failing run logs the error under "error".
	e.write("data/a.jsonl", tasks(5, nil)+"{broken\n")
	buf.Reset()
	if _, err := e.pool.Exec(ctx, `UPDATE sources SET next_run_at = now()`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RunDue(ctx); err != nil {
		t.Fatal(err)
	}
	failed := findLog(logLines(t, &buf.Buffer), "run failed")
	if failed == nil || !strings.Contains(fmt.Sprint(failed["error"]), "malformed JSON") || failed["level"] != "ERROR" {
		t.Errorf("run failed line = %v", failed)
	}

	// Decisions: change_id, decision, dedupe_key.
	buf.Reset()
	evLogger := (&cli.Env{Stderr: buf, LogFormat: "json"}).Logger(cfg, "evaluator")
	econf := evaluator.FromConfig(cfg)
	econf.Owner = "ev-log"
	ev, err := evaluator.New(e.pool, econf, evLogger)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ev.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	dec := findLog(logLines(t, &buf.Buffer), "decision")
	if dec == nil {
		t.Fatalf("no decision line in:\n%s", buf.String())
	}
	for _, k := range []string{"source", "change_id", "record_id", "watch", "decision", "reason", "dedupe_key"} {
		if _, ok := dec[k]; !ok {
			t.Errorf("decision lacks %s: %v", k, dec)
		}
	}
	if dec["decision"] != "notify" || !strings.HasPrefix(fmt.Sprint(dec["dedupe_key"]), "tasks/t-000/urgent/v1-") {
		t.Errorf("decision = %v", dec)
	}

	// The text format for terminals carries the same keys.
	buf.Reset()
	textLogger := (&cli.Env{Stderr: buf, LogFormat: "text"}).Logger(cfg, "syncer")
	sconf = syncer.FromConfig(cfg)
	sconf.Owner = "syncer-text"
	s2, err := syncer.New(e.pool, sconf, textLogger)
	if err != nil {
		t.Fatal(err)
	}
	e.write("data/a.jsonl", tasks(5, nil))
	if _, err := e.pool.Exec(ctx, `UPDATE sources SET next_run_at = now()`); err != nil {
		t.Fatal(err)
	}
	if _, err := s2.RunDue(ctx); err != nil {
		t.Fatal(err)
	}
	text := buf.String()
	for _, want := range []string{`level=INFO msg="run finished" service=syncer`, "source=tasks", "run_id=", "claim.owner=syncer-text", "claim.expires_at=", "cursor_before=", "cursor_after="} {
		if !strings.Contains(text, want) {
			t.Errorf("text log lacks %q:\n%s", want, text)
		}
	}
}

// TestMetricsOfRateLimitWaits: a source limited to one request every 2
// seconds with a burst of 1 waits before its second and third page. (At 5
// a second, a page that took longer than 200 ms on a busy machine, as on a
// Citus cluster at load 20, found its token refilled and did not wait.)
func TestMetricsOfRateLimitWaits(t *testing.T) {
	t.Parallel()
	api := &fakeAPI{perPage: 7}
	for i := 0; i < 20; i++ {
		api.items = append(api.items, fmt.Sprintf(`{"id": %d, "name": "item %d"}`, i, i))
	}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	e := newEnv(t)
	e.write("sources/api.yaml", fmt.Sprintf("name: api\nconnector: http\nrate_limit: {per_second: 0.5, burst: 1}\nhttp:\n  url: %s/items?page=1\n  items: body.data\n  next: body.links.next\nfields:\n  title: item.name\n", srv.URL))
	m := metrics.New()
	sconf := syncer.FromConfig(e.config())
	sconf.Owner = "syncer-w"
	sconf.Metrics = m
	s, err := syncer.New(e.pool, sconf, e.log)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := s.Register(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e.pool.Exec(ctx, `UPDATE sources SET next_run_at = now()`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RunDue(ctx); err != nil {
		t.Fatal(err)
	}
	host := strings.TrimPrefix(srv.URL, "http://")
	wantSeries(t, scrape(t, m), map[string]float64{
		`lookout_polls_finished_total{connector="http",status="succeeded"}`:      1,
		`lookout_upstream_responses_total{code_class="2xx",host="` + host + `"}`: 3,
		`lookout_rate_limit_waits_total{host="` + host + `",limit="source"}`:     2,
		`lookout_rate_limit_waits_total{host="` + host + `",limit="host"}`:       -1,
		`lookout_records_changed_total{connector="http",kind="created"}`:         20,
	})
}
