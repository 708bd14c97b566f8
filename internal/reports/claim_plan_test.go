package reports

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lookout-dev/lookout/internal/pgtest"
	"github.com/lookout-dev/lookout/internal/retention"
)

// longHistories is a backlog behind records with long histories: 2,000
// records of 30 evaluated changes each, half of them two weeks ago and
// half a week ago (two weekly partitions), each record's next change
// pending (in last week's partition, beside the second half of its
// history), then 30,000 pending changes of other records.
const longHistories = `
INSERT INTO changes (source, record_id, kind, version, new_hash, record, run_id, created_at, eval_status, evaluated_at)
SELECT 'src-' || (r % 20), 'r-' || r, 'updated', v, 'h' || v, '{}', v,
       now() - CASE WHEN v <= 15 THEN interval '14 days' ELSE interval '7 days' END, 'done', now()
FROM generate_series(1, 30) v, generate_series(1, 2000) r
ORDER BY v, r;
INSERT INTO changes (source, record_id, kind, version, new_hash, record, run_id, created_at)
SELECT 'src-' || (r % 20), 'r-' || r, 'updated', 31, 'h31', '{}', 31, now() - interval '7 days'
FROM generate_series(1, 2000) r;
INSERT INTO changes (source, record_id, kind, version, new_hash, record, run_id)
SELECT 'gen', 'g-' || i, 'created', 1, 'h', '{}', 32 FROM generate_series(1, 30000) i;
`

// explainAnalyzed runs EXPLAIN (ANALYZE, BUFFERS) of sql on conn in a
// transaction it rolls back (the claim locks the rows it returns).
func explainAnalyzed(ctx context.Context, conn *pgxpool.Conn, sql string, args ...any) (plan, error) {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return plan{}, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	var raw []byte
	if err := tx.QueryRow(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+sql, args...).Scan(&raw); err != nil {
		return plan{}, err
	}
	return decodePlan(raw)
}

// TestClaimDoesNotReadRecordHistories: the evaluator's claim checks that
// no earlier change of a candidate's record is pending. Without an index
// of pending changes per record (migration 28 dropped it), the check reads
// changes_record_idx from the oldest pending change on: on a backlog
// behind records with 30 evaluated changes each, the claim reads none of
// them, whether planned with the values or as the generic plan pgx's
// prepared statement ends up with. Checked on the rows the probes read
// and discarded, and on buffers with a generous bound; no timing.
func TestClaimDoesNotReadRecordHistories(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, longHistories); err != nil {
		t.Fatalf("fill: %v", err)
	}
	// The weeks of the history get their partitions, as on a lookout that
	// ran for weeks.
	if _, err := retention.New(pool, retention.Config{BatchSize: 5000, Interval: time.Hour}, slog.New(slog.DiscardHandler)).Prune(ctx); err != nil {
		t.Fatalf("make the partitions: %v", err)
	}
	// The rows the pruner moved out of the default partition leave dead
	// entries in its indexes, which the probes would read (28 buffers a
	// probe). A running lookout's autovacuum removes them; a VACUUM here
	// cannot while another test's transaction holds the database's
	// horizon back, so the emptied partition is truncated. Then analyzed,
	// as autovacuum leaves the tables.
	var left int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM changes_default`).Scan(&left); err != nil || left != 0 {
		t.Fatalf("the default partition holds %d changes after the pruner (%v), want 0", left, err)
	}
	if _, err := pool.Exec(ctx, `TRUNCATE changes_default`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `ANALYZE changes`); err != nil {
		t.Fatal(err)
	}
	var parts int
	if err := pool.QueryRow(ctx, `SELECT count(DISTINCT tableoid) FROM changes WHERE eval_status = 'done'`).Scan(&parts); err != nil {
		t.Fatal(err)
	}
	if parts < 2 {
		t.Fatalf("the history is in %d partition(s), want 2", parts)
	}

	claim := sqlConst(t, "internal/evaluator/evaluator.go", "claimSQL")
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Conn().Prepare(ctx, "claim", claim); err != nil {
		t.Fatal(err)
	}
	const batch = 500
	for _, mode := range []string{"auto", "force_generic_plan"} {
		if _, err := conn.Exec(ctx, "SET plan_cache_mode = "+mode); err != nil {
			t.Fatal(err)
		}
		// The first 500 pending changes are the records' with history.
		p, err := explainAnalyzed(ctx, conn, "EXECUTE claim("+fmt.Sprint(batch)+", NULL)")
		if err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
		var lines []string
		var removed float64
		var sorts []string
		p.walk(0, func(n plan, depth int) {
			s := strings.Repeat("  ", depth) + strings.TrimSpace(n.JoinType+" "+n.NodeType)
			if n.IndexName != "" {
				s += " using " + n.IndexName
			}
			if n.RelationName != "" {
				s += " on " + n.RelationName
			}
			lines = append(lines, fmt.Sprintf("%s (rows %.0f, loops %.0f, removed %.0f, buffers %d)", s, n.ActualRows, n.Loops, n.RemovedByFilter, n.Hit+n.Read))
			if table(n.RelationName) == "changes" {
				removed += n.RemovedByFilter * n.Loops
			}
			if n.NodeType == "Sort" && n.Loops > 1 {
				sorts = append(sorts, s)
			}
		})
		tree := strings.Join(lines, "\n")
		t.Logf("claim (plan_cache_mode %s):\n%s", mode, tree)
		if p.ActualRows != batch {
			t.Fatalf("claim (%s) took %.0f changes, want %d:\n%s", mode, p.ActualRows, batch, tree)
		}
		// The history of the 500 records claimed is 15,000 evaluated
		// changes, 7,500 of them in the partition of the pending ones.
		if removed > batch {
			t.Errorf("claim (%s) read and discarded %.0f changes, want at most %d (one per claimed change): it reads the records' histories:\n%s",
				mode, removed, batch, tree)
		}
		if len(sorts) > 0 {
			t.Errorf("claim (%s) sorts once per candidate (%v): it reads each record's changes to find the previous one:\n%s", mode, sorts, tree)
		}
		// About 3,600 buffers here; reading the histories, about 10,600.
		if b := p.Hit + p.Read; b > 8000 {
			t.Errorf("claim (%s) read %d buffers, want at most 8,000:\n%s", mode, b, tree)
		}
	}
	if _, err := conn.Exec(ctx, "RESET plan_cache_mode"); err != nil {
		t.Fatal(err)
	}
}
