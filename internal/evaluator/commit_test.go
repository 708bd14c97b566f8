package evaluator

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lookout-dev/lookout/internal/changes"
	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/normalize"
	"github.com/lookout-dev/lookout/internal/notify"
	"github.com/lookout-dev/lookout/internal/pgtest"
)

// commitSetup loads a configuration with one file source "tasks" whose
// watches are given as YAML, registers the source, and returns an
// evaluator on a fresh schema.
func commitSetup(t *testing.T, global, watches string) (*pgxpool.Pool, *Evaluator) {
	t.Helper()
	return commitSetupWith(t, Config{}, global, watches)
}

// commitSetupWith is commitSetup with the evaluator settings a test sets
// in o (see testConfig) put over the loaded ones: a clock, for one.
func commitSetupWith(t *testing.T, o Config, global, watches string) (*pgxpool.Pool, *Evaluator) {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "sources"), 0o755); err != nil {
		t.Fatal(err)
	}
	src := "name: tasks\nconnector: file\nfile:\n  paths: [x.json]\nwatches:\n" + watches
	if err := os.WriteFile(filepath.Join(dir, "sources", "tasks.yaml"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if global != "" {
		if err := os.WriteFile(filepath.Join(dir, "lookout.yaml"), []byte(global), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := config.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	pool := pgtest.Pool(t)
	if _, err := pool.Exec(context.Background(), `INSERT INTO sources (name, connector, config_hash) VALUES ('tasks', 'file', 'x')`); err != nil {
		t.Fatal(err)
	}
	o.Owner = cmp.Or(o.Owner, "test")
	e, err := New(pool, testConfig(cfg, o), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return pool, e
}

// apply mirrors the records into the change log, as the syncer does.
func apply(t *testing.T, pool *pgxpool.Pool, recs ...normalize.Record) {
	t.Helper()
	h, err := normalize.NewHasher(nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range recs {
		h.Hash(&recs[i])
	}
	err = pgx.BeginFunc(context.Background(), pool, func(tx pgx.Tx) error {
		_, err := changes.Apply(context.Background(), tx, "tasks", 1, recs, h)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

func drain(t *testing.T, e *Evaluator) {
	t.Helper()
	if _, err := e.Drain(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// decisions returns watch -> decision of the latest change of a record.
func decisions(t *testing.T, pool *pgxpool.Pool, recordID string) map[string]string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `
		SELECT watch, decision FROM evaluations
		WHERE record_id = $1 AND change_id = (SELECT max(change_id) FROM evaluations WHERE record_id = $1)`, recordID)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for rows.Next() {
		var w, d string
		if err := rows.Scan(&w, &d); err != nil {
			t.Fatal(err)
		}
		out[w] = d
	}
	return out
}

type noteCount struct{ rows, suppressed int }

func notes(t *testing.T, pool *pgxpool.Pool) map[string]noteCount {
	t.Helper()
	rows, err := pool.Query(context.Background(), `
		SELECT watch, count(*), sum(duplicates_suppressed) FROM notifications GROUP BY watch`)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]noteCount{}
	for rows.Next() {
		var w string
		var c noteCount
		if err := rows.Scan(&w, &c.rows, &c.suppressed); err != nil {
			t.Fatal(err)
		}
		out[w] = c
	}
	return out
}

func TestCommitDedupePolicies(t *testing.T) {
	t.Parallel()
	pool, e := commitSetup(t, "", `
  - {name: ver, notify: [log]}
  - {name: rec, notify: [log], dedupe: record}
  - {name: win, notify: [log], dedupe: 1h}
`)
	ctx := context.Background()
	apply(t, pool, normalize.Record{ID: "T1", Title: "first", Status: "open"})
	drain(t, e)
	if got := notes(t, pool); got["ver"].rows != 1 || got["rec"].rows != 1 || got["win"].rows != 1 {
		t.Fatalf("after v1: %v", got)
	}

	// v2: a new version for "ver"; "rec" notified this record already;
	// "win" notified it within the hour.
	apply(t, pool, normalize.Record{ID: "T1", Title: "second", Status: "open"})
	drain(t, e)
	want := map[string]string{"ver": "notify", "rec": "duplicate", "win": "duplicate"}
	if got := decisions(t, pool, "T1"); !equalMaps(got, want) {
		t.Errorf("v2 decisions = %v, want %v", got, want)
	}
	if got := notes(t, pool); got["ver"] != (noteCount{2, 0}) || got["rec"] != (noteCount{1, 1}) || got["win"] != (noteCount{1, 1}) {
		t.Errorf("after v2: %v", got)
	}
	var linked int
	if err := pool.QueryRow(ctx, `
		SELECT count(*) FROM evaluations e JOIN notifications n ON n.source = e.source AND n.id = e.notification_id
		WHERE e.decision = 'duplicate' AND n.watch = e.watch AND n.last_duplicate_at IS NOT NULL`).Scan(&linked); err != nil {
		t.Fatal(err)
	}
	if linked != 2 {
		t.Errorf("%d duplicate evaluations point at the notification that suppressed them, want 2", linked)
	}

	// An hour later the window is over. (The time is moved in UTC, as
	// timestamp arithmetic: Citus refuses timestamptz - interval, a STABLE
	// function, of a column in an UPDATE.)
	if _, err := pool.Exec(ctx, `UPDATE notifications SET created_at = (created_at AT TIME ZONE 'UTC' - interval '2 hours') AT TIME ZONE 'UTC' WHERE watch = 'win'`); err != nil {
		t.Fatal(err)
	}
	apply(t, pool, normalize.Record{ID: "T1", Title: "third", Status: "open"})
	drain(t, e)
	want = map[string]string{"ver": "notify", "rec": "duplicate", "win": "notify"}
	if got := decisions(t, pool, "T1"); !equalMaps(got, want) {
		t.Errorf("v3 decisions = %v, want %v", got, want)
	}

	// The same change evaluated again (a retry) finds its keys: nothing new.
	if _, err := pool.Exec(ctx, `
		DELETE FROM evaluations WHERE change_id = (SELECT max(id) FROM changes);
		UPDATE changes SET eval_status = 'pending' WHERE id = (SELECT max(id) FROM changes)`); err != nil {
		t.Fatal(err)
	}
	drain(t, e)
	want = map[string]string{"ver": "duplicate", "rec": "duplicate", "win": "duplicate"}
	if got := decisions(t, pool, "T1"); !equalMaps(got, want) {
		t.Errorf("re-evaluation decisions = %v, want %v", got, want)
	}
	if got := notes(t, pool); got["ver"] != (noteCount{3, 1}) || got["rec"] != (noteCount{1, 3}) || got["win"] != (noteCount{2, 2}) {
		t.Errorf("after the retry: %v", got)
	}
	var keys []string
	rows, _ := pool.Query(ctx, `SELECT dedupe_key FROM notifications WHERE watch IN ('ver', 'rec') ORDER BY id`)
	for rows.Next() {
		var k string
		_ = rows.Scan(&k)
		keys = append(keys, k)
	}
	if len(keys) != 4 || !strings.HasPrefix(keys[0], "tasks/T1/ver/v1-") || keys[1] != "tasks/T1/rec" || !strings.HasPrefix(keys[3], "tasks/T1/ver/v3-") {
		t.Errorf("dedupe keys = %v", keys)
	}

	// Visible in SQL, per watch.
	sup := map[string]int{}
	rows, err := pool.Query(ctx, `SELECT watch, duplicates_suppressed FROM report_duplicates_suppressed WHERE source = 'tasks'`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var w string
		var n int
		_ = rows.Scan(&w, &n)
		sup[w] = n
	}
	if !equalInts(sup, map[string]int{"ver": 1, "rec": 3, "win": 2}) {
		t.Errorf("report_duplicates_suppressed = %v", sup)
	}
}

// TestCommitRendersTemplatesPerSinkAndHoldsDigests renders each sink's
// templates and holds a digest watch's notification until the end of its
// period, computed from the evaluator's clock (Config.Now) at fixed dates
// named below (docs/development.md#tests): before, after and at the
// digest's 08:00 UTC.
func TestCommitRendersTemplatesPerSinkAndHoldsDigests(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		date string
		now  time.Time
		// due is the digest's next 08:00 UTC after now.
		due time.Time
	}{
		{"2026-12-01 09:30 UTC, a month's first day, after 08:00", time.Date(2026, 12, 1, 9, 30, 0, 0, time.UTC), time.Date(2026, 12, 2, 8, 0, 0, 0, time.UTC)},
		{"2027-01-01 07:30 UTC, a new year, before 08:00", time.Date(2027, 1, 1, 7, 30, 0, 0, time.UTC), time.Date(2027, 1, 1, 8, 0, 0, 0, time.UTC)},
		{"2028-02-29 08:00 UTC, a leap day, at 08:00", time.Date(2028, 2, 29, 8, 0, 0, 0, time.UTC), time.Date(2028, 3, 1, 8, 0, 0, 0, time.UTC)},
	} {
		t.Run(tc.date, func(t *testing.T) {
			t.Parallel()
			commitRendersTemplatesAt(t, tc.now, tc.due)
		})
	}
}

// commitRendersTemplatesAt is TestCommitRendersTemplatesPerSinkAndHoldsDigests
// with the evaluator's clock at now; due is the digest's next 08:00.
func commitRendersTemplatesAt(t *testing.T, now, due time.Time) {
	pool, e := commitSetupWith(t, Config{Now: func() time.Time { return now }}, `sinks:
  hook:
    type: webhook
    url: http://127.0.0.1:1/
    title: "{{.Record.Status}}: {{.Record.Title}}"
  log:
    type: log
`, `
  - name: now
    notify: [hook, log]
    body: "{{.Record.Title}} ({{.Change.Kind}}, {{join .Change.ChangedFields \",\"}})"
  - name: daily
    notify: [hook]
    digest: {cron: "0 8 * * *", timezone: UTC}
`)
	ctx := context.Background()
	apply(t, pool, normalize.Record{ID: "T1", Title: "Ship it", Status: "open", URL: "https://x/T1"})
	drain(t, e)
	type row struct {
		title, body, status string
		due                 *time.Time
		payload             []byte
	}
	got := map[string]row{}
	rows, err := pool.Query(ctx, `SELECT watch || '/' || sink, title, body, status, digest_due_at, payload FROM notifications`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var k string
		var r row
		if err := rows.Scan(&k, &r.title, &r.body, &r.status, &r.due, &r.payload); err != nil {
			t.Fatal(err)
		}
		got[k] = r
	}
	if len(got) != 3 {
		t.Fatalf("notifications = %v", got)
	}
	hook, log := got["now/hook"], got["now/log"]
	if hook.title != "open: Ship it" || log.title != "[now] Ship it" || hook.status != "pending" {
		t.Errorf("titles %q / %q", hook.title, log.title)
	}
	if want := "Ship it (created, id,title,url,status)"; hook.body != want || log.body != want {
		t.Errorf("bodies %q / %q, want %q", hook.body, log.body, want)
	}
	var p notify.Payload
	if err := json.Unmarshal(hook.payload, &p); err != nil {
		t.Fatal(err)
	}
	if p.Title != hook.title || p.Body != hook.body || p.Record.URL != "https://x/T1" || p.Record.ContentHash == "" || p.Kind != "single" ||
		!p.CreatedAt.Equal(now) {
		t.Errorf("payload = %+v", p)
	}
	d := got["daily/hook"]
	if d.status != "held" || d.due == nil || !d.due.Equal(due) {
		t.Errorf("digest member: status %s, due %v; want held until %s", d.status, d.due, due.Format(time.RFC3339))
	}
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func equalInts(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// Two changes of one record committed in one batch (the claim never makes
// such a batch: a record's later change waits for the earlier one; this
// test builds one by hand) under a dedupe: record watch: the first
// notifies, the second is its duplicate, in one statement without a
// conflict error ("ON CONFLICT DO UPDATE command cannot affect row a
// second time" was the reported failure).
func TestCommitTwoChangesOfOneRecordInOneBatch(t *testing.T) {
	t.Parallel()
	pool, e := commitSetup(t, "", `
  - {name: rec, notify: [log], dedupe: record}
  - {name: ver, notify: [log]}
`)
	ctx := context.Background()
	apply(t, pool, normalize.Record{ID: "T1", Title: "first", Status: "open"})
	apply(t, pool, normalize.Record{ID: "T1", Title: "second", Status: "open"})
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	claimed, err := scanChanges(tx.Query(ctx, `
		SELECT ch.id, ch.source, ch.record_id, ch.kind, ch.version, coalesce(ch.new_hash, ''), ch.changed_fields,
		       ch.record, ch.previous, ch.eval_attempts + 1, ch.created_at
		FROM changes ch WHERE source = 'tasks' AND record_id = 'T1' ORDER BY id FOR UPDATE`))
	if err != nil {
		t.Fatal(err)
	}
	if len(claimed) != 2 {
		t.Fatalf("%d changes of T1, want 2", len(claimed))
	}
	if err := fillSnapshots(ctx, tx, claimed); err != nil {
		t.Fatal(err)
	}
	decided, err := e.decidedWatches(ctx, tx, claimed)
	if err != nil {
		t.Fatal(err)
	}
	decs := e.evaluate(claimed, decided)
	completed, created, err := e.commitClaim(ctx, tx, claimed, claimed, nil, decs, "")
	if err != nil {
		t.Fatalf("commit of two changes of one record: %v", err)
	}
	if completed != 2 || created != 3 {
		t.Errorf("completed %d changes, created %d notifications; want 2 and 3 (rec once, ver twice)", completed, created)
	}
	got := map[string]string{}
	for _, d := range decs {
		got[d.watch.Config.Name+"/v"+strconv.Itoa(d.change.Version)] = d.verdict
	}
	want := map[string]string{"rec/v1": "notify", "rec/v2": "duplicate", "ver/v1": "notify", "ver/v2": "notify"}
	if !equalMaps(got, want) {
		t.Errorf("decisions %v, want %v", got, want)
	}
	if n := notes(t, pool); n["rec"] != (noteCount{1, 1}) || n["ver"] != (noteCount{2, 0}) {
		t.Errorf("notifications %v, want rec 1 row with 1 duplicate, ver 2 rows", n)
	}
}

// A batch whose changes were created weeks apart (a change that waited,
// held, while newer ones came) is settled whole: the statements on the
// batch carry its earliest created_at as the lower bound of the partition
// key, not any one change's.
func TestBatchAcrossWeeksIsSettledWhole(t *testing.T) {
	t.Parallel()
	pool, e := commitSetup(t, "", `
  - {name: all, when: 'true', notify: [log]}
`)
	ctx := context.Background()
	apply(t, pool, normalize.Record{ID: "NEW-1", Title: "new", Status: "open"})
	apply(t, pool, normalize.Record{ID: "OLD-1", Title: "old", Status: "open"}, normalize.Record{ID: "OLD-2", Title: "old", Status: "open"})
	// OLD-1's change was created three weeks ago and comes back for a
	// second attempt (its earlier decisions are read); moving created_at
	// moves the row to that week's partition (in UTC, as in
	// TestCommitDedupePolicies, for Citus).
	if _, err := pool.Exec(ctx, `
		UPDATE changes SET created_at = (created_at AT TIME ZONE 'UTC' - interval '21 days') AT TIME ZONE 'UTC',
		       eval_attempts = CASE WHEN record_id = 'OLD-1' THEN 1 ELSE 0 END
		WHERE record_id IN ('OLD-1', 'OLD-2')`); err != nil {
		t.Fatal(err)
	}
	n, err := e.Batch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n != 3 {
		t.Errorf("one batch completed %d changes, want 3", n)
	}
	rows, err := pool.Query(ctx, `
		SELECT c.record_id, c.eval_status, c.created_at < now() - interval '20 days', count(ev.id)
		FROM changes c LEFT JOIN evaluations ev ON ev.source = c.source AND ev.change_id = c.id AND ev.change_created_at = c.created_at
		GROUP BY 1, 2, 3 ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for rows.Next() {
		var rec, status string
		var old bool
		var evs int
		if err := rows.Scan(&rec, &status, &old, &evs); err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%s %s old=%t evaluations=%d", rec, status, old, evs))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	want := []string{"NEW-1 done old=false evaluations=1", "OLD-1 done old=true evaluations=1", "OLD-2 done old=true evaluations=1"}
	if !slices.Equal(got, want) {
		t.Errorf("after one batch:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// keysOf gives the batch's ids in order, its sources once each, sorted,
// and its earliest created_at wherever that change is in the batch.
func TestKeysOf(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	k := keysOf([]*change{
		{ID: 7, Source: "b", CreatedAt: at},
		{ID: 3, Source: "a", CreatedAt: at.Add(-21 * 24 * time.Hour)},
		{ID: 9, Source: "b", CreatedAt: at.Add(time.Hour)},
	})
	if !slices.Equal(k.ids, []int64{7, 3, 9}) || !slices.Equal(k.sources, []string{"a", "b"}) || !k.since.Equal(at.Add(-21*24*time.Hour)) {
		t.Errorf("keysOf = %+v", k)
	}
	if k := keysOf(nil); len(k.ids) != 0 || len(k.sources) != 0 || !k.since.IsZero() {
		t.Errorf("keysOf(nil) = %+v", k)
	}
}

// TestEvaluationsIndexesEachRowEnters lists the indexes every evaluation
// the evaluator writes enters (those without a predicate), each with the
// reader it serves: an index no statement reads only costs the COPY of a
// batch's decisions (migration 61 dropped evaluations_watch_created_idx,
// an eighth of the COPY's WAL; docs/benchmarks.md, (4) on branch
// eval-backlog3). An index added here needs a reader that its plan names
// (internal/reports TestHotQueriesUseIndexes).
func TestEvaluationsIndexesEachRowEnters(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	readers := map[string]string{
		"evaluations_pkey":                "an evaluation by id (control's lookup of an id)",
		"evaluations_change_id_watch_key": "a batch's decided watches and retries, a record's trail, replay",
		"evaluations_created_idx":         "the admin's rows of an hour, retention",
		"evaluations_record_idx":          "a record's decisions (docs/cookbook.md, question 6)",
	}
	pgtest.CheckFullIndexes(t, pool, "evaluations", readers)
}
