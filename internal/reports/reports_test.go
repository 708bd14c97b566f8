package reports

import (
	"bytes"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

// Every report view answers on a database the pipeline filled, each is
// documented in docs/cookbook.md, and report_stuck lists exactly the
// stuck things of each kind.
func TestReportViews(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.populate()
	// The sources' definitions, as the binaries apply them (the story's
	// syncer runs from the files alone): report_owner_overview has a row
	// per owner of definitions.
	if _, err := w.pool.Exec(w.ctx, `INSERT INTO source_definitions (name, owner, managed_by, connector, definition, definition_hash, version)
		SELECT name, 'alice', 'api', connector, '{}', 'h', 1 FROM sources`); err != nil {
		t.Fatal(err)
	}

	views, err := Views(w.ctx, w.pool)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile("../../docs/cookbook.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^### (report_[a-z_]+)$`).FindAllStringSubmatch(string(doc), -1) {
		documented[m[1]] = true
	}
	var names []string
	for _, v := range views {
		names = append(names, v.Name)
		if !documented[v.Name] {
			t.Errorf("view %s has no section in docs/cookbook.md", v.Name)
		}
		if v.Description == "" {
			t.Errorf("view %s has no COMMENT (the report command lists it)", v.Name)
		}
		delete(documented, v.Name)
		rows, err := w.query("SELECT * FROM " + v.Name)
		if err != nil {
			t.Errorf("%s: %v", v.Name, err)
			continue
		}
		// A healthy system has nothing stuck; everything else has rows
		// after the story.
		if empty := len(rows) == 0; empty != (v.Name == "report_stuck") {
			t.Errorf("%s: %d rows", v.Name, len(rows))
		}
	}
	for name := range documented {
		t.Errorf("docs/cookbook.md documents %s, which the database does not have", name)
	}
	for _, want := range []string{"report_active_sources", "report_stuck", "report_recent_failures", "report_high_retry",
		"report_dead_letters", "report_disabled_sources", "report_expensive_evaluations", "report_model_drift",
		"report_duplicates_suppressed", "report_ran_twice", "report_overview"} {
		if !slices.Contains(names, want) {
			t.Errorf("no view %s", want)
		}
	}

	over, err := w.query(`SELECT active_sources, inactive_sources, pending_notifications, dead_notifications, stuck, pending_changes
	                      FROM report_overview`)
	if err != nil {
		t.Fatal(err)
	}
	o := over[0]
	if o["active_sources"].(int64) != 1 || o["inactive_sources"].(int64) != 1 || o["pending_notifications"].(int64) != 1 ||
		o["dead_notifications"].(int64) != 1 || o["stuck"].(int64) != 0 || o["pending_changes"].(int64) != 0 {
		t.Errorf("overview: %v", o)
	}
	retry, err := w.query(`SELECT kind, sink, attempts FROM report_high_retry`)
	// One failed attempt, or more: on a slow machine the retry falls due
	// before the story's next delivery pass.
	if err != nil || len(retry) != 1 || retry[0]["sink"] != "flaky" || retry[0]["attempts"].(int32) < 1 {
		t.Errorf("high retry: %v, %v; want the flaky sink's notification", retry, err)
	}
	disabled, err := w.query(`SELECT name, status, status_reason, resume_with FROM report_disabled_sources`)
	if err != nil || len(disabled) != 1 || disabled[0]["status_reason"] != "moving the archive" ||
		disabled[0]["resume_with"] != "syncer resume archive" {
		t.Errorf("disabled sources: %v, %v", disabled, err)
	}

	// What a dead syncer, evaluator and deliverer, and a stopped digester,
	// leave behind.
	w.exec(`WITH run AS (
	            INSERT INTO sync_runs (source, owner, started_at) VALUES ('tasks', 'syncer-dead', now() - interval '2 hours')
	            RETURNING id)
	        UPDATE sources SET lease_owner = 'syncer-dead', lease_expires_at = now() - interval '1 minute',
	               run_id = (SELECT id FROM run)
	        WHERE name = 'tasks'`)
	w.exec(`INSERT INTO changes (source, record_id, kind, version, record, created_at, eval_owner, eval_lease_expires_at, eval_attempts)
	        VALUES ('tasks', 't-9', 'created', 1, '{}', now() - interval '2 hours', 'evaluator-dead', now() - interval '1 minute', 1),
	               ('tasks', 't-8', 'created', 1, '{}', now() - interval '10 minutes', 'evaluator-dead', now() - interval '1 minute', 1)`)
	w.exec(`UPDATE notifications SET lease_owner = 'deliverer-dead', lease_expires_at = now() - interval '1 minute' WHERE sink = 'flaky'`)
	w.exec(`INSERT INTO notifications (dedupe_key, source, record_id, watch, sink, title, payload, next_attempt_at)
	        VALUES ('k1', 'tasks', 't-4', 'open', 'gone-sink', 'x', '{}', now() - interval '31 minutes')`)
	w.exec(`INSERT INTO notifications (dedupe_key, source, record_id, watch, sink, title, payload, status, digest_due_at)
	        VALUES ('k2', 'tasks', 't-4', 'open', 'log', 'x', '{}', 'held', now() - interval '3 hours')`)
	w.exec(`INSERT INTO task_runs (source, task, record_id, record_version, content_version, idempotency_key, run_id, status,
	                               claimed_by, claimed_at, claim_expires_at, executor)
	        VALUES ('tasks', 'execute', 't-2', 1, '00aa', 'tasks:t-2:v00aa:execute', 'run-99.1', 'running',
	                'lookout@syncer-dead', now() - interval '2 hours', now() - interval '1 minute', 'command')`)
	w.exec(`UPDATE sources SET stuck_after_seconds = 3600 WHERE name = 'tasks'`)

	stuck, err := w.query(`SELECT kind, record_id, owner, stuck_after_seconds, detail FROM report_stuck ORDER BY kind, record_id`)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, r := range stuck {
		kinds = append(kinds, r["kind"].(string)+" "+Cell(r["record_id"])+" "+Cell(r["owner"]))
		if r["stuck_after_seconds"].(int32) != 3600 {
			t.Errorf("%s: threshold %v, want the source's 3600", r["kind"], r["stuck_after_seconds"])
		}
	}
	want := []string{
		"change_lease_expired t-8 evaluator-dead",
		"change_lease_expired t-9 evaluator-dead",
		"change_pending_too_long t-9 evaluator-dead", // t-8 is 10 minutes old: not yet
		"digest_overdue t-4 -",
		"notification_lease_expired t-3 deliverer-dead",
		"run_too_long - syncer-dead",
		"source_lease_expired - syncer-dead",
		"task_claim_expired t-2 lookout@syncer-dead",
		// the notification due 31 minutes ago is not stuck under a 1h threshold
	}
	if !slices.Equal(kinds, want) {
		t.Errorf("report_stuck:\n got %q\nwant %q", kinds, want)
	}

	// The report command's view of it.
	tb, err := Query(w.ctx, w.pool, "stuck", Options{Source: "tasks", Limit: 3})
	if err != nil {
		t.Fatal(err)
	}
	if len(tb.Rows) != 3 || !tb.More || tb.Columns[0] != "kind" {
		t.Errorf("Query(stuck, limit 3) = %d rows, more %t, columns %v", len(tb.Rows), tb.More, tb.Columns)
	}
	var out bytes.Buffer
	if err := Write(&out, tb, Format{Expanded: true}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"-[ report_stuck row 1 ]", "stuck_after_seconds  3600", "(more rows: raise --limit"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("expanded output lacks %q:\n%s", s, out.String())
		}
	}
	tb, err = Query(w.ctx, w.pool, "report_active_sources", Options{Source: "tasks"})
	if err != nil || len(tb.Rows) != 1 {
		t.Fatalf("active sources of tasks: %v, %v", tb, err)
	}
	out.Reset()
	if err := Write(&out, tb, Format{}); err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSpace(out.String()), "\n"); len(lines) != 2 || !strings.HasPrefix(lines[0], "name ") ||
		!strings.Contains(lines[1], "lease expired") {
		t.Errorf("table output:\n%s", out.String())
	}
	if _, err := Query(w.ctx, w.pool, "stuk", Options{}); err == nil || !strings.Contains(err.Error(), `report "stuk" is not known (known: active_sources, activity_hourly, dead_letters,`) {
		t.Errorf("unknown report: %v", err)
	}
	if _, err := Query(w.ctx, w.pool, "overview", Options{Source: "tasks"}); err == nil || !strings.Contains(err.Error(), "no source column") {
		t.Errorf("source filter on overview: %v", err)
	}
}

func TestCell(t *testing.T) {
	t.Parallel()
	var num pgtype.Numeric
	if err := num.Scan("0.125"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		v    any
		want string
	}{
		{nil, "-"},
		{"two\n lines", "two lines"},
		{time.Date(2026, 1, 2, 3, 4, 5, 600, time.FixedZone("X", 3600)), "2026-01-02T02:04:05Z"},
		{pgtype.Interval{Microseconds: 90_500_000, Days: 1, Valid: true}, "24h1m31s"},
		{pgtype.Interval{Microseconds: 1500, Valid: true}, "1.5ms"},
		{num, "0.125"},
		{float64(300), "300"},
		{2.5, "2.5"},
		{[]any{int64(3), int64(1)}, "3,1"},
		{map[string]any{"page": 2}, `{"page":2}`},
		{int32(7), "7"},
		{true, "true"},
	} {
		if got := Cell(tc.v); got != tc.want {
			t.Errorf("Cell(%#v) = %q, want %q", tc.v, got, tc.want)
		}
	}
}
