package definitions

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// rowQuerier runs a statement that returns one row.
type rowQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// PruneDeletions deletes at most limit definition_deletions rows recorded
// before before, and returns how many. A follower reads the deletions
// after the version it applied; when one it may need was pruned (its
// version is older than the highest pruned), it loads the definitions
// whole instead (Delta.Full), so nothing is missed. internal/retention
// calls it until a batch is short.
func PruneDeletions(ctx context.Context, q rowQuerier, before time.Time, limit int) (int64, error) {
	var n int64
	if err := q.QueryRow(ctx, queryPruneDeletions, before, limit).Scan(&n); err != nil {
		return 0, fmt.Errorf("prune definition deletions recorded before %s: %w", before.UTC().Format(time.RFC3339), err)
	}
	return n, nil
}

// CountDeletions counts the rows PruneDeletions would delete (a dry run).
func CountDeletions(ctx context.Context, q rowQuerier, before time.Time) (int64, error) {
	var n int64
	if err := q.QueryRow(ctx, queryCountDeletions, before).Scan(&n); err != nil {
		return 0, fmt.Errorf("count definition deletions recorded before %s: %w", before.UTC().Format(time.RFC3339), err)
	}
	return n, nil
}
