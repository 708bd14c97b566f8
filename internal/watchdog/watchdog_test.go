package watchdog

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/metrics"
	"github.com/lookout-dev/lookout/internal/notify"
	"github.com/lookout-dev/lookout/internal/outbox"
	"github.com/lookout-dev/lookout/internal/pgtest"
	"github.com/lookout-dev/lookout/migrations"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"),
		goleak.IgnoreAnyFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).triggerHealthCheck.func1"),
	)
}

const testGlobal = `sinks:
  log: {type: log}
  ops: {type: log}
alerts:
  notify: [log, ops]
  stale_after: 1h
`

type setup struct {
	t    *testing.T
	dir  string
	pool *pgxpool.Pool
	cfg  *config.Config
	dog  *Watchdog
	m    *metrics.Metrics
}

func newSetup(t *testing.T, global string, sources ...string) *setup {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "sources"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "lookout.yaml"), []byte(global), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, name := range sources {
		src := "name: " + name + "\nconnector: file\nfile:\n  paths: [x.json]\nevery: 1m\n"
		if err := os.WriteFile(filepath.Join(dir, "sources", name+".yaml"), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := config.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	s := &setup{t: t, dir: dir, pool: pgtest.Pool(t), cfg: cfg, m: metrics.New()}
	conf := FromConfig(cfg)
	conf.Metrics = s.m
	s.dog = New(s.pool, conf, slog.New(slog.DiscardHandler))
	return s
}

// withClock rebuilds the setup's watchdog with its clock (Config.Now)
// reading *now.
func (s *setup) withClock(now *time.Time) {
	conf := FromConfig(s.cfg)
	conf.Metrics = s.m
	conf.Now = func() time.Time { return *now }
	s.dog = New(s.pool, conf, slog.New(slog.DiscardHandler))
}

func (s *setup) exec(sql string, args ...any) {
	s.t.Helper()
	if _, err := s.pool.Exec(context.Background(), sql, args...); err != nil {
		s.t.Fatalf("%s: %v", sql, err)
	}
}

func (s *setup) count(sql string, args ...any) int {
	s.t.Helper()
	var n int
	if err := s.pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		s.t.Fatalf("%s: %v", sql, err)
	}
	return n
}

func (s *setup) check() Result {
	s.t.Helper()
	res, err := s.dog.Check(context.Background())
	if err != nil {
		s.t.Fatal(err)
	}
	if !res.Ran {
		s.t.Fatal("check did not run")
	}
	return res
}

func kinds(res Result) []string {
	var out []string
	for _, a := range res.Raised {
		out = append(out, a.Kind+":"+a.Subject)
	}
	return out
}

func (s *setup) addSource(name, extra string) {
	s.t.Helper()
	s.exec(`INSERT INTO sources (name, connector, config_hash, created_at, next_run_at) VALUES ($1, 'file', 'h', now() - interval '1 day', now())`, name)
	if extra != "" {
		s.exec(`UPDATE sources SET `+extra+` WHERE name = $1`, name)
	}
}

