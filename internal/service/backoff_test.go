package service

import (
	"context"
	"testing"
	"time"
)

func TestBackoffCapDoublesToTheCap(t *testing.T) {
	t.Parallel()
	b := Backoff{Min: 30 * time.Second, Max: time.Hour}
	want := []time.Duration{30 * time.Second, time.Minute, 2 * time.Minute, 4 * time.Minute, 8 * time.Minute, 16 * time.Minute, 32 * time.Minute, time.Hour, time.Hour}
	for i, w := range want {
		if got := b.Cap(i + 1); got != w {
			t.Errorf("Cap(%d) = %s, want %s", i+1, got, w)
		}
	}
	for _, n := range []int{0, -3} {
		if got := b.Cap(n); got != b.Min {
			t.Errorf("Cap(%d) = %s, want Min", n, got)
		}
	}
	for _, n := range []int{64, 500, 1 << 40} {
		if got := b.Cap(n); got != time.Hour {
			t.Errorf("Cap(%d) = %s, want the cap (no overflow)", n, got)
		}
	}
	// A Max that is no power-of-two multiple of Min is reached exactly.
	odd := Backoff{Min: 3 * time.Nanosecond, Max: 5 * time.Nanosecond}
	if got := odd.Cap(2); got != 5 {
		t.Errorf("Cap(2) with 3ns..5ns = %s, want 5ns", got)
	}
	if got := (Backoff{Max: time.Second}).Cap(3); got != time.Second {
		t.Errorf("Cap with no Min = %s, want Max", got)
	}
}

func TestBackoffJitterStaysInHalfToFull(t *testing.T) {
	t.Parallel()
	b := Backoff{Min: time.Second, Max: time.Minute}
	for n := 1; n <= 10; n++ {
		c := b.Cap(n)
		lo, hi := c, time.Duration(0)
		for range 300 {
			d := b.Delay(n)
			if d < c/2 || d > c {
				t.Fatalf("Delay(%d) = %s, want in [%s, %s]", n, d, c/2, c)
			}
			lo, hi = min(lo, d), max(hi, d)
		}
		if lo == hi {
			t.Errorf("Delay(%d) returned %s 300 times: no jitter", n, lo)
		}
	}
	if got := Jitter(0); got != 0 {
		t.Errorf("Jitter(0) = %s", got)
	}
}

func TestBackoffNextGrowsAndResets(t *testing.T) {
	t.Parallel()
	b := Backoff{Min: 100 * time.Millisecond, Max: time.Second}
	for n := 1; n <= 6; n++ {
		if d, c := b.Next(), b.Cap(n); d < c/2 || d > c {
			t.Fatalf("Next #%d = %s, want in [%s, %s]", n, d, c/2, c)
		}
	}
	b.Reset()
	if d := b.Next(); d > 100*time.Millisecond {
		t.Errorf("first Next after Reset = %s, want at most Min", d)
	}
}

func TestSleepReturnsFalseOnCancel(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if Sleep(ctx, time.Hour) {
		t.Error("Sleep on a cancelled context reported that an hour elapsed")
	}
	if !Sleep(context.Background(), time.Millisecond) {
		t.Error("Sleep(1ms) did not report that it elapsed")
	}
}
