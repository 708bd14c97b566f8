// Package syncertest drives the real syncer in tests: build it over a
// configuration directory, make every source due and run it, read the
// last run. Connector packages do not use it (they sit below the syncer);
// syncer, e2e and binary tests do.
package syncertest

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/sources"
	"github.com/lookout-dev/lookout/internal/syncer"
)

// New loads the configuration in dir and builds a registered syncer on pool.
func New(t testing.TB, pool *pgxpool.Pool, dir string) *syncer.Syncer {
	t.Helper()
	cfg, err := config.Load(dir)
	if err != nil {
		t.Fatalf("load config: %v", err)
	}
	sconf := syncer.FromConfig(cfg)
	sconf.Owner = "test"
	s, err := syncer.New(pool, sconf, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("build syncer: %v", err)
	}
	if err := s.Register(context.Background()); err != nil {
		t.Fatalf("register: %v", err)
	}
	return s
}

// SyncNow makes every source due and runs them once.
func SyncNow(t testing.TB, pool *pgxpool.Pool, s *syncer.Syncer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := sources.MakeAllDue(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RunDue(ctx); err != nil {
		t.Fatalf("run due: %v", err)
	}
}

// LastRun returns the status and error of the latest run of source.
func LastRun(t testing.TB, pool *pgxpool.Pool, source string) (status, errText string) {
	t.Helper()
	var e *string
	err := pool.QueryRow(context.Background(), `
		SELECT status, error FROM sync_runs WHERE source = $1 ORDER BY id DESC LIMIT 1`, source).Scan(&status, &e)
	if err != nil {
		t.Fatalf("last run of %s: %v", source, err)
	}
	if e != nil {
		errText = *e
	}
	return status, errText
}
