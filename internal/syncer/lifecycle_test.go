package syncer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lookout-dev/lookout/internal/connectors"
	"github.com/lookout-dev/lookout/internal/sources"
)

func TestRegisterSpreadsFirstRuns(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	sources, fetch := map[string]string{}, map[string]fetchFunc{}
	for i := range 40 {
		name := fmt.Sprintf("s%02d", i)
		sources[name] = "every: 1m\njitter: 1m\n"
		fetch[name] = items(func() []map[string]any { return nil })
	}
	sources["daily"] = "cron: \"30 9 * * *\"\ntimezone: Asia/Tokyo\n"
	fetch["daily"] = items(func() []map[string]any { return nil })
	cfg := loadConfig(t, "", sources, fetch)
	now := h.clock.Now()
	h.syncer(cfg, Config{})

	var distinct int
	var lo, hi time.Duration
	err := h.pool.QueryRow(context.Background(), `
		SELECT count(DISTINCT next_run_at), min(next_run_at) - $1, max(next_run_at) - $1
		FROM sources WHERE name LIKE 's%'`, now).Scan(&distinct, &lo, &hi)
	if err != nil {
		t.Fatal(err)
	}
	if distinct < 38 {
		t.Errorf("40 sources with one interval got %d distinct first runs", distinct)
	}
	if lo < 0 || hi >= time.Minute || hi-lo < 30*time.Second {
		t.Errorf("first runs span [%s, %s] after now; want spread over [0, 1m)", lo, hi)
	}
	// The cron source waits for its next slot: 09:30 in Tokyo.
	next := h.source("daily").NextRunAt.In(mustLoc(t, "Asia/Tokyo"))
	if next.Hour() != 9 || next.Minute() != 30 || !next.After(now) || next.Sub(now) > 24*time.Hour {
		t.Errorf("cron source first run at %s (now %s)", next, now)
	}
	if r := h.source("daily"); !strings.Contains(r.IntervalReason, "first run at the next cron slot") {
		t.Errorf("interval_reason = %q", r.IntervalReason)
	}
}

