package syncer

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lookout-dev/lookout/internal/connectors"
	"github.com/lookout-dev/lookout/internal/testsignal"
)

// TestRunRequestedDuringARunStartsWhenItEnds: a run requested (run-now)
// while the source's previous run holds its lease cannot be claimed then;
// it starts as soon as that run ends, not at the next poll or due time
// (both an hour away here). Nothing else wakes the loop: the request is
// written without a wake-up, as a request that arrives while the claim
// skips the leased source is.
func TestRunRequestedDuringARunStartsWhenItEnds(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	release := make(chan struct{})
	started := make(chan struct{}, 2)
	var fetches atomic.Int32
	cfg := loadConfig(t, fastLimits+"syncer: {poll_interval: 1h}\n", map[string]string{"s": "every: 1h\njitter: 0s\n"},
		map[string]fetchFunc{"s": func(ctx context.Context, _ connectors.Env, _ json.RawMessage, emit connectors.EmitFunc) (connectors.Result, error) {
			n := fetches.Add(1)
			started <- struct{}{}
			if n == 1 {
				select {
				case <-release:
				case <-ctx.Done():
					return connectors.Result{}, ctx.Err()
				}
			}
			err := emit(ctx, connectors.Page{Items: []connectors.Item{{Value: map[string]any{"id": "a", "n": int(n)}, Loc: "x"}}})
			return connectors.Result{Requests: 1}, err
		}})
	s := h.syncer(cfg, Config{Now: time.Now})
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
		if err := s.Stop(); err != nil {
			t.Error(err)
		}
	})
	<-started // the first run holds the source
	h.exec(`UPDATE sources SET run_requested_at = now() WHERE name = 's'`)
	close(release)
	finished := func() (n int, manual int) {
		if err := h.pool.QueryRow(context.Background(), `
			SELECT count(*), count(*) FILTER (WHERE reason = 'manual') FROM sync_runs WHERE source = 's' AND finished_at IS NOT NULL`).Scan(&n, &manual); err != nil {
			t.Fatal(err)
		}
		return n, manual
	}
	testsignal.EventuallyWithin(t, 60*time.Second, "the requested run after the first one ended", func() bool {
		n, _ := finished()
		return n == 2
	})
	if _, manual := finished(); manual != 1 || fetches.Load() != 2 {
		t.Errorf("%d manual runs, %d fetches; want the second run manual, 2 fetches", manual, fetches.Load())
	}
}
