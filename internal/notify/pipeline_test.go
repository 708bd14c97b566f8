package notify

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/pgtest"
	"github.com/lookout-dev/lookout/internal/testsignal"
)

// holdRequest returns a behave hook that holds the request of key until
// the returned release is called (at the latest when the test ends, so
// that the receiver can close), signalling held when it arrives.
func holdRequest(t *testing.T, key string) (behave func(http.ResponseWriter, *http.Request, string, int) bool, held <-chan struct{}, release func()) {
	t.Helper()
	arrived, gate := make(chan struct{}), make(chan struct{})
	var once, arrive sync.Once
	release = func() { once.Do(func() { close(gate) }) }
	t.Cleanup(release)
	behave = func(_ http.ResponseWriter, _ *http.Request, k string, _ int) bool {
		if k == key {
			arrive.Do(func() { close(arrived) })
			<-gate
		}
		return false
	}
	return behave, arrived, release
}

// A lane claims its next batch while it still sends the current one, and
// records outcomes meanwhile: with one worker and batches of 5, while the
// second row of the first batch is being sent, the first row's outcome is
// recorded and rows of the next batch are already leased to the
// deliverer. Everything is then delivered once.
func TestOutcomeRecordedWhileNextBatchIsClaimed(t *testing.T) {
	t.Parallel()
	const n, batch = 15, 5
	pool := pgtest.Pool(t)
	keys := insertNotifications(t, pool, "hook", "ahead", n)
	rc := newReceiver(t, "s3cret")
	behave, held, release := holdRequest(t, keys[1])
	rc.behave = behave
	d := newDeliverer(t, pool, map[string]Sink{"hook": rc.sink(t)},
		// A timeout longer than the test waits: the held request must not
		// end (and its lane go on) before the test releases it.
		map[string]*config.Sink{"hook": sinkConf("webhook", 2*testsignal.Timeout(), 3, 1)},
		DelivererConfig{Owner: "ahead", BatchSize: batch, Lease: 5 * testsignal.Timeout()})
	done := make(chan error, 1)
	go func() {
		_, err := d.DeliverDue(context.Background())
		done <- err
	}()
	testsignal.Receive(t, held, "the second row's request")
	ctx := context.Background()
	testsignal.Eventually(t, "the first row recorded delivered and the next batch leased while the second row is sent", func() bool {
		var first string
		var leased int
		if err := pool.QueryRow(ctx, `
			SELECT (SELECT status FROM notifications WHERE dedupe_key = $1),
			       (SELECT count(*) FROM notifications WHERE lease_owner = 'ahead')`, keys[0]).Scan(&first, &leased); err != nil {
			t.Fatal(err)
		}
		// Rows 2–5 of the first batch are leased; more are the next batch's.
		return first == "delivered" && leased > batch-1
	})
	release()
	if err := testsignal.Receive(t, done, "DeliverDue to return"); err != nil {
		t.Fatal(err)
	}
	if m := rc.missing(keys); len(m) > 0 {
		t.Errorf("not delivered: %v", m)
	}
	if dup := rc.duplicates(); dup != 0 {
		t.Errorf("receiver saw %d repeats, want none", dup)
	}
	if got := countStatus(t, pool, "hook", "delivered"); got != n {
		t.Errorf("%d rows delivered, want %d", got, n)
	}
	rc.check()
}

// Sends go on while a write of outcomes is in flight: the first row's
// outcome cannot be written (the test holds its row lock), yet the worker
// sends the rest; once the lock goes, every outcome is recorded.
func TestSendsGoOnWhileAnOutcomeIsBeingRecorded(t *testing.T) {
	t.Parallel()
	const n = 20
	pool := pgtest.Pool(t)
	keys := insertNotifications(t, pool, "hook", "inflight", n)
	rc := newReceiver(t, "s3cret")
	ctx := context.Background()
	locked := make(chan pgx.Tx, 1)
	var once sync.Once
	rc.behave = func(_ http.ResponseWriter, _ *http.Request, key string, _ int) bool {
		if key != keys[0] {
			return false
		}
		once.Do(func() {
			tx, err := pool.Begin(ctx)
			if err == nil {
				_, err = tx.Exec(ctx, `SELECT 1 FROM notifications WHERE source = 'src' AND dedupe_key = $1 FOR UPDATE`, key)
			}
			if err != nil {
				rc.problem("lock the first row: %v", err)
			}
			locked <- tx
		})
		return false
	}
	d := newDeliverer(t, pool, map[string]Sink{"hook": rc.sink(t)},
		map[string]*config.Sink{"hook": sinkConf("webhook", 5*time.Second, 3, 1)}, DelivererConfig{Owner: "inflight", BatchSize: n})
	done := make(chan error, 1)
	go func() {
		_, err := d.DeliverDue(ctx)
		done <- err
	}()
	tx := testsignal.Receive(t, locked, "the first row's request")
	defer func() { _ = tx.Rollback(ctx) }()
	testsignal.Eventually(t, "every row sent while the first outcome's write waits on its row lock", func() bool {
		return rc.total.Load() == n
	})
	if got := countStatus(t, pool, "hook", "delivered"); got != 0 {
		t.Errorf("%d rows recorded delivered while the first write waits, want 0 (the lock did not hold the write)", got)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := testsignal.Receive(t, done, "DeliverDue to return"); err != nil {
		t.Fatal(err)
	}
	if got := countStatus(t, pool, "hook", "delivered"); got != n {
		t.Errorf("%d rows delivered, want %d", got, n)
	}
	if dup := rc.duplicates(); dup != 0 {
		t.Errorf("receiver saw %d repeats, want none", dup)
	}
	rc.check()
}
