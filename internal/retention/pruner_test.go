package retention

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/lookout-dev/lookout/internal/pgtest"
	"github.com/lookout-dev/lookout/internal/testsignal"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// fixture fills every pruned table with rows that must go and rows that
// must stay, named by a label in a text column, so that a test can say
// which survived.
type fixture struct {
	t    *testing.T
	pool *pgxpool.Pool
	call int64 // the old model call a verdict names
	// now is the clock of the fixture's pruners (Config.Now); the rows'
	// times are relative to it (ago).
	now time.Time
}

// fixtureNow is the fixture's clock: Monday 2026-11-30 00:05 UTC, a week
// boundary (docs/development.md#tests): a row ten minutes old is in the
// previous week's partition. It is in the past, so the prune statements'
// own guards on the database's clock (the current hour of a rollup, the
// current day of a budget) hold for every row the tests write.
var fixtureNow = time.Date(2026, 11, 30, 0, 5, 0, 0, time.UTC)

// newFixture returns a fixture on a fresh schema at fixtureNow, without
// the weekly partitions the migration made for the database's weeks: the
// partitions are the ones a prune makes at the fixture's clock, whatever
// today is.
func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{t: t, pool: pgtest.Pool(t), now: fixtureNow}
	f.exec(`INSERT INTO sources (name, connector, config_hash) VALUES ('s', 'file', 'h')`)
	f.dropWeeklyPartitions()
	return f
}

// pruner returns a pruner with conf's settings and, unless conf has one,
// the fixture's clock.
func (f *fixture) pruner(conf Config) *Pruner {
	if conf.Now == nil {
		conf.Now = func() time.Time { return f.now }
	}
	return New(f.pool, conf, slog.New(slog.DiscardHandler))
}

// ago is a time literal for the fixture's inserts: d before its clock.
func (f *fixture) ago(d time.Duration) string { return at(f.now.Add(-d)) }

func (f *fixture) exec(sql string, args ...any) {
	f.t.Helper()
	if _, err := f.pool.Exec(context.Background(), sql, args...); err != nil {
		f.t.Fatalf("%s: %v", sql, err)
	}
}

func (f *fixture) id(sql string, args ...any) int64 {
	f.t.Helper()
	var id int64
	if err := f.pool.QueryRow(context.Background(), sql, args...).Scan(&id); err != nil {
		f.t.Fatalf("%s: %v", sql, err)
	}
	return id
}

