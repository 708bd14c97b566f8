package drift

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// Execer runs a statement: a connection, a pool or a transaction.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Prune deletes at most limit embedded decisions made before before and
// returns how many (retention.drift_embeddings, called by
// internal/retention only). Pending ones are never deleted.
func Prune(ctx context.Context, q Execer, before time.Time, limit int) (int64, error) {
	tag, err := q.Exec(ctx, queryPrune, before, limit)
	if err != nil {
		return 0, fmt.Errorf("prune drift_embeddings older than %s: %w", before.UTC().Format(time.RFC3339), err)
	}
	return tag.RowsAffected(), nil
}

// CountPrunable counts the rows Prune would delete (a dry run).
func CountPrunable(ctx context.Context, q Querier, before time.Time) (int64, error) {
	var n int64
	if err := q.QueryRow(ctx, queryCountPrunable, before).Scan(&n); err != nil {
		return 0, fmt.Errorf("count drift_embeddings older than %s: %w", before.UTC().Format(time.RFC3339), err)
	}
	return n, nil
}