func TestStaleSourceAlertsOnce(t *testing.T) {
	t.Parallel()
	s := newSetup(t, testGlobal, "tasks", "fresh", "paused")
	s.addSource("tasks", `last_success_at = now() - interval '3 hours', last_run_at = now() - interval '5 minutes',
		failure_count = 7, last_error = 'GET https://x/: 503 Service Unavailable'`)
	s.addSource("fresh", `last_success_at = now() - interval '10 minutes'`)
	s.addSource("paused", `status = 'paused', last_success_at = now() - interval '3 hours'`)
	s.addSource("unconfigured", `last_success_at = now() - interval '3 hours'`)

	res := s.check()
	if got := kinds(res); !slices.Equal(got, []string{"stale:tasks"}) {
		t.Fatalf("raised %v, want [stale:tasks]", got)
	}
	if res.Notifications != 2 {
		t.Errorf("notifications = %d, want one per alert sink (2)", res.Notifications)
	}
	// Several more ticks: the problem is the same instance, nothing more.
	for range 3 {
		if res := s.check(); len(res.Raised) != 0 || res.Notifications != 0 {
			t.Fatalf("a later check raised %v", kinds(res))
		}
	}
	if got := s.count(`SELECT count(*) FROM notifications WHERE kind = 'alert' AND watch = '_alert_stale'`); got != 2 {
		t.Fatalf("stale alert rows = %d, want 2 (log and ops)", got)
	}

	var title, body, key, status string
	var payload []byte
	if err := s.pool.QueryRow(context.Background(), `SELECT title, body, dedupe_key, status, payload FROM notifications WHERE sink = 'ops' AND kind = 'alert'`).
		Scan(&title, &body, &key, &status, &payload); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(title, "[lookout] source tasks is stale: no successful run for 3h0m") || !strings.Contains(title, "stale_after 1h0m0s") {
		t.Errorf("title = %q", title)
	}
	if !strings.Contains(body, "503 Service Unavailable") || !strings.Contains(body, "consecutive failures: 7") {
		t.Errorf("body = %q", body)
	}
	if !strings.HasPrefix(key, "alert/stale/tasks/") || status != "pending" {
		t.Errorf("dedupe key %q, status %s", key, status)
	}
	var p notify.Payload
	if err := json.Unmarshal(payload, &p); err != nil {
		t.Fatal(err)
	}
	if p.Kind != "alert" || p.Alert == nil || p.Alert.Type != "stale" || p.Alert.Subject != "tasks" || p.Record.ID != "tasks" ||
		p.Alert.Details["failure_count"] != float64(7) || p.Urgency != "high" {
		t.Errorf("payload = %s", payload)
	}

	// The source recovers, then goes stale again: a new instance, a new alert.
	s.exec(`UPDATE sources SET last_success_at = now() WHERE name = 'tasks'`)
	if res := s.check(); len(res.Raised) != 0 {
		t.Fatalf("recovered source raised %v", kinds(res))
	}
	s.exec(`UPDATE sources SET last_success_at = now() - interval '2 hours' WHERE name = 'tasks'`)
	if got := kinds(s.check()); !slices.Equal(got, []string{"stale:tasks"}) {
		t.Fatalf("stale again raised %v", got)
	}
	if got := s.count(`SELECT count(DISTINCT dedupe_key) FROM notifications WHERE watch = '_alert_stale'`); got != 2 {
		t.Errorf("stale instances = %d, want 2", got)
	}

	// A resume restarts the window: a source resumed a minute ago is not
	// stale for its old last success.
	s.exec(`UPDATE sources SET last_success_at = now() - interval '5 hours', status_changed_at = now() - interval '1 minute' WHERE name = 'tasks'`)
	if res := s.check(); len(res.Raised) != 0 {
		t.Errorf("a just-resumed source raised %v", kinds(res))
	}
}

