package definitions

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/lookout-dev/lookout/internal/testsignal"
)

// Callers that arrive while a NOTIFY is being sent share the next one:
// each returns only after a NOTIFY that started after its call, and ten
// of them cost one NOTIFY, not ten.
func TestWakerSharesTheNextNotifyAmongTheCallersWaiting(t *testing.T) {
	t.Parallel()
	var sends atomic.Int32
	started := make(chan struct{})
	release := make(chan struct{})
	w := newWaker(func(context.Context) error {
		if sends.Add(1) == 1 {
			close(started)
			<-release
		}
		return nil
	})
	ctx := context.Background()
	first := make(chan error, 1)
	go func() { first <- w.Wake(ctx) }()
	testsignal.Receive(t, started, "the first NOTIFY")

	const callers = 10
	var wg sync.WaitGroup
	sendsSeen := make([]int32, callers)
	for i := range callers {
		wg.Go(func() {
			if err := w.Wake(ctx); err != nil {
				t.Errorf("Wake %d: %v", i, err)
			}
			sendsSeen[i] = sends.Load()
		})
	}
	testsignal.Eventually(t, "the callers waiting for the next NOTIFY", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.next != nil && w.next.waiters == callers
	})
	close(release)
	if err := testsignal.Receive(t, first, "the first caller's return"); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if n := sends.Load(); n != 2 {
		t.Errorf("%d NOTIFYs for 1 caller and then %d callers waiting together, want 2", n, callers)
	}
	for i, n := range sendsSeen {
		if n < 2 {
			t.Errorf("caller %d returned after NOTIFY %d, which had started before its call; want after the next", i, n)
		}
	}
}

// A failed NOTIFY is the error of the callers that waited for it; the
// next call sends again.
func TestWakerReturnsTheErrorOfItsNotify(t *testing.T) {
	t.Parallel()
	fail := errors.New("connection refused")
	var calls atomic.Int32
	w := newWaker(func(context.Context) error {
		if calls.Add(1) == 1 {
			return fail
		}
		return nil
	})
	if err := w.Wake(context.Background()); !errors.Is(err, fail) {
		t.Errorf("Wake with a failing NOTIFY = %v, want %v", err, fail)
	}
	if err := w.Wake(context.Background()); err != nil {
		t.Errorf("Wake after the failure = %v, want nil", err)
	}
}
