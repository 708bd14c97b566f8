package postgres_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	neturl "net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lookout-dev/lookout/internal/connectors"
	"github.com/lookout-dev/lookout/internal/connectors/conntest"
	"github.com/lookout-dev/lookout/internal/connectors/postgres"
	"github.com/lookout-dev/lookout/internal/egress"
	"github.com/lookout-dev/lookout/internal/normalize"
	"github.com/lookout-dev/lookout/internal/pgtest"
	"github.com/lookout-dev/lookout/internal/testsignal"
)

// upstream is a second database of the test cluster, holding an
// agent_tasks table shaped like the seed's.
type upstream struct {
	url  string
	pool *pgxpool.Pool
}

func newUpstream(t *testing.T) *upstream {
	t.Helper()
	url := pgtest.Database(t)
	u := &upstream{url: url, pool: pgtest.PoolFor(t, url)}
	u.exec(t, `CREATE TABLE agent_tasks (
		id                  SERIAL PRIMARY KEY,
		title               TEXT NOT NULL,
		agent_name          TEXT,
		status              TEXT DEFAULT 'pending',
		executor            VARCHAR(20),
		priority            INTEGER DEFAULT 3,
		surveillance_score  SMALLINT,
		result_json         JSONB,
		correction_count    INTEGER DEFAULT 0,
		deleted_at          TIMESTAMPTZ,
		created_at          TIMESTAMPTZ DEFAULT NOW(),
		updated_at          TIMESTAMPTZ DEFAULT NOW())`)
	u.exec(t, `CREATE INDEX ON agent_tasks (updated_at, id)`) // the keyset's order (docs/connectors.md#postgres)
	return u
}

func (u *upstream) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	if _, err := u.pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("upstream: %s: %v", sql, err)
	}
}

// seed inserts tasks from+1..to, ten per updated_at second from
// 2026-01-01 (ties of the cursor cross page boundaries).
func (u *upstream) seed(t *testing.T, from, to int) {
	t.Helper()
	u.exec(t, `INSERT INTO agent_tasks (id, title, agent_name, status, executor, priority, created_at, updated_at)
		SELECT i, 'task ' || i, 'agent-' || (i % 7), 'done', CASE WHEN i % 3 = 0 THEN 'windows' ELSE 'linux' END, 1 + i % 5,
		       timestamptz '2026-01-01 00:00:00+00' + (i / 10) * interval '1 second',
		       timestamptz '2026-01-01 00:00:00+00' + (i / 10) * interval '1 second'
		FROM generate_series($1::int + 1, $2::int) AS i`, from, to)
}

