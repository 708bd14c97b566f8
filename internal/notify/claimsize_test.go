package notify

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/pgtest"
)

func TestClaimSize(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		paced int
		took  time.Duration
		want  int
	}{
		{"no pace seen yet", 0, 0, 100},
		{"no time measured", 84, 0, 100},
		{"a slow receiver: 90 rows in 2 s", 90, 2 * time.Second, 100},
		{"a claim's worth in claimSpan", 100, claimSpan, 100},
		{"just over a claim in claimSpan", 101, claimSpan, 200},
		{"250 rows in claimSpan", 100, 40 * time.Millisecond, 400},
		{"a local receiver: 84 rows in 5 ms", 84, 5 * time.Millisecond, maxClaimFactor * 100},
		{"faster still: capped", 1000, time.Millisecond, maxClaimFactor * 100},
	}
	for _, c := range cases {
		if got := claimSize(100, c.paced, c.took, claimSpan); got != c.want {
			t.Errorf("%s: claimSize(100, %d, %v, claimSpan) = %d, want %d", c.name, c.paced, c.took, got, c.want)
		}
	}
}

// TestSendSlotsFollowTheirLimit: a sender waiting for a slot gets one when
// the limit grows, and after the limit shrinks only the slots given back
// below it let a sender in.
func TestSendSlotsFollowTheirLimit(t *testing.T) {
	t.Parallel()
	s := newSendSlots(1)
	s.acquire()
	in := make(chan struct{})
	go func() { s.acquire(); close(in) }()
	s.setLimit(2) // the waiting sender gets the new slot
	waitFor(t, in, "a sender to get the slot the limit added")

	s.setLimit(1) // two held, one allowed
	s.release()   // one held: still at the limit
	in = make(chan struct{})
	go func() { s.acquire(); close(in) }()
	s.release() // none held: the sender gets in
	waitFor(t, in, "a sender to get the slot given back under the lower limit")
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.used != 1 || s.limit != 1 {
		t.Errorf("used %d of %d slots, want 1 of 1", s.used, s.limit)
	}
}

// waitFor fails the test when ch is not closed within a minute (a lost
// wake-up would hang forever).
func waitFor(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(time.Minute):
		t.Fatalf("waited a minute for %s", what)
	}
}

// claimLog records a deliverer's claims (Deliverer.onClaim).
type claimLog struct {
	mu    sync.Mutex
	asked []int
}

func (c *claimLog) add(asked, _ int) {
	c.mu.Lock()
	c.asked = append(c.asked, asked)
	c.mu.Unlock()
}

func (c *claimLog) sizes() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.asked)
}

// drainCountingClaims delivers n pending notifications to rc through a
// lane of the given concurrency claiming base rows at first (sizing its
// claims to span of sending; 0: claimSpan), checks that each was
// delivered exactly once, and returns the limit of every claim.
func drainCountingClaims(t *testing.T, rc *receiver, n, base, concurrency int, span time.Duration) []int {
	t.Helper()
	pool := pgtest.Pool(t)
	keys := insertNotifications(t, pool, "hook", "k", n)
	d := newDeliverer(t, pool, map[string]Sink{"hook": rc.sink(t)},
		map[string]*config.Sink{"hook": sinkConf("webhook", 5*time.Second, 3, concurrency)}, DelivererConfig{BatchSize: base})
	var claims claimLog
	d.onClaim = claims.add
	d.span = span
	if got, err := d.DeliverDue(context.Background()); got != n || err != nil {
		t.Fatalf("DeliverDue = %d, %v; want %d", got, err, n)
	}
	rc.check()
	if m := rc.missing(keys); len(m) > 0 || rc.duplicates() > 0 {
		t.Errorf("%d rows never delivered, %d delivered twice", len(m), rc.duplicates())
	}
	return claims.sizes()
}

// TestClaimsGrowOnlyByTheirRule drains a backlog to a local receiver that
// answers at once: every row is delivered exactly once, and every claim
// asks for batch_size times 1, 2, 4 or 8 rows, starting at batch_size.
// With the default claimSpan, how far the claims grow depends on the
// machine's pace (the log line shows it); with a span of hours any pace is
// fast, so the claims must reach their cap, whatever the machine's speed
// (the rule itself is TestClaimSize's).
func TestClaimsGrowOnlyByTheirRule(t *testing.T) {
	t.Parallel()
	const base = 10
	for _, span := range []time.Duration{0, 24 * time.Hour} {
		sizes := drainCountingClaims(t, newReceiver(t, "s3cret"), 600, base, 4, span)
		if len(sizes) == 0 || sizes[0] != base {
			t.Fatalf("span %v: claims asked %v; want the first to ask batch_size (%d)", span, sizes, base)
		}
		for _, s := range sizes {
			if !slices.Contains([]int{base, 2 * base, 4 * base, 8 * base}, s) {
				t.Errorf("span %v: a claim asked %d rows; want batch_size (%d) times 1, 2, 4 or 8 (all: %v)", span, s, base, sizes)
			}
		}
		if span > 0 && !slices.Contains(sizes, maxClaimFactor*base) {
			t.Errorf("span %v: claims asked %v; want them to reach %d (maxClaimFactor × batch_size)", span, sizes, maxClaimFactor*base)
		}
		t.Logf("span %v: claims asked %v", span, sizes)
	}
}

// TestSlowReceiverKeepsBatchSizeClaims: a receiver that takes 30 ms a
// request, two at a time, is handed fewer than batch_size rows in
// claimSpan, so every claim stays at batch_size — a slower machine only
// makes it slower.
func TestSlowReceiverKeepsBatchSizeClaims(t *testing.T) {
	t.Parallel()
	const base = 10
	rc := newReceiver(t, "s3cret")
	rc.behave = func(http.ResponseWriter, *http.Request, string, int) bool {
		time.Sleep(30 * time.Millisecond) // the receiver's own work, not a wait for state
		return false
	}
	sizes := drainCountingClaims(t, rc, 40, base, 2, 0)
	for _, s := range sizes {
		if s != base {
			t.Fatalf("claims asked %v; want batch_size (%d) every time", sizes, base)
		}
	}
}
