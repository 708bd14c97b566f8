package syncer

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lookout-dev/lookout/internal/connectors"
	"github.com/lookout-dev/lookout/internal/metrics"
	"github.com/lookout-dev/lookout/internal/testsignal"
)

// TestQuietRunsRollUp: a scheduled run that changes nothing writes no
// sync_runs row and no INFO line; it is counted in its source's hour in
// sync_run_hours (a 304 as not_modified). Runs that change something,
// fail, or follow a failure keep their row and their line.
func TestQuietRunsRollUp(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	var step atomic.Int32
	fetch := func(ctx context.Context, _ connectors.Env, _ json.RawMessage, emit connectors.EmitFunc) (connectors.Result, error) {
		switch step.Load() {
		case 2:
			return connectors.Result{Requests: 1}, connectors.ErrNotModified
		case 3:
			return connectors.Result{Requests: 1}, errors.New("upstream is down")
		}
		err := emit(ctx, connectors.Page{Items: []connectors.Item{{Value: map[string]any{"id": "a", "v": 1}, Loc: "x"}}})
		return connectors.Result{Requests: 1}, err
	}
	cfg := loadConfig(t, fastLimits+"syncer: {backoff: {min: 1s, max: 1s}}\n", map[string]string{"s": "every: 1m\njitter: 0s\n"},
		map[string]fetchFunc{"s": fetch})
	m := metrics.New()
	s := h.syncer(cfg, Config{Metrics: m})
	quietRows := func() (runs, notModified, requests, seen int) {
		t.Helper()
		if err := h.pool.QueryRow(context.Background(), `
			SELECT coalesce(sum(runs), 0), coalesce(sum(not_modified), 0), coalesce(sum(requests), 0), coalesce(sum(items_seen), 0)
			FROM sync_run_hours WHERE source = 's'`).Scan(&runs, &notModified, &requests, &seen); err != nil {
			t.Fatal(err)
		}
		return
	}
	infoLines := func() int { return strings.Count(h.logs.String(), `level=INFO msg="run finished"`) }

	// 0: the first run creates the record: a row and a line.
	h.runAt(s, "s")
	if runs := h.runs("s"); len(runs) != 1 || runs[0].Created != 1 {
		t.Fatalf("first run: %+v", runs)
	}
	// 1: unchanged, 2: not modified — quiet: no row, no INFO line.
	for i := int32(1); i <= 2; i++ {
		step.Store(i)
		before := infoLines()
		if n := h.runAt(s, "s"); n != 1 {
			t.Fatalf("step %d ran %d", i, n)
		}
		if runs := h.runs("s"); len(runs) != 1 {
			t.Errorf("step %d: a quiet run wrote a sync_runs row: %+v", i, runs[1:])
		}
		if infoLines() != before {
			t.Errorf("step %d: a quiet run logged at INFO", i)
		}
	}
	if runs, notModified, requests, seen := quietRows(); runs != 2 || notModified != 1 || requests != 2 || seen != 1 {
		t.Errorf("sync_run_hours: runs %d, not_modified %d, requests %d, items_seen %d; want 2, 1, 2, 1", runs, notModified, requests, seen)
	}
	r := h.source("s")
	if r.NextRunAt.Sub(h.clock.Now()) != time.Minute || r.IntervalReason != "every 1m0s" {
		t.Errorf("after quiet runs: next run in %s (%s), want 1m", r.NextRunAt.Sub(h.clock.Now()), r.IntervalReason)
	}
	// 3: a failure keeps its row; 4: the success after it too (it clears
	// the failure); 5: quiet again.
	for i := int32(3); i <= 5; i++ {
		step.Store(i)
		h.runAt(s, "s")
	}
	runs := h.runs("s")
	if len(runs) != 3 || runs[1].Status != "failed" || runs[2].Status != "succeeded" {
		t.Fatalf("runs: %+v", runs)
	}
	if n, _, _, _ := quietRows(); n != 3 {
		t.Errorf("%d quiet runs, want 3", n)
	}
	if r := h.source("s"); r.Failures != 0 || r.LastError != "" {
		t.Errorf("after recovery: %+v", r)
	}
	if !strings.Contains(h.logs.String(), `level=ERROR msg="run failed"`) {
		t.Errorf("no run failed line")
	}
}

