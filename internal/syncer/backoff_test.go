package syncer

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/lookout-dev/lookout/internal/pgtest"
	"github.com/lookout-dev/lookout/internal/service"
	"github.com/lookout-dev/lookout/internal/testsignal"
)

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
	rec := &testsignal.Sleeps{Limit: attempts}
	if err := s.Start(service.WithRetrySleep(context.Background(), rec.Sleep)); err != nil {
		t.Fatal(err)
	}
	proxy.Cut()
	testsignal.Eventually(t, "the syncer's retries", func() bool { return len(rec.Delays()) == attempts })
	_ = s.Stop()
	delays := rec.Delays()
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
