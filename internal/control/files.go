package control

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lookout-dev/lookout/internal/outbox"
)

// FileDefinitions is the Definitions of a deployment whose definitions
// all come from the operator's configuration files.
//
// SEAM (issue 12): it stands in until the definitions store (sources and
// watches in the database with their owner) lands; then the store
// implements Definitions and this goes.
type FileDefinitions struct{ Pool *pgxpool.Pool }

// OwnedWatches returns none: file watches belong to no API owner.
func (f FileDefinitions) OwnedWatches(context.Context, string) ([]outbox.WatchKey, error) {
	return nil, nil
}

// SourceVisible reports whether the source exists: file sources are shared.
func (f FileDefinitions) SourceVisible(ctx context.Context, _ string, source string) (bool, error) {
	var n int
	if err := f.Pool.QueryRow(ctx, `SELECT count(*) FROM sources WHERE name = $1`, source).Scan(&n); err != nil {
		return false, fmt.Errorf("look up source %s: %w", source, err)
	}
	return n > 0, nil
}