func connector(t *testing.T, o postgres.Options) *postgres.Connector {
	t.Helper()
	c, err := postgres.New(o)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func tasks(u *upstream) postgres.Options {
	return postgres.Options{DSN: u.url, Table: "agent_tasks", Key: "id", Cursor: "updated_at", PageSize: 1000}
}

// run runs c from cursor as conntest.Fetch does, bounded by five minutes
// rather than its 30 s: 100 pages on a loaded machine can take longer.
func run(t *testing.T, c *postgres.Connector, cursor json.RawMessage) conntest.Run {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	r := conntest.Run{Snapshot: c.Snapshot()}
	r.Result, r.Err = c.Fetch(ctx, cursor, func(_ context.Context, p connectors.Page) error {
		r.Pages = append(r.Pages, p)
		return nil
	})
	return r
}

// fetch runs c from cursor; a failed run fails the test.
func fetch(t *testing.T, c *postgres.Connector, cursor json.RawMessage) conntest.Run {
	t.Helper()
	r := run(t, c, cursor)
	if r.Err != nil {
		t.Fatalf("fetch: %v", r.Err)
	}
	return r
}

func count(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// 100k rows: the first run reads them all (100 pages, each with the
// cursor after it); the next run reads nothing; then only the rows
// updated or inserted since; then the rows deleted_when selects, read as
// deleted items, and, at the key check full_scan_every asks for, the rows
// removed by DELETE, found by Present over every live record 5,000 at a
// time as the syncer's key check does: each recorded as deleted once.
func TestInitialSyncResumeAndUpdates(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	up.seed(t, 0, 100_000)
	pool := pgtest.Pool(t)
	now := time.Date(2026, 12, 1, 9, 30, 0, 0, time.UTC)
	o := tasks(up)
	o.DeletedWhen, o.FullScanEvery = "deleted_at", time.Hour
	o.Now = func() time.Time { return now }
	c := connector(t, o)

	r1 := fetch(t, c, nil)
	if len(r1.Pages) != 100 || r1.Result.Complete || r1.Snapshot || !r1.Result.CheckKeys {
		t.Fatalf("first run: %d pages, complete %v, snapshot %v, check keys %v; want 100 incremental pages and a key check (never scanned)",
			len(r1.Pages), r1.Result.Complete, r1.Snapshot, r1.Result.CheckKeys)
	}
	if got := string(r1.Pages[0].Cursor); got != `{"cursor":"2026-01-01 00:01:40+00","key":"1000"}` {
		t.Errorf("first page's cursor = %s", got)
	}
	st := conntest.Mirror(t, pool, "tasks", normalize.FieldExprs{}, nil, r1)
	if st.Created != 100_000 || st.Updated != 0 || st.Deleted != 0 {
		t.Fatalf("first run mirrored %+v, want 100000 created", st)
	}
	if n := count(t, pool, `SELECT count(DISTINCT record_id) FROM records WHERE source = 'tasks'`); n != 100_000 {
		t.Fatalf("%d records, want 100000", n)
	}
	if kc := conntest.CheckKeys(t, pool, "tasks", c); kc.Asked != 100_000 || kc.Calls != 20 || len(kc.Missing) != 0 {
		t.Fatalf("first key check asked about %d ids in %d calls and found %v missing; want 100000 in 20, none missing", kc.Asked, kc.Calls, kc.Missing)
	}
	cur := r1.Cursor(nil)
	if string(cur) != `{"cursor":"2026-01-01 02:46:40+00","key":"100000","scanned_at":"2026-12-01T09:30:00Z"}` {
		t.Errorf("cursor after the run = %s", cur)
	}

	r2 := fetch(t, c, cur)
	if len(r2.Items()) != 0 || r2.Result.CheckKeys {
		t.Fatalf("second run read %d rows, check keys %v; want none: nothing changed, scanned just now", len(r2.Items()), r2.Result.CheckKeys)
	}

	// Ten rows are updated (one of them from the first page) and five
	// inserted: the next run reads those fifteen.
	up.exec(t, `UPDATE agent_tasks SET status = 'failed', updated_at = timestamptz '2026-02-01 00:00:00+00' WHERE id IN (1, 500, 1000, 20000, 40000, 50000, 60000, 70000, 80000, 99999)`)
	up.seed(t, 100_000, 100_005)
	up.exec(t, `UPDATE agent_tasks SET updated_at = timestamptz '2026-02-01 00:00:01+00' WHERE id > 100000`)
	now = now.Add(30 * time.Minute)
	r3 := fetch(t, c, cur)
	if ids := r3.IDs(); len(ids) != 15 || ids[0] != "1" || ids[14] != "100005" || r3.Result.CheckKeys {
		t.Fatalf("third run read %v, check keys %v; want the 10 updated rows then the 5 new ones, no check within the hour", ids, r3.Result.CheckKeys)
	}
	st = conntest.Mirror(t, pool, "tasks", normalize.FieldExprs{}, nil, r3)
	if st.Created != 5 || st.Updated != 10 || st.Deleted != 0 {
		t.Errorf("third run mirrored %+v, want 5 created and 10 updated", st)
	}
	if n := count(t, pool, `SELECT count(*) FROM records WHERE source = 'tasks' AND status = 'failed'`); n != 10 {
		t.Errorf("%d failed records, want 10", n)
	}
	cur = r3.Cursor(cur)

	// Three rows are soft-deleted (deleted_when: the first page's, one
	// updated above, a new one) and three removed by DELETE (one updated
	// above). An hour after the last scan, the run reads the first three
	// as deleted items and asks for a key check, which finds the others.
	up.exec(t, `UPDATE agent_tasks SET deleted_at = now(), updated_at = timestamptz '2026-02-01 00:00:02+00' WHERE id IN (2, 50000, 100003)`)
	up.exec(t, `DELETE FROM agent_tasks WHERE id IN (7, 60001, 99999)`)
	now = now.Add(30 * time.Minute)
	r4 := fetch(t, c, cur)
	var deleted []string
	for _, p := range r4.Pages {
		for _, it := range p.Items {
			if it.Deleted {
				deleted = append(deleted, fmt.Sprint(it.Value.(map[string]any)["id"]))
			}
		}
	}
	if ids := r4.IDs(); fmt.Sprint(ids) != "[2 50000 100003]" || fmt.Sprint(deleted) != "[2 50000 100003]" || !r4.Result.CheckKeys {
		t.Fatalf("fourth run read %v, %v as deleted, check keys %v; want 2, 50000, 100003 read as deleted and a key check", ids, deleted, r4.Result.CheckKeys)
	}
	st = conntest.Mirror(t, pool, "tasks", normalize.FieldExprs{}, nil, r4)
	if st.Deleted != 3 || st.Created != 0 || st.Updated != 0 {
		t.Errorf("fourth run mirrored %+v, want 3 deleted", st)
	}
	kc := conntest.CheckKeys(t, pool, "tasks", c)
	if kc.Asked != 100_002 || kc.Calls != 21 || fmt.Sprint(kc.Missing) != "[60001 7 99999]" || kc.Stats.Deleted != 3 {
		t.Errorf("key check asked about %d ids in %d calls, found %v missing, recorded %+v; want the 100002 live in 21 calls, 60001, 7, 99999 missing and deleted",
			kc.Asked, kc.Calls, kc.Missing, kc.Stats)
	}
	cur = r4.Cursor(cur)

	// An hour later nothing changed upstream: the run reads nothing and
	// its key check finds nothing missing, so each deletion is recorded
	// once.
	now = now.Add(time.Hour)
	r5 := fetch(t, c, cur)
	if len(r5.Items()) != 0 || !r5.Result.CheckKeys {
		t.Errorf("fifth run read %v, check keys %v; want nothing and a check", r5.IDs(), r5.Result.CheckKeys)
	}
	if kc := conntest.CheckKeys(t, pool, "tasks", c); kc.Asked != 99_999 || len(kc.Missing) != 0 {
		t.Errorf("second key check asked about %d ids and found %v missing; want 99999, none missing", kc.Asked, kc.Missing)
	}
	if got := textColumn(t, pool, `SELECT record_id FROM changes WHERE source = 'tasks' AND kind = 'deleted' ORDER BY record_id`); fmt.Sprint(got) != "[100003 2 50000 60001 7 99999]" {
		t.Errorf("deleted changes of %v, want one each of 100003, 2, 50000, 60001, 7, 99999", got)
	}
	if got := textColumn(t, pool, `SELECT record_id FROM records WHERE source = 'tasks' AND deleted_at IS NOT NULL ORDER BY record_id`); fmt.Sprint(got) != "[100003 2 50000 60001 7 99999]" {
		t.Errorf("tombstoned records %v, want 100003, 2, 50000, 60001, 7, 99999", got)
	}
	if n := count(t, pool, `SELECT count(*) FROM records WHERE source = 'tasks' AND deleted_at IS NULL`); n != 99_999 {
		t.Errorf("%d live records, want 99999", n)
	}
}

// textColumn returns the text column of sql's rows.
func textColumn(t *testing.T, pool *pgxpool.Pool, sql string) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), sql)
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return out
}

