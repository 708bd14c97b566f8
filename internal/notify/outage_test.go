package notify

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/pgtest"
	"github.com/lookout-dev/lookout/internal/testsignal"
)

// signalHandler passes records on to next and closes fired the first time
// a message starts with prefix.
type signalHandler struct {
	next   slog.Handler
	prefix string
	once   *sync.Once
	fired  chan struct{}
}

func (h signalHandler) Enabled(ctx context.Context, l slog.Level) bool { return true }

func (h signalHandler) Handle(ctx context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, h.prefix) {
		h.once.Do(func() { close(h.fired) })
	}
	if !h.next.Enabled(ctx, r.Level) {
		return nil
	}
	return h.next.Handle(ctx, r)
}

func (h signalHandler) WithAttrs(as []slog.Attr) slog.Handler {
	h.next = h.next.WithAttrs(as)
	return h
}

func (h signalHandler) WithGroup(name string) slog.Handler {
	h.next = h.next.WithGroup(name)
	return h
}

// TestDatabaseOutageStopsSending cuts the deliverer's database connections
// in the middle of a claimed batch of 300: once recording an outcome has
// failed, at most the sink's concurrency sends may follow (those already
// under way), and after the database is back every notification is
// delivered with no repeat, its attempt counted once.
func TestDatabaseOutageStopsSending(t *testing.T) {
	t.Parallel()
	const n, concurrency = 300, 4
	_, url := pgtest.Schema(t)
	direct := pgtest.PoolFor(t, url)
	proxy, viaProxy := pgtest.NewProxy(t, url)
	pool := pgtest.PoolFor(t, viaProxy)
	keys := insertNotifications(t, direct, "hook", "outage", n)

	failed := make(chan struct{})
	logger := slog.New(signalHandler{next: testLogger(t).Handler(), prefix: "record delivery outcomes", once: &sync.Once{}, fired: failed})
	var requests, sentAfterFailure atomic.Int64
	var outage atomic.Bool
	rc := newReceiver(t, "s3cret")
	rc.behave = func(w http.ResponseWriter, _ *http.Request, _ string, _ int) bool {
		if requests.Add(1) == 20 {
			outage.Store(true)
			proxy.Cut() // the database goes away while this request is answered
		}
		select {
		case <-failed:
			if outage.Load() {
				sentAfterFailure.Add(1)
			}
		default:
		}
		return false
	}
	d := NewDeliverer(pool, map[string]Sink{"hook": rc.sink(t)},
		DelivererConfig{Sinks: map[string]*config.Sink{"hook": sinkConf("webhook", 5*time.Second, 3, concurrency)},
			Owner: "outage", BatchSize: n, Lease: 30 * time.Second, PollInterval: 20 * time.Millisecond,
			RetryMin: 10 * time.Millisecond, RetryMax: 50 * time.Millisecond}, logger)
	if err := d.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := d.Stop(); err != nil {
			t.Errorf("Stop: %v", err)
		}
	}()

	testsignal.Receive(t, failed, "an outcome failing to record after the database went away")
	// Keep the database away while the deliverer tries it again and again:
	// each failed write of an outcome is a connection refused.
	base := proxy.Refused.Load()
	testsignal.Eventually(t, "8 refused connections", func() bool { return proxy.Refused.Load() >= base+8 })
	outage.Store(false)
	during := sentAfterFailure.Load()
	proxy.Restore()

	testsignal.Eventually(t, "every notification to be delivered", func() bool {
		return len(rc.missing(keys)) == 0 && countStatus(t, direct, "hook", "delivered") == n
	})
	rc.check()
	dups := rc.duplicates()
	t.Logf("database cut after 20 of %d sends: %d sends after the first failed record (concurrency %d), %d repeats after recovery",
		n, during, concurrency, dups)
	if during > concurrency {
		t.Errorf("%d notifications were sent after recording failed, want at most the concurrency (%d)", during, concurrency)
	}
	if dups > 0 {
		t.Errorf("receiver saw %d repeats, want none: the outcomes of the sends are recorded once the database is back", dups)
	}
	var recounted int
	if err := direct.QueryRow(context.Background(), `SELECT count(*) FROM notifications WHERE attempts <> 1`).Scan(&recounted); err != nil {
		t.Fatal(err)
	}
	if recounted != 0 {
		t.Errorf("%d notifications counted more than one attempt", recounted)
	}
}

