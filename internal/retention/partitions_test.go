package retention

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lookout-dev/lookout/internal/db"
	"github.com/lookout-dev/lookout/internal/pgtest"
)

var week7 = 7 * 24 * time.Hour

// exists reports whether relation name exists in the test's schema.
func (f *fixture) exists(name string) bool {
	f.t.Helper()
	var ok bool
	if err := f.pool.QueryRow(context.Background(), `SELECT to_regclass($1) IS NOT NULL`, name).Scan(&ok); err != nil {
		f.t.Fatal(err)
	}
	return ok
}

func prune(t *testing.T, f *fixture, conf Config) Result {
	t.Helper()
	res, err := f.pruner(conf).Prune(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func tableResult(t *testing.T, res Result, table string) TableResult {
	t.Helper()
	for _, tr := range res.Tables {
		if tr.Table == table {
			return tr
		}
	}
	t.Fatalf("no result for %s in %+v", table, res.Tables)
	return TableResult{}
}

// Every table has its partitions for this week and the Ahead weeks after
// it; a prune makes the ones missing, whether retention is on or not. The
// fixture has none (it dropped the migration's): the prune at the
// fixture's clock makes them all.
func TestPartitionsMadeAhead(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	last := PartitionName("changes", WeekOf(f.now).Add(Ahead*Week))
	if f.exists(last) {
		t.Fatalf("%s is there before the prune", last)
	}
	res := prune(t, f, Config{BatchSize: 10, Interval: time.Hour})
	for _, table := range []string{"changes", "evaluations", "notifications", "sync_runs", "model_calls"} {
		for i := range Ahead + 1 {
			name := PartitionName(table, WeekOf(f.now).Add(time.Duration(i)*Week))
			if !f.exists(name) || !slices.Contains(res.Made, name) {
				t.Errorf("%s: exists %t, among the made %t (made %v)", name, f.exists(name), slices.Contains(res.Made, name), res.Made)
			}
		}
		if !f.exists(table + "_default") {
			t.Errorf("%s_default is missing", table)
		}
	}
	// A row of this week goes to this week's partition (read from it by
	// name: on Citus a row's tableoid is its shard's).
	id := f.change("now", "done", f.ago(0))
	want := PartitionName("changes", WeekOf(f.now))
	var in bool
	if err := f.pool.QueryRow(context.Background(), fmt.Sprintf(`SELECT EXISTS (SELECT 1 FROM %s WHERE id = $1)`,
		pgx.Identifier{want}.Sanitize()), id).Scan(&in); err != nil {
		t.Fatal(err)
	}
	if !in {
		t.Errorf("a change of now is not in %s", want)
	}
}

// A partition made takes the storage parameters of its table's default
// partition: notifications' leave room on each page for a claim's new
// row version (migration 58), and so do the weeks made later; a table
// whose default partition has none makes partitions without any.
func TestPartitionsMadeTakeTheDefaultPartitionsStorage(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	pgtest.SkipOnCitus(t, f.pool, "pgtest's leased schemas on Citus have no storage parameters on notifications_default (a schema the binary migrates has migration 58's fillfactor)")
	prune(t, f, Config{BatchSize: 10, Interval: time.Hour})
	options := func(rel string) string {
		t.Helper()
		var opts string
		if err := f.pool.QueryRow(context.Background(), `
			SELECT coalesce(array_to_string(reloptions, ','), '') FROM pg_class WHERE oid = $1::regclass`, rel).Scan(&opts); err != nil {
			t.Fatalf("storage parameters of %s: %v", rel, err)
		}
		return opts
	}
	for _, c := range []struct{ table, want string }{{"notifications", "fillfactor=45"}, {"changes", ""}} {
		if got := options(c.table + "_default"); got != c.want {
			t.Errorf("%s_default has storage parameters %q; want %q", c.table, got, c.want)
		}
		for i := range Ahead + 1 {
			name := PartitionName(c.table, WeekOf(f.now).Add(time.Duration(i)*Week))
			if got := options(name); got != c.want {
				t.Errorf("%s (made by the prune) has storage parameters %q; want %q, its default partition's", name, got, c.want)
			}
		}
	}
}

// An old partition without pending work is dropped whole: no row is
// deleted one by one. A partition holding a pending change is kept, and
// its old done rows are deleted by rows; once the change is decided, the
// partition goes whole.
func TestOldPartitionsDroppedWholeUnlessPending(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	var done []int64
	for i := range 5 {
		done = append(done, f.change(fmt.Sprintf("old-%d", i), "done", f.ago(40*day)))
	}
	for i, id := range done {
		f.evaluation(fmt.Sprintf("w-%d", i), id, f.ago(40*day))
	}
	pending := f.change("keep-pending", "pending", f.ago(20*day))
	for i := range 3 {
		f.change(fmt.Sprintf("old-done-beside-pending-%d", i), "done", f.ago(20*day))
	}
	f.change("keep-recent", "done", f.ago(0))
	conf := Config{Changes: week7, Evaluations: week7, BatchSize: 100, Interval: time.Hour}
	weekOld := PartitionName("changes", WeekOf(f.now.Add(-40*day)))
	weekPending := PartitionName("changes", WeekOf(f.now.Add(-20*day)))

	res := prune(t, f, conf)
	// The old rows came in the default partition; the prune gave their
	// weeks partitions.
	if !slices.Contains(res.Made, weekOld) || !slices.Contains(res.Made, weekPending) {
		t.Errorf("made %v, want %s and %s", res.Made, weekOld, weekPending)
	}
	ch := tableResult(t, res, "changes")
	if !slices.Equal(ch.Dropped, []string{weekOld}) || !slices.Equal(ch.Kept, []string{weekPending}) || ch.Rows != 3 {
		t.Errorf("changes: dropped %v, kept %v, %d rows deleted; want [%s], [%s], 3", ch.Dropped, ch.Kept, ch.Rows, weekOld, weekPending)
	}
	if f.exists(weekOld) || !f.exists(weekPending) {
		t.Errorf("after prune: %s exists %t, %s exists %t; want dropped, kept", weekOld, f.exists(weekOld), weekPending, f.exists(weekPending))
	}
	ev := tableResult(t, res, "evaluations")
	if wantDrop := PartitionName("evaluations", WeekOf(f.now.Add(-40*day))); !slices.Equal(ev.Dropped, []string{wantDrop}) || ev.Rows != 0 {
		t.Errorf("evaluations: dropped %v, %d rows; want [%s], 0", ev.Dropped, ev.Rows, wantDrop)
	}
	if got := f.labels(`SELECT record_id FROM changes`); !slices.Equal(got, []string{"keep-pending", "keep-recent"}) {
		t.Errorf("changes left: %v", got)
	}
	if n := len(f.labels(`SELECT watch FROM evaluations`)); n != 0 {
		t.Errorf("%d evaluations left, want 0", n)
	}

	// Decided: its partition has nothing pending any more.
	f.exec(`UPDATE changes SET eval_status = 'done' WHERE id = $1`, pending)
	res = prune(t, f, conf)
	if ch := tableResult(t, res, "changes"); !slices.Equal(ch.Dropped, []string{weekPending}) || ch.Rows != 0 {
		t.Errorf("second prune: dropped %v, %d rows; want [%s], 0", ch.Dropped, ch.Rows, weekPending)
	}
	if got := f.labels(`SELECT record_id FROM changes`); !slices.Equal(got, []string{"keep-recent"}) {
		t.Errorf("changes left: %v", got)
	}
}

// Notifications: an old partition whose rows were delivered goes whole
// with their dedupe keys, except a dedupe: record key; a held one stays.
func TestNotificationPartitionsTakeTheirKeys(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.notification("old-1", "delivered", "", f.ago(40*day))
	f.notification("old-2", "dead", "", f.ago(40*day))
	f.notification("old-record", "delivered", "s/r/w", f.ago(40*day))
	f.notification("keep-held", "held", "", f.ago(20*day))
	f.notification("old-beside-held", "delivered", "", f.ago(20*day))
	res := prune(t, f, Config{Notifications: week7, BatchSize: 100, Interval: time.Hour})
	tr := tableResult(t, res, "notifications")
	if len(tr.Dropped) != 1 || len(tr.Kept) != 1 || tr.Rows != 1 {
		t.Errorf("notifications: dropped %v, kept %v, %d rows; want one, one, 1", tr.Dropped, tr.Kept, tr.Rows)
	}
	s := f.survivors()
	if !slices.Equal(s["notifications"], []string{"keep-held"}) || !slices.Equal(s["keys"], []string{"keep-held"}) ||
		!slices.Equal(s["orphan keys"], []string{"s/r/w"}) {
		t.Errorf("after prune: notifications %v, keys %v, orphan keys %v", s["notifications"], s["keys"], s["orphan keys"])
	}
}

// Migration 16 converts tables holding rows, and its down migration
// converts them back, rows, constraints and views included.
func TestMigration16UpAndDownWithData(t *testing.T) {
	t.Parallel()
	// The migration, and the version before it.
	const partitioned, before = 16, 15
	_, url := pgtest.Schema(t)
	pool := pgtest.PoolFor(t, url)
	pgtest.SkipOnCitus(t, pool, "the down migrations run on one PostgreSQL only: migration 57's down makes triggers on evaluations, which Citus refuses on a distributed table")
	ctx := context.Background()
	if v, err := db.MigrateTo(ctx, pool, before); err != nil || v != before {
		t.Fatalf("migrate down to %d: %d, %v", before, v, err)
	}
	f := &fixture{t: t, pool: pool}
	// The migration makes a partition for every week from the oldest
	// row's to three weeks after the database's now(): the rows end at the
	// Monday of the database's week, so that 5000 changes 10 minutes apart
	// (about 34.7 days) fill the five weeks before it, whatever the day
	// and hour (ending at now(), they filled five or six).
	var monday time.Time
	if err := pool.QueryRow(ctx, `SELECT date_trunc('week', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'`).Scan(&monday); err != nil {
		t.Fatal(err)
	}
	f.exec(`INSERT INTO sources (name, connector, config_hash) VALUES ('s', 'file', 'h')`)
	f.exec(`INSERT INTO changes (source, record_id, kind, version, record, eval_status, created_at)
	        SELECT 's', 'r' || g, 'created', 1, '{}', CASE WHEN g % 100 = 0 THEN 'pending' ELSE 'done' END,
	               $1::timestamptz - g * interval '10 minutes'
	        FROM generate_series(1, 5000) g`, monday)
	f.exec(`INSERT INTO evaluations (change_id, source, record_id, watch, step, matched, decision, evaluator, created_at)
	        SELECT id, source, record_id, 'w', 'filter', false, 'skip', 'e', created_at + interval '1 second' FROM changes`)
	f.exec(`INSERT INTO notifications (dedupe_key, source, record_id, watch, sink, title, payload, status, created_at)
	        SELECT 'k' || id, source, record_id, 'w', 'log', 't', '{}', 'delivered', created_at FROM changes WHERE id % 10 = 0`)
	f.exec(`UPDATE notifications SET digest_id = (SELECT min(id) FROM notifications) WHERE id % 3 = 0`)
	f.exec(`INSERT INTO model_calls (source, record_id, watch, model, prompt_version, input_ref, input_hash, outcome, created_at, change_id)
	        SELECT source, record_id, 'w', 'm', 'pv', 'x', 'h', 'ok', created_at, id FROM changes WHERE id % 50 = 0`)
	f.exec(`INSERT INTO verdicts (prompt_version, model_digest, input_hash, model, source, watch, should_notify, urgency, confidence, reason, model_call_id)
	        SELECT 'pv', 'd', 'h' || id, 'm', 's', 'w', true, 'low', 1, 'r', id FROM model_calls`)
	f.exec(`INSERT INTO sync_runs (source, owner, status, started_at) SELECT 's', 'o', 'succeeded', $1::timestamptz - g * interval '1 hour'
	        FROM generate_series(1, 1000) g`, monday)
	type state struct{ rows, views string }
	read := func() state {
		t.Helper()
		var st state
		if err := pool.QueryRow(ctx, `
			SELECT format('%s %s %s %s %s %s', (SELECT count(*) FROM changes), (SELECT count(*) FROM evaluations),
			              (SELECT count(*) FROM notifications), (SELECT count(*) FROM model_calls),
			              (SELECT count(*) FROM sync_runs), (SELECT count(*) FROM verdicts WHERE model_call_id IS NOT NULL)),
			       (SELECT string_agg(c.relname || ':' || coalesce(obj_description(c.oid, 'pg_class'), ''), ',' ORDER BY c.relname)
			        FROM pg_class c WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'v')`).
			Scan(&st.rows, &st.views); err != nil {
			t.Fatal(err)
		}
		return st
	}
	relkind := func(table string) string {
		t.Helper()
		var k string
		if err := pool.QueryRow(ctx, `SELECT relkind::text FROM pg_class WHERE oid = $1::regclass`, table).Scan(&k); err != nil {
			t.Fatal(err)
		}
		return k
	}
	was := read()
	if was.rows != "5000 5000 500 100 1000 100" {
		t.Fatalf("filled: %s", was.rows)
	}

	if v, err := db.MigrateTo(ctx, pool, partitioned); err != nil || v != partitioned {
		t.Fatalf("migrate up to %d: %d, %v", partitioned, v, err)
	}
	if got := read(); got != was {
		t.Errorf("after up: %+v, want %+v", got, was)
	}
	for _, table := range []string{"changes", "evaluations", "notifications", "sync_runs", "model_calls"} {
		if k := relkind(table); k != "p" {
			t.Errorf("%s relkind %s, want p (partitioned)", table, k)
		}
	}
	var keys, wrongAt, parts, inDefault int
	if err := pool.QueryRow(ctx, `
		SELECT (SELECT count(*) FROM notification_keys k JOIN notifications n ON n.id = k.notification_id
		        AND n.created_at = k.created_at AND n.dedupe_key = k.dedupe_key AND n.sink = k.sink),
		       (SELECT count(*) FROM evaluations e JOIN changes c ON c.id = e.change_id WHERE e.change_created_at <> c.created_at),
		       (SELECT count(*) FROM pg_inherits WHERE inhparent = 'changes'::regclass),
		       (SELECT count(*) FROM changes_default)`).Scan(&keys, &wrongAt, &parts, &inDefault); err != nil {
		t.Fatal(err)
	}
	// The five weeks of the rows, the database's week, the Ahead weeks and
	// the default partition (one week more ahead when the run crossed
	// Monday 00:00 UTC between the fill and the migration).
	if keys != 500 || wrongAt != 0 || parts < 5+1+Ahead+1 || inDefault != 0 {
		t.Errorf("after up: %d keys (want 500), %d evaluations with a wrong change_created_at, %d partitions of changes (want %d), %d changes in the default partition (want 0)",
			keys, wrongAt, parts, 5+1+Ahead+1, inDefault)
	}
	for i := -5; i <= Ahead; i++ {
		if name := PartitionName("changes", monday.Add(time.Duration(i)*Week)); !f.exists(name) {
			t.Errorf("after up: %s is missing", name)
		}
	}
	// The sequences still number the rows.
	var next int64
	if err := pool.QueryRow(ctx, `INSERT INTO changes (source, record_id, kind, version) VALUES ('s', 'new', 'created', 1) RETURNING id`).Scan(&next); err != nil || next != 5001 {
		t.Errorf("a new change got id %d, %v; want 5001", next, err)
	}
	f.exec(`DELETE FROM changes WHERE id = 5001`)
	// What pruning leaves: references to pruned rows (no foreign keys now).
	f.exec(`DELETE FROM changes WHERE id = 50`)
	f.exec(`DELETE FROM model_calls WHERE id = 1`)

	if v, err := db.MigrateTo(ctx, pool, before); err != nil || v != before {
		t.Fatalf("migrate down to %d: %d, %v", before, v, err)
	}
	after := read()
	if want := (state{"4999 5000 500 99 1000 99", was.views}); after != want {
		t.Errorf("after down: %+v, want %+v", after, want)
	}
	for _, table := range []string{"changes", "evaluations", "notifications", "sync_runs", "model_calls"} {
		if k := relkind(table); k != "r" {
			t.Errorf("%s relkind %s after down, want r", table, k)
		}
	}
	var cons string
	if err := pool.QueryRow(ctx, `
		SELECT string_agg(conname, ',' ORDER BY conname) FROM pg_constraint
		WHERE connamespace = current_schema()::regnamespace AND contype IN ('f', 'u')`).Scan(&cons); err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"evaluations_change_id_watch_key", "notifications_dedupe_key_sink_key", "model_calls_change_id_fkey",
		"verdicts_model_call_id_fkey", "notifications_digest_id_fkey", "sync_runs_source_fkey"} {
		if !slices.Contains(strings.Split(cons, ","), c) {
			t.Errorf("constraint %s missing after down (have %s)", c, cons)
		}
	}
	if _, err := db.Migrate(ctx, pool); err != nil {
		t.Fatalf("up again: %v", err)
	}
}

// dropWeeklyPartitions drops the (empty) weekly partitions the migration
// made for the database's current weeks, so that a test's partitions are
// the ones a prune makes at the test's clock, whatever today is.
func (f *fixture) dropWeeklyPartitions() {
	f.t.Helper()
	for _, t := range tables {
		for _, name := range f.labels(fmt.Sprintf(`
			SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
			WHERE i.inhparent = '%s'::regclass AND c.relname <> '%[1]s_default'`, t.name)) {
			f.exec(`DROP TABLE ` + name)
		}
	}
}

// at is a time literal for the fixture's inserts.
func at(t time.Time) string { return "'" + t.UTC().Format(time.RFC3339Nano) + "'::timestamptz" }

// TestPartitionsAtCalendarEdges prunes with the clock at each of the
// dates every calendar rule is tested at (docs/development.md#tests): the
// current week's partition (named after its Monday, UTC) and the Ahead
// weeks after it are made, rows land in their week's partition, and the
// weeks past the window are dropped or kept by the same rule on every date.
// The data is written at times relative to the test's clock, and the
// partitions the migration made for the database's weeks are dropped
// first: the outcome does not depend on today.
func TestPartitionsAtCalendarEdges(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		date string
		now  time.Time
		// week is the Monday of now's partition, and before the Monday of
		// the partition of a row ten minutes before now.
		week, before string
	}{
		{"2026-12-01 09:30 UTC, a month's first day (a Tuesday)", time.Date(2026, 12, 1, 9, 30, 0, 0, time.UTC), "20261130", "20261130"},
		{"2027-01-01, a new year in ISO week 53 of 2026", time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC), "20261228", "20261228"},
		{"2027-01-04, ISO week 1 of 2027", time.Date(2027, 1, 4, 12, 0, 0, 0, time.UTC), "20270104", "20270104"},
		{"2027-03-28 01:30 UTC, Europe/Paris springs forward", time.Date(2027, 3, 28, 1, 30, 0, 0, time.UTC), "20270322", "20270322"},
		{"2027-10-31 01:30 UTC, Europe/Paris falls back", time.Date(2027, 10, 31, 1, 30, 0, 0, time.UTC), "20271025", "20271025"},
		{"2027-03-14 07:00 UTC, America/New_York springs forward", time.Date(2027, 3, 14, 7, 0, 0, 0, time.UTC), "20270308", "20270308"},
		{"2027-11-07 06:00 UTC, America/New_York falls back", time.Date(2027, 11, 7, 6, 0, 0, 0, time.UTC), "20271101", "20271101"},
		{"2028-02-29, a leap day", time.Date(2028, 2, 29, 12, 0, 0, 0, time.UTC), "20280228", "20280228"},
		{"Monday 2027-01-11 00:05 UTC, a week boundary", time.Date(2027, 1, 11, 0, 5, 0, 0, time.UTC), "20270111", "20270104"},
	} {
		t.Run(tc.date, func(t *testing.T) {
			t.Parallel()
			if got := WeekOf(tc.now).Format("20060102"); got != tc.week {
				t.Fatalf("WeekOf(%s) = %s, want %s", tc.now.Format(time.RFC3339), got, tc.week)
			}
			f := newFixture(t)
			day := 24 * time.Hour
			oldDone := f.change("old-done", "done", at(tc.now.Add(-40*day)))
			f.evaluation("old", oldDone, at(tc.now.Add(-40*day)))
			f.change("keep-pending", "pending", at(tc.now.Add(-20*day)))
			f.change("old-done-beside-pending", "done", at(tc.now.Add(-20*day)))
			f.change("keep-ten-minutes-before", "done", at(tc.now.Add(-10*time.Minute)))
			f.change("keep-now", "done", at(tc.now))

			res := prune(t, f, Config{Changes: week7, Evaluations: week7, BatchSize: 100, Interval: time.Hour,
				Now: func() time.Time { return tc.now }})

			for _, table := range []string{"changes", "evaluations", "notifications", "sync_runs", "model_calls"} {
				for i := range Ahead + 1 {
					if name := PartitionName(table, WeekOf(tc.now).Add(time.Duration(i)*Week)); !f.exists(name) {
						t.Errorf("%s is missing (made %v)", name, res.Made)
					}
				}
			}
			for label, week := range map[string]string{"keep-now": tc.week, "keep-ten-minutes-before": tc.before} {
				// Read from the partition by name: on Citus a row's
				// tableoid is its shard's.
				want := "changes_p" + week
				var in bool
				if err := f.pool.QueryRow(context.Background(), fmt.Sprintf(`SELECT EXISTS (SELECT 1 FROM %s WHERE record_id = $1)`,
					pgx.Identifier{want}.Sanitize()), label).Scan(&in); err != nil {
					t.Fatal(err)
				}
				if !in {
					t.Errorf("%s is not in %s", label, want)
				}
			}
			ch := tableResult(t, res, "changes")
			weekOld := PartitionName("changes", WeekOf(tc.now.Add(-40*day)))
			weekPending := PartitionName("changes", WeekOf(tc.now.Add(-20*day)))
			if !ch.Cutoff.Equal(tc.now.Add(-week7)) {
				t.Errorf("cutoff %s, want %s", ch.Cutoff.UTC().Format(time.RFC3339), tc.now.Add(-week7).Format(time.RFC3339))
			}
			if !slices.Equal(ch.Dropped, []string{weekOld}) || !slices.Equal(ch.Kept, []string{weekPending}) || ch.Rows != 1 {
				t.Errorf("changes: dropped %v, kept %v, %d rows deleted; want [%s], [%s], 1", ch.Dropped, ch.Kept, ch.Rows, weekOld, weekPending)
			}
			if ev := tableResult(t, res, "evaluations"); !slices.Equal(ev.Dropped, []string{PartitionName("evaluations", WeekOf(tc.now.Add(-40*day)))}) {
				t.Errorf("evaluations: dropped %v", ev.Dropped)
			}
			if got := f.labels(`SELECT record_id FROM changes`); !slices.Equal(got, []string{"keep-now", "keep-pending", "keep-ten-minutes-before"}) {
				t.Errorf("changes left: %v", got)
			}
		})
	}
}
