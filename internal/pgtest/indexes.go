package pgtest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// CheckFullIndexes fails tb unless the indexes of table without a
// predicate — those every row written enters — are exactly those of
// readers, each named with the statement that reads it: an index no
// statement reads only costs every insert and every non-HOT update.
func CheckFullIndexes(tb testing.TB, pool *pgxpool.Pool, table string, readers map[string]string) {
	tb.Helper()
	rows, err := pool.Query(context.Background(), `
		SELECT c.relname::text FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
		WHERE i.indrelid = $1::regclass AND i.indpred IS NULL ORDER BY 1`, table)
	if err != nil {
		tb.Fatalf("the indexes of %s: %v", table, err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		tb.Fatalf("the indexes of %s: %v", table, err)
	}
	for _, name := range got {
		if readers[name] == "" {
			tb.Errorf("every row of %s enters index %s, which no reader is listed for", table, name)
		}
	}
	if len(got) != len(readers) {
		tb.Errorf("%s's indexes without a predicate: %v, want the %d listed", table, got, len(readers))
	}
}