func mustLoc(t *testing.T, name string) *time.Location {
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

func TestOverdueSourceRunsOnce(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	var calls atomic.Int32
	fetch := func(ctx context.Context, env connectors.Env, c json.RawMessage, emit connectors.EmitFunc) (connectors.Result, error) {
		calls.Add(1)
		return connectors.Result{}, nil
	}
	cfg := loadConfig(t, "", map[string]string{
		"tick": "every: 10m\njitter: 0s\n",
		"cron": "cron: \"0 * * * *\"\n",
	}, map[string]fetchFunc{"tick": fetch, "cron": fetch})
	s := h.syncer(cfg, Config{})
	// The syncer was down for three days: both sources missed hundreds of slots.
	h.exec(`UPDATE sources SET next_run_at = $1`, h.clock.Now().Add(-72*time.Hour))
	now := h.clock.Advance(17 * time.Minute)
	if n := h.runDue(s); n != 2 {
		t.Fatalf("ran %d, want each overdue source once", n)
	}
	if calls.Load() != 2 {
		t.Fatalf("fetched %d times", calls.Load())
	}
	if n := h.runDue(s); n != 0 {
		t.Fatalf("second pass ran %d, want 0: missed slots are not caught up", n)
	}
	if got := h.source("tick").NextRunAt; !got.Equal(now.Add(10 * time.Minute)) {
		t.Errorf("tick next run %s, want now+10m", got.Sub(now))
	}
	if got := h.source("cron").NextRunAt; !got.Equal(now.Truncate(time.Hour).Add(time.Hour)) {
		t.Errorf("cron next run %s, want the next full hour", got)
	}
}

func TestRunDueEndsWhenIntervalIsShorterThanRun(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	fetch := func(ctx context.Context, env connectors.Env, c json.RawMessage, emit connectors.EmitFunc) (connectors.Result, error) {
		time.Sleep(30 * time.Millisecond) // the run's work
		return connectors.Result{}, nil
	}
	cfg := loadConfig(t, "", map[string]string{"fast": "every: 10ms\njitter: 0s\n"}, map[string]fetchFunc{"fast": fetch})
	s := h.syncer(cfg, Config{Now: time.Now})
	if n := h.runDue(s); n != 1 {
		t.Fatalf("RunDue ran %d, want 1 (sources that fall due meanwhile wait for the next call)", n)
	}
}

func TestBackoffThenDisableAfterMaxFailures(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	up := newUpstream(t, 1, h.clock.Now)
	up.on("/flaky/page/1", func(w http.ResponseWriter, r *http.Request) bool {
		http.Error(w, "database on fire", http.StatusInternalServerError)
		return true
	})
	cfg := loadConfig(t, fastLimits+"syncer: {backoff: {min: 10s, max: 40s}}\n", map[string]string{
		"flaky": "every: 1s\njitter: 0s\nstop: {max_failures: 5}\n",
	}, map[string]fetchFunc{"flaky": pager(func() string { return up.URL }, "flaky")})
	s := h.syncer(cfg, Config{})

	caps := []time.Duration{10 * time.Second, 20 * time.Second, 40 * time.Second, 40 * time.Second}
	for i, d := range caps {
		if n := h.runAt(s, "flaky"); n != 1 {
			t.Fatalf("failure %d: ran %d", i+1, n)
		}
		r := h.source("flaky")
		if r.Failures != i+1 || r.Status != "active" {
			t.Fatalf("after failure %d: failures %d status %s", i+1, r.Failures, r.Status)
		}
		wait := r.NextRunAt.Sub(h.clock.Now())
		if wait < d/2 || wait >= d {
			t.Errorf("failure %d: next run in %s, want in [%s, %s)", i+1, wait, d/2, d)
		}
		if !strings.Contains(r.IntervalReason, fmt.Sprintf("backoff after %d consecutive failure(s)", i+1)) ||
			!strings.Contains(r.LastError, "500") {
			t.Errorf("failure %d: reason %q, last_error %q", i+1, r.IntervalReason, r.LastError)
		}
	}
	h.runAt(s, "flaky")
	r := h.source("flaky")
	if r.Status != "disabled" || !strings.Contains(r.StatusReason, "stop.max_failures: disabled after 5 consecutive failures") ||
		!strings.Contains(r.StatusReason, "database on fire") {
		t.Fatalf("after 5 failures: status %s, reason %q", r.Status, r.StatusReason)
	}
	if logs := h.logs.String(); !strings.Contains(logs, `msg="source disabled"`) || !strings.Contains(logs, "stop.max_failures") {
		t.Errorf("the log does not say the source was disabled:\n%s", logs)
	}
	before := up.total.Load()
	h.clock.Advance(24 * time.Hour)
	if n := h.runDue(s); n != 0 || up.total.Load() != before {
		t.Fatalf("a disabled source ran (%d runs, %d requests)", n, up.total.Load()-before)
	}
}

func TestBackoffResetsOnSuccess(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	up := newUpstream(t, 1, h.clock.Now)
	var failing atomic.Bool
	failing.Store(true)
	up.on("/s/page/1", func(w http.ResponseWriter, r *http.Request) bool {
		if failing.Load() {
			http.Error(w, "boom", http.StatusBadGateway)
			return true
		}
		return false
	})
	cfg := loadConfig(t, fastLimits, map[string]string{"s": "every: 1s\njitter: 0s\n"},
		map[string]fetchFunc{"s": pager(func() string { return up.URL }, "s")})
	s := h.syncer(cfg, Config{})
	for range 3 {
		h.runAt(s, "s")
	}
	if r := h.source("s"); r.Failures != 3 || r.NextRunAt.Sub(h.clock.Now()) < time.Minute {
		t.Fatalf("after 3 failures: %+v", r)
	}
	failing.Store(false)
	h.runAt(s, "s")
	r := h.source("s")
	if r.Failures != 0 || r.LastError != "" || r.NextRunAt.Sub(h.clock.Now()) != time.Second || r.IntervalReason != "every 1s" {
		t.Fatalf("after a success: failures %d, last_error %q, next in %s, reason %q",
			r.Failures, r.LastError, r.NextRunAt.Sub(h.clock.Now()), r.IntervalReason)
	}
}

func TestUnauthorizedDisables(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	up := newUpstream(t, 1, h.clock.Now)
	up.on("/locked/page/1", func(w http.ResponseWriter, r *http.Request) bool {
		http.Error(w, `{"message":"Bad credentials"}`, http.StatusUnauthorized)
		return true
	})
	up.on("/forbidden/page/1", func(w http.ResponseWriter, r *http.Request) bool {
		http.Error(w, "no", http.StatusForbidden)
		return true
	})
	// GitHub answers 403 with X-RateLimit-Remaining: 0 when the budget is
	// spent: that is a rate limit, not a refusal. (Another host: the block
	// would hold the other sources too.)
	other := newUpstream(t, 1, h.clock.Now)
	other.on("/spent/page/1", func(w http.ResponseWriter, r *http.Request) bool {
		w.Header().Set("X-RateLimit-Remaining", "0")
		w.Header().Set("X-RateLimit-Reset", fmt.Sprint(h.clock.Now().Add(time.Hour).Unix()))
		http.Error(w, "API rate limit exceeded", http.StatusForbidden)
		return true
	})
	base := func() string { return up.URL }
	cfg := loadConfig(t, "", map[string]string{
		"locked": "every: 1m\njitter: 0s\n", "forbidden": "every: 1m\njitter: 0s\n", "spent": "every: 1m\njitter: 0s\n",
	}, map[string]fetchFunc{"locked": pager(base, "locked"), "forbidden": pager(base, "forbidden"),
		"spent": pager(func() string { return other.URL }, "spent")})
	s := h.syncer(cfg, Config{})
	h.clock.Advance(time.Minute)
	if n := h.runDue(s); n != 3 {
		t.Fatalf("ran %d", n)
	}
	for _, name := range []string{"locked", "forbidden"} {
		r := h.source(name)
		if r.Status != "disabled" || !strings.Contains(r.StatusReason, "authorization refused by upstream") {
			t.Errorf("%s: status %s, reason %q", name, r.Status, r.StatusReason)
		}
	}
	if r := h.source("spent"); r.Status != "active" || r.Failures != 0 {
		t.Errorf("spent rate limit: status %s failures %d, want active and deferred", r.Status, r.Failures)
	}
	if runs := h.runs("spent"); runs[0].Status != "deferred" {
		t.Errorf("spent rate limit run: %s", runs[0].Status)
	}
	if logs := h.logs.String(); strings.Count(logs, `msg="source disabled"`) != 2 {
		t.Errorf("want two 'source disabled' lines:\n%s", logs)
	}
}

func TestStopAfterCompletes(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	var calls atomic.Int32
	fetch := func(ctx context.Context, env connectors.Env, c json.RawMessage, emit connectors.EmitFunc) (connectors.Result, error) {
		calls.Add(1)
		return connectors.Result{}, nil
	}
	start := h.clock.Now()
	after := start.Add(150 * time.Second).UTC().Format(time.RFC3339)
	past := start.Add(-time.Hour).UTC().Format(time.RFC3339)
	cfg := loadConfig(t, "", map[string]string{
		"until": "every: 1m\njitter: 0s\nstop: {after: " + after + "}\n",
		"over":  "every: 1m\njitter: 0s\nstop: {after: " + past + "}\n",
	}, map[string]fetchFunc{"until": fetch, "over": fetch})
	s := h.syncer(cfg, Config{})

	// "over" passed its date while the syncer was down: it is completed
	// without another run.
	if n := h.runDue(s); n != 1 {
		t.Fatalf("first pass ran %d, want only 'until'", n)
	}
	if r := h.source("over"); r.Status != "completed" || !strings.Contains(r.StatusReason, "stop.after "+past+" reached") {
		t.Errorf("over: %s %q", r.Status, r.StatusReason)
	}
	if len(h.runs("over")) != 0 {
		t.Errorf("'over' ran after its stop time")
	}
	// "until" runs at +0 and +60s; the run after that would be at +120s.
	h.runAt(s, "until")
	if r := h.source("until"); r.Status != "active" {
		t.Fatalf("until after 2 runs: %s", r.Status)
	}
	h.runAt(s, "until")
	r := h.source("until")
	if r.Status != "completed" || !strings.Contains(r.StatusReason, "stop.after") {
		t.Fatalf("until after 3 runs: %s %q", r.Status, r.StatusReason)
	}
	h.clock.Advance(time.Hour)
	if n := h.runDue(s); n != 0 || calls.Load() != 3 {
		t.Fatalf("completed source ran again (%d runs, %d calls)", n, calls.Load())
	}
	var changed *time.Time
	if err := h.pool.QueryRow(context.Background(), `SELECT status_changed_at FROM sources WHERE name = 'until'`).Scan(&changed); err != nil || changed == nil {
		t.Errorf("status_changed_at not set: %v", err)
	}
}

func TestStopWhenCompletes(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	var n atomic.Int32
	// The watched job reports its state; it is done on the third look.
	job := items(func() []map[string]any {
		state := "running"
		if n.Add(1) >= 3 {
			state = "done"
		}
		return []map[string]any{{"id": "job-1", "status": state, "checks": int(n.Load())}}
	})
	broken := items(func() []map[string]any { return []map[string]any{{"id": "x"}} })
	cfg := loadConfig(t, "", map[string]string{
		"job":  "every: 1m\njitter: 0s\nstop: {when: 'run.status == \"succeeded\" && run.updated > 0 && source.failure_count == 0 && run.seen == 1'}\n",
		"done": "every: 1m\njitter: 0s\nstop: {when: 'run.status == \"succeeded\"'}\n",
		// run.seen (a number) is refused at load; a time (nil or not)
		// gets past the check and fails at run time.
		"broken": "every: 1m\njitter: 0s\nstop: {when: 'source.last_change_at'}\n",
	}, map[string]fetchFunc{"job": job, "done": broken, "broken": broken})
	s := h.syncer(cfg, Config{})
	h.clock.Advance(time.Minute)
	h.runDue(s) // job created (not updated), done completes at once, broken errs
	if r := h.source("done"); r.Status != "completed" || !strings.Contains(r.StatusReason, `stop.when "run.status == \"succeeded\"" was true after run`) {
		t.Errorf("done: %s %q", r.Status, r.StatusReason)
	}
	if r := h.source("job"); r.Status != "active" {
		t.Fatalf("job after a create: %s %q", r.Status, r.StatusReason)
	}
	// A stop.when that does not give a boolean keeps the source running
	// and says why in last_error.
	if r := h.source("broken"); r.Status != "active" || !strings.Contains(r.LastError, "stop.when") || !strings.Contains(r.LastError, "stop.when: returned a time, want a boolean") {
		t.Errorf("broken: %s, last_error %q", r.Status, r.LastError)
	}
	h.runAt(s, "job") // updated: checks 1 -> 2, status running
	r := h.source("job")
	if r.Status != "completed" {
		t.Fatalf("job after an update: %s", r.Status)
	}
	if logs := h.logs.String(); !strings.Contains(logs, `msg="source completed"`) {
		t.Errorf("no 'source completed' log line")
	}
}

func TestAdaptiveIntervalMovesBothWays(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	var version atomic.Int32
	fetch := items(func() []map[string]any {
		return []map[string]any{{"id": "price", "title": fmt.Sprintf("v%d", version.Load())}}
	})
	cfg := loadConfig(t, "", map[string]string{
		"prices": "every: 8m\njitter: 0s\nadaptive: {min: 1m, max: 30m}\n",
	}, map[string]fetchFunc{"prices": fetch})
	s := h.syncer(cfg, Config{})
	if r := h.source("prices"); r.Interval != 480 {
		t.Fatalf("initial interval %v, want every (8m)", r.Interval)
	}
	h.runDue(s) // first run creates the record: a change
	var seen []float64
	check := func(want float64, reason string) {
		t.Helper()
		r := h.source("prices")
		seen = append(seen, r.Interval)
		if r.Interval != want || !strings.Contains(r.IntervalReason, reason) {
			t.Fatalf("interval %vs (%q), want %vs containing %q; history %v", r.Interval, r.IntervalReason, want, reason, seen)
		}
		if got := r.NextRunAt.Sub(h.clock.Now()).Seconds(); math.Abs(got-want) > 0.001 {
			t.Fatalf("next run in %vs, want %vs", got, want)
		}
	}
	check(240, "1 change(s) in the last run: interval halved from 8m0s to 4m0s (adaptive 1m0s..30m0s)")
	for _, want := range []float64{120, 60, 60} {
		version.Add(1)
		h.runAt(s, "prices")
		check(want, "change(s) in the last run")
	}
	// Nothing changes any more: the interval follows half the quiet time up
	// to max, and stays there.
	for range 12 {
		h.runAt(s, "prices")
		r := h.source("prices")
		seen = append(seen, r.Interval)
		if r.Interval < 60 || r.Interval > 1800 {
			t.Fatalf("interval %vs outside [1m, 30m]", r.Interval)
		}
		if !strings.Contains(r.IntervalReason, "no change for") {
			t.Fatalf("reason %q", r.IntervalReason)
		}
	}
	if last := seen[len(seen)-1]; last != 1800 {
		t.Fatalf("after a long quiet the interval is %vs, want the max 1800s; history %v", last, seen)
	}
	// A change brings it down again.
	version.Add(1)
	h.runAt(s, "prices")
	check(900, "halved from 30m0s to 15m0s")
}

func TestPauseResumeRunNow(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	var calls atomic.Int32
	fetch := func(ctx context.Context, env connectors.Env, c json.RawMessage, emit connectors.EmitFunc) (connectors.Result, error) {
		calls.Add(1)
		return connectors.Result{}, nil
	}
	cfg := loadConfig(t, "", map[string]string{"inbox": "every: 1h\njitter: 0s\n"}, map[string]fetchFunc{"inbox": fetch})
	s := h.syncer(cfg, Config{})
	ctx := context.Background()
	h.runDue(s)

	if _, err := sources.Pause(ctx, h.pool, "inbox", "vacation", h.clock.Now()); err != nil {
		t.Fatal(err)
	}
	if r := h.source("inbox"); r.Status != "paused" || r.StatusReason != "vacation" {
		t.Fatalf("paused: %s %q", r.Status, r.StatusReason)
	}
	h.clock.Advance(5 * time.Hour)
	if n := h.runDue(s); n != 0 {
		t.Fatalf("a paused source ran")
	}
	if err := sources.RunNow(ctx, h.pool, "inbox", h.clock.Now()); err == nil || !strings.Contains(err.Error(), `source "inbox" is paused: resume it first`) {
		t.Fatalf("run-now on a paused source: %v", err)
	}
	st, err := sources.Resume(ctx, h.pool, "inbox", h.clock.Now())
	if err != nil || st.PreviousStatus != "paused" {
		t.Fatalf("resume: %+v %v", st, err)
	}
	if r := h.source("inbox"); r.Status != "active" || !strings.Contains(r.StatusReason, "resumed by operator (was paused)") {
		t.Fatalf("resumed: %s %q", r.Status, r.StatusReason)
	}
	if n := h.runDue(s); n != 1 {
		t.Fatalf("a resumed source is due now; ran %d", n)
	}
	if st, _ := sources.Resume(ctx, h.pool, "inbox", h.clock.Now()); st == nil || st.PreviousStatus != "active" {
		t.Errorf("resume of an active source reports %+v", st)
	}

	// run-now: due within the hour, run at once with reason manual.
	if n := h.runDue(s); n != 0 {
		t.Fatalf("not due yet, ran %d", n)
	}
	if err := sources.RunNow(ctx, h.pool, "inbox", h.clock.Now()); err != nil {
		t.Fatal(err)
	}
	if n := h.runDue(s); n != 1 {
		t.Fatalf("run-now: ran %d", n)
	}
	runs := h.runs("inbox")
	if last := runs[len(runs)-1]; last.Reason != "manual" {
		t.Errorf("run-now run reason %q", last.Reason)
	}
	if calls.Load() != 3 {
		t.Errorf("fetched %d times, want 3", calls.Load())
	}

	// A disabled source resumes with its failures cleared.
	h.exec(`UPDATE sources SET status = 'disabled', status_reason = 'x', failure_count = 7 WHERE name = 'inbox'`)
	if st, err := sources.Resume(ctx, h.pool, "inbox", h.clock.Now()); err != nil || st.PreviousStatus != "disabled" {
		t.Fatalf("resume disabled: %+v %v", st, err)
	}
	if r := h.source("inbox"); r.Failures != 0 {
		t.Errorf("failures after resume: %d", r.Failures)
	}

	for _, err := range []error{
		func() error { _, err := sources.Pause(ctx, h.pool, "nope", "", h.clock.Now()); return err }(),
		sources.RunNow(ctx, h.pool, "nope", h.clock.Now()),
		func() error { _, err := sources.Resume(ctx, h.pool, "nope", h.clock.Now()); return err }(),
	} {
		if !errors.Is(err, sources.ErrUnknownSource) || !strings.Contains(err.Error(), `"nope" (known: inbox)`) {
			t.Errorf("unknown source: %v", err)
		}
	}

	states, err := sources.States(ctx, h.pool)
	if err != nil || len(states) != 1 {
		t.Fatalf("states: %v %v", states, err)
	}
	var out bytes.Buffer
	if err := sources.WriteStatus(&out, states, h.clock.Now()); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "SOURCE") || !strings.Contains(out.String(), "inbox") || !strings.Contains(out.String(), "active") {
		t.Errorf("status output:\n%s", out.String())
	}
}

