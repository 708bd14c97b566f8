package db_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lookout-dev/lookout/internal/db"
	"github.com/lookout-dev/lookout/internal/pgtest"
	"github.com/lookout-dev/lookout/internal/testsignal"
)

// notifySQL signals a channel of the connection's schema, as the change
// log and the outbox do.
const notifySQL = `SELECT pg_notify(current_schema() || '.changes', 'src')`

func notify(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), notifySQL); err != nil {
		t.Fatal(err)
	}
}

func TestListenerWakesAndReconnects(t *testing.T) {
	t.Parallel()
	schema, url := pgtest.Schema(t)
	pool := pgtest.PoolFor(t, url)
	ctx := context.Background()
	l := db.NewListener(pool, db.ChangesChannel(schema), slog.New(slog.DiscardHandler))
	listening := l.ListeningSignal(t)
	if err := l.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Stop() })
	listening.WaitOrTimeout()
	testsignal.Receive(t, l.Wake(), "the catch-up after connecting")

	notify(t, pool)
	testsignal.Receive(t, l.Wake(), "a NOTIFY on the schema's channel")

	// Kill the listening backend: the listener reconnects, LISTENs again and
	// wakes its consumer to catch up on what it may have missed.
	tag, err := pool.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE 'LISTEN %' AND pid <> pg_backend_pid() AND query LIKE '%' || $1 || '%'`, schema)
	if err != nil {
		t.Fatal(err)
	}
	if tag.RowsAffected() != 1 {
		t.Fatalf("terminated %d listening backends, want 1", tag.RowsAffected())
	}
	listening.WaitOrTimeout()
	testsignal.Receive(t, l.Wake(), "the catch-up after reconnecting")
	if !l.Connected() {
		t.Error("not connected after LISTEN")
	}
	notify(t, pool)
	testsignal.Receive(t, l.Wake(), "a NOTIFY after reconnecting")

	if err := l.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := l.Stop(); err != nil { // idempotent
		t.Fatal(err)
	}
	if l.Connected() {
		t.Error("connected after Stop")
	}
}

func TestListenerChannelsAreSchemaScoped(t *testing.T) {
	t.Parallel()
	schemaA, urlA := pgtest.Schema(t)
	_, urlB := pgtest.Schema(t)
	poolA, poolB := pgtest.PoolFor(t, urlA), pgtest.PoolFor(t, urlB)
	ctx := context.Background()
	l := db.NewListener(poolA, db.ChangesChannel(schemaA), slog.New(slog.DiscardHandler))
	if err := l.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Stop() })
	testsignal.Receive(t, l.Wake(), "the catch-up after connecting")
	// A NOTIFY in another schema is not heard...
	notify(t, poolB)
	// (absence can only be checked for a while: 200ms is ample on loopback)
	select {
	case <-l.Wake():
		t.Fatal("woken by a NOTIFY in another schema")
	case <-time.After(200 * time.Millisecond):
	}
	notify(t, poolA)
	testsignal.Receive(t, l.Wake(), "a NOTIFY in its own schema")
}
