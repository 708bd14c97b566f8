package syncer

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/connectors/conntest"
	"github.com/lookout-dev/lookout/internal/definitions"
)

// statements records the SQL a pool sends.
type statements struct {
	mu  sync.Mutex
	sql []string
}

func (s *statements) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sql = append(s.sql, d.SQL)
	return ctx
}
func (s *statements) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// count returns how many statements sent since the last count contain
// part.
func (s *statements) count(part string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, q := range s.sql {
		if strings.Contains(q, part) {
			n++
		}
	}
	s.sql = nil
	return n
}

// readRegistered is in the statement that reads the registered state of
// sources back (storedSources).
const readRegistered = "FROM sources WHERE name = ANY"

// The first load of the definitions registers every source once: the
// Start after it reads none back (a second registration of 100,000
// sources was megabytes of garbage before the daemon was ready, docs/
// benchmarks.md (13)), and the load itself tells whether the table holds
// sources the syncer does not run, so that claims name the syncer's
// sources only when it does.
func TestFirstLoadRegistersOnce(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := context.Background()
	load := func(files map[string]string) *config.Config {
		t.Helper()
		cfg, err := config.Load(conntest.WriteConfig(t, files))
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	source := func(name string) string {
		return "name: " + name + "\nconnector: file\nevery: 1h\nfile:\n  paths: [" + name + ".jsonl]\n"
	}
	cfg := load(map[string]string{"lookout.yaml": fastLimits, "sources/a.yaml": source("a"), "sources/b.yaml": source("b")})
	if _, err := definitions.Apply(ctx, h.pool, cfg, definitions.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	traced := &statements{}
	pc := h.pool.Config()
	pc.ConnConfig.Tracer = traced
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)

	firstLoad := func() *Syncer {
		t.Helper()
		conf := FromConfig(cfg)
		conf.Sources = nil
		s := h.syncerOn(pool, cfg, conf)
		traced.count("") // what New and Register sent (no source)
		if _, err := definitions.NewFollower(pool, &cfg.Global, s.Apply).CatchUp(ctx); err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := firstLoad()
	if n := traced.count(readRegistered); n != 1 {
		t.Errorf("the first load read the registered sources %d times, want once", n)
	}
	if s.restrict.Load() {
		t.Error("claims are limited to the syncer's sources after its first load, though the table holds no other")
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if n := traced.count(readRegistered); n != 0 {
		t.Errorf("Start after the first load read the registered sources %d times, want none", n)
	}
	// Another configuration's source in the table: claims name ours.
	other := load(map[string]string{"lookout.yaml": fastLimits, "sources/z.yaml": source("z")})
	h.syncerOn(h.pool, other, Config{Owner: "other"})
	if s := firstLoad(); !s.restrict.Load() {
		t.Error("claims are not limited to the syncer's sources after its first load, though the table holds another configuration's")
	}
}