// TestConnectorPanicFailsOnlyItsRun: a connector that panics after its
// first page (a bug, or a library that panics on what an upstream sent)
// fails its run with an error that says so, keeps the page written before
// it, backs off, and logs the stack; the syncer and its other sources go
// on.
func TestConnectorPanicFailsOnlyItsRun(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	cfg := loadConfig(t, fastLimits+"syncer: {backoff: {min: 10s, max: 40s}}\n", map[string]string{
		"bad":  "every: 1s\njitter: 0s\n",
		"good": "every: 1s\njitter: 0s\n",
	}, map[string]fetchFunc{
		"bad": func(ctx context.Context, _ connectors.Env, _ json.RawMessage, emit connectors.EmitFunc) (connectors.Result, error) {
			if err := emit(ctx, connectors.Page{Items: []connectors.Item{{Value: map[string]any{"id": "before"}, Loc: "page 1"}}}); err != nil {
				return connectors.Result{}, err
			}
			var m map[string]int
			m["page 2"]++ // a nil map: the runtime panics
			return connectors.Result{}, nil
		},
		"good": items(func() []map[string]any { return []map[string]any{{"id": "g1"}, {"id": "g2"}} }),
	})
	s := h.syncer(cfg, Config{})
	if n := h.runDue(s); n != 2 {
		t.Fatalf("ran %d sources, want 2", n)
	}
	runs := h.runs("bad")
	if len(runs) != 1 || runs[0].Status != "failed" || !strings.Contains(runs[0].Error, "the connector panicked") ||
		!strings.Contains(runs[0].Error, "assignment to entry in nil map") {
		t.Fatalf("bad's runs: %+v, want one failed run whose error says the connector panicked, and why", runs)
	}
	if r := h.source("bad"); r.Failures != 1 || !strings.Contains(r.IntervalReason, "backoff after 1 consecutive failure") {
		t.Errorf("bad after the panic: failures %d, interval reason %q", r.Failures, r.IntervalReason)
	}
	for name, want := range map[string]map[string]int{"bad": {"before": 1}, "good": {"g1": 1, "g2": 1}} {
		if got, _ := h.stored(name); !maps.Equal(got, want) {
			t.Errorf("%s's records %v, want %v (the page before the panic, and the other source's)", name, got, want)
		}
	}
	if r := h.runs("good"); len(r) != 1 || r[0].Status != "succeeded" {
		t.Errorf("good's runs: %+v, want one succeeded", r)
	}
	if logs := h.logs.String(); !strings.Contains(logs, `msg="the connector panicked; the run failed"`) ||
		!strings.Contains(logs, "source=bad") || !strings.Contains(logs, "lifecycle_test.go") {
		t.Errorf("the log does not name the panic, its source and its stack:\n%s", logs)
	}
}

