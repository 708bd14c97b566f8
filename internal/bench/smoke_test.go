package bench

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/lookout-dev/lookout/internal/pgtest"
)

// The regression guard of the hot paths (docs/benchmarks.md, "CI smoke"):
// each is measured against a baseline measured in the same run on the same
// machine, alternated with it five times after a warm-up, and the median ratio must stay
// above a threshold set at half of the ratio measured when the guard was
// written — a 2x regression fails, the load of a shared CI machine (which
// slows both sides) does not.

// smokeRuns is how many alternated runs each ratio's median is taken over.
const smokeRuns = 5

// smokeMedian runs each side once untimed (connections, plans, caches),
// then alternates baseline and measured runs and returns the median of
// baseline time ÷ measured time (the measured path's speed as a fraction
// of the baseline's).
func smokeMedian(t *testing.T, baseline, measured func(run int) (time.Duration, error)) (float64, []string) {
	t.Helper()
	if _, err := baseline(smokeRuns); err != nil {
		t.Fatalf("baseline warm-up: %v", err)
	}
	if _, err := measured(smokeRuns); err != nil {
		t.Fatalf("measured warm-up: %v", err)
	}
	ratios := make([]float64, 0, smokeRuns)
	var runs []string
	for i := range smokeRuns {
		b, err := baseline(i)
		if err != nil {
			t.Fatalf("baseline run %d: %v", i, err)
		}
		m, err := measured(i)
		if err != nil {
			t.Fatalf("measured run %d: %v", i, err)
		}
		ratios = append(ratios, b.Seconds()/m.Seconds())
		runs = append(runs, fmt.Sprintf("%v/%v", b.Round(time.Millisecond), m.Round(time.Millisecond)))
	}
	slices.Sort(ratios)
	return ratios[len(ratios)/2], runs
}

// smokeDeliveries is how many notifications each delivery run sends;
// the bare loop sends smokeBareFactor times as many (it is that much
// faster), so that both runs last long enough for the load of the
// machine to even out.
const (
	smokeDeliveries = 1000
	smokeBareFactor = 4
)

// smokeDeliveriesMin is the least median ratio of webhook deliveries
// through the outbox to bare signed POSTs to the same receiver: half of
// 0.21, the lowest of the medians measured when the guard was written
// (0.21 to 0.50 at load 10-18 on 2 cores: the bare loop gains more than
// the outbox when the machine is quieter; docs/benchmarks.md).
const smokeDeliveriesMin = 0.10

// TestSmokeDeliveries guards (5): deliveries through the outbox (claim,
// sign, POST, record) against a bare signed POST loop with the same
// concurrency to the same receiver.
func TestSmokeDeliveries(t *testing.T) {
	pool := pgtest.Pool(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r := NewReceiver()
	defer r.Close()
	ratio, runs := smokeMedian(t,
		func(int) (time.Duration, error) {
			took, err := BarePosts(ctx, r, smokeBareFactor*smokeDeliveries)
			return took / smokeBareFactor, err
		},
		func(i int) (time.Duration, error) {
			return DeliverTo(ctx, pool, r, fmt.Sprintf("s%d", i), smokeDeliveries)
		})
	t.Logf("deliveries ÷ bare POSTs: median %.3f of runs (bare per 1000 / outbox) %v; threshold %.3f", ratio, runs, smokeDeliveriesMin)
	if ratio < smokeDeliveriesMin {
		t.Errorf("webhook deliveries run at %.3f of a bare signed POST loop to the same receiver (runs %v); want at least %.3f: "+
			"the delivery path regressed (profile it with lookout-bench --only 5 --cpuprofile)", ratio, runs, smokeDeliveriesMin)
	}
}

// smokeBacklog is how many changes each backlog run drains.
const smokeBacklog = 4000

// smokeBacklogMin is the least median ratio of the evaluator's drain to a
// bare claim-and-update loop over the same rows: half of 0.127, the
// lower of two medians measured when the guard was written (0.127 and
// 0.148 at load 8 on 2 cores; docs/benchmarks.md).
const smokeBacklogMin = 0.063

// TestSmokeBacklog guards (4): one evaluator draining a backlog (claim,
// two deterministic watches, evaluations, notifications, settle) against
// a bare claim-and-update loop over the same rows (a copy of them: only
// the evaluator marks changes). Each pair of runs drains changes written
// before the bare run, not timed.
func TestSmokeBacklog(t *testing.T) {
	pool := pgtest.Pool(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	next := 20_000_000
	fill := func() error {
		next += smokeBacklog
		if err := fillBacklog(ctx, pool, next, smokeBacklog); err != nil {
			return err
		}
		// Every run starts from the same table: the earlier runs' dead
		// rows and index entries gone, the statistics current.
		_, err := pool.Exec(ctx, `VACUUM ANALYZE changes`)
		return err
	}
	ratio, runs := smokeMedian(t,
		func(int) (time.Duration, error) {
			if err := fill(); err != nil {
				return 0, err
			}
			return bareDrain(ctx, pool, smokeBacklog)
		},
		func(int) (time.Duration, error) { return drainBacklog(ctx, pool, smokeBacklog) })
	t.Logf("backlog ÷ bare claim-and-update: median %.3f of runs (bare / evaluator) %v; threshold %.3f", ratio, runs, smokeBacklogMin)
	if ratio < smokeBacklogMin {
		t.Errorf("the evaluator drains a backlog at %.3f of a bare claim-and-update loop over the same rows (runs %v); want at least %.3f: "+
			"the evaluator's path regressed (profile it with lookout-bench --only 4 --cpuprofile)", ratio, runs, smokeBacklogMin)
	}
}
