package changes

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/lookout-dev/lookout/internal/normalize"
)

// Querier is what Missing needs: a pool, a connection or a transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// liveIDsSQL lists the live record ids of a source ($1).
const liveIDsSQL = `SELECT record_id FROM records WHERE source = $1 AND deleted_at IS NULL`

// liveIDsAfterSQL is a keyset page ($3 ids after $2, in id order) of
// liveIDsSQL.
const liveIDsAfterSQL = `SELECT record_id FROM records WHERE source = $1 AND deleted_at IS NULL AND record_id > $2
		ORDER BY record_id LIMIT $3`

// Missing returns the ids of live (not deleted) records of source that are
// not in seen: the records a complete snapshot no longer contains; and the
// number of live records it read.
func Missing[V any](ctx context.Context, q Querier, source string, seen map[string]V) (missing []string, live int, err error) {
	rows, err := q.Query(ctx, liveIDsSQL, source)
	if err != nil {
		return nil, 0, fmt.Errorf("list live records of %s: %w", source, err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, 0, fmt.Errorf("list live records of %s: %w", source, err)
		}
		live++
		if _, ok := seen[id]; !ok {
			missing = append(missing, id)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, 0, fmt.Errorf("list live records of %s: %w", source, err)
	}
	return missing, live, nil
}

// LiveIDs returns at most limit ids of live (not deleted) records of
// source after the id after ("" for the first), in id order: a keyset page
// of the records a check of what is still upstream reads.
func LiveIDs(ctx context.Context, q Querier, source, after string, limit int) ([]string, error) {
	rows, err := q.Query(ctx, liveIDsAfterSQL, source, after, limit)
	if err != nil {
		return nil, fmt.Errorf("list live records of %s after %q: %w", source, after, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list live records of %s after %q: %w", source, after, err)
	}
	return ids, nil
}

// Delete records tombstones for ids of source in tx: the records keep their
// last content with deleted_at set and a new version, and a deleted change
// carries the last content as both record and previous. A created change
// that left its snapshot to the record gets it first (materialize).
func Delete(ctx context.Context, tx pgx.Tx, source string, runID int64, ids []string) (Stats, error) {
	var st Stats
	if len(ids) == 0 {
		return st, nil
	}
	prev, err := loadFields(ctx, tx, source, ids)
	if err != nil {
		return st, err
	}
	if err := materialize(ctx, tx, source, ids); err != nil {
		return st, err
	}
	rows, err := tx.Query(ctx, `
		UPDATE records SET deleted_at = now(), version = version + 1, last_run_id = $3, synced_at = now()
		WHERE source = $1 AND record_id = ANY($2::text[]) AND deleted_at IS NULL
		RETURNING record_id, version, content_hash`, source, ids, runArg(runID))
	if err != nil {
		return st, fmt.Errorf("tombstone records of %s: %w", source, err)
	}
	c := newBatch(len(ids))
	for rows.Next() {
		var id, hash string
		var version int
		if err := rows.Scan(&id, &version, &hash); err != nil {
			rows.Close()
			return st, fmt.Errorf("tombstone records of %s: %w", source, err)
		}
		snap := string(normalize.Canonical(prev[id]))
		h := hash
		c.addChange(&source, runIDOf(runID), &id, Deleted, version, &h, nil, []string{}, &snap, &snap)
		st.Deleted++
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return st, fmt.Errorf("tombstone records of %s: %w", source, err)
	}
	if st.Deleted == 0 {
		return st, nil
	}
	if err := c.write(ctx, tx, source, runID); err != nil {
		return st, err
	}
	return st, nil
}