// The upstream connection is terminated (pg_terminate_backend) between
// the second and third pages: the run fails saying so, the two pages
// before stay mirrored with their cursor, and the next run reads the rest
// without losing or repeating a row.
func TestConnectionDroppedMidRun(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	up.seed(t, 0, 5000)
	pool := pgtest.Pool(t)
	o := tasks(up)
	killed := false
	o.BetweenPages = func(ctx context.Context, page int, pid uint32) {
		if page != 3 || killed {
			return
		}
		killed = true
		var ok bool
		// The second argument waits until the backend is gone.
		if err := up.pool.QueryRow(ctx, `SELECT pg_terminate_backend($1, 10000)`, int32(pid)).Scan(&ok); err != nil || !ok {
			t.Errorf("terminate backend %d: %v %v", pid, ok, err)
		}
	}
	c := connector(t, o)
	r1 := run(t, c, nil)
	if r1.Err == nil {
		t.Fatal("run with its connection terminated succeeded")
	}
	if msg := r1.Err.Error(); !strings.Contains(msg, `page 3 (after id 2000) of table agent_tasks: the connection to database "`) ||
		!strings.Contains(msg, "was lost; the pages before it are kept and the next run resumes after id 2000") {
		t.Errorf("error = %v", r1.Err)
	}
	if len(r1.Pages) != 2 {
		t.Fatalf("%d pages emitted before the cut, want 2", len(r1.Pages))
	}
	st := conntest.Mirror(t, pool, "tasks", normalize.FieldExprs{}, nil, r1)
	cur := r1.Cursor(nil)
	r2 := fetch(t, c, cur)
	st2 := conntest.Mirror(t, pool, "tasks", normalize.FieldExprs{}, nil, r2)
	if st.Created != 2000 || st2.Created != 3000 || st2.Updated != 0 {
		t.Errorf("mirrored %+v then %+v, want 2000 then 3000 created and nothing updated", st, st2)
	}
	if n := count(t, pool, `SELECT count(*) FROM changes WHERE source = 'tasks'`); n != 5000 {
		t.Errorf("%d changes, want 5000 (one per row)", n)
	}
}

