package notify

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/lookout-dev/lookout/internal/pgtest"
	"github.com/lookout-dev/lookout/internal/service"
	"github.com/lookout-dev/lookout/internal/testsignal"
)

// countHandler counts the records whose message is msg.
type countHandler struct {
	slog.Handler
	msg string
	mu  *sync.Mutex
	n   *int
}

func (h countHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == h.msg {
		h.mu.Lock()
		*h.n++
		h.mu.Unlock()
	}
	return h.Handler.Handle(ctx, r)
}

func (h countHandler) WithAttrs(as []slog.Attr) slog.Handler {
	h.Handler = h.Handler.WithAttrs(as)
	return h
}

// During a database outage the digester backs off: every failed build is
// followed by a wait of the loop backoff, each about twice the one before
// up to the cap (service.LoopBackoff), so the errors logged are as many
// as the waits asked for, not one per poll interval (81 "build digests"
// errors in 24 s before).
func TestDigesterBacksOffDuringAnOutage(t *testing.T) {
	t.Parallel()
	_, url := pgtest.Schema(t)
	proxy, viaProxy := pgtest.NewProxy(t, url)
	pool := pgtest.PoolFor(t, viaProxy)
	var mu sync.Mutex
	errors := 0
	logger := slog.New(countHandler{Handler: testLogger(t).Handler(), msg: "build digests", mu: &mu, n: &errors})
	const attempts = 10
	rec := &testsignal.Sleeps{Limit: attempts}
	g := NewDigester(pool, nil, DigesterConfig{PollInterval: 5 * time.Millisecond, BatchSize: DigestBatchDefault}, logger)
	proxy.Cut()
	if err := g.Start(service.WithRetrySleep(context.Background(), rec.Sleep)); err != nil {
		t.Fatal(err)
	}
	testsignal.Eventually(t, "the digester's retries", func() bool { return len(rec.Delays()) == attempts })
	if err := g.Stop(); err != nil {
		t.Fatal(err)
	}
	checkGrowth(t, rec.Delays())
	mu.Lock()
	defer mu.Unlock()
	if errors != attempts {
		t.Errorf("%d build digests errors logged for %d backoff waits; want one per wait", errors, attempts)
	}
}

// checkGrowth checks that delays are the loop backoff's, in order: the
// n-th in [Cap(n)/2, Cap(n)], reaching the cap.
func checkGrowth(t *testing.T, delays []time.Duration) {
	t.Helper()
	b := service.LoopBackoff()
	for i, d := range delays {
		if c := b.Cap(i + 1); d < c/2 || d > c {
			t.Errorf("wait %d after consecutive errors = %s, want in [%s, %s] (all: %v)", i+1, d, c/2, c, delays)
		}
	}
	if last := delays[len(delays)-1]; last < b.Max/2 {
		t.Errorf("the waits never reach the cap %s: %v", b.Max, delays)
	}
}
