package control

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/lookout-dev/lookout/internal/pgtest"
)

// begin's Tx is the transaction it opened with the claim: its savepoints
// roll back what they hold and no more, its Commit keeps the rest, and a
// closed Tx refuses statements.
func TestBegunTxSavepointsAndCommit(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `CREATE TABLE begun (n int PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	tx, _, err := begin(ctx, conn.Conn(), "", "", "test", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO begun VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	// A failed statement in a savepoint rolls back to it, not further.
	err = pgx.BeginFunc(ctx, tx, func(sp pgx.Tx) error {
		if _, err := sp.Exec(ctx, `INSERT INTO begun VALUES (2)`); err != nil {
			return err
		}
		_, err := sp.Exec(ctx, `INSERT INTO begun VALUES (1)`)
		return err
	})
	if err == nil {
		t.Fatal("the duplicate insert in the savepoint did not fail")
	}
	if err := pgx.BeginFunc(ctx, tx, func(sp pgx.Tx) error {
		_, err := sp.Exec(ctx, `INSERT INTO begun VALUES (3)`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT 1`); !errors.Is(err, pgx.ErrTxClosed) {
		t.Errorf("a statement after the commit: %v, want %v", err, pgx.ErrTxClosed)
	}
	var got []int32
	rows, _ := pool.Query(ctx, `SELECT n FROM begun ORDER BY n`)
	got, err = pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0] != 1 || got[1] != 3 {
		t.Errorf("committed rows %v, want [1 3]", got)
	}

	// Rolled back, nothing stays and the connection is out of the
	// transaction.
	tx, _, err = begin(ctx, conn.Conn(), "", "", "test", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO begun VALUES (4)`); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if s := conn.Conn().PgConn().TxStatus(); s != 'I' {
		t.Errorf("after the rollback the connection's transaction status is %c, want I", s)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM begun WHERE n = 4`).Scan(&n); err != nil || n != 0 {
		t.Errorf("rolled back row: %d %v, want 0", n, err)
	}
}
