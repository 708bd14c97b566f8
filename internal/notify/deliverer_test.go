package notify

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/outbox"
	"github.com/lookout-dev/lookout/internal/pgtest"
	"github.com/lookout-dev/lookout/internal/testsignal"
)

func TestWebhookDeliversSignedPayloadsOnce(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	rc := newReceiver(t, "s3cret")
	keys := insertNotifications(t, pool, "hook", "k", 25)
	d := newDeliverer(t, pool, map[string]Sink{"hook": rc.sink(t)},
		map[string]*config.Sink{"hook": sinkConf("webhook", 5*time.Second, 3, 4)}, DelivererConfig{BatchSize: 10})

	n, err := d.DeliverDue(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if n != 25 {
		t.Errorf("attempted %d deliveries, want 25", n)
	}
	rc.check()
	if m := rc.missing(keys); len(m) > 0 {
		t.Errorf("never delivered: %v", m)
	}
	if dup := rc.duplicates(); dup != 0 {
		t.Errorf("receiver saw %d duplicates, want 0", dup)
	}
	var delivered, attempts, leased, withErr int
	if err := pool.QueryRow(context.Background(), `
		SELECT count(*) FILTER (WHERE status = 'delivered' AND delivered_at IS NOT NULL AND last_attempt_at IS NOT NULL),
		       sum(attempts), count(lease_owner), count(last_error)
		FROM notifications`).Scan(&delivered, &attempts, &leased, &withErr); err != nil {
		t.Fatal(err)
	}
	if delivered != 25 || attempts != 25 || leased != 0 || withErr != 0 {
		t.Errorf("delivered %d, attempts %d, leased %d, with error %d; want 25, 25, 0, 0", delivered, attempts, leased, withErr)
	}
	// Nothing is due any more.
	if n, err := d.DeliverDue(context.Background()); n != 0 || err != nil {
		t.Errorf("second DeliverDue = %d, %v; want 0, nil", n, err)
	}
}

func TestWebhookRetriesUntilTheReceiverAccepts(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	rc := newReceiver(t, "s3cret")
	rc.behave = func(w http.ResponseWriter, _ *http.Request, _ string, n int) bool {
		if n <= 2 { // the first two attempts of every key fail
			http.Error(w, "try again", http.StatusServiceUnavailable)
			return true
		}
		return false
	}
	keys := insertNotifications(t, pool, "hook", "k", 10)
	d := newDeliverer(t, pool, map[string]Sink{"hook": rc.sink(t)},
		map[string]*config.Sink{"hook": sinkConf("webhook", 5*time.Second, 5, 4)}, DelivererConfig{})
	if err := d.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer d.Stop()
	testsignal.Eventually(t, "all delivered", func() bool { return countStatus(t, pool, "hook", "delivered") == 10 })
	rc.check()
	if m := rc.missing(keys); len(m) > 0 {
		t.Errorf("never delivered: %v", m)
	}
	var minA, maxA int
	if err := pool.QueryRow(context.Background(), `SELECT min(attempts), max(attempts) FROM notifications`).Scan(&minA, &maxA); err != nil {
		t.Fatal(err)
	}
	if minA != 3 || maxA != 3 {
		t.Errorf("attempts between %d and %d, want 3", minA, maxA)
	}
}

func TestWebhookHonoursRetryAfter(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	rc := newReceiver(t, "s3cret")
	var first atomic.Int64
	rc.behave = func(w http.ResponseWriter, _ *http.Request, _ string, n int) bool {
		if n == 1 {
			first.Store(time.Now().UnixNano())
			w.Header().Set("Retry-After", "1")
			http.Error(w, "slow down", http.StatusTooManyRequests)
			return true
		}
		return false
	}
	insertNotifications(t, pool, "hook", "k", 1)
	d := newDeliverer(t, pool, map[string]Sink{"hook": rc.sink(t)},
		map[string]*config.Sink{"hook": sinkConf("webhook", 5*time.Second, 5, 1)}, DelivererConfig{})
	if _, err := d.DeliverDue(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The drain ends when a claim finds nothing due; on a busy machine that
	// claim can come after the Retry-After has passed and deliver the row
	// already: then only the gap below says whether the 429 was honoured.
	if rc.total.Load() == 0 {
		var status, lastErr string
		var wait time.Duration
		if err := pool.QueryRow(context.Background(), `
			SELECT status, coalesce(last_error, ''), next_attempt_at - last_attempt_at FROM notifications`).Scan(&status, &lastErr, &wait); err != nil {
			t.Fatal(err)
		}
		if status != "pending" || !strings.Contains(lastErr, "429") || wait < 900*time.Millisecond {
			t.Fatalf("after a 429: status %s, last_error %q, next attempt after %s; want pending, a 429, >= 1s", status, lastErr, wait)
		}
	}
	if err := d.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer d.Stop()
	testsignal.Eventually(t, "delivery after Retry-After", func() bool { return rc.total.Load() == 1 })
	rc.mu.Lock()
	gap := rc.firstAt["k/r0"].Sub(time.Unix(0, first.Load()))
	rc.mu.Unlock()
	if gap < 900*time.Millisecond {
		t.Errorf("retried %s after a Retry-After of 1s", gap)
	}
	rc.check()
}

func TestWebhookPermanentFailureIsDeadAndCanBeRetried(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	rc := newReceiver(t, "s3cret")
	var reject atomic.Bool
	reject.Store(true)
	rc.behave = func(w http.ResponseWriter, _ *http.Request, _ string, _ int) bool {
		if reject.Load() {
			http.Error(w, "unknown hook", http.StatusNotFound)
			return true
		}
		return false
	}
	keys := insertNotifications(t, pool, "hook", "k", 3)
	d := newDeliverer(t, pool, map[string]Sink{"hook": rc.sink(t)},
		map[string]*config.Sink{"hook": sinkConf("webhook", 5*time.Second, 8, 2)}, DelivererConfig{})
	ctx := context.Background()
	if _, err := d.DeliverDue(ctx); err != nil {
		t.Fatal(err)
	}
	var dead, attempts int
	var lastErr string
	if err := pool.QueryRow(ctx, `SELECT count(*), max(attempts), max(last_error) FROM report_dead_letters`).Scan(&dead, &attempts, &lastErr); err != nil {
		t.Fatal(err)
	}
	if dead != 3 || attempts != 1 || !strings.Contains(lastErr, "permanent") || !strings.Contains(lastErr, "404") {
		t.Fatalf("report_dead_letters: %d rows, max attempts %d, last_error %q; want 3, 1, a permanent 404", dead, attempts, lastErr)
	}

	reject.Store(false)
	n, err := outbox.RetryDead(ctx, pool, outbox.Filter{Sink: "other"})
	if err != nil || n != 0 {
		t.Fatalf("RetryDead(other sink) = %d, %v; want 0", n, err)
	}
	var id int64
	if err := pool.QueryRow(ctx, `SELECT id FROM notifications WHERE dedupe_key = $1`, keys[0]).Scan(&id); err != nil {
		t.Fatal(err)
	}
	if n, err := outbox.RetryDead(ctx, pool, outbox.Filter{ID: id}); err != nil || n != 1 {
		t.Fatalf("RetryDead(id) = %d, %v; want 1", n, err)
	}
	if _, err := d.DeliverDue(ctx); err != nil {
		t.Fatal(err)
	}
	if got := rc.missing(keys[:1]); len(got) > 0 {
		t.Errorf("retried notification not delivered")
	}
	if n, err := outbox.RetryDead(ctx, pool, outbox.Filter{Sink: "hook", Watch: "w"}); err != nil || n != 2 {
		t.Fatalf("RetryDead(sink, watch) = %d, %v; want 2", n, err)
	}
	if _, err := d.DeliverDue(ctx); err != nil {
		t.Fatal(err)
	}
	if m := rc.missing(keys); len(m) > 0 {
		t.Errorf("never delivered: %v", m)
	}
	var retries, delivered int
	if err := pool.QueryRow(ctx, `SELECT sum(manual_retries), count(*) FILTER (WHERE status = 'delivered' AND attempts = 1) FROM notifications`).Scan(&retries, &delivered); err != nil {
		t.Fatal(err)
	}
	if retries != 3 || delivered != 3 {
		t.Errorf("manual_retries %d, delivered at first new attempt %d; want 3, 3", retries, delivered)
	}
	rows, err := outbox.List(ctx, pool, outbox.Filter{Status: "delivered", Limit: 2})
	if err != nil || len(rows) != 2 || rows[0].ID < rows[1].ID {
		t.Errorf("ListDeliveries = %d rows, %v; want 2, newest first", len(rows), err)
	}
	rc.check()
}

func TestMaxAttemptsMakesTheRowDead(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	rc := newReceiver(t, "s3cret")
	rc.behave = func(w http.ResponseWriter, _ *http.Request, _ string, _ int) bool {
		http.Error(w, "broken", http.StatusInternalServerError)
		return true
	}
	insertNotifications(t, pool, "hook", "k", 2)
	d := newDeliverer(t, pool, map[string]Sink{"hook": rc.sink(t)},
		map[string]*config.Sink{"hook": sinkConf("webhook", 5*time.Second, 3, 2)}, DelivererConfig{})
	if err := d.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer d.Stop()
	testsignal.Eventually(t, "dead rows", func() bool { return countStatus(t, pool, "hook", "dead") == 2 })
	var attempts int
	var lastErr string
	if err := pool.QueryRow(context.Background(), `SELECT max(attempts), max(last_error) FROM report_dead_letters`).Scan(&attempts, &lastErr); err != nil {
		t.Fatal(err)
	}
	if attempts != 3 || !strings.Contains(lastErr, "gave up after 3 attempts") || !strings.Contains(lastErr, "500") {
		t.Errorf("dead after %d attempts with %q; want 3 and the 500", attempts, lastErr)
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for k, n := range rc.requests {
		if n != 3 {
			t.Errorf("%s requested %d times, want 3", k, n)
		}
	}
}

// A hanging receiver occupies only its own sink's lane; a healthy sink
// delivers meanwhile. The hanging sink's timeout (10 minutes) lies within
// the deliverer's lease (an hour: a send must fit in its lease, see
// leaseCovers) and beyond the test, so its requests stay blocked in the
// receiver until the test releases them: the healthy sink's 200
// deliveries all complete while the hanging sink's requests are in the
// receiver and none has returned. Only the order of events is asserted.
// (It asserted that the healthy sink took under 2 s, with the hanging
// sink's requests cut at a 300 ms timeout.) Once released, the hanging
// sink's attempts are recorded as failures, and nothing of it delivered.
func TestHangingSinkDoesNotBlockOthers(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	hang := newReceiver(t, "s3cret")
	release := make(chan struct{})
	var blocked, returned atomic.Int64
	hang.behave = func(w http.ResponseWriter, r *http.Request, _ string, _ int) bool {
		blocked.Add(1)
		select {
		case <-r.Context().Done(): // the sender gave up
		case <-release:
		}
		returned.Add(1)
		http.Error(w, "late", http.StatusGatewayTimeout)
		return true
	}
	var releaseOnce sync.Once
	releaseAll := func() { releaseOnce.Do(func() { close(release) }) }
	fast := newReceiver(t, "other")
	insertNotifications(t, pool, "slow", "slow", 40)
	fastKeys := insertNotifications(t, pool, "fast", "fast", 200)
	d := newDeliverer(t, pool, map[string]Sink{"slow": hang.sink(t), "fast": fast.sink(t)},
		map[string]*config.Sink{
			"slow": sinkConf("webhook", 10*time.Minute, 5, 2),
			"fast": sinkConf("webhook", 5*time.Second, 5, 4),
		}, DelivererConfig{Lease: time.Hour})
	if err := d.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer d.Stop()
	defer releaseAll() // before Stop, which waits for the sends in flight
	testsignal.Eventually(t, "the hanging sink's requests blocked in its receiver", func() bool { return blocked.Load() > 0 })
	testsignal.Eventually(t, "the healthy sink's deliveries", func() bool { return len(fast.missing(fastKeys)) == 0 })
	if n := returned.Load(); n != 0 {
		t.Fatalf("%d of the hanging sink's requests returned before the healthy sink finished: the test's premise (they hang until released) broke", n)
	}
	if countStatus(t, pool, "slow", "delivered") != 0 {
		t.Errorf("hanging sink delivered something")
	}
	releaseAll()
	testsignal.Eventually(t, "the released attempts to be recorded as failures", func() bool {
		var n int
		_ = pool.QueryRow(context.Background(), `SELECT count(*) FROM notifications WHERE sink = 'slow' AND last_error LIKE '%answered 504%'`).Scan(&n)
		return n > 0
	})
	if countStatus(t, pool, "slow", "delivered") != 0 {
		t.Errorf("hanging sink delivered something")
	}
	fast.check()
}

// A deliverer stopped between sending and acknowledging records a failed
// attempt (a killed one records nothing: TestKilledDeliverersLoseNothing);
// the next deliverer sends it again with the same idempotency key, which
// the receiver recognises as a duplicate. Rows claimed but not started go
// back unsent.
func TestCancelBetweenSendAndAckDeliversAgain(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	rc := newReceiver(t, "s3cret")
	keys := insertNotifications(t, pool, "hook", "k", 30)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	crash := &crashSink{inner: rc.sink(t), after: 5, crash: cancel}
	a := newDeliverer(t, pool, map[string]Sink{"hook": crash},
		map[string]*config.Sink{"hook": sinkConf("webhook", 5*time.Second, 5, 1)}, DelivererConfig{Owner: "a"})
	if _, err := a.DeliverDue(ctx); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	if got := rc.total.Load(); got != 5 {
		t.Fatalf("receiver accepted %d before the crash, want 5", got)
	}
	var leased int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM notifications WHERE lease_owner IS NOT NULL`).Scan(&leased); err != nil {
		t.Fatal(err)
	}
	if leased != 0 {
		t.Errorf("%d rows still leased after a graceful stop", leased)
	}
	var lastErr string
	if err := pool.QueryRow(context.Background(), `SELECT last_error FROM notifications WHERE last_error IS NOT NULL`).Scan(&lastErr); err != nil ||
		!strings.Contains(lastErr, "crashed before acknowledging") {
		t.Errorf("the unacknowledged attempt: last_error %q (%v), want it recorded as failed", lastErr, err)
	}
	b := newDeliverer(t, pool, map[string]Sink{"hook": rc.sink(t)},
		map[string]*config.Sink{"hook": sinkConf("webhook", 5*time.Second, 5, 4)}, DelivererConfig{Owner: "b"})
	testsignal.Eventually(t, "b to deliver the rest and the retry", func() bool {
		if _, err := b.DeliverDue(context.Background()); err != nil {
			t.Fatal(err)
		}
		return countStatus(t, pool, "hook", "delivered") == 30
	})
	if m := rc.missing(keys); len(m) > 0 {
		t.Errorf("lost notifications: %v", m)
	}
	if dup := rc.duplicates(); dup != 1 {
		t.Errorf("receiver saw %d duplicates, want exactly the 1 interrupted delivery", dup)
	}
	if n := countStatus(t, pool, "hook", "delivered"); n != 30 {
		t.Errorf("%d delivered rows, want 30", n)
	}
	rc.check()
}

// crashSink cancels the deliverer after the after-th successful send and
// reports failure, as a process killed before acknowledging would.
type crashSink struct {
	inner Sink
	after int64
	crash func()
	n     atomic.Int64
}

func (c *crashSink) Deliver(ctx context.Context, n *Notification) error {
	if err := c.inner.Deliver(ctx, n); err != nil {
		return err
	}
	if c.n.Add(1) == c.after {
		c.crash()
		return errors.New("crashed before acknowledging")
	}
	return nil
}

// A replica whose lease expired loses the row to another, and its late
// acknowledgement changes nothing.
func TestExpiredLeaseIsTakenOverAndFenced(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	rc := newReceiver(t, "s3cret")
	keys := insertNotifications(t, pool, "hook", "k", 3)
	// The sink's timeout is long too: a 100 ms one timed out b's delivery
	// on a busy machine, and its retry made attempts 3.
	cfgs := map[string]*config.Sink{"hook": sinkConf("webhook", 5*time.Second, 5, 2)}
	sinks := map[string]Sink{"hook": rc.sink(t)}
	// Both leases are long, and a's ends when the test says so: a short
	// real-time lease would end before b's first look on a busy machine.
	a := newDeliverer(t, pool, sinks, cfgs, DelivererConfig{Owner: "a", Lease: 30 * time.Second})
	b := newDeliverer(t, pool, sinks, cfgs, DelivererConfig{Owner: "b", Lease: 30 * time.Second})
	ctx := context.Background()
	claimed, err := a.claim(ctx, a.lanes[0], a.conf.BatchSize) // a claims, then "dies"
	if err != nil || len(claimed) != 3 {
		t.Fatalf("claim = %d rows, %v", len(claimed), err)
	}
	if n, err := b.DeliverDue(ctx); n != 0 || err != nil {
		t.Fatalf("b delivered %d leased rows (%v); want 0", n, err)
	}
	if _, err := pool.Exec(ctx, `UPDATE notifications SET lease_expires_at = now() - interval '1 second' WHERE sink = 'hook' AND lease_owner = 'a'`); err != nil {
		t.Fatal(err)
	}
	testsignal.Eventually(t, "b to take over after the lease", func() bool {
		_, _ = b.DeliverDue(ctx)
		return countStatus(t, pool, "hook", "delivered") == 3
	})
	// a comes back and reports a failure: fenced out by lease_owner.
	outs := []outcome{{id: claimed[0].n.ID, created: claimed[0].n.CreatedAt, kind: outcomeDead, at: time.Now(), err: "late"}}
	if err := a.record(outs); err != nil {
		t.Fatal(err)
	}
	if n := countStatus(t, pool, "hook", "delivered"); n != 3 {
		t.Errorf("a's late outcome changed a row b delivered")
	}
	var attempts int
	if err := pool.QueryRow(ctx, `SELECT max(attempts) FROM notifications`).Scan(&attempts); err != nil {
		t.Fatal(err)
	}
	if attempts != 2 {
		t.Errorf("attempts = %d, want 2 (a's claim and b's)", attempts)
	}
	if m := rc.missing(keys); len(m) > 0 {
		t.Errorf("never delivered: %v", m)
	}
}

// A claimed row whose lease cannot cover an attempt any more goes back
// unsent, without counting an attempt.
func TestStaleClaimIsGivenBackUnsent(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	rc := newReceiver(t, "s3cret")
	insertNotifications(t, pool, "hook", "k", 1)
	d := newDeliverer(t, pool, map[string]Sink{"hook": rc.sink(t)},
		// a timeout longer than the lease: no attempt can ever start.
		map[string]*config.Sink{"hook": sinkConf("webhook", 5*time.Second, 5, 1)}, DelivererConfig{Lease: time.Second})
	if _, err := d.DeliverDue(context.Background()); err != nil {
		t.Fatal(err)
	}
	var status string
	var attempts int
	if err := pool.QueryRow(context.Background(), `SELECT status, attempts FROM notifications`).Scan(&status, &attempts); err != nil {
		t.Fatal(err)
	}
	if status != "pending" || attempts != 0 || rc.total.Load() != 0 {
		t.Errorf("status %s, attempts %d, sent %d; want pending, 0, 0", status, attempts, rc.total.Load())
	}
}
