package syncer

import (
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/lookout-dev/lookout/internal/sources"
)

// tally counts what a replica did since its last summary line: runs by
// outcome, changes, and how late runs started.
type tally struct {
	mu        sync.Mutex
	since     time.Time
	claimed   int
	byStatus  map[string]int
	changes   int
	quiet     int
	changed   int
	spreadN   int
	late      []time.Duration // a uniform sample of the window's lateness
	lateSeen  int
	lateMax   time.Duration
	totalRuns int
}

// lateSample is the most lateness values kept per window (reservoir
// sampling keeps the sample uniform however many runs there were).
const lateSample = 20000

func newTally(now time.Time) *tally {
	return &tally{since: now, byStatus: map[string]int{}}
}

func (t *tally) claimedRun(late time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.claimed++
	t.lateSeen++
	t.lateMax = max(t.lateMax, late)
	if len(t.late) < lateSample {
		t.late = append(t.late, late)
	} else if i := rand.IntN(t.lateSeen); i < lateSample {
		t.late[i] = late
	}
}

func (t *tally) spread(n int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.spreadN += n
}

// finished counts a run's outcome: its status, whether it was quiet (no
// sync_runs row), and the changes it wrote.
func (t *tally) finished(status sources.RunStatus, quiet bool, changes int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.byStatus[string(status)]++
	t.changes += changes
	t.totalRuns++
	if quiet {
		t.quiet++
	}
	if changes > 0 {
		t.changed++
	}
}

// window is one summary: the counts since the last one and the lateness
// quantiles.
type window struct {
	Since                 time.Time
	Claimed, Finished     int
	ByStatus              map[string]int
	Changes               int
	Quiet, ChangedRuns    int
	Spread                int
	LateP50, LateP99, Max time.Duration
}

// take returns the window's counts and starts a new window at now.
func (t *tally) take(now time.Time) window {
	t.mu.Lock()
	defer t.mu.Unlock()
	w := window{Since: t.since, Claimed: t.claimed, Finished: t.totalRuns, ByStatus: t.byStatus, Changes: t.changes, Max: t.lateMax,
		Quiet: t.quiet, ChangedRuns: t.changed, Spread: t.spreadN}
	if n := len(t.late); n > 0 {
		slices.Sort(t.late)
		w.LateP50 = t.late[n/2]
		w.LateP99 = t.late[min(n-1, n*99/100)]
	}
	t.since, t.claimed, t.byStatus, t.changes, t.quiet, t.changed, t.spreadN = now, 0, map[string]int{}, 0, 0, 0, 0
	t.late, t.lateSeen, t.lateMax, t.totalRuns = t.late[:0], 0, 0, 0
	return w
}

// summary logs the replica's summary line: what it ran since the last one
// and how late. A replica that ran nothing logs nothing (unless final).
func (s *Syncer) summary(final bool) {
	now := s.conf.Now()
	w := s.stats.take(now)
	if w.Claimed == 0 && w.Finished == 0 && !final {
		return
	}
	msg := "syncer summary"
	if final {
		msg = "syncer stopped"
	}
	s.logger.Info(msg, "owner", s.conf.Owner, "window_s", int(now.Sub(w.Since).Round(time.Second).Seconds()), "runs", w.Finished, "claimed", w.Claimed,
		"quiet", w.Quiet, "changed_runs", w.ChangedRuns,
		"changes", w.Changes, "spread", w.Spread, "failed", w.ByStatus["failed"], "deferred", w.ByStatus["deferred"], "abandoned", w.ByStatus["abandoned"],
		"lateness_p50_ms", w.LateP50.Milliseconds(), "lateness_p99_ms", w.LateP99.Milliseconds(), "lateness_max_ms", w.Max.Milliseconds())
}
