package changes_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/lookout-dev/lookout/internal/changes"
	"github.com/lookout-dev/lookout/internal/db"
	"github.com/lookout-dev/lookout/internal/pgtest"
)

func waitWake(t *testing.T, l *changes.Listener, what string) {
	t.Helper()
	select {
	case <-l.Wake():
	case <-time.After(15 * time.Second):
		t.Fatalf("no wake-up for %s", what)
	}
}

func TestListenerWakesAndReconnects(t *testing.T) {
	t.Parallel()
	schema, url := pgtest.Schema(t)
	pool := pgtest.PoolFor(t, url)
	ctx := context.Background()
	l := changes.NewListener(pool, db.ChangesChannel(schema), slog.New(slog.DiscardHandler))
	if err := l.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Stop)
	waitWake(t, l, "the catch-up after connecting")

	if _, err := pool.Exec(ctx, changes.NotifySQL, "src"); err != nil {
		t.Fatal(err)
	}
	waitWake(t, l, "a NOTIFY on the schema's channel")

	// Kill the listening backend: the listener reconnects, LISTENs again and
	// wakes its consumer to catch up on what it may have missed.
	tag, err := pool.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE 'LISTEN %' AND pid <> pg_backend_pid() AND query LIKE '%' || $1 || '%'`, schema)
	if err != nil {
		t.Fatal(err)
	}
	if tag.RowsAffected() != 1 {
		t.Fatalf("terminated %d listening backends, want 1", tag.RowsAffected())
	}
	waitWake(t, l, "the catch-up after reconnecting")
	deadline := time.Now().Add(15 * time.Second)
	for !l.Connected() {
		if time.Now().After(deadline) {
			t.Fatal("listener did not reconnect")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := pool.Exec(ctx, changes.NotifySQL, "src"); err != nil {
		t.Fatal(err)
	}
	waitWake(t, l, "a NOTIFY after reconnecting")

	l.Stop()
	l.Stop() // idempotent
}

func TestListenerChannelsAreSchemaScoped(t *testing.T) {
	t.Parallel()
	schemaA, urlA := pgtest.Schema(t)
	_, urlB := pgtest.Schema(t)
	poolA, poolB := pgtest.PoolFor(t, urlA), pgtest.PoolFor(t, urlB)
	ctx := context.Background()
	l := changes.NewListener(poolA, db.ChangesChannel(schemaA), slog.New(slog.DiscardHandler))
	if err := l.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Stop)
	waitWake(t, l, "the catch-up after connecting")
	// A NOTIFY in another schema is not heard...
	if _, err := poolB.Exec(ctx, changes.NotifySQL, "src"); err != nil {
		t.Fatal(err)
	}
	// (absence can only be checked for a while: 200ms is ample on loopback)
	select {
	case <-l.Wake():
		t.Fatal("woken by a NOTIFY in another schema")
	case <-time.After(200 * time.Millisecond):
	}
	if _, err := poolA.Exec(ctx, changes.NotifySQL, "src"); err != nil {
		t.Fatal(err)
	}
	waitWake(t, l, "a NOTIFY in its own schema")
}
