package testsignal

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// fakeTB records a failure instead of failing the test.
type fakeTB struct{ failed string }

func (*fakeTB) Helper() {}

func (f *fakeTB) Fatalf(format string, args ...any) { f.failed = fmt.Sprintf(format, args...) }

func TestSignal(t *testing.T) {
	t.Parallel()
	var off Signal[int]
	off.Signal(1) // not initialised: a no-op, as in production

	var s Signal[string]
	s.Init(t)
	s.Signal("connected")
	s.Signal("again")
	if got := s.WaitOrTimeout(); got != "connected" {
		t.Errorf("first value %q", got)
	}
	if got := s.WaitOrTimeout(); got != "again" {
		t.Errorf("second value %q", got)
	}
}

func TestEventually(t *testing.T) {
	t.Parallel()
	var n atomic.Int32
	Eventually(t, "the third call", func() bool { return n.Add(1) == 3 })
	if n.Load() != 3 {
		t.Errorf("cond called %d times", n.Load())
	}
	var f fakeTB
	EventuallyWithin(&f, 20*time.Millisecond, "never", func() bool { return false })
	if !strings.Contains(f.failed, "timed out after 20ms waiting for never") {
		t.Errorf("failure %q", f.failed)
	}
}

func TestReceive(t *testing.T) {
	t.Parallel()
	ch := make(chan int, 1)
	ch <- 7
	if got := Receive(t, ch, "a value"); got != 7 {
		t.Errorf("Receive = %d", got)
	}
}

// TestTimeoutOf: TimeoutEnv's value sets the waits' bound; empty is 20 s,
// and a value that is no positive duration names the variable.
func TestTimeoutOf(t *testing.T) {
	t.Parallel()
	if got := timeoutOf(""); got != 20*time.Second {
		t.Errorf("empty: %s, want 20s", got)
	}
	if got := timeoutOf("2m"); got != 2*time.Minute {
		t.Errorf("2m: %s", got)
	}
	for _, v := range []string{"soon", "0s", "-1m"} {
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), TimeoutEnv) {
					t.Errorf("%q: recovered %v, want a panic naming %s", v, r, TimeoutEnv)
				}
			}()
			timeoutOf(v)
		}()
	}
}

// TestTimeoutReadsTheEnvironment: a variable set after the package's
// init (by a test, by TestMain) bounds the waits that follow. It was read
// once at init, and such a setting was silently ignored.
func TestTimeoutReadsTheEnvironment(t *testing.T) {
	t.Setenv(TimeoutEnv, "")
	if got := Timeout(); got != 20*time.Second {
		t.Errorf("unset: %s, want 20s", got)
	}
	t.Setenv(TimeoutEnv, "30ms")
	if got := Timeout(); got != 30*time.Millisecond {
		t.Errorf("set to 30ms: %s", got)
	}
	var f fakeTB
	Eventually(&f, "never", func() bool { return false })
	if !strings.Contains(f.failed, "timed out after 30ms waiting for never") {
		t.Errorf("Eventually's failure %q, want it bounded by the 30ms set", f.failed)
	}
	f = fakeTB{}
	Receive(&f, make(chan int), "nothing")
	if !strings.Contains(f.failed, "timed out after 30ms waiting for nothing") {
		t.Errorf("Receive's failure %q, want it bounded by the 30ms set", f.failed)
	}
}

// TestCancelWhen: the context ends once the condition holds, not before.
func TestCancelWhen(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var ready atomic.Bool
	polled := make(chan struct{}, 1)
	CancelWhen(ctx, cancel, func() bool {
		select {
		case polled <- struct{}{}:
		default:
		}
		return ready.Load()
	})
	Receive(t, polled, "a first poll")
	if ctx.Err() != nil {
		t.Fatal("canceled before the condition held")
	}
	ready.Store(true)
	Receive(t, ctx.Done(), "the cancel once the condition held")
}

// TestScaled: a quiet machine's bound grows with Timeout (a minute is six
// at 2m, hours do not overflow) and never shrinks below itself.
func TestScaled(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ d, timeout, want time.Duration }{
		{time.Minute, 20 * time.Second, time.Minute},
		{time.Minute, 2 * time.Minute, 6 * time.Minute},
		{5 * time.Minute, 2 * time.Minute, 30 * time.Minute},
		{time.Minute, 5 * time.Second, time.Minute},
		{10 * time.Hour, time.Hour, 1800 * time.Hour},
	} {
		if got := scaledBy(c.d, c.timeout); got != c.want {
			t.Errorf("%s at %s: %s, want %s", c.d, c.timeout, got, c.want)
		}
	}
}
