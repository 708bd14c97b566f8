package evaluator

import (
	"log/slog"
	"testing"
	"time"

	"github.com/lookout-dev/lookout/internal/db"
)

// TestStartReadiesAConnectionPerWorker: before the evaluator listens, each
// worker has a connection on which the batch's statements are prepared
// (and the server's catalog caches loaded), so that the first changes are
// not decided at the cost of a new connection: commit-to-decision (3) had
// its p99 tail in the first second of a run.
func TestStartReadiesAConnectionPerWorker(t *testing.T) {
	t.Parallel()
	h := newHarness(t, baseGlobal, map[string]string{"tasks.yaml": anySource})
	sh, err := db.ShardingOf(h.ctx, h.pool)
	if err != nil {
		t.Fatal(err)
	}
	if sh.Distributed() {
		t.Skip("on Citus the warm-up reads the claim's candidates only")
	}
	const workers = 2
	ev, err := New(h.pool, testConfig(h.cfg, Config{Owner: "warm", Workers: workers, CatchUpInterval: time.Hour}),
		slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := ev.Start(h.ctx); err != nil {
		t.Fatal(err)
	}
	if err := ev.Stop(); err != nil {
		t.Fatal(err)
	}
	ready := 0
	for _, c := range h.pool.AcquireAllIdle(h.ctx) {
		var n int
		err := c.QueryRow(h.ctx, `SELECT count(*) FROM pg_prepared_statements WHERE statement = $1`, settleDoneSQL).Scan(&n)
		c.Release()
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			ready++
		}
	}
	if ready < workers {
		t.Fatalf("%d idle connections have the settle prepared after Start; want one per worker (%d)", ready, workers)
	}
}