// TestLatenessIsMeasured: a run that starts 2.5 s after its source was
// due is observed as 2.5 s late in lookout_schedule_lateness_seconds and
// in its hour of sync_run_hours.
func TestLatenessIsMeasured(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	cfg := loadConfig(t, fastLimits, map[string]string{"s": "every: 1m\njitter: 0s\n"},
		map[string]fetchFunc{"s": func(context.Context, connectors.Env, json.RawMessage, connectors.EmitFunc) (connectors.Result, error) {
			return connectors.Result{}, connectors.ErrNotModified
		}})
	m := metrics.New()
	s := h.syncer(cfg, Config{Metrics: m})
	h.clock.Set(h.source("s").NextRunAt.Add(2500 * time.Millisecond))
	if n := h.runDue(s); n != 1 {
		t.Fatalf("ran %d", n)
	}
	families, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, f := range families {
		if f.GetName() != "lookout_schedule_lateness_seconds" {
			continue
		}
		hist := f.GetMetric()[0].GetHistogram()
		found = true
		if hist.GetSampleCount() != 1 || hist.GetSampleSum() != 2.5 {
			t.Errorf("lateness histogram: %d samples, sum %g; want 1, 2.5", hist.GetSampleCount(), hist.GetSampleSum())
		}
	}
	if !found {
		t.Error("no lookout_schedule_lateness_seconds")
	}
	var late float64
	if err := h.pool.QueryRow(context.Background(), `SELECT lateness_seconds_max FROM sync_run_hours WHERE source = 's'`).Scan(&late); err != nil || late != 2.5 {
		t.Errorf("sync_run_hours lateness %g (%v), want 2.5", late, err)
	}
}

// TestQuietRunCountsWaitForTheFlush: a replica counts its quiet runs in
// memory and adds them to sync_run_hours every rollup_every, not once per
// run: with an hour between flushes, many quiet runs leave sync_run_hours
// empty while the replica runs (their source row is committed each time),
// and Stop writes them all, as one row of the source's hour.
func TestQuietRunCountsWaitForTheFlush(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	var fetches atomic.Int32
	cfg := loadConfig(t, fastLimits, map[string]string{"s": "every: 20ms\njitter: 0s\n"},
		map[string]fetchFunc{"s": func(context.Context, connectors.Env, json.RawMessage, connectors.EmitFunc) (connectors.Result, error) {
			fetches.Add(1)
			return connectors.Result{Requests: 1}, connectors.ErrNotModified
		}})
	s := h.syncer(cfg, Config{Now: time.Now, RollupEvery: time.Hour})
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = s.Stop()
		}
	})
	count := func(sql string) int {
		t.Helper()
		var n int
		if err := h.pool.QueryRow(context.Background(), sql).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	first := h.source("s").NextRunAt
	testsignal.EventuallyWithin(t, 60*time.Second, "five quiet runs committed", func() bool {
		return fetches.Load() >= 5 && h.source("s").NextRunAt.After(first)
	})
	if n := count(`SELECT count(*) FROM sync_run_hours`); n != 0 {
		t.Errorf("sync_run_hours has %d rows while the replica runs with rollup_every 1h, want 0 (counted in memory)", n)
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	stopped = true
	runs, rows := count(`SELECT coalesce(sum(runs), 0)::int FROM sync_run_hours WHERE source = 's'`), count(`SELECT count(*)::int FROM sync_run_hours`)
	if want := int(fetches.Load()); runs != want || rows < 1 || rows > 2 {
		t.Errorf("after Stop: sync_run_hours counts %d runs in %d rows; want %d runs (every fetch was a quiet run) in one row per hour", runs, rows, want)
	}
	if n := count(`SELECT count(*) FROM sync_runs`); n != 0 {
		t.Errorf("%d sync_runs rows, want 0", n)
	}
}

// TestRollupRestoreMerges: counts a failed flush gives back are merged
// with the runs counted meanwhile, so the next flush writes both.
func TestRollupRestoreMerges(t *testing.T) {
	t.Parallel()
	var r rollup
	t0 := time.Date(2026, 11, 30, 10, 15, 0, 0, time.UTC)
	run := func(at time.Time, notModified bool, late time.Duration) quietRun {
		return quietRun{c: claim{name: "s", startedAt: at, lateness: late}, finishedAt: at.Add(10 * time.Millisecond),
			requests: 1, seen: 2, notModified: notModified}
	}
	r.add(run(t0, true, time.Second))
	r.add(run(t0.Add(time.Minute), false, 3*time.Second))
	failed := r.take()
	r.add(run(t0.Add(2*time.Minute), true, 0))
	r.add(run(t0.Add(50*time.Minute), true, 0)) // the next hour
	r.restore(failed)
	m := r.take()
	hour := t0.Truncate(time.Hour)
	c := m[hourKey{"s", hour}]
	if len(m) != 2 || c == nil {
		t.Fatalf("rollup rows %v, want the hours of 10:00 and 11:00", m)
	}
	if c.runs != 3 || c.notModified != 2 || c.requests != 3 || c.items != 6 || c.latenessM != 3 || c.latenessSum != 4 ||
		!c.first.Equal(t0) || !c.last.Equal(t0.Add(2*time.Minute)) || !c.lastFinished.Equal(t0.Add(2*time.Minute+10*time.Millisecond)) {
		t.Errorf("10:00: %+v", *c)
	}
	if n := m[hourKey{"s", hour.Add(time.Hour)}]; n == nil || n.runs != 1 {
		t.Errorf("11:00: %+v", n)
	}
	if r.take() != nil {
		t.Error("take left counts behind")
	}
}