func TestStuckRuns(t *testing.T) {
	t.Parallel()
	s := newSetup(t, testGlobal, "a", "b", "c")
	for _, name := range []string{"a", "b", "c"} {
		s.addSource(name, `last_success_at = now()`)
	}
	run := func(source, started string) int64 {
		var id int64
		if err := s.pool.QueryRow(context.Background(), `INSERT INTO sync_runs (source, owner, started_at) VALUES ($1, 'host:42', now() - $2::interval) RETURNING id`,
			source, started).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	// a: the lease holder died (lease expired); b: alive but running past
	// stuck_after_seconds; c: a healthy run in progress.
	ra := run("a", "2 minutes")
	s.exec(`UPDATE sources SET lease_owner = 'host:42', lease_expires_at = now() - interval '1 second', run_id = $1 WHERE name = 'a'`, ra)
	rb := run("b", "45 minutes")
	s.exec(`UPDATE sources SET lease_owner = 'host:42', lease_expires_at = now() + interval '5 minutes', run_id = $1 WHERE name = 'b'`, rb)
	rc := run("c", "1 minute")
	s.exec(`UPDATE sources SET lease_owner = 'host:42', lease_expires_at = now() + interval '5 minutes', run_id = $1 WHERE name = 'c'`, rc)

	res := s.check()
	got := kinds(res)
	want := []string{"stuck:a/run-" + itoa(ra), "stuck:b/run-" + itoa(rb)}
	if !slices.Equal(got, want) {
		t.Fatalf("raised %v, want %v", got, want)
	}
	// One definition of a stuck run: report_stuck (the admin page's Stuck
	// work) lists the runs the watchdog raised, and no other.
	rows, err := s.pool.Query(context.Background(), `SELECT source || '/run-' || id FROM report_stuck WHERE kind = 'run_too_long' ORDER BY source`)
	if err != nil {
		t.Fatal(err)
	}
	listed, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if wantListed := []string{"a/run-" + itoa(ra), "b/run-" + itoa(rb)}; !slices.Equal(listed, wantListed) {
		t.Errorf("report_stuck lists the stuck runs %v, the watchdog raised %v", listed, wantListed)
	}
	titles := map[string]string{}
	for _, a := range res.Raised {
		titles[a.Source] = a.Title
	}
	if !strings.Contains(titles["a"], "lease expired at") {
		t.Errorf("a: %q", titles["a"])
	}
	if !strings.Contains(titles["b"], "running for 45m0s, past stuck_after_seconds (1800)") {
		t.Errorf("b: %q", titles["b"])
	}
	// b's lease expires too, later: the same run, no second alert.
	s.exec(`UPDATE sources SET lease_expires_at = now() - interval '1 second' WHERE name = 'b'`)
	for range 2 {
		if res := s.check(); len(res.Raised) != 0 {
			t.Fatalf("later check raised %v", kinds(res))
		}
	}
	if got := s.count(`SELECT count(*) FROM notifications WHERE watch = '_alert_stuck'`); got != 4 {
		t.Errorf("stuck alert rows = %d, want 2 alerts x 2 sinks", got)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func scrape(t *testing.T, m *metrics.Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler(nil).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	return rec.Body.String()
}

func TestDisabledSource(t *testing.T) {
	t.Parallel()
	s := newSetup(t, testGlobal, "gh")
	s.addSource("gh", `status = 'disabled', status_reason = 'authorization refused by upstream: 401 Unauthorized', status_changed_at = now(), last_success_at = now()`)
	res := s.check()
	if got := kinds(res); !slices.Equal(got, []string{"disabled:gh"}) {
		t.Fatalf("raised %v", got)
	}
	if !strings.Contains(res.Raised[0].Title, "401 Unauthorized") || !strings.Contains(res.Raised[0].Body, "syncer resume gh") {
		t.Errorf("alert = %+v", res.Raised[0])
	}
	if res := s.check(); len(res.Raised) != 0 {
		t.Errorf("second check raised %v", kinds(res))
	}
}

// failing is a sink that refuses everything for good.
type failing struct{}

func (failing) Deliver(context.Context, *notify.Notification) error {
	return &notify.PermanentError{Err: errors.New("410 Gone")}
}

// recording remembers what it received.
type recording struct {
	mu    sync.Mutex
	notes []*notify.Notification
}

func (r *recording) Deliver(_ context.Context, n *notify.Notification) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.notes = append(r.notes, n)
	return nil
}

func TestDeadLettersAlertOnceAndNeverLoop(t *testing.T) {
	t.Parallel()
	s := newSetup(t, testGlobal)
	ctx := context.Background()
	// Three notifications to ops: ops refuses them all, they die.
	for _, k := range []string{"k1", "k2", "k3"} {
		s.exec(`INSERT INTO notifications (dedupe_key, source, record_id, watch, sink, title, payload)
			VALUES ($1, 'tasks', 't-1', 'urgent', 'ops', 'Task ' || $1, '{}')`, k)
	}
	rec := &recording{}
	deliver := func() {
		t.Helper()
		dconf := notify.DelivererConfigFrom(&s.cfg.Global)
		dconf.Owner = "d-" + t.Name()
		d := notify.NewDeliverer(s.pool, map[string]notify.Sink{"log": rec, "ops": failing{}}, dconf, slog.New(slog.DiscardHandler))
		if _, err := d.DeliverDue(ctx); err != nil {
			t.Fatal(err)
		}
	}
	deliver()
	if got := s.count(`SELECT count(*) FROM notifications WHERE status = 'dead'`); got != 3 {
		t.Fatalf("dead = %d, want 3", got)
	}

	res := s.check()
	if got := kinds(res); !slices.Equal(got, []string{"dead_letters:ops"}) {
		t.Fatalf("raised %v", got)
	}
	a := res.Raised[0]
	// Not sent to the failing sink itself.
	if !slices.Equal(a.Sinks, []string{"log"}) || res.Notifications != 1 {
		t.Errorf("dead-letter alert sinks %v (%d rows), want [log]", a.Sinks, res.Notifications)
	}
	if !strings.Contains(a.Title, "3 notification(s) to sink ops are dead letters") || !strings.Contains(a.Body, "410 Gone") ||
		!strings.Contains(a.Body, "retry-dead --sink ops") {
		t.Errorf("alert = %q\n%s", a.Title, a.Body)
	}
	if got := s.count(`SELECT count(*) FROM notifications WHERE status = 'dead' AND dead_alerted_at IS NOT NULL`); got != 3 {
		t.Errorf("dead letters marked alerted = %d, want 3", got)
	}
	if res := s.check(); len(res.Raised) != 0 {
		t.Fatalf("second check raised %v", kinds(res))
	}

	// The alert is delivered through the log sink like any notification.
	deliver()
	rec.mu.Lock()
	if len(rec.notes) != 1 || rec.notes[0].Kind != "alert" || rec.notes[0].Payload.Alert == nil || rec.notes[0].Payload.Alert.Type != "dead_letters" {
		t.Errorf("log sink received %+v", rec.notes)
	}
	rec.mu.Unlock()

	// An alert that dies (a stale alert to ops, which refuses it) raises
	// nothing: no alert about alerts, no loop.
	s.exec(`INSERT INTO sources (name, connector, config_hash, created_at, last_success_at) VALUES ('tasks', 'file', 'h', now() - interval '1 day', now() - interval '1 day')`)
	s.cfg.Sources = append(s.cfg.Sources, &config.Source{Name: "tasks", StaleAfter: 1})
	conf := FromConfig(s.cfg)
	conf.Metrics = s.m
	s.dog = New(s.pool, conf, slog.New(slog.DiscardHandler))
	if got := kinds(s.check()); !slices.Equal(got, []string{"stale:tasks"}) {
		t.Fatalf("raised %v", got)
	}
	deliver()
	if got := s.count(`SELECT count(*) FROM notifications WHERE kind = 'alert' AND status = 'dead'`); got != 1 {
		t.Fatalf("dead alerts = %d, want the stale alert to ops", got)
	}
	for range 2 {
		if res := s.check(); len(res.Raised) != 0 {
			t.Fatalf("a dead alert raised %v", kinds(res))
		}
	}

	// A dead letter sent back by retry-dead that dies again is alerted again.
	if n, err := outbox.RetryDead(ctx, s.pool, outbox.Filter{Sink: "ops", Watch: "urgent"}); err != nil || n != 3 {
		t.Fatalf("retry-dead = %d, %v", n, err)
	}
	deliver()
	if got := kinds(s.check()); !slices.Equal(got, []string{"dead_letters:ops"}) {
		t.Fatalf("after retry-dead raised %v", got)
	}
	if got := s.count(`SELECT count(DISTINCT dedupe_key) FROM notifications WHERE watch = '_alert_dead_letters'`); got != 2 {
		t.Errorf("dead-letter alerts = %d, want 2", got)
	}
	body := scrape(t, s.m)
	for _, want := range []string{`lookout_alerts_total{kind="dead_letters"} 2`, `lookout_alerts_total{kind="stale"} 1`} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

func TestOneWatchdogAtATime(t *testing.T) {
	t.Parallel()
	s := newSetup(t, testGlobal, "tasks")
	s.addSource("tasks", `last_success_at = now() - interval '3 hours'`)
	ctx := context.Background()
	// Another replica is checking: it holds the lock in its transaction.
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, hashtext(current_schema()))`, lockKey); err != nil {
		t.Fatal(err)
	}
	res, err := s.dog.Check(ctx)
	if err != nil || res.Ran || len(res.Raised) != 0 {
		t.Fatalf("Check while another holds the lock = %+v, %v; want skipped", res, err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if got := kinds(s.check()); !slices.Equal(got, []string{"stale:tasks"}) {
		t.Errorf("after the lock is free: %v", got)
	}
}

func TestStartChecksAndWakesDelivery(t *testing.T) {
	t.Parallel()
	s := newSetup(t, testGlobal, "tasks")
	s.addSource("tasks", `last_success_at = now() - interval '3 hours'`)
	woke := make(chan int, 1)
	conf := FromConfig(s.cfg)
	conf.OnAlert = func(n int) { woke <- n }
	dog := New(s.pool, conf, slog.New(slog.DiscardHandler))
	if err := dog.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer dog.Stop()
	if n := <-woke; n != 2 {
		t.Errorf("OnAlert(%d), want 2", n)
	}
	if err := dog.Stop(); err != nil {
		t.Fatal(err)
	}
}

// The down migration of 0006 drops the alerts; up brings the schema back.
func TestMigration0006RoundTrip(t *testing.T) {
	t.Parallel()
	s := newSetup(t, testGlobal, "tasks")
	s.addSource("tasks", `last_success_at = now() - interval '3 hours'`)
	s.check()
	ctx := context.Background()
	read := func(name string) string {
		b, err := fs.ReadFile(migrations.FS, name)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, read("0006_alerts.down.sql")); err != nil {
			return err
		}
		// The dedupe keys (migration 16) of the alerts it deleted.
		if _, err := tx.Exec(ctx, `DELETE FROM notification_keys k
			WHERE NOT EXISTS (SELECT 1 FROM notifications n WHERE n.id = k.notification_id)`); err != nil {
			return err
		}
		var n int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM notifications`).Scan(&n); err != nil || n != 0 {
			t.Errorf("after down: %d notifications, %v", n, err)
		}
		_, err := tx.Exec(ctx, read("0006_alerts.up.sql"))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := kinds(s.check()); !slices.Equal(got, []string{"stale:tasks"}) {
		t.Errorf("after down and up: %v", got)
	}
}

// A webhook source that receives nothing for longer than its
// silence_alert while its reconciliation polls repair changes alerts
// once; one that receives events, or whose polls find nothing, does not.
func TestWebhookSilenceAlerts(t *testing.T) {
	t.Parallel()
	s := newSetup(t, testGlobal)
	for _, name := range []string{"silent", "quiet", "lively", "never"} {
		s.addSource(name, `webhook = 'github', silence_alert_seconds = 3600, last_success_at = now()`)
	}
	s.addSource("polled", `last_success_at = now()`) // no webhook
	// silent: an event 3 hours ago, polls since then repaired changes.
	// quiet: an event 3 hours ago, its polls found nothing (nothing changed).
	// lively: an event a minute ago.
	// never: no event since it was registered a day ago, polls repaired.
	s.exec(`INSERT INTO inbound_events (source, delivery_id, event_type, received_at, signature_valid, payload, payload_hash, processed_at, outcome)
	        VALUES ('silent', 'd1', 'issues', now() - interval '3 hours', true, '{}', 'h', now(), 'updated'),
	               ('quiet', 'd2', 'issues', now() - interval '3 hours', true, '{}', 'h', now(), 'updated'),
	               ('lively', 'd3', 'issues', now() - interval '1 minute', true, '{}', 'h', now(), 'updated'),
	               ('silent', 'bad', 'issues', now() - interval '1 hour', false, NULL, 'h', now(), 'rejected')`)
	s.exec(`INSERT INTO sync_runs (source, owner, status, started_at, repaired, items_updated)
	        VALUES ('silent', 'x', 'succeeded', now() - interval '2 hours', 2, 2),
	               ('silent', 'x', 'succeeded', now() - interval '4 hours', 5, 5),
	               ('quiet', 'x', 'succeeded', now() - interval '2 hours', 0, 0),
	               ('lively', 'x', 'succeeded', now() - interval '2 hours', 3, 3),
	               ('never', 'x', 'succeeded', now() - interval '2 hours', 1, 1),
	               ('polled', 'x', 'succeeded', now() - interval '2 hours', 0, 4)`)

	res := s.check()
	if got := kinds(res); !slices.Equal(got, []string{"webhook_silent:never", "webhook_silent:silent"}) {
		t.Fatalf("raised %v, want the silent and never-heard webhook sources", got)
	}
	var silent Alert
	for _, a := range res.Raised {
		if a.Subject == "silent" {
			silent = a
		}
	}
	if silent.Details["repaired"] != int64(2) || silent.Details["rejected"] != int64(1) ||
		!strings.Contains(silent.Title, "while its polls repaired 2 change(s)") ||
		!strings.Contains(silent.Body, "1 delivery(ies) were rejected for their signature") {
		t.Errorf("alert: %s\n%s\n%v", silent.Title, silent.Body, silent.Details)
	}
	if n := s.count(`SELECT count(*) FROM notifications WHERE kind = 'alert' AND watch = '_alert_webhook_silent'`); n != 4 {
		t.Errorf("%d alert notifications, want 2 alerts x 2 sinks", n)
	}
	if got := kinds(s.check()); len(got) != 0 {
		t.Errorf("the same silence alerted again: %v", got)
	}
	// An event arrives: the silence ends; a new one would be a new alert.
	s.exec(`INSERT INTO inbound_events (source, delivery_id, event_type, received_at, signature_valid, payload, payload_hash)
	        VALUES ('silent', 'd4', 'issues', now(), true, '{}', 'h')`)
	if got := kinds(s.check()); len(got) != 0 {
		t.Errorf("after an event: %v", got)
	}
}

// TestLateSourcesAlert: the late alert looks at the 99th percentile of how
// late the active sources run (the worst quiet-run start of the last
// hour, or how long a source is overdue now): one source far behind among
// a hundred is no alert; three are, once per hour. The hour is that of
// the watchdog's clock (Config.Now), fixed at 2026-12-01 09:30 UTC (a
// month's first day, docs/development.md#tests): a run across HH:00
// raised it twice. The lateness itself is measured on the database's
// clock, which the rows are relative to.
func TestLateSourcesAlert(t *testing.T) {
	t.Parallel()
	s := newSetup(t, testGlobal)
	now := time.Date(2026, 12, 1, 9, 30, 0, 0, time.UTC)
	s.withClock(&now)
	s.exec(`INSERT INTO sources (name, connector, config_hash, next_run_at, last_success_at)
	        SELECT 's' || i, 'file', 'h', now() + interval '1 minute', now() FROM generate_series(1, 100) i`)
	if res := s.check(); len(res.Raised) != 0 {
		t.Fatalf("on time: raised %v", kinds(res))
	}
	s.exec(`UPDATE sources SET next_run_at = now() - interval '10 minutes' WHERE name = 's1'`)
	if res := s.check(); len(res.Raised) != 0 {
		t.Fatalf("one source of 100 late: raised %v", kinds(res))
	}
	// Two more ran five minutes late this hour.
	s.exec(`INSERT INTO sync_run_hours (source, hour, runs, first_started_at, last_started_at, last_finished_at, lateness_seconds_sum, lateness_seconds_max)
	        SELECT name, date_trunc('hour', now()), 1, now(), now(), now(), 300, 300 FROM sources WHERE name IN ('s2', 's3')`)
	res := s.check()
	if got := kinds(res); !slices.Equal(got, []string{"late:schedule"}) {
		t.Fatalf("three sources of 100 late: raised %v, want the late alert", got)
	}
	if a := res.Raised[0]; !strings.Contains(a.Title, "sources run late: p99 lateness") || !strings.Contains(a.Body, "3 of 100 sources") {
		t.Errorf("alert: %q\n%s", a.Title, a.Body)
	}
	if res := s.check(); len(res.Raised) != 0 {
		t.Errorf("second check raised %v again", kinds(res))
	}
	if !strings.Contains(scrape(t, s.m), `lookout_alerts_total{kind="late"} 1`) {
		t.Error("lookout_alerts_total{kind=late} is not 1")
	}
	// The next hour of the clock, still late: raised once more.
	now = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	if got := kinds(s.check()); !slices.Equal(got, []string{"late:schedule"}) {
		t.Errorf("at 10:00, still late: raised %v, want the late alert of the new hour", got)
	}
	// The reports say it too: overdue and lateness_max_1h per source, and
	// a source overdue past its stuck_after is stuck.
	if n := s.count(`SELECT count(*) FROM report_active_sources
	                 WHERE (name = 's1' AND overdue > interval '9 minutes') OR (name = 's2' AND lateness_max_1h = 300)`); n != 2 {
		t.Errorf("report_active_sources shows %d of the 2 late sources", n)
	}
	if n := s.count(`SELECT count(*) FROM report_stuck WHERE kind = 'source_overdue'`); n != 0 {
		t.Errorf("%d overdue sources stuck before stuck_after", n)
	}
	s.exec(`UPDATE sources SET stuck_after_seconds = 300 WHERE name = 's1'`)
	if n := s.count(`SELECT count(*) FROM report_stuck WHERE kind = 'source_overdue' AND source = 's1' AND detail LIKE 'due since %'`); n != 1 {
		t.Errorf("report_stuck lists s1 %d times, want once as source_overdue", n)
	}
}
