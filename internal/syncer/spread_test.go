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
// run every source that missed runs at once: each is due again at a
// random point within its interval (interval_reason says why), and runs
// once then. A source late by less than its interval runs at once.
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
	sources["recent"] = "every: 1h\njitter: 0s\n"
	fetch["recent"] = fetch["s00"]
	cfg := loadConfig(t, fastLimits+"syncer: {poll_interval: 10ms}\n", sources, fetch)
	s := h.syncer(cfg, Config{})
	// The syncers were down for ten minutes; "recent" fell due a minute ago.
	now := h.clock.Now()
	h.exec(`UPDATE sources SET next_run_at = $1`, now.Add(-10*time.Minute))
	h.exec(`UPDATE sources SET next_run_at = $1 WHERE name = 'recent'`, now.Add(-time.Minute))
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
	testsignal.Eventually(t, "the overdue sources to be spread and the recent one to run", func() bool {
		return count(`SELECT count(*) FROM sources WHERE interval_reason LIKE 'spread after an outage:%'`) == n &&
			count(`SELECT coalesce(sum(runs), 0) FROM sync_run_hours`) == 1
	})
	if f := fetches.Load(); f != 1 {
		t.Errorf("%d fetches while spreading, want 1 (the recent source)", f)
	}
	var first, last time.Time
	if err := h.pool.QueryRow(context.Background(), `SELECT min(next_run_at), max(next_run_at) FROM sources WHERE name <> 'recent'`).Scan(&first, &last); err != nil {
		t.Fatal(err)
	}
	if first.Before(now) || !last.Before(now.Add(time.Minute)) || last.Sub(first) < 20*time.Second {
		t.Errorf("spread over [%s, %s] after now, want within the minute and spread out", first.Sub(now), last.Sub(now))
	}
	if r := h.source("s07"); !strings.Contains(r.IntervalReason, "overdue by 10m0s, more than its interval 1m0s") {
		t.Errorf("interval_reason %q", r.IntervalReason)
	}
	// A minute later every spread source has run once (late or not).
	h.clock.Advance(time.Minute)
	testsignal.Eventually(t, "every spread source to run once", func() bool {
		return count(`SELECT coalesce(sum(runs), 0) FROM sync_run_hours`) == n+1
	})
	if f := fetches.Load(); f != n+1 {
		t.Errorf("%d fetches, want %d", f, n+1)
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
