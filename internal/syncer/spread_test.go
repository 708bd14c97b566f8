package syncer

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lookout-dev/lookout/internal/connectors"
	"github.com/lookout-dev/lookout/internal/testsignal"
)

// TestOutageSpreadsOverdueSources: after an outage, the daemon does not
// run every source that fell due during it at once: each is due again at
// a random point within as long as it has been overdue, at most its
// interval (interval_reason says why), and runs once then. A source that
// fell due in the last seconds of the outage runs at once.
func TestOutageSpreadsOverdueSources(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	const n = 50
	var fetches atomic.Int64
	sources, fetch := map[string]string{}, map[string]fetchFunc{}
	for i := range n {
		name := fmt.Sprintf("s%02d", i)
		sources[name] = "every: 1m\njitter: 0s\n"
		fetch[name] = func(context.Context, connectors.Env, json.RawMessage, connectors.EmitFunc) (connectors.Result, error) {
			fetches.Add(1)
			return connectors.Result{}, connectors.ErrNotModified
		}
	}
	for _, name := range []string{"recent", "hourly", "justnow"} {
		sources[name] = "every: 1h\njitter: 0s\n"
		fetch[name] = fetch["s00"]
	}
	cfg := loadConfig(t, fastLimits+"syncer: {poll_interval: 10ms}\n", sources, fetch)
	s := h.syncer(cfg, Config{})
	// The syncers were down for ten minutes (the hourly source fell due
	// twenty minutes ago, during a longer outage of its own); "recent"
	// fell due a minute ago, "justnow" ten seconds ago.
	now := h.clock.Now()
	h.exec(`UPDATE sources SET next_run_at = $1`, now.Add(-10*time.Minute))
	h.exec(`UPDATE sources SET next_run_at = $1 WHERE name = 'recent'`, now.Add(-time.Minute))
	h.exec(`UPDATE sources SET next_run_at = $1 WHERE name = 'hourly'`, now.Add(-20*time.Minute))
	h.exec(`UPDATE sources SET next_run_at = $1 WHERE name = 'justnow'`, now.Add(-10*time.Second))
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Error(err)
		}
	})
	count := func(sql string) int {
		var c int
		if err := h.pool.QueryRow(context.Background(), sql).Scan(&c); err != nil {
			t.Fatal(err)
		}
		return c
	}
	testsignal.Eventually(t, "the overdue sources to be spread and the one due just now to run", func() bool {
		return count(`SELECT count(*) FROM sources WHERE interval_reason LIKE 'spread after an outage:%'`) == n+2 &&
			count(`SELECT coalesce(sum(runs), 0) FROM sync_run_hours`) == 1
	})
	if f := fetches.Load(); f != 1 {
		t.Errorf("%d fetches while spreading, want 1 (the source due just now)", f)
	}
	var first, last time.Time
	if err := h.pool.QueryRow(context.Background(), `SELECT min(next_run_at), max(next_run_at) FROM sources WHERE name LIKE 's%'`).Scan(&first, &last); err != nil {
		t.Fatal(err)
	}
	if first.Before(now) || !last.Before(now.Add(time.Minute)) || last.Sub(first) < 20*time.Second {
		t.Errorf("spread over [%s, %s] after now, want within the minute and spread out", first.Sub(now), last.Sub(now))
	}
	if r := h.source("s07"); !strings.Contains(r.IntervalReason, "overdue by 10m0s (interval 1m0s): next run spread over 1m0s") {
		t.Errorf("interval_reason %q", r.IntervalReason)
	}
	// Spread over as long as they were overdue, not over their hour.
	for name, within := range map[string]time.Duration{"recent": time.Minute, "hourly": 20 * time.Minute} {
		r := h.source(name)
		if r.NextRunAt.Before(now) || !r.NextRunAt.Before(now.Add(within)) {
			t.Errorf("%s: next run %s after now, want within %s", name, r.NextRunAt.Sub(now), within)
		}
		if want := fmt.Sprintf("next run spread over %s", within); !strings.Contains(r.IntervalReason, want) {
			t.Errorf("%s: interval_reason %q, want %q", name, r.IntervalReason, want)
		}
	}
	// A minute later every source spread within the minute has run once
	// (late or not).
	h.clock.Advance(time.Minute)
	testsignal.Eventually(t, "every source spread within the minute to run once", func() bool {
		return count(`SELECT count(DISTINCT source) FROM sync_run_hours WHERE source LIKE 's%' OR source IN ('recent', 'justnow')`) == n+2
	})
	if f := fetches.Load(); f < n+2 {
		t.Errorf("%d fetches, want at least %d", f, n+2)
	}
}

// TestRegisterSpreadsManyNewSources: more than a hundred sources
// registered together start spread over their interval (a hundred first
// runs a second), not within their jitter.
func TestRegisterSpreadsManyNewSources(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	sources, fetch := map[string]string{}, map[string]fetchFunc{}
	for i := range 300 {
		name := fmt.Sprintf("s%03d", i)
		sources[name] = "every: 1m\njitter: 0s\n"
		fetch[name] = items(func() []map[string]any { return nil })
	}
	cfg := loadConfig(t, "", sources, fetch)
	now := h.clock.Now()
	h.syncer(cfg, Config{})
	var first, last time.Time
	var reasons int
	if err := h.pool.QueryRow(context.Background(), `
		SELECT min(next_run_at), max(next_run_at), count(*) FILTER (WHERE interval_reason LIKE 'registered with 299 other new or changed sources: first run spread over 3s')
		FROM sources`).Scan(&first, &last, &reasons); err != nil {
		t.Fatal(err)
	}
	if first.Before(now) || !last.Before(now.Add(3*time.Second)) || last.Sub(first) < time.Second || reasons != 300 {
		t.Errorf("first runs in [%s, %s] after registration (%d reasons); want spread over 3s", first.Sub(now), last.Sub(now), reasons)
	}
}
