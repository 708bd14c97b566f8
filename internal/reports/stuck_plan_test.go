package reports

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/lookout-dev/lookout/internal/pgtest"
)

// fleetOnTime is 20,000 active sources kept on schedule (every next run
// within minutes, as a syncer that keeps up leaves them; here an hour
// ahead, so that none falls due while a busy machine fills the rest), with
// their definitions (one in 100 alice's, half of the rest of 49 other
// owners) and the few that are late: 20
// overdue by an hour (past their stuck_after_seconds of 1800: stuck), 20
// overdue by five minutes (late, not stuck), a run requested two hours ago
// that never ran (stuck), one requested a minute ago (not stuck), one
// overdue by an hour with a stuck_after_seconds of two hours (not stuck);
// and a day of runs and evaluations (1 in 100 failed) and notifications
// (1 in 50 retried), for the failures page.
const fleetOnTime = `
INSERT INTO sources (name, connector, config_hash, schedule, interval_seconds, interval_reason, next_run_at, last_run_at,
                     status, status_reason, status_changed_at)
SELECT 'src-' || i, 'http', 'h', 'every 5m0s', 300, 'every 5m0s',
       now() + interval '1 hour' + (i % 240) * interval '1 second', now() - interval '4 minutes',
       CASE WHEN i % 100 = 50 THEN 'paused' ELSE 'active' END, NULL, NULL
FROM generate_series(1, 20000) i;
UPDATE sources SET next_run_at = now() - interval '1 hour' WHERE name IN (SELECT 'src-' || i FROM generate_series(3, 20000, 1000) i);
UPDATE sources SET next_run_at = now() - interval '5 minutes' WHERE name IN (SELECT 'src-' || i FROM generate_series(4, 20000, 1000) i);
UPDATE sources SET run_requested_at = now() - interval '2 hours' WHERE name = 'src-5';
UPDATE sources SET run_requested_at = now() - interval '1 minute' WHERE name = 'src-7';
UPDATE sources SET next_run_at = now() - interval '1 hour', stuck_after_seconds = 7200 WHERE name = 'src-8';
INSERT INTO source_definitions (name, owner, managed_by, connector, definition, definition_hash, version)
SELECT 'src-' || i, CASE WHEN i % 100 = 3 THEN 'alice' WHEN i % 2 = 0 THEN 'owner-' || (i % 49) ELSE '' END, 'api', 'http', '{}', 'h', 1
FROM generate_series(1, 20000) i;
INSERT INTO sync_runs (source, owner, reason, status, started_at, finished_at, duration_ms, pages, items_seen, error, due_at, due_reason)
SELECT 'src-' || (1 + i % 20000), 'syncer-1', 'schedule', CASE WHEN i % 100 = 0 THEN 'failed' ELSE 'succeeded' END,
       now() - i * interval '10 seconds', now() - i * interval '10 seconds' + interval '1 second', 1000, 1, 10,
       CASE WHEN i % 100 = 0 THEN 'boom' END, now() - i * interval '10 seconds', 'every 5m0s'
FROM generate_series(1, 8600) i;
INSERT INTO evaluations (change_id, source, record_id, watch, content_hash, step, matched, decision, reason, evaluator,
                         created_at, change_created_at)
SELECT i, 'src-' || (1 + i % 20000), 'r-' || i, 'w', 'h', 'filter', false,
       CASE WHEN i % 100 = 0 THEN 'error' ELSE 'skip' END, 'when', 'evaluator-1',
       now() - i * interval '10 seconds', now() - i * interval '10 seconds'
FROM generate_series(1, 8600) i;
INSERT INTO notifications (dedupe_key, source, record_id, watch, sink, title, payload, status, attempts, created_at,
                           delivered_at, last_attempt_at, last_error, next_attempt_at)
SELECT 'k-' || i, 'src-' || (1 + i % 20000), 'r-' || i, 'w', 'hook', 't', '{}', 'delivered', 1 + (i % 50 = 0)::int,
       now() - i * interval '10 seconds', now() - i * interval '10 seconds', now() - i * interval '10 seconds',
       CASE WHEN i % 50 = 0 THEN '503' END, now() - i * interval '10 seconds'
FROM generate_series(1, 8600) i;
`

