// Package testsignal is how tests wait for asynchronous state, in one
// place: a typed Signal that a service fires at a point tests care about
// (a no-op in production, where nobody initialised it), and Eventually,
// which polls a condition until it holds or a deadline passes. Tests
// never sleep to wait. River's rivershared/testsignal is the model.
package testsignal

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"
)

// TimeoutEnv names the environment variable that sets Timeout (a Go
// duration, e.g. 2m). scripts/test_citus.sh sets it: on a Citus cluster
// on one busy machine every statement goes through the coordinator to
// the workers, and a daemon's start or a pipeline's step that takes a
// few seconds on one PostgreSQL took more than 20 s at load 40.
const TimeoutEnv = "LOOKOUT_TESTSIGNAL_TIMEOUT"

// Timeout is how long a wait lasts before the test fails: long enough
// for a busy machine, short enough to fail well before go test's own
// timeout. 20 s unless TimeoutEnv says otherwise. It reads TimeoutEnv at
// each call, not at the package's init: a test (or TestMain) that sets
// the variable is heard, and a binary that links the package (the
// daemons carry its signals as no-ops) never reads it.
func Timeout() time.Duration { return timeoutOf(os.Getenv(TimeoutEnv)) }

// timeoutOf reads TimeoutEnv's value v: 20 s when empty; a value that is
// not a positive duration stops the test binary with the reason.
func timeoutOf(v string) time.Duration {
	if v == "" {
		return defaultTimeout
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		panic(fmt.Sprintf("testsignal: %s=%q is not a positive duration (e.g. 2m)", TimeoutEnv, v))
	}
	return d
}

// defaultTimeout is Timeout when TimeoutEnv is not set.
const defaultTimeout = 20 * time.Second

// Scaled returns d, a bound that holds on a quiet machine (a real model's
// answer, a lease that must outlast it), scaled as Timeout is from its
// default: 6 times d when TimeoutEnv is 2m (scripts/test_citus.sh), d
// itself by default, never less than d. A hang still fails, later.
func Scaled(d time.Duration) time.Duration { return scaledBy(d, Timeout()) }

func scaledBy(d, timeout time.Duration) time.Duration {
	return max(d, time.Duration(float64(d)*float64(timeout)/float64(defaultTimeout)))
}

// pollInterval is how often Eventually checks its condition.
const pollInterval = 5 * time.Millisecond

// TB is the part of testing.TB the waits use (so that services can embed
// a Signal without linking the testing package).
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// Signal is a typed test signal. Zero value: Signal does nothing, so a
// service fires it unconditionally; a test calls Init before it starts
// the service, then waits with WaitOrTimeout.
type Signal[T any] struct {
	ch chan T
	tb TB
}

// signalBuffer is how many values may be pending; more is a test bug.
const signalBuffer = 1000

// Init makes the signal live for tb.
func (s *Signal[T]) Init(tb TB) {
	s.ch = make(chan T, signalBuffer)
	s.tb = tb
}

// Signal fires v when the signal was initialised; it never blocks and
// panics when the test let signalBuffer values pile up.
func (s *Signal[T]) Signal(v T) {
	if s.ch == nil {
		return
	}
	select {
	case s.ch <- v:
	default:
		panic("testsignal: signal buffer is full; does the test wait for its signals?")
	}
}

// WaitOrTimeout returns the next value fired, failing the test after
// Timeout.
func (s *Signal[T]) WaitOrTimeout() T {
	s.tb.Helper()
	return Receive(s.tb, s.ch, "test signal")
}

// Receive returns the next value from ch, failing tb after Timeout with
// what it waited for.
func Receive[T any](tb TB, ch <-chan T, what string) T {
	tb.Helper()
	within := Timeout()
	t := time.NewTimer(within)
	defer t.Stop()
	select {
	case v := <-ch:
		return v
	case <-t.C:
		tb.Fatalf("timed out after %s waiting for %s", within, what)
		var zero T
		return zero
	}
}

// Eventually polls cond until it holds, failing tb after Timeout with
// what it waited for.
func Eventually(tb TB, what string, cond func() bool) {
	tb.Helper()
	EventuallyWithin(tb, Timeout(), what, cond)
}

// EventuallyWithin is Eventually with its own deadline, for tests whose
// point is that the condition holds within a bound.
func EventuallyWithin(tb TB, within time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %s waiting for %s", within, what)
			return
		}
		time.Sleep(pollInterval)
	}
}

// CancelWhen calls cancel once cond holds, polling it as Eventually does,
// and stops polling when ctx ends: a test ends an operation's time when
// the operation's state says it hangs (an executor has started its
// child), instead of when a short timer fires on a machine of unknown
// speed. ctx is usually the one cancel ends, with the test's own
// deadline as a safety net.
func CancelWhen(ctx context.Context, cancel context.CancelFunc, cond func() bool) {
	go func() {
		for ctx.Err() == nil {
			if cond() {
				cancel()
				return
			}
			time.Sleep(pollInterval)
		}
	}()
}

// Sleeps records the waits a loop asks for through a replaceable sleep
// (service.WithRetrySleep's), and returns at once: a test counts attempts,
// not time. Once Limit waits are recorded, the next one blocks until ctx
// is done, so that the loop does not spin.
type Sleeps struct {
	Limit int

	mu     sync.Mutex
	delays []time.Duration
}

// Sleep records d; it reports false once ctx is done.
func (s *Sleeps) Sleep(ctx context.Context, d time.Duration) bool {
	s.mu.Lock()
	s.delays = append(s.delays, d)
	full := len(s.delays) >= s.Limit
	s.mu.Unlock()
	if full {
		<-ctx.Done()
		return false
	}
	return ctx.Err() == nil
}

// Delays returns the waits recorded so far.
func (s *Sleeps) Delays() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Duration(nil), s.delays...)
}