// panickyKeys is a source's connector made a KeyChecker whose check
// panics, as a connector's bug would.
type panickyKeys struct{ connectors.Connector }

func (panickyKeys) Present(context.Context, []string) ([]string, error) {
	var byID map[string]bool
	byID["k1"] = true // a write to a nil map
	return nil, nil
}

// A panic while the connector checks which records are still upstream
// fails the run like one in its fetch: the records stay (nothing is
// deleted on a check that did not end), the log has the stack.
func TestKeyCheckPanicFailsItsRun(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	cfg := loadConfig(t, fastLimits, map[string]string{"keys": "every: 1s\njitter: 0s\n"}, map[string]fetchFunc{
		"keys": func(ctx context.Context, _ connectors.Env, _ json.RawMessage, emit connectors.EmitFunc) (connectors.Result, error) {
			if err := emit(ctx, connectors.Page{Items: []connectors.Item{{Value: map[string]any{"id": "k1"}, Loc: "page 1"}}}); err != nil {
				return connectors.Result{}, err
			}
			return connectors.Result{CheckKeys: true}, nil
		},
	})
	s := h.syncer(cfg, Config{})
	src := s.source("keys")
	src.conn = panickyKeys{src.conn}
	h.runDue(s)
	runs := h.runs("keys")
	if len(runs) != 1 || runs[0].Status != "failed" || !strings.Contains(runs[0].Error, "the connector panicked") {
		t.Fatalf("runs: %+v, want one failed run whose error says the connector panicked", runs)
	}
	if got, _ := h.stored("keys"); !maps.Equal(got, map[string]int{"k1": 1}) {
		t.Errorf("records %v, want k1 kept", got)
	}
	if logs := h.logs.String(); !strings.Contains(logs, `msg="the connector panicked; the key check failed"`) || !strings.Contains(logs, "lifecycle_test.go") {
		t.Errorf("the log does not name the panic and its stack:\n%s", logs)
	}
}
