package syncer

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lookout-dev/lookout/internal/sources"
)

// TestRegisterInBulkKeepsTheUpsertRules registers sources in the two
// bulk statements (sources.QueryRegisterNew, QueryRegisterExisting) and
// checks each rule the one-row upsert had: a new source as configured, a
// paused definition registered paused, a changed configuration restarting
// the interval, the failures and a disabled source, a removed source
// defined again, a resumed definition active again, an unchanged source
// left alone; and a source another replica registered between the read
// and the insert updated, not skipped.
func TestRegisterInBulkKeepsTheUpsertRules(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := context.Background()
	none := items(func() []map[string]any { return nil })
	names := []string{"changed", "disabled", "removed", "paused", "resumed", "same"}
	fetch := map[string]fetchFunc{}
	body := map[string]string{}
	for _, n := range names {
		fetch[n] = none
		body[n] = "every: 1m\njitter: 0s\n"
	}
	build := func(body map[string]string, paused ...string) *Syncer {
		t.Helper()
		s, err := New(h.pool, overlay(FromConfig(loadConfig(t, "", body, fetch)), Config{Owner: "test", Now: h.clock.Now, Transport: h.tr}),
			slog.New(slog.NewTextHandler(h.logs, nil)))
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range paused {
			s.sources[n].paused = true
		}
		if err := s.Register(ctx); err != nil {
			t.Fatalf("register: %v", err)
		}
		return s
	}
	start := h.clock.Now()
	build(body, "resumed")
	for _, n := range names {
		r := h.source(n)
		want := "active"
		if n == "resumed" {
			want = "paused"
		}
		if r.Status != want || r.Interval != 60 || r.NextRunAt.Before(start) || r.NextRunAt.After(start.Add(time.Minute)) {
			t.Errorf("new source %s: status %s, interval %v s, next run %s after now; want %s, 60 s, within the minute",
				n, r.Status, r.Interval, r.NextRunAt.Sub(start), want)
		}
	}
	if r := h.source("resumed"); r.StatusReason != sources.DefinitionPaused {
		t.Errorf("source paused in its definition registered with reason %q, want %q", r.StatusReason, sources.DefinitionPaused)
	}

	// What runs and operators did since.
	later := start.Add(time.Hour)
	h.exec(`UPDATE sources SET next_run_at = $1, interval_seconds = 300, interval_reason = 'adapted', failure_count = 2
	        WHERE name IN ('changed', 'same')`, later)
	h.exec(`UPDATE sources SET status = 'disabled', status_reason = 'too many failures', failure_count = 9 WHERE name = 'disabled'`)
	h.exec(`UPDATE sources SET status = 'removed', status_reason = 'gone' WHERE name = 'removed'`)
	h.clock.Advance(time.Minute)
	now := h.clock.Now()

	body["changed"] = "every: 2m\njitter: 0s\n"
	body["disabled"] = "every: 3m\njitter: 0s\n"
	s := build(body, "paused")
	for _, c := range []struct {
		name, status, reason string
		interval             float64
		failures             int
		intervalReason       string
		nextBefore           time.Time // the next run is before it (moved up), or zero: unchanged at later
	}{
		{"changed", "active", "", 120, 0, "configuration changed; ", now.Add(2 * time.Minute)},
		{"disabled", "active", "configuration changed", 180, 0, "configuration changed; ", now.Add(3 * time.Minute)},
		{"removed", "active", "defined again", 60, 0, "", time.Time{}},
		{"paused", "paused", sources.DefinitionPaused, 60, 0, "", time.Time{}},
		{"resumed", "active", "resumed in its definition", 60, 0, "", time.Time{}},
		{"same", "active", "", 300, 2, "adapted", time.Time{}},
	} {
		r := h.source(c.name)
		if r.Status != c.status || r.StatusReason != c.reason || r.Interval != c.interval || r.Failures != c.failures ||
			!strings.HasPrefix(r.IntervalReason, c.intervalReason) {
			t.Errorf("%s: status %s (%q), interval %v s (%q), failures %d; want %s (%q), %v s (%q...), %d",
				c.name, r.Status, r.StatusReason, r.Interval, r.IntervalReason, r.Failures, c.status, c.reason, c.interval, c.intervalReason, c.failures)
		}
		if !c.nextBefore.IsZero() && !r.NextRunAt.Before(c.nextBefore) {
			t.Errorf("%s: next run %s after now, want moved up to its new first run (before %s)", c.name, r.NextRunAt.Sub(now), c.nextBefore.Sub(now))
		}
	}
	if r := h.source("same"); !r.NextRunAt.Equal(later) {
		t.Errorf("unchanged source: next run moved from %s to %s", later, r.NextRunAt)
	}

	// Another replica registered "same" with another configuration
	// between this replica's read (nothing stored) and its insert: the
	// insert skips it and the update brings it to this configuration.
	src := s.sources["same"]
	src.hash = "replica-2"
	if err := s.writeRegistration(ctx, s.registerRows([]*source{src}, nil, 1, true)); err != nil {
		t.Fatal(err)
	}
	var hash string
	if err := h.pool.QueryRow(ctx, `SELECT config_hash FROM sources WHERE name = 'same'`).Scan(&hash); err != nil {
		t.Fatal(err)
	}
	if r := h.source("same"); hash != "replica-2" || !strings.HasPrefix(r.IntervalReason, "configuration changed; ") || r.Failures != 0 {
		t.Errorf("source registered meanwhile: hash %q, interval reason %q, failures %d; want replica-2, configuration changed, 0",
			hash, r.IntervalReason, r.Failures)
	}
	var n int
	if err := h.pool.QueryRow(ctx, `SELECT count(*) FROM sources`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != len(names) {
		t.Errorf("%d rows in sources, want %d", n, len(names))
	}
}

// TestRegisterManySources times the registration of
// LOOKOUT_TEST_REGISTER_SOURCES new sources, then of all of them with a
// changed configuration (skipped when unset): the figures of
// docs/scaling.md "Registration on Citus", on one PostgreSQL or, with
// TEST_DATABASE_URL a Citus coordinator, on a cluster. It checks every
// source was written both times.
func TestRegisterManySources(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("LOOKOUT_TEST_REGISTER_SOURCES"))
	if n <= 0 {
		t.Skip("LOOKOUT_TEST_REGISTER_SOURCES is not set")
	}
	h := newHarness(t)
	ctx := context.Background()
	none := items(func() []map[string]any { return nil })
	body, fetch := map[string]string{}, map[string]fetchFunc{}
	for i := range n {
		name := fmt.Sprintf("s%06d", i)
		body[name] = "every: 1m\n"
		fetch[name] = none
	}
	s, err := New(h.pool, overlay(FromConfig(loadConfig(t, "", body, fetch)), Config{Owner: "test", Now: h.clock.Now, Transport: h.tr}),
		slog.New(slog.NewTextHandler(h.logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	all := slices.Collect(maps.Values(s.sources))
	count := func(hashSuffix string) int {
		t.Helper()
		var got int
		if err := h.pool.QueryRow(ctx, `SELECT count(*) FROM sources WHERE config_hash LIKE '%' || $1`, hashSuffix).Scan(&got); err != nil {
			t.Fatal(err)
		}
		return got
	}
	start := time.Now()
	if err := s.register(ctx, all, false); err != nil {
		t.Fatal(err)
	}
	t.Logf("registered %d new sources in %s", n, time.Since(start).Round(time.Millisecond))
	if got := count(""); got != n {
		t.Fatalf("%d sources registered, want %d", got, n)
	}
	for _, src := range all {
		src.hash += "-changed"
	}
	start = time.Now()
	if err := s.register(ctx, all, false); err != nil {
		t.Fatal(err)
	}
	t.Logf("registered %d changed sources in %s", n, time.Since(start).Round(time.Millisecond))
	if got := count("-changed"); got != n {
		t.Fatalf("%d sources brought to their new configuration, want %d", got, n)
	}
}
