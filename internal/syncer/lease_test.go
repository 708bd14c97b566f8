package syncer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lookout-dev/lookout/internal/connectors"
	"github.com/lookout-dev/lookout/internal/normalize"
	"github.com/lookout-dev/lookout/internal/pgtest"
	"github.com/lookout-dev/lookout/internal/testsignal"
)

func TestLeaseTakeoverIsRecorded(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	cfg := loadConfig(t, "", map[string]string{"s": "every: 1m\njitter: 0s\n"},
		map[string]fetchFunc{"s": items(func() []map[string]any { return []map[string]any{{"id": "a"}} })})
	a := h.syncer(cfg, Config{Owner: "replica-a", Lease: time.Minute})
	b := h.syncer(cfg, Config{Owner: "replica-b", Lease: time.Minute})
	ctx := context.Background()

	// Replica a claims the source and dies before running it.
	claims, _, err := a.claim(ctx, 1, h.clock.Now(), false)
	if err != nil || len(claims) != 1 {
		t.Fatalf("claim: %v %v", claims, err)
	}
	if n := h.runDue(b); n != 0 {
		t.Fatalf("b ran a source whose lease a holds")
	}
	h.clock.Advance(61 * time.Second)
	if n := h.runDue(b); n != 1 {
		t.Fatalf("b ran %d after the lease expired, want 1", n)
	}
	runs := h.runs("s")
	if len(runs) != 2 {
		t.Fatalf("runs: %+v", runs)
	}
	if r := runs[0]; r.Owner != "replica-a" || r.Status != "abandoned" || !strings.Contains(r.Error, "lease expired while running; taken over by replica-b") {
		t.Errorf("a's run: %+v", r)
	}
	if r := runs[1]; r.Owner != "replica-b" || r.Reason != "takeover" || r.Status != "succeeded" {
		t.Errorf("b's run: %+v", r)
	}
	if !strings.Contains(h.logs.String(), `msg="took over expired lease"`) {
		t.Errorf("no takeover log line")
	}

	// a wakes up: its writes are fenced out and its outcome is not recorded.
	stale := &run{claim: claims[0]}
	rec, err := a.sources["s"].mapper.Map(map[string]any{"id": "b"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.writeBatch(ctx, stale, []job{{recs: []normalize.Record{rec}}}, new(atomic.Bool)); !errors.Is(err, ErrLeaseLost) {
		t.Errorf("write after takeover: %v, want ErrLeaseLost", err)
	}
	_, err = a.finish(ctx, stale, a.sources["s"], outcome{status: "succeeded"}, &runStats{})
	if !errors.Is(err, ErrLeaseLost) {
		t.Errorf("finish after takeover: %v, want ErrLeaseLost", err)
	}
	if r := h.runs("s")[0]; r.Status != "abandoned" {
		t.Errorf("a's run became %s", r.Status)
	}
}

// TestHeartbeatKeepsLongRunsLeased runs a source for several leases of
// the harness's clock: each time the clock passes the lease's expiry, the
// test waits until a's heartbeat has renewed it from the clock's new time
// (state, not a duration), and b then finds the source held.
func TestHeartbeatKeepsLongRunsLeased(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	release := make(chan struct{})
	var releaseOnce sync.Once
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) })
	started := make(chan struct{})
	var fetches atomic.Int32
	slow := func(ctx context.Context, env connectors.Env, c json.RawMessage, emit connectors.EmitFunc) (connectors.Result, error) {
		if fetches.Add(1) == 1 {
			close(started)
		}
		select {
		case <-release:
		case <-ctx.Done():
			return connectors.Result{}, ctx.Err()
		}
		return connectors.Result{}, nil
	}
	const lease = 300 * time.Millisecond
	cfg := loadConfig(t, "", map[string]string{"slow": "every: 1h\njitter: 0s\n"}, map[string]fetchFunc{"slow": slow})
	a := h.syncer(cfg, Config{Owner: "replica-a", Lease: lease})
	b := h.syncer(cfg, Config{Owner: "replica-b", Lease: lease})
	done := make(chan int)
	go func() { n, _ := a.RunDue(context.Background()); done <- n }()
	<-started
	// The run lasts five leases of the clock; without a renewal b would
	// take over at the first step, as each step passes the last expiry.
	for step := range 5 {
		now := h.clock.Advance(lease + lease/3)
		testsignal.Eventually(t, fmt.Sprintf("step %d: a's heartbeat to renew the lease from %s", step, now.Format(time.RFC3339Nano)), func() bool {
			var expires time.Time
			err := h.pool.QueryRow(context.Background(), `SELECT lease_expires_at FROM sources WHERE name = 'slow'`).Scan(&expires)
			return err == nil && !expires.Before(now.Add(lease))
		})
		if n := h.runDue(b); n != 0 {
			t.Fatalf("step %d: b took over a run whose holder is alive", step)
		}
	}
	releaseOnce.Do(func() { close(release) })
	if n := <-done; n != 1 {
		t.Fatalf("a ran %d", n)
	}
	if n := fetches.Load(); n != 1 {
		t.Errorf("the connector was called %d times, want 1", n)
	}
	if runs := h.runs("slow"); len(runs) != 1 || runs[0].Status != "succeeded" {
		t.Fatalf("runs: %+v", runs)
	}
}

