package syncer

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lookout-dev/lookout/internal/pgtest"
	"github.com/lookout-dev/lookout/internal/service"
	"github.com/lookout-dev/lookout/internal/testsignal"
)

// retryLog records the waits a loop asks service.RetrySleep for, and
// returns at once: the test counts attempts, not time. Past limit it
// blocks until the loop stops, so that the loop does not spin.
type retryLog struct {
	mu     sync.Mutex
	delays []time.Duration
	limit  int
}

func (r *retryLog) sleep(ctx context.Context, d time.Duration) bool {
	r.mu.Lock()
	r.delays = append(r.delays, d)
	full := len(r.delays) >= r.limit
	r.mu.Unlock()
	if full {
		<-ctx.Done()
		return false
	}
	return ctx.Err() == nil
}

func (r *retryLog) get() []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]time.Duration(nil), r.delays...)
}

// During a database outage the syncer's loop backs off: every failed
// claim is followed by a wait of the loop backoff, each about twice the
// one before up to the cap (service.LoopBackoff), so the "claim due
// sources" errors logged are as many as the waits asked for, not one per
// poll interval (71 in 15 s before).
func TestSyncerBacksOffDuringAnOutage(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	proxy, viaProxy := pgtest.NewProxy(t, h.url)
	cfg := loadConfig(t, "", map[string]string{"quiet": "every: 1h\n"}, map[string]fetchFunc{"quiet": items(func() []map[string]any { return nil })})
	s := h.syncerOn(pgtest.PoolFor(t, viaProxy), cfg, Config{Now: time.Now, PollInterval: 5 * time.Millisecond})
	const attempts = 10
	rec := &retryLog{limit: attempts}
	if err := s.Start(service.WithRetrySleep(context.Background(), rec.sleep)); err != nil {
		t.Fatal(err)
	}
	proxy.Cut()
	testsignal.Eventually(t, "the syncer's retries", func() bool { return len(rec.get()) == attempts })
	_ = s.Stop()
	delays := rec.get()
	b := service.LoopBackoff()
	for i, d := range delays {
		if c := b.Cap(i + 1); d < c/2 || d > c {
			t.Errorf("wait %d after consecutive errors = %s, want in [%s, %s] (all: %v)", i+1, d, c/2, c, delays)
		}
	}
	if n := strings.Count(h.logs.String(), `msg="claim due sources"`); n != attempts {
		t.Errorf("%d claim due sources errors logged for %d backoff waits; want one per wait", n, attempts)
	}
}
