package notify

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"testing"
	"time"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/db"
	"github.com/lookout-dev/lookout/internal/pgtest"
	"github.com/lookout-dev/lookout/internal/testsignal"
)

// The child process of TestKilledDeliverersLoseNothing: a deliverer run by
// the test binary itself, killed with SIGKILL by the parent.
const (
	childEnv      = "LOOKOUT_TEST_DELIVERER_CHILD"
	childDB       = "LOOKOUT_TEST_CHILD_DB"
	childHook     = "LOOKOUT_TEST_CHILD_HOOK"
	childSecret   = "LOOKOUT_TEST_CHILD_SECRET"
	crashLease    = 2 * time.Second
	crashTimeout  = 300 * time.Millisecond
	crashBatch    = 50
	crashParallel = 4
)

func crashSinkConf() map[string]*config.Sink {
	return map[string]*config.Sink{"hook": sinkConf("webhook", crashTimeout, 10, crashParallel)}
}

func runChildDeliverer() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	pool, err := db.Open(ctx, os.Getenv(childDB))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer pool.Close()
	hook, err := NewWebhookSink(WebhookOptions{URL: os.Getenv(childHook), Secret: os.Getenv(childSecret), Concurrency: crashParallel})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	d := NewDeliverer(pool, map[string]Sink{"hook": hook}, DelivererConfig{
		Sinks: crashSinkConf(), Owner: fmt.Sprintf("child-%d", os.Getpid()), Lease: crashLease, BatchSize: crashBatch,
		PollInterval: 50 * time.Millisecond, RetryMin: 10 * time.Millisecond, RetryMax: 50 * time.Millisecond,
	}, logger)
	if err := d.Start(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	<-ctx.Done()
	_ = d.Stop()
	return 0
}

// Deliverer processes killed with SIGKILL at arbitrary points between
// claiming and acknowledging lose no notification: their leases expire and
// another deliverer sends the rows again, with the same idempotency key,
// so the receiver sees every key at least once and recognises repeats.
func TestKilledDeliverersLoseNothing(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("spawns deliverer processes")
	}
	_, url := pgtest.Schema(t)
	pool := pgtest.PoolFor(t, url)
	rc := newReceiver(t, "s3cret")
	rc.behave = func(http.ResponseWriter, *http.Request, string, int) bool {
		time.Sleep(time.Millisecond) // a receiver doing a little work
		return false
	}
	const total = 400
	keys := insertNotifications(t, pool, "hook", "k", total)

	kills := 0
	for round := range 5 {
		before := rc.total.Load()
		if before >= total-crashBatch {
			break
		}
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"=1", childDB+"="+url, childHook+"="+rc.srv.URL+"/hook", childSecret+"=s3cret")
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Kill once the child is mid-stream: a few deliveries past the
		// previous count, at a different point each round. The child
		// starts a test binary, connects and claims first: that took
		// more than 10 s (the bound this wait had) on a busy machine, and
		// through a Citus coordinator, so it waits as long as any wait on
		// state (testsignal.Timeout()).
		target := before + int64(20+17*round)
		reached := false
		defer func() {
			if !reached {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
				t.Logf("round %d: the child's output:\n%s", round, out.String())
			}
		}()
		testsignal.Eventually(t, fmt.Sprintf("round %d: the child's deliveries to reach %d", round, target),
			func() bool { return rc.total.Load() >= target })
		reached = true
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		kills++
	}
	var leased int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM notifications WHERE lease_owner IS NOT NULL AND status = 'pending'`).Scan(&leased); err != nil {
		t.Fatal(err)
	}

	// A survivor finishes the work once the dead children's leases expire.
	hook := rc.sink(t)
	d := newDeliverer(t, pool, map[string]Sink{"hook": hook}, crashSinkConf(),
		DelivererConfig{Owner: "survivor", Lease: crashLease, BatchSize: crashBatch, PollInterval: 50 * time.Millisecond})
	if err := d.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	testsignal.Eventually(t, "every notification delivered", func() bool { return countStatus(t, pool, "hook", "delivered") == total })
	if err := d.Stop(); err != nil {
		t.Fatal(err)
	}
	rc.check()
	if m := rc.missing(keys); len(m) > 0 {
		t.Fatalf("%d notification(s) lost: %v", len(m), m)
	}
	dups := rc.duplicates()
	var attempts int
	if err := pool.QueryRow(context.Background(), `SELECT sum(attempts) FROM notifications`).Scan(&attempts); err != nil {
		t.Fatal(err)
	}
	// A child may have sent as many rows unrecorded as it has send slots,
	// twice its current claim (Deliverer.unrecorded; the claim grows up to
	// maxClaimFactor × crashBatch against this fast receiver), when it is
	// killed, and a few more may be under way.
	if inFlight := d.unrecorded(crashParallel, maxClaimFactor*crashBatch) + crashParallel; dups > kills*inFlight {
		t.Errorf("%d duplicates for %d kills: more than the rows in flight at each kill (%d)", dups, kills, inFlight)
	}
	t.Logf("crash test: %d notifications, %d SIGKILLed deliverers (%d rows left leased), %d delivered, %d duplicates recognised by idempotency key, %d attempts",
		total, kills, leased, rc.total.Load(), dups, attempts)
}