// TestThreeReplicasNeverOverlap runs three syncers on one schema against
// sources due every 50ms; the fake connector detects two runs of one
// source at once.
func TestThreeReplicasNeverOverlap(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	const nSources, minRuns = 9, 6
	type counters struct{ running, runs, overlaps atomic.Int32 }
	state := map[string]*counters{}
	sources, fetch := map[string]string{}, map[string]fetchFunc{}
	for i := range nSources {
		name := fmt.Sprintf("src%d", i)
		c := &counters{}
		state[name] = c
		sources[name] = "every: 50ms\njitter: 20ms\n"
		fetch[name] = func(ctx context.Context, env connectors.Env, cur json.RawMessage, emit connectors.EmitFunc) (connectors.Result, error) {
			if c.running.Add(1) > 1 {
				c.overlaps.Add(1)
			}
			defer c.running.Add(-1)
			time.Sleep(time.Duration(2+rand.IntN(15)) * time.Millisecond) // the run's work
			n := c.runs.Add(1)
			err := emit(ctx, connectors.Page{Items: []connectors.Item{{Value: map[string]any{"id": "r", "n": int(n)}, Loc: "x"}}})
			return connectors.Result{}, err
		}
	}
	cfg := loadConfig(t, fastLimits, sources, fetch)
	var replicas []*Syncer
	for _, owner := range []string{"replica-a", "replica-b", "replica-c"} {
		// The lease is far longer than any run: an overlap can then only
		// come from the claim, not from a run stalled past its lease on a
		// busy machine (a lost lease is TestLeaseTakeoverIsRecorded's).
		s := h.syncer(cfg, Config{Owner: owner, Now: time.Now, Lease: time.Minute, PollInterval: 5 * time.Millisecond, Concurrency: 3})
		if err := s.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		replicas = append(replicas, s)
	}
	var stopOnce sync.Once
	stop := func() {
		stopOnce.Do(func() {
			for _, s := range replicas {
				if err := s.Stop(); err != nil {
					t.Errorf("stop: %v", err)
				}
			}
		})
	}
	t.Cleanup(stop)
	t.Cleanup(func() {
		if t.Failed() {
			for name, c := range state {
				t.Logf("%s: %d runs", name, c.runs.Load())
			}
		}
	})
	// On Citus each run's dozen statements go through the coordinator to
	// the workers: at load 40 on 2 cores the three replicas ran about 1.3
	// runs/s (4 or 5 of the 6 runs of each source in 30 s), so there the
	// wait is longer; it waits for the runs, not for the time.
	within := 30 * time.Second
	if pgtest.OnCitus(t, h.pool) {
		within = 3 * time.Minute
	}
	testsignal.EventuallyWithin(t, within, fmt.Sprintf("every source to run %d times", minRuns), func() bool {
		for _, c := range state {
			if c.runs.Load() < minRuns {
				return false
			}
		}
		return true
	})
	stop()

	total := 0
	for name, c := range state {
		if o := c.overlaps.Load(); o != 0 {
			t.Errorf("%s: %d overlapping runs", name, o)
		}
		total += int(c.runs.Load())
	}
	// Every replica took part, and every finished run is recorded once;
	// none lost its lease (runs cut off by the final Stop are abandoned as
	// interrupted by shutdown, which is no lost lease).
	rows, err := h.pool.Query(context.Background(), `
		SELECT owner, count(*) FILTER (WHERE status = 'succeeded'), count(*) FILTER (WHERE status = 'abandoned' AND error NOT LIKE 'interrupted by shutdown%')
		FROM sync_runs GROUP BY owner ORDER BY owner`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	owners, succeeded := 0, 0
	for rows.Next() {
		var owner string
		var ok, abandoned int
		if err := rows.Scan(&owner, &ok, &abandoned); err != nil {
			t.Fatal(err)
		}
		owners++
		succeeded += ok
		if abandoned != 0 {
			t.Errorf("%s: %d abandoned runs (a lease was lost)", owner, abandoned)
		}
		t.Logf("%s: %d runs succeeded", owner, ok)
	}
	if owners != 3 {
		t.Errorf("%d replicas ran sources, want 3", owners)
	}
	if succeeded > total || succeeded < total-nSources {
		t.Errorf("%d succeeded runs recorded for %d fetches", succeeded, total)
	}
}

// TestReplicasRegisterTogether: replicas that start at the same time (a
// Deployment's pods) register the same sources at once; both succeed. The
// upserts ran in each replica's map order and deadlocked.
func TestReplicasRegisterTogether(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	sources, fetch := map[string]string{}, map[string]fetchFunc{}
	for i := range 2000 {
		name := fmt.Sprintf("s%04d", i)
		sources[name] = "every: 1h\n"
		fetch[name] = items(func() []map[string]any { return nil })
	}
	cfg := loadConfig(t, "", sources, fetch)
	for round := range 3 {
		a, b := h.syncer(cfg, Config{Owner: "replica-a"}), h.syncer(cfg, Config{Owner: "replica-b"})
		start := make(chan struct{})
		errs := make(chan error, 2)
		for _, s := range []*Syncer{a, b} {
			go func() {
				<-start
				errs <- s.Register(context.Background())
			}()
		}
		close(start)
		for range 2 {
			if err := <-errs; err != nil {
				t.Fatalf("round %d: register: %v", round, err)
			}
		}
	}
	var n int
	if err := h.pool.QueryRow(context.Background(), `SELECT count(*) FROM sources`).Scan(&n); err != nil || n != 2000 {
		t.Fatalf("%d sources registered (%v), want 2000", n, err)
	}
}

// TestRegisterWritesOnlyWhatChanged: a replica that starts with the
// configuration the table already has writes no source row (it would
// lock every row while the other replicas run them); a changed source is
// written, the others are left alone.
func TestRegisterWritesOnlyWhatChanged(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	sources, fetch := map[string]string{}, map[string]fetchFunc{}
	for i := range 50 {
		name := fmt.Sprintf("s%02d", i)
		sources[name] = "every: 1h\n"
		fetch[name] = items(func() []map[string]any { return nil })
	}
	cfg := loadConfig(t, "", sources, fetch)
	h.syncer(cfg, Config{Owner: "replica-a"}) // registers
	xmin := func() map[string]string {
		rows, err := h.pool.Query(context.Background(), `SELECT name, xmin::text FROM sources`)
		if err != nil {
			t.Fatal(err)
		}
		m, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (struct{ k, v string }, error) {
			var kv struct{ k, v string }
			return kv, r.Scan(&kv.k, &kv.v)
		})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, kv := range m {
			out[kv.k] = kv.v
		}
		return out
	}
	before := xmin()
	if err := h.syncer(cfg, Config{Owner: "replica-b"}).Register(context.Background()); err != nil {
		t.Fatal(err)
	}
	after := xmin()
	for name, x := range before {
		if after[name] != x {
			t.Errorf("%s was written again by a replica with the same configuration", name)
		}
	}
	// One source's schedule changes: it alone is written.
	sources["s07"] = "every: 2h\n"
	cfg2 := loadConfig(t, "", sources, fetch)
	if err := h.syncer(cfg2, Config{Owner: "replica-c"}).Register(context.Background()); err != nil {
		t.Fatal(err)
	}
	changed := xmin()
	for name, x := range after {
		if wrote := changed[name] != x; wrote != (name == "s07") {
			t.Errorf("%s written: %v, want %v", name, wrote, name == "s07")
		}
	}
	if r := h.source("s07"); r.Interval != 7200 {
		t.Errorf("s07 interval %v s after its schedule changed, want 7200", r.Interval)
	}
}