// The upstream backend is terminated while page 3's query runs. The
// query's select list calls lookout_gate(id), which for id 2500 (page 3
// holds ids 2001..3000) takes a shared advisory lock that the test takes
// just before page 3 (BetweenPages), so pages 1 and 2 pass the gate
// whatever the plan. lookout_gate is declared STABLE so that the query
// (the connector's WITH) is inlined and read through the (updated_at, id)
// index: the gate is evaluated row by row as the page's rows are sent, so
// rows 2001..2499 are sent to the connector (but for what the server
// still buffers) before the query blocks. (Under a
// plan that sorts before the LIMIT it may be evaluated before any row of
// the page is sent: still during the page's query.) The test waits until
// the backend waits for the advisory lock (pg_stat_activity), then
// terminates it: the run fails naming page 3 and the lost connection and
// emits nothing of page 3, the two pages before stay mirrored with their
// cursor, and the next run reads the rest without losing or repeating a
// row.
func TestConnectionDroppedMidPage(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	up.seed(t, 0, 5000)
	up.exec(t, `CREATE FUNCTION lookout_gate(id int) RETURNS boolean STABLE LANGUAGE plpgsql AS $$
		BEGIN
			IF id = 2500 THEN
				PERFORM pg_advisory_xact_lock_shared(4242);
			END IF;
			RETURN true;
		END $$`)
	pool := pgtest.Pool(t)
	ctx := context.Background()
	lock, err := up.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		_, _ = lock.Exec(ctx, `SELECT pg_advisory_unlock_all()`)
		lock.Release()
	}()
	o := postgres.Options{DSN: up.url, Query: "SELECT t.*, lookout_gate(t.id) AS gate FROM agent_tasks t", Key: "id", Cursor: "updated_at", PageSize: 1000}
	pids := make(chan uint32, 1)
	o.BetweenPages = func(ctx context.Context, page int, pid uint32) {
		if page != 3 {
			return
		}
		if _, err := lock.Exec(ctx, `SELECT pg_advisory_lock(4242)`); err != nil {
			t.Errorf("take the gate's lock: %v", err)
		}
		pids <- pid
	}
	c := connector(t, o)
	runs := make(chan conntest.Run, 1)
	go func() { runs <- run(t, c, nil) }()
	pid := testsignal.Receive(t, pids, "page 3 to start")
	testsignal.Eventually(t, "page 3's query to wait for the gate's advisory lock", func() bool {
		var n int
		err := up.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE pid = $1 AND wait_event_type = 'Lock' AND wait_event = 'advisory'`, int32(pid)).Scan(&n)
		return err == nil && n == 1
	})
	var ok bool
	// The second argument waits until the backend is gone.
	if err := up.pool.QueryRow(ctx, `SELECT pg_terminate_backend($1, 10000)`, int32(pid)).Scan(&ok); err != nil || !ok {
		t.Fatalf("terminate backend %d: %v %v", pid, ok, err)
	}
	if _, err := lock.Exec(ctx, `SELECT pg_advisory_unlock(4242)`); err != nil {
		t.Fatal(err)
	}
	r1 := testsignal.Receive(t, runs, "the run to end")
	if r1.Err == nil {
		t.Fatal("run with its connection terminated during page 3 succeeded")
	}
	if msg := r1.Err.Error(); !strings.Contains(msg, `page 3 (after id 2000) of the query: the connection to database "`) ||
		!strings.Contains(msg, "was lost; the pages before it are kept and the next run resumes after id 2000") {
		t.Errorf("error = %v", r1.Err)
	}
	if ids := r1.IDs(); len(r1.Pages) != 2 || len(ids) != 2000 || ids[1999] != "2000" {
		t.Fatalf("%d pages, %d rows emitted before the cut; want pages 1 and 2 (ids 1..2000), nothing of page 3", len(r1.Pages), len(ids))
	}
	cur := r1.Cursor(nil)
	if string(cur) != `{"cursor":"2026-01-01 00:03:20+00","key":"2000"}` {
		t.Errorf("cursor after the cut run = %s, want page 2's", cur)
	}
	st := conntest.Mirror(t, pool, "tasks", normalize.FieldExprs{}, nil, r1)
	r2 := fetch(t, c, cur)
	if ids := r2.IDs(); len(ids) != 3000 || ids[0] != "2001" || ids[2999] != "5000" {
		t.Fatalf("next run read %d rows, want 2001..5000", len(ids))
	}
	st2 := conntest.Mirror(t, pool, "tasks", normalize.FieldExprs{}, nil, r2)
	if st.Created != 2000 || st2.Created != 3000 || st2.Updated != 0 {
		t.Errorf("mirrored %+v then %+v, want 2000 then 3000 created and nothing updated", st, st2)
	}
	if n := count(t, pool, `SELECT count(*) FROM changes WHERE source = 'tasks'`); n != 5000 {
		t.Errorf("%d changes, want 5000 (one per row)", n)
	}
	if n := count(t, pool, `SELECT count(DISTINCT record_id) FROM records WHERE source = 'tasks'`); n != 5000 {
		t.Errorf("%d records, want 5000", n)
	}
}

// lookback re-reads the rows whose cursor is within it of the last one,
// so a row committed late with an older updated_at is read; an older one
// is not.
func TestLookbackReadsLateCommits(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	up.seed(t, 0, 100)
	o := tasks(up)
	o.Lookback = 30 * 1e9 // 30s
	c := connector(t, o)
	r1 := fetch(t, c, nil)
	cur := r1.Cursor(nil) // updated_at 00:00:10 (id 100)
	up.exec(t, `INSERT INTO agent_tasks (id, title, updated_at) VALUES
		(1001, 'late, within the lookback', timestamptz '2026-01-01 00:00:05+00'),
		(1002, 'late, before the lookback', timestamptz '2025-12-31 23:59:00+00')`)
	ids := fetch(t, c, cur).IDs()
	if !contains(ids, "1001") || contains(ids, "1002") || len(ids) != 101 {
		t.Errorf("run after late commits read %d rows (%v…), want the 100 in the window and 1001", len(ids), ids[:min(5, len(ids))])
	}

	// A lookback needs a timestamp cursor.
	o = tasks(up)
	o.Cursor, o.Lookback = "priority", 1e9
	err := run(t, connector(t, o), nil).Err
	if err == nil || err.Error() != "postgres.lookback needs a date or timestamp cursor column; priority is not one" {
		t.Errorf("lookback on an integer cursor: %v", err)
	}
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// A snapshot source reads everything at every run; rows deleted_when
// selects and rows that vanished are left out, so a complete run records
// them as deleted.
func TestSnapshotDeletions(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	up.seed(t, 0, 25)
	pool := pgtest.Pool(t)
	o := postgres.Options{DSN: up.url, Table: "agent_tasks", Key: "id", Snapshot: true, DeletedWhen: "deleted_at", PageSize: 10}
	c := connector(t, o)
	r1 := fetch(t, c, nil)
	if !r1.Result.Complete || !r1.Snapshot || len(r1.Pages) != 3 || string(r1.Result.Cursor) != `{}` {
		t.Fatalf("first run: complete %v snapshot %v, %d pages, cursor %s", r1.Result.Complete, r1.Snapshot, len(r1.Pages), r1.Result.Cursor)
	}
	conntest.Mirror(t, pool, "tasks", normalize.FieldExprs{}, nil, r1)
	up.exec(t, `UPDATE agent_tasks SET deleted_at = now() WHERE id = 3`)
	up.exec(t, `DELETE FROM agent_tasks WHERE id IN (7, 21)`)
	r2 := fetch(t, c, r1.Cursor(nil))
	st := conntest.Mirror(t, pool, "tasks", normalize.FieldExprs{}, nil, r2)
	if st.Deleted != 3 || st.Created != 0 || st.Updated != 0 {
		t.Errorf("second run mirrored %+v, want 3 deleted", st)
	}
	if n := count(t, pool, `SELECT count(*) FROM records WHERE source = 'tasks' AND deleted_at IS NOT NULL AND record_id IN ('3', '7', '21')`); n != 3 {
		t.Errorf("%d of tasks 3, 7, 21 tombstoned, want 3", n)
	}

	// A run resumed from a mid-run cursor has not seen everything.
	r3 := fetch(t, c, r2.Pages[0].Cursor)
	if r3.Result.Complete {
		t.Error("a resumed snapshot run reported complete")
	}

	// A cursor left by the incremental mode (the source became a
	// snapshot) starts from the beginning: a complete run.
	if r := fetch(t, c, json.RawMessage(`{"cursor":"2026-01-01 00:00:01+00","key":"12"}`)); !r.Result.Complete || len(r.IDs()) != 22 {
		t.Errorf("snapshot run from an incremental cursor: complete %v, %d rows", r.Result.Complete, len(r.IDs()))
	}

	// deleted_when as an expression.
	o.DeletedWhen = "status = 'cancelled' OR correction_count > 2"
	up.exec(t, `UPDATE agent_tasks SET status = 'cancelled' WHERE id = 1`)
	up.exec(t, `UPDATE agent_tasks SET correction_count = 3 WHERE id = 2`)
	ids := fetch(t, connector(t, o), nil).IDs()
	if contains(ids, "1") || contains(ids, "2") || !contains(ids, "3") || len(ids) != 21 {
		t.Errorf("deleted_when expression: read %v", ids)
	}
	o.DeletedWhen = "statuss = 'cancelled'"
	err := run(t, connector(t, o), nil).Err
	if err == nil || !strings.HasPrefix(err.Error(), `postgres.deleted_when is not a boolean SQL expression over the columns (id, title, agent_name, status, executor, priority, surveillance_score, result_json, correction_count, deleted_at, created_at, updated_at): column "statuss" does not exist`) {
		t.Errorf("bad deleted_when: %v", err)
	}
}

// An incremental read emits the rows deleted_when selects as deleted
// items; every full_scan_every a run asks for a key check (its cursor
// says when), and Present finds the keys still there, leaving out rows
// deleted_when selects.
func TestIncrementalDeletions(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	up.seed(t, 0, 25)
	now := time.Date(2026, 12, 1, 9, 30, 0, 0, time.UTC)
	o := tasks(up)
	o.PageSize, o.DeletedWhen, o.FullScanEvery = 10, "deleted_at", time.Hour
	o.Now = func() time.Time { return now }
	c := connector(t, o)
	r1 := fetch(t, c, nil)
	if len(r1.IDs()) != 25 || !r1.Result.CheckKeys {
		t.Fatalf("first run: %d rows, check keys %v; want 25 and a check (never scanned)", len(r1.IDs()), r1.Result.CheckKeys)
	}
	if want := `"scanned_at":"2026-12-01T09:30:00Z"`; !strings.Contains(string(r1.Result.Cursor), want) {
		t.Fatalf("first run's cursor %s, want %s in it", r1.Result.Cursor, want)
	}
	up.exec(t, `UPDATE agent_tasks SET deleted_at = now(), updated_at = '2026-02-01' WHERE id = 3`)
	up.exec(t, `DELETE FROM agent_tasks WHERE id = 7`)
	now = now.Add(59 * time.Minute)
	r2 := fetch(t, c, r1.Result.Cursor)
	var deleted []string
	for _, p := range r2.Pages {
		for _, it := range p.Items {
			if it.Deleted {
				deleted = append(deleted, fmt.Sprint(it.Value.(map[string]any)["id"]))
			}
		}
	}
	if len(r2.IDs()) != 1 || fmt.Sprint(deleted) != "[3]" || r2.Result.CheckKeys || r2.Result.Cursor != nil {
		t.Errorf("second run: %v read, %v deleted, check keys %v, cursor %s; want task 3 read as deleted, no check before the hour", r2.IDs(), deleted, r2.Result.CheckKeys, r2.Result.Cursor)
	}
	now = now.Add(time.Minute)
	r3 := fetch(t, c, r2.Cursor(r1.Result.Cursor))
	if !r3.Result.CheckKeys || len(r3.IDs()) != 0 {
		t.Errorf("third run, an hour after the scan: check keys %v, %d rows; want a check and no row", r3.Result.CheckKeys, len(r3.IDs()))
	}
	present, err := c.Present(context.Background(), []string{"1", "3", "7", "25", "26"})
	slices.Sort(present)
	if err != nil || fmt.Sprint(present) != "[1 25]" {
		t.Errorf("Present(1, 3, 7, 25, 26) = %v, %v; want [1 25] (3 deleted_when, 7 and 26 not there)", present, err)
	}
	_, err = c.Present(context.Background(), []string{"1", "t-2"})
	if err == nil || !strings.HasPrefix(err.Error(), `postgres.full_scan_every looks records up by key, and a record id is not a value of id's type integer`) {
		t.Errorf("Present of an id that is no integer: %v", err)
	}
}

// Every read runs in a READ ONLY transaction: a query that writes fails
// naming the key, and writes nothing.
func TestQueryThatWritesFails(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	up.seed(t, 0, 10)
	for q, want := range map[string]string{
		"DELETE FROM agent_tasks RETURNING id, updated_at": "postgres.query tries to write, and the connector reads in a READ ONLY transaction " +
			"(PostgreSQL said: cannot execute SELECT in a read-only transaction); give it a SELECT that only reads",
		"INSERT INTO agent_tasks (title) VALUES ('x') RETURNING id, updated_at;": "postgres.query tries to write, and the connector reads in a READ ONLY transaction " +
			"(PostgreSQL said: cannot execute SELECT in a read-only transaction); give it a SELECT that only reads",
		"WITH d AS (UPDATE agent_tasks SET status = 'x' RETURNING *) SELECT id, updated_at FROM d": "postgres.query is not a plain read " +
			"(WITH clause containing a data-modifying statement must be at the top level): the connector reads in a READ ONLY transaction; give it a SELECT",
	} {
		o := postgres.Options{DSN: up.url, Query: q, Key: "id", Cursor: "updated_at"}
		err := run(t, connector(t, o), nil).Err
		if err == nil || err.Error() != want {
			t.Errorf("query %q: %v\nwant %s", q, err, want)
		}
	}
	if n := count(t, up.pool, `SELECT count(*) FROM agent_tasks WHERE status = 'done'`); n != 10 {
		t.Errorf("%d rows left as they were, want 10", n)
	}
}

// Names the rows do not have, a missing table, a statement over its
// timeout: each a clear error at its first run (and at Verify).
func TestFirstRunErrors(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	up.seed(t, 0, 10)
	cases := []struct {
		o    postgres.Options
		want string
	}{
		{postgres.Options{Table: "agent_tasks", Key: "id", Cursor: "updatd_at"},
			`postgres.cursor names the column "updatd_at", which table agent_tasks does not have (its columns: id, title, agent_name, status, executor, priority, surveillance_score, result_json, correction_count, deleted_at, created_at, updated_at)`},
		{postgres.Options{Table: "agent_tasks", Key: "ID", Cursor: "updated_at"},
			`postgres.key names the column "ID", which table agent_tasks does not have; it has "id" (names are case-sensitive)`},
		{postgres.Options{Query: "SELECT id AS task, updated_at FROM agent_tasks", Key: "id", Cursor: "updated_at"},
			`postgres.key names the column "id", which the query does not have (its columns: task, updated_at)`},
		{postgres.Options{Query: "SELECT a.id, b.id, a.updated_at FROM agent_tasks a JOIN agent_tasks b USING (id)", Key: "id", Cursor: "updated_at"},
			`postgres.query returns the column "id" twice: give each column its own name (AS)`},
		{postgres.Options{Table: "agent_task", Key: "id", Cursor: "updated_at"},
			`postgres.table names a table that does not exist in database "`},
		{postgres.Options{Query: "SELEC id FROM agent_tasks", Key: "id", Cursor: "updated_at"},
			`postgres.query is not a valid query: syntax error at or near "SELEC"`},
	}
	for _, tc := range cases {
		tc.o.DSN = up.url
		c := connector(t, tc.o)
		err := run(t, c, nil).Err
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%+v: error %v\nwant %q", tc.o, err, tc.want)
		}
		if verr := c.Verify(context.Background()); fmt.Sprint(verr) != fmt.Sprint(err) {
			t.Errorf("Verify = %v, want the run's %v", verr, err)
		}
	}
	o := postgres.Options{DSN: up.url, Query: "SELECT id, updated_at FROM agent_tasks, pg_sleep(60)", Key: "id", Cursor: "updated_at", StatementTimeout: 1e9}
	err := run(t, connector(t, o), nil).Err
	if err == nil || !strings.HasPrefix(err.Error(), "page 1 (from the start): read the query: the statement ran longer than postgres.statement_timeout 1s (add an index on the cursor and key, or raise it): ERROR: canceling statement due to statement timeout (SQLSTATE 57014)") {
		t.Errorf("statement timeout: %v", err)
	}
}

// Values become JSON: timestamps RFC 3339 in UTC, numeric exact, bytea
// base64, json as it is, NaN and infinities as strings, other types as
// to_jsonb writes them.
func TestValuesAsJSON(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	up.exec(t, `CREATE TYPE mood AS ENUM ('calm', 'busy')`)
	up.exec(t, `CREATE TABLE kinds (id bigint PRIMARY KEY, updated_at timestamptz, n numeric, big bigint, f float8, fn float8,
		b bytea, j jsonb, js json, d date, ts timestamp, tags text[], u uuid, m mood, iv interval, ok boolean, c char(3), nothing text,
		inf timestamptz)`)
	up.exec(t, `INSERT INTO kinds VALUES (9007199254740993, '2026-03-01 12:34:56.789012+02', 12345678901234567890.123456789, 9007199254740993,
		0.1, 'NaN', '\x00ff10', '{"score": 12345678901234567890, "a": [1, "x"]}', '{"k":  1}', '2028-02-29', '2026-03-01 08:00:00',
		'{a,"b c"}', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', 'busy', '1 day 2 hours', true, 'ab', NULL, 'infinity'),
		(2, '2026-03-01 00:00:00+00', 'NaN', 1, 1e300, '-Infinity', '', 'null', '[]', '2026-01-01', '2026-01-01 00:00:00', '{}', NULL, 'calm', '0', false, 'abc', 'x', NULL)`)
	o := postgres.Options{DSN: up.url, Table: "kinds", Key: "id", Cursor: "updated_at"}
	r := fetch(t, connector(t, o), nil)
	var raws []string
	for _, p := range r.Pages {
		for _, it := range p.Items {
			raws = append(raws, string(it.Raw))
		}
	}
	want := []string{
		`{"id":2,"updated_at":"2026-03-01T00:00:00Z","n":"NaN","big":1,"f":1e+300,"fn":"-Infinity","b":"","j":null,"js":[],"d":"2026-01-01",` +
			`"ts":"2026-01-01T00:00:00Z","tags":[],"u":null,"m":"calm","iv":"PT0S","ok":false,"c":"abc","nothing":"x","inf":null}`,
		`{"id":9007199254740993,"updated_at":"2026-03-01T10:34:56.789012Z","n":12345678901234567890.123456789,"big":9007199254740993,"f":0.1,"fn":"NaN",` +
			`"b":"AP8Q","j":{"a": [1, "x"], "score": 12345678901234567890},"js":{"k":  1},"d":"2028-02-29","ts":"2026-03-01T08:00:00Z",` +
			`"tags":["a", "b c"],"u":"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11","m":"busy","iv":"P1DT2H","ok":true,"c":"ab ","nothing":null,"inf":"infinity"}`,
	}
	if len(raws) != 2 || raws[0] != want[0] || raws[1] != want[1] {
		t.Errorf("rows as JSON:\n%s\nwant\n%s", strings.Join(raws, "\n"), strings.Join(want, "\n"))
	}
	// Items are decoded the way every connector's are: the big id exact.
	if id := r.Items()[1]["id"]; id != int64(9007199254740993) {
		t.Errorf("id decoded as %T %v", id, id)
	}
}

// Through the registry: a source file's block builds the connector, and
// a check (connectors.Check) does not connect.
func TestSourceFileBuilds(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	up.seed(t, 0, 3)
	cfg, err := conntest.LoadSource(t, "name: s\nconnector: postgres\npostgres:\n  dsn: "+up.url+"\n  table: public.agent_tasks\n  key: id\n  cursor: updated_at\n")
	if err != nil {
		t.Fatal(err)
	}
	if err := connectors.Check(cfg); err != nil {
		t.Fatalf("check: %v", err)
	}
	c, err := connectors.New(cfg.Sources[0], connectors.Env{})
	if err != nil {
		t.Fatal(err)
	}
	if ids := conntest.Fetch(t, c, nil).IDs(); len(ids) != 3 {
		t.Errorf("read %v", ids)
	}
}

// The connection goes through the Dial the syncer gives (its egress
// policy): a DSN whose host is refused fails before connecting.
func TestEgressPolicyApplies(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	o := tasks(up)
	o.Dial = egress.Policy{DenyPrivate: true}.Dialer().DialContext
	err := run(t, connector(t, o), nil).Err
	var denied *egress.DeniedError
	if !errors.As(err, &denied) || !strings.HasPrefix(err.Error(), `connect to database "up_testegresspolicyapplies_`) {
		t.Errorf("connect to a loopback DSN under deny_private: %v", err)
	}
}

// Credentials the server refuses (here a role that does not exist,
// SQLSTATE 28000) are connectors.ErrUnauthorized: the syncer disables the
// source until its configuration changes.
func TestRefusedRoleIsUnauthorized(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	o := tasks(up)
	u, err := neturl.Parse(up.url)
	if err != nil {
		t.Fatal(err)
	}
	u.User = neturl.User("no_such_reader")
	o.DSN = u.String()
	err = run(t, connector(t, o), nil).Err
	if !errors.Is(err, connectors.ErrUnauthorized) || !strings.Contains(err.Error(), `role "no_such_reader" does not exist`) {
		t.Errorf("refused role: %v", err)
	}
}
