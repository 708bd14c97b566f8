package db

import (
	"context"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// openTx is the pgx.Tx of OpenTx.
type openTx struct {
	conn *pgx.Conn
	// savepoint names the savepoint this Tx ends, "" for the transaction.
	savepoint string
	// savepoints counts the savepoints made in the transaction (shared by
	// its nested Txs), to name the next.
	savepoints *int
	closed     bool
}

var _ pgx.Tx = (*openTx)(nil)

// OpenTx returns a pgx.Tx over a transaction the caller already opened on
// conn, for a caller that sends its BEGIN in one round trip with its first
// statement (control's Idempotent sends it with the Idempotency-Key's
// claim), where pgx's Begin waits for BEGIN's answer alone. Its
// statements run on conn; Begin makes a savepoint (a Tx of it), Commit
// and Rollback end the transaction or the savepoint. LargeObjects is not
// available (its zero value).
func OpenTx(conn *pgx.Conn) pgx.Tx {
	return &openTx{conn: conn, savepoints: new(int)}
}

// Begin makes a savepoint in the transaction.
func (t *openTx) Begin(ctx context.Context) (pgx.Tx, error) {
	if t.closed {
		return nil, pgx.ErrTxClosed
	}
	*t.savepoints++
	name := "sp_" + strconv.Itoa(*t.savepoints)
	if _, err := t.conn.Exec(ctx, "SAVEPOINT "+name); err != nil {
		return nil, err
	}
	return &openTx{conn: t.conn, savepoint: name, savepoints: t.savepoints}, nil
}

// Commit commits the transaction, or releases the savepoint.
func (t *openTx) Commit(ctx context.Context) error {
	if t.closed {
		return pgx.ErrTxClosed
	}
	t.closed = true
	if t.savepoint != "" {
		_, err := t.conn.Exec(ctx, "RELEASE SAVEPOINT "+t.savepoint)
		return err
	}
	tag, err := t.conn.Exec(ctx, "COMMIT")
	if err != nil {
		return err
	}
	if tag.String() != "COMMIT" {
		// PostgreSQL answers ROLLBACK to the COMMIT of a failed
		// transaction.
		return pgx.ErrTxCommitRollback
	}
	return nil
}

// Rollback rolls the transaction back, or back to the savepoint.
func (t *openTx) Rollback(ctx context.Context) error {
	if t.closed {
		return pgx.ErrTxClosed
	}
	t.closed = true
	q := "ROLLBACK"
	if t.savepoint != "" {
		q = "ROLLBACK TO SAVEPOINT " + t.savepoint
	}
	_, err := t.conn.Exec(ctx, q)
	return err
}

func (t *openTx) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, rows pgx.CopyFromSource) (int64, error) {
	if t.closed {
		return 0, pgx.ErrTxClosed
	}
	return t.conn.CopyFrom(ctx, table, columns, rows)
}

func (t *openTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	return t.conn.SendBatch(ctx, b)
}

func (t *openTx) LargeObjects() pgx.LargeObjects { return pgx.LargeObjects{} }

func (t *openTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	if t.closed {
		return nil, pgx.ErrTxClosed
	}
	return t.conn.Prepare(ctx, name, sql)
}

func (t *openTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if t.closed {
		return pgconn.CommandTag{}, pgx.ErrTxClosed
	}
	return t.conn.Exec(ctx, sql, args...)
}

func (t *openTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if t.closed {
		return nil, pgx.ErrTxClosed
	}
	return t.conn.Query(ctx, sql, args...)
}

func (t *openTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if t.closed {
		return errRow{pgx.ErrTxClosed}
	}
	return t.conn.QueryRow(ctx, sql, args...)
}

func (t *openTx) Conn() *pgx.Conn { return t.conn }

// errRow is a pgx.Row that scans to err.
type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }
