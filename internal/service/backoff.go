package service

import (
	"context"
	"math/rand/v2"
	"time"
)

// Backoff is lookout's one retry formula: exponential with jitter and a
// cap. The n-th consecutive failure waits about Min·2^(n-1), at most Max;
// Next counts failures and Reset starts over after a success. The zero
// counter makes a Backoff literal ready to use, and a Backoff value is
// also the configuration of a schedule's retries (schedule.Backoff).
type Backoff struct {
	// Min is the wait after the first failure; it doubles per failure.
	Min time.Duration
	// Max caps the wait.
	Max time.Duration

	failures int
}

// Cap is the wait before jitter after the n-th consecutive failure
// (n >= 1; less is read as 1): Min doubled n-1 times, at most Max. It
// never overflows, however large n is.
func (b Backoff) Cap(n int) time.Duration {
	d := b.Min
	for i := 1; i < n && d > 0 && d < b.Max; i++ {
		if d > b.Max/2 {
			d = b.Max
			break
		}
		d *= 2
	}
	if d > b.Max || d <= 0 {
		d = b.Max
	}
	return d
}

// Delay is the jittered wait after the n-th consecutive failure:
// Jitter(b.Cap(n)).
func (b Backoff) Delay(n int) time.Duration { return Jitter(b.Cap(n)) }

// Next counts one more failure and returns the wait before the retry.
func (b *Backoff) Next() time.Duration {
	b.failures++
	return b.Delay(b.failures)
}

// Reset starts over from Min; call it after a success.
func (b *Backoff) Reset() { b.failures = 0 }

// Jitter returns a random wait in [d/2, d] ("equal jitter"): the wait
// keeps growing with d while replicas retrying together spread out.
func Jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return d/2 + rand.N(d/2+1)
}

// Loop retries: every daemon loop waits after a failed iteration (a
// database outage, mostly) a delay of a Backoff from LoopRetryMin
// doubling to LoopRetryMax, reset by the next success, so that an outage
// costs a handful of attempts and log lines, not one per poll interval.
const (
	LoopRetryMin = 500 * time.Millisecond
	LoopRetryMax = 30 * time.Second
)

// LoopBackoff is the backoff of a daemon loop's consecutive errors.
func LoopBackoff() Backoff { return Backoff{Min: LoopRetryMin, Max: LoopRetryMax} }

// retrySleepKey holds the sleep of WithRetrySleep.
type retrySleepKey struct{}

// WithRetrySleep returns a context whose loops' waits between an error and
// its retry (RetrySleep) call sleep instead: tests record the delays a
// loop asks for and return at once, counting attempts rather than time.
func WithRetrySleep(ctx context.Context, sleep func(ctx context.Context, d time.Duration) bool) context.Context {
	return context.WithValue(ctx, retrySleepKey{}, sleep)
}

// RetrySleep is a loop's wait d between an error and its retry (d from
// the loop's Backoff.Next): Sleep, or the sleep of WithRetrySleep. It
// reports whether d elapsed (false: ctx is done).
func RetrySleep(ctx context.Context, d time.Duration) bool {
	if sleep, ok := ctx.Value(retrySleepKey{}).(func(context.Context, time.Duration) bool); ok {
		return sleep(ctx, d)
	}
	return Sleep(ctx, d)
}

// Sleep waits for d or until ctx is done; it reports whether d elapsed.
// It is the one sleep of lookout's loops: every wait is cancellable.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