// TestStuckAndOverviewReadNoWholeSources: the overview, the stuck page and
// the failures page find the few late sources through the indexes of the
// schedule (sources_due_idx, sources_run_requested_idx) and the few
// failures through the failure indexes: no statement scans sources,
// source_definitions or a history table (Seq Scan reading more than 1,000
// rows; but the count of active sources, which reads them all). Before migration 45 report_stuck's overdue branch and the
// overview's most overdue source compared every active source's
// least(next_run_at, run_requested_at) with now(), which no index answers:
// a (Parallel) Seq Scan of the 100,000 sources of the admin benchmark, and
// a hash of every definition, on each request (docs/benchmarks.md, (9)).
// The pages' rows are checked too: the stuck sources, and only they, are
// listed. Checked on the plans' scans (EXPLAIN ANALYZE); no timing.
func TestStuckAndOverviewReadNoWholeSources(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, fleetOnTime); err != nil {
		t.Fatalf("fill: %v", err)
	}
	// As autovacuum leaves them: statistics and visibility maps.
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE sources, source_definitions, sync_runs, evaluations, notifications`); err != nil {
		t.Fatal(err)
	}
	const adminQ = "internal/control/report_queries.go"
	stuckQ := sqlFrom(t, adminQ, "SELECT * FROM report_stuck\nWHERE")
	failuresQ := sqlFrom(t, adminQ, "SELECT * FROM report_recent_failures\nWHERE")
	overviewQ := sqlConst(t, adminQ, "queryOverview")
	ownerOverviewQ := sqlConst(t, adminQ, "queryOwnerOverview")
	noFilter := []any{nil, nil, nil, nil, nil, nil, nil}
	watched := []string{"sources", "source_definitions", "sync_runs", "evaluations", "notifications", "changes", "records", "model_calls"}

	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	for _, q := range []struct {
		name string
		sql  string
		args []any
	}{
		{"overview", overviewQ, nil},
		{"an owner's overview", ownerOverviewQ, []any{"alice"}},
		{"stuck", stuckQ, noFilter},
		{"stuck: overdue sources", stuckQ, []any{"source_overdue", nil, nil, nil, nil, nil, nil}},
		{"an owner's stuck work", stuckQ, []any{nil, nil, "alice", nil, nil, nil, nil}},
		{"failures", failuresQ, []any{nil, nil, nil, nil, nil, nil, nil, nil, nil, nil}},
		{"failures: failed runs", failuresQ, []any{"sync_run", nil, nil, nil, nil, nil, nil, nil, nil, nil}},
	} {
		p, err := explainAnalyzed(ctx, conn, q.sql, q.args...)
		if err != nil {
			t.Fatalf("%s: %v", q.name, err)
		}
		var lines, scans []string
		p.walk(0, func(n plan, depth int) {
			s := strings.Repeat("  ", depth) + strings.TrimSpace(n.JoinType+" "+n.NodeType)
			if n.IndexName != "" {
				s += " using " + n.IndexName
			}
			if n.RelationName != "" {
				s += " on " + n.RelationName
			}
			read := (n.ActualRows + n.RemovedByFilter) * n.Loops
			lines = append(lines, fmt.Sprintf("%s (rows %.0f, loops %.0f, removed %.0f)", s, n.ActualRows, n.Loops, n.RemovedByFilter))
			// The count of active sources (the fleet's, an owner's)
			// reads every one of them, here or through sources_due_idx.
			countActive := table(n.RelationName) == "sources" && n.Filter == "(status = 'active'::text)"
			if strings.HasSuffix(n.NodeType, "Seq Scan") && slices.Contains(watched, table(n.RelationName)) && read > 1000 && !countActive {
				scans = append(scans, fmt.Sprintf("%s of %s (%.0f rows read)", n.NodeType, n.RelationName, read))
			}
		})
		tree := strings.Join(lines, "\n")
		if len(scans) > 0 {
			t.Errorf("%s scans %s:\n%s", q.name, strings.Join(scans, ", "), tree)
		}
	}

	// What the pages list: the stuck sources, each once.
	rows, err := pool.Query(ctx, `SELECT source FROM report_stuck WHERE kind = 'source_overdue' ORDER BY source`)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		got = append(got, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	var want []string
	for i := 3; i <= 20000; i += 1000 {
		want = append(want, fmt.Sprintf("src-%d", i))
	}
	want = append(want, "src-5")
	slices.Sort(want)
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("overdue sources listed:\n%v\nwant\n%v", got, want)
	}
	// src-5's request of two hours ago is the most overdue; alice's
	// sources are src-3, src-103, ...: the 20 overdue by an hour are hers.
	var stuck, aliceStuck int64
	var mostOverdue, aliceMostOverdue bool
	if err := pool.QueryRow(ctx, `SELECT o.stuck, o.most_overdue = now() - (SELECT run_requested_at FROM sources WHERE name = 'src-5'),
		       a.stuck, a.most_overdue = now() - (SELECT next_run_at FROM sources WHERE name = 'src-3')
		FROM report_overview o, report_owner_overview a WHERE a.owner = 'alice'`).Scan(&stuck, &mostOverdue, &aliceStuck, &aliceMostOverdue); err != nil {
		t.Fatal(err)
	}
	if stuck != int64(len(want)) || !mostOverdue || aliceStuck != 20 || !aliceMostOverdue {
		t.Errorf("overview: stuck %d, most overdue is src-5's %v; alice's: stuck %d, most overdue is src-3's %v; want %d, true, 20, true",
			stuck, mostOverdue, aliceStuck, aliceMostOverdue, len(want))
	}
}