// TestStopDuringOutage stops a deliverer while its database is away: Stop
// returns (after recordGiveUp), and the rows it could not record are sent
// again by another deliverer after their lease, with the same key — at
// most the lane's send slots of them (set to twice the sink's concurrency
// here), whatever the claim batch, nothing lost. With batches of 10 the
// deliverer holds the batches it claimed ahead when it stops.
func TestStopDuringOutage(t *testing.T) {
	t.Parallel()
	for _, batch := range []int{200, 10} {
		t.Run(fmt.Sprintf("batch %d", batch), func(t *testing.T) {
			t.Parallel()
			stopDuringOutage(t, batch)
		})
	}
}

func stopDuringOutage(t *testing.T, batch int) {
	const n, concurrency = 200, 4
	_, url := pgtest.Schema(t)
	direct := pgtest.PoolFor(t, url)
	proxy, viaProxy := pgtest.NewProxy(t, url)
	pool := pgtest.PoolFor(t, viaProxy)
	keys := insertNotifications(t, direct, "hook", "stop", n)

	failed := make(chan struct{})
	logger := slog.New(signalHandler{next: testLogger(t).Handler(), prefix: "record delivery outcomes", once: &sync.Once{}, fired: failed})
	var requests atomic.Int64
	rc := newReceiver(t, "s3cret")
	rc.behave = func(w http.ResponseWriter, _ *http.Request, _ string, _ int) bool {
		if requests.Add(1) == 10 {
			proxy.Cut()
		}
		return false
	}
	cfgs := map[string]*config.Sink{"hook": sinkConf("webhook", time.Second, 3, concurrency)}
	sinks := map[string]Sink{"hook": rc.sink(t)}
	conf := DelivererConfig{Sinks: cfgs, BatchSize: batch, Lease: 3 * time.Second, PollInterval: 20 * time.Millisecond,
		RetryMin: 10 * time.Millisecond, RetryMax: 50 * time.Millisecond}
	if pgtest.OnCitus(t, direct) {
		// A claim of 200 rows through the coordinator of a busy cluster
		// took longer than 3 s: its rows were past their lease when sent,
		// and given back unsent, claim after claim, so the database never
		// went away mid-batch (batch 200 timed out waiting for the first
		// failed record, with no error logged). The survivor waits for
		// the leases either way.
		conf.Lease = 30 * time.Second
	}
	conf.Owner = "stopped"
	d := NewDeliverer(pool, sinks, conf, logger)
	d.maxUnrecorded = 2 * concurrency
	if err := d.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	testsignal.Receive(t, failed, "an outcome failing to record after the database went away")
	stopped := make(chan struct{})
	go func() {
		_ = d.Stop()
		close(stopped)
	}()
	testsignal.Receive(t, stopped, "Stop to return while the database is away")
	sent := requests.Load()
	proxy.Restore()

	conf.Owner = "survivor"
	d2 := NewDeliverer(direct, sinks, conf, testLogger(t))
	testsignal.Eventually(t, "every notification to be delivered", func() bool {
		if _, err := d2.DeliverDue(context.Background()); err != nil {
			t.Errorf("DeliverDue: %v", err)
		}
		return len(rc.missing(keys)) == 0
	})
	rc.check()
	dups := rc.duplicates()
	t.Logf("deliverer stopped during the outage after %d sends: %d repeats after its leases expired (concurrency %d)", sent, dups, concurrency)
	if dups > d.maxUnrecorded {
		t.Errorf("receiver saw %d repeats, want at most the send slots (%d)", dups, d.maxUnrecorded)
	}
}