func (f *fixture) labels(sql string) []string {
	f.t.Helper()
	rows, err := f.pool.Query(context.Background(), sql)
	if err != nil {
		f.t.Fatalf("%s: %v", sql, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			f.t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		f.t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

// Old rows are a month old: their week's partition (made by the prune,
// which moves them out of the default partition) is past a week's
// window; recent rows are ten minutes old (at fixtureNow, in the previous
// week's partition, inside the window).
const (
	oldAge    = 30 * 24 * time.Hour
	recentAge = 10 * time.Minute
)

// change inserts a change labelled by its record_id.
func (f *fixture) change(label, status, at string) int64 {
	return f.id(fmt.Sprintf(`
		INSERT INTO changes (source, record_id, kind, version, record, eval_status, created_at)
		VALUES ('s', $1, 'created', 1, '{}', $2, %s) RETURNING id`, at), label, status)
}

// evaluation inserts an evaluation of change labelled by its watch. The
// change's time is read first: Citus refuses a subquery in an INSERT's
// VALUES ("subqueries are not supported within INSERT queries").
func (f *fixture) evaluation(label string, change int64, at string) {
	f.t.Helper()
	var changeAt time.Time
	if err := f.pool.QueryRow(context.Background(), `SELECT created_at FROM changes WHERE id = $1`, change).Scan(&changeAt); err != nil {
		f.t.Fatalf("read change %d: %v", change, err)
	}
	f.exec(fmt.Sprintf(`
		INSERT INTO evaluations (change_id, source, record_id, watch, step, matched, decision, evaluator, created_at,
		                         change_created_at)
		VALUES ($1, 's', 'r', $2, 'filter', false, 'skip', 'e', %s, $3)`, at), change, label, changeAt)
}

// notification inserts a notification labelled by its title, with a
// version dedupe key unless key is given, and its dedupe key (two
// statements: notification_keys is distributed by its key on Citus).
func (f *fixture) notification(label, status, key string, at string) int64 {
	f.t.Helper()
	if key == "" {
		key = "s/r/w/v1-" + label
	}
	var id int64
	var created time.Time
	if err := f.pool.QueryRow(context.Background(), fmt.Sprintf(`
		INSERT INTO notifications (dedupe_key, source, record_id, watch, sink, title, payload, status, created_at)
		VALUES ($1, 's', 'r', 'w', 'log', $2, '{}', $3, %s) RETURNING id, created_at`, at), key, label, status).Scan(&id, &created); err != nil {
		f.t.Fatalf("insert notification %s: %v", label, err)
	}
	f.exec(`INSERT INTO notification_keys (dedupe_key, sink, notification_id, created_at) VALUES ($1, 'log', $2, $3)`, key, id, created)
	return id
}

func (f *fixture) modelCall(label, at string) int64 {
	return f.id(fmt.Sprintf(`
		INSERT INTO model_calls (source, record_id, watch, model, prompt_version, input_ref, input_hash, outcome, created_at)
		VALUES ('s', $1, 'w', 'm', 'pv', 'change:1', 'h', 'ok', %s) RETURNING id`, at), label)
}

func (f *fixture) run(label, status, at string) int64 {
	return f.id(fmt.Sprintf(`
		INSERT INTO sync_runs (source, owner, status, error, started_at)
		VALUES ('s', 'o', $2, $1, %s) RETURNING id`, at), label, status)
}

// fill writes the rows of every table; the labels of the rows that must
// survive a prune with 1h windows start with "keep".
func (f *fixture) fill() {
	old, recent := f.ago(oldAge), f.ago(recentAge)
	// Out of order: the lowest id is recent. Ids follow time only roughly
	// (a long transaction commits late); the row is below the frontier.
	f.change("keep-recent-first", "done", recent)
	var done []int64
	for i := range 7 {
		done = append(done, f.change(fmt.Sprintf("old-done-%d", i), "done", old))
	}
	pending := f.change("keep-old-pending", "pending", old)
	f.change("keep-recent-done-1", "done", recent)
	f.change("keep-recent-done-2", "done", recent)

	for i := range 5 {
		f.evaluation(fmt.Sprintf("old-%d", i), done[i], old)
	}
	f.evaluation("keep-of-pending-1", pending, old)
	f.evaluation("keep-of-pending-2", pending, old)
	f.evaluation("keep-recent", done[5], recent)

	f.notification("old-delivered-1", "delivered", "", old)
	f.notification("old-delivered-2", "delivered", "", old)
	f.notification("old-delivered-3", "delivered", "", old)
	f.notification("old-dead", "dead", "", old)
	summary := f.notification("old-digest-summary", "delivered", "digest/s/w/log/2026-01-01T00:00:00Z/1", old)
	member := f.notification("old-digested", "digested", "", old)
	f.exec(`UPDATE notifications SET digest_id = $1 WHERE id = $2`, summary, member)
	f.notification("keep-old-pending", "pending", "", old)
	f.notification("keep-old-held", "held", "", old)
	f.notification("old-record-key", "delivered", "s/r/w", old)
	f.notification("keep-recent", "delivered", "", recent)

	call := f.modelCall("old-1", old)
	f.call = call
	f.modelCall("old-2", old)
	f.modelCall("keep-recent", recent)
	f.exec(`INSERT INTO verdicts (prompt_version, model_digest, input_hash, model, source, watch, should_notify, urgency,
	                              confidence, reason, model_call_id)
	        VALUES ('pv', 'd', 'h', 'm', 's', 'w', true, 'low', 1, 'keep', $1)`, call)

	for i := range 4 {
		f.run(fmt.Sprintf("old-%d", i), "succeeded", old)
	}
	f.run("keep-old-running", "running", old)
	latest := f.run("keep-old-latest-of-source", "failed", old)
	f.exec(`UPDATE sources SET run_id = $1`, latest)
	f.run("keep-recent", "succeeded", recent)
}

// survivors lists the labels left in every table.
func (f *fixture) survivors() map[string][]string {
	return map[string][]string{
		"changes":       f.labels(`SELECT record_id FROM changes`),
		"evaluations":   f.labels(`SELECT watch FROM evaluations`),
		"notifications": f.labels(`SELECT title FROM notifications`),
		"model_calls":   f.labels(`SELECT record_id FROM model_calls`),
		"sync_runs":     f.labels(`SELECT error FROM sync_runs`),
		"verdicts":      f.labels(`SELECT reason || coalesce(':' || model_call_id, ':null') FROM verdicts`),
		// The keys are read first (a materialized CTE): on Citus
		// notification_keys is distributed by its key, notifications by
		// source, and Citus joins them only through such a result.
		"keys": f.labels(`WITH k AS MATERIALIZED (SELECT notification_id FROM notification_keys)
		                  SELECT n.title FROM k JOIN notifications n ON n.id = k.notification_id`),
		"orphan keys": f.labels(`SELECT k.dedupe_key FROM notification_keys k
		                         WHERE k.notification_id NOT IN (SELECT id FROM notifications)`),
	}
}

var weekly = Config{Changes: 7 * 24 * time.Hour, SyncRuns: 7 * 24 * time.Hour, Evaluations: 7 * 24 * time.Hour,
	Notifications: 7 * 24 * time.Hour, ModelCalls: 7 * 24 * time.Hour, BatchSize: 2}

func TestPruneDeletesOldHistoryAndNeverPendingWork(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.fill()
	p := f.pruner(weekly)
	ctx := context.Background()

	dry, err := p.DryRun(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Before the first prune, the old rows are in the default partition:
	// a dry run counts them there.
	wantRows := map[string]int64{"notifications": 7, "evaluations": 5, "model_calls": 2, "changes": 7, "sync_runs": 4}
	for _, tr := range dry.Tables {
		if tr.Rows != wantRows[tr.Table] || tr.Batches != 0 {
			t.Errorf("dry run: %s would delete %d rows in %d batches, want %d in 0", tr.Table, tr.Rows, tr.Batches, wantRows[tr.Table])
		}
	}
	if len(dry.Tables) != len(wantRows) {
		t.Errorf("dry run covered %d tables, want %d", len(dry.Tables), len(wantRows))
	}
	before := f.survivors()
	if got := f.survivors(); fmt.Sprint(got) != fmt.Sprint(before) {
		t.Fatal("the dry run deleted rows")
	}

	res, err := p.Prune(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The prune moved the old rows into their week's partition. The old
	// model calls' partition holds nothing pending: dropped whole. The
	// others hold pending work: kept, their other rows deleted.
	wantRows["model_calls"] = 0
	old := PartitionName("x", WeekOf(f.now.Add(-oldAge)))[1:]
	for _, tr := range res.Tables {
		wantDropped, wantKept := "[]", "["+tr.Table+old+"]"
		if tr.Table == "model_calls" {
			wantDropped, wantKept = wantKept, "[]"
		}
		if got := fmt.Sprint(tr.Dropped); got != wantDropped {
			t.Errorf("%s: dropped %s, want %s", tr.Table, got, wantDropped)
		}
		if got := fmt.Sprint(tr.Kept); got != wantKept {
			t.Errorf("%s: kept %s, want %s", tr.Table, got, wantKept)
		}
		if tr.Table == "model_calls" {
			continue
		}
		// Batches of 2: a table with n rows to delete takes n/2+1
		// statements (the last one finds fewer than 2).
		if tr.Rows != wantRows[tr.Table] || tr.Batches != int(tr.Rows/2)+1 {
			t.Errorf("%s: deleted %d rows in %d batches, want %d in %d", tr.Table, tr.Rows, tr.Batches, wantRows[tr.Table], wantRows[tr.Table]/2+1)
		}
	}
	want := map[string][]string{
		"changes":       {"keep-old-pending", "keep-recent-done-1", "keep-recent-done-2", "keep-recent-first"},
		"evaluations":   {"keep-of-pending-1", "keep-of-pending-2", "keep-recent"},
		"notifications": {"keep-old-held", "keep-old-pending", "keep-recent"},
		"model_calls":   {"keep-recent"},
		"sync_runs":     {"keep-old-latest-of-source", "keep-old-running", "keep-recent"},
		// The cache outlives the call that filled it; model_call_id is a
		// plain id (model_calls is partitioned): it names the pruned call.
		"verdicts": {fmt.Sprintf("keep:%d", f.call)},
		// The keys of the pruned notifications went with them, except the
		// dedupe: record key, which keeps suppressing the record's.
		"keys":        {"keep-old-held", "keep-old-pending", "keep-recent"},
		"orphan keys": {"s/r/w"},
	}
	got := f.survivors()
	for table, labels := range want {
		if !slices.Equal(got[table], labels) {
			t.Errorf("%s after prune: %v, want %v", table, got[table], labels)
		}
	}

	again, err := p.Prune(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := again.Rows(); n != 0 {
		t.Errorf("a second prune deleted %d rows, want 0", n)
	}
}

// A zero window keeps the table whole.
func TestPruneOnlyTablesWithAWindow(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.fill()
	res, err := f.pruner(Config{Changes: time.Hour, BatchSize: 5000}).Prune(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Tables) != 1 || res.Tables[0].Table != "changes" || res.Tables[0].Rows != 7 || res.Tables[0].Batches != 1 {
		t.Fatalf("result %+v, want 7 changes in one batch of 5000", res.Tables)
	}
	if n := len(f.labels(`SELECT title FROM notifications`)); n != 10 {
		t.Errorf("notifications = %d, want all 10", n)
	}
}

// One replica prunes at a time: while the schema's lock is held elsewhere,
// Prune skips and deletes nothing.
func TestPruneSkipsWhileAnotherReplicaPrunes(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.fill()
	ctx := context.Background()
	other, err := f.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Release()
	if _, err := other.Exec(ctx, `SELECT pg_advisory_lock(`+lockKey+`)`); err != nil {
		t.Fatal(err)
	}
	p := f.pruner(weekly)
	res, err := p.Prune(ctx)
	if err != nil || !res.Skipped || res.Rows() != 0 {
		t.Fatalf("Prune while locked = %+v, %v; want skipped", res, err)
	}
	if _, err := other.Exec(ctx, `SELECT pg_advisory_unlock(`+lockKey+`)`); err != nil {
		t.Fatal(err)
	}
	res, err = p.Prune(ctx)
	if err != nil || res.Skipped || res.Rows() != 23 || res.Dropped() != 1 {
		t.Fatalf("Prune after unlock = %+v (%d rows), %v; want 23 rows and one partition dropped", res, res.Rows(), err)
	}
}

// The daemon's loop prunes at start and every interval, and stops.
func TestPrunerLoop(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.fill()
	p := f.pruner(Config{Changes: time.Hour, BatchSize: 5000, Interval: time.Hour})
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	testsignal.Eventually(t, "the loop to prune the old changes", func() bool {
		return len(f.labels(`SELECT record_id FROM changes`)) == 4
	})
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := p.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	off := f.pruner(Config{})
	if err := off.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := off.Stop(); err != nil {
		t.Fatal(err)
	}
}
