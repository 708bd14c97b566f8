package semantic

import (
	"context"
	"fmt"
	"github.com/lookout-dev/lookout/internal/db"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Querier runs a statement: a *pgxpool.Pool, a *pgx.Conn or a pgx.Tx.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// PruneBudgets deletes at most limit model_budgets rows of UTC days that
// ended before before, never the current UTC day, and returns how many.
// internal/retention calls it until a batch is short.
func PruneBudgets(ctx context.Context, q db.Querier, before time.Time, limit int) (int64, error) {
	return pruneShards(ctx, q, "model_budgets", queryPruneBudgetsCandidates, queryPruneBudgets, before, limit)
}

// CountBudgets counts the rows PruneBudgets would delete (a dry run).
func CountBudgets(ctx context.Context, q Querier, before time.Time) (int64, error) {
	return countOld(ctx, q, "model_budgets", queryCountBudgets, before)
}

// PruneVerdicts deletes at most limit cached verdicts made before before
// and not hit since, and returns how many. A pruned verdict is asked of
// the model again if the same question comes back.
func PruneVerdicts(ctx context.Context, q db.Querier, before time.Time, limit int) (int64, error) {
	return pruneShards(ctx, q, "verdicts", queryPruneVerdictsCandidates, queryPruneVerdicts, before, limit)
}

// CountVerdicts counts the rows PruneVerdicts would delete (a dry run).
func CountVerdicts(ctx context.Context, q Querier, before time.Time) (int64, error) {
	return countOld(ctx, q, "verdicts", queryCountVerdicts, before)
}

// PruneBriefings deletes at most limit finished briefings (ok or failed)
// last written or hit before before, and returns how many; one being
// written (a held claim) is never deleted.
func PruneBriefings(ctx context.Context, q Querier, before time.Time, limit int) (int64, error) {
	return pruneBatch(ctx, q, "briefings", queryPruneBriefings, before, limit)
}

// CountBriefings counts the rows PruneBriefings would delete (a dry run).
func CountBriefings(ctx context.Context, q Querier, before time.Time) (int64, error) {
	return countOld(ctx, q, "briefings", queryCountBriefings, before)
}

// pruneShards runs the prune statement sql of a table distributed by
// source, restricted to the sources of one shard at a time on Citus
// (db.PruneEachShard), and returns how many rows it deleted.
func pruneShards(ctx context.Context, q db.Querier, table, candidates, sql string, before time.Time, limit int) (int64, error) {
	n, err := db.PruneEachShard(ctx, q, table, before, limit, candidates, sql)
	if err != nil {
		return n, fmt.Errorf("prune %s older than %s: %w", table, before.UTC().Format(time.RFC3339), err)
	}
	return n, nil
}

func pruneBatch(ctx context.Context, q Querier, table, sql string, before time.Time, limit int) (int64, error) {
	tag, err := q.Exec(ctx, sql, before, limit)
	if err != nil {
		return 0, fmt.Errorf("prune %s older than %s: %w", table, before.UTC().Format(time.RFC3339), err)
	}
	return tag.RowsAffected(), nil
}

func countOld(ctx context.Context, q Querier, table, sql string, before time.Time) (int64, error) {
	var n int64
	if err := q.QueryRow(ctx, sql, before).Scan(&n); err != nil {
		return 0, fmt.Errorf("count %s older than %s: %w", table, before.UTC().Format(time.RFC3339), err)
	}
	return n, nil
}
