package taskrunner_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/evaluator"
	"github.com/lookout-dev/lookout/internal/pgtest"
	"github.com/lookout-dev/lookout/internal/testsignal"
)

// Three syncer replicas, each with its task runner, run the source every
// 200ms next to an evaluator that watches the same source: every task is
// claimed and executed exactly once, whichever replica ran the pass, and
// the evaluator sees lookout's writes as changes (a watch on completions
// fires once per task) without acting on tasks.
func TestExactlyOnceWithThreeReplicas(t *testing.T) {
	t.Parallel()
	w := newWorld(t, options{mode: modeOK, every: "200ms",
		extra: "watches:\n  - name: completed\n    when: changed(\"status\") && record.status == \"Complete\"\n"})
	var ids []string
	for i := range 3 {
		ids = append(ids, w.addTask(fmt.Sprintf("task %d", i), float64(i)))
	}
	var reps []*replica
	for i := range 3 {
		reps = append(reps, w.replica(fmt.Sprintf("syncer-%d", i+1), pgtest.PoolFor(t, w.url), nil))
	}
	cfg, err := config.Load(w.dir)
	if err != nil {
		t.Fatal(err)
	}
	ec := evaluator.FromConfig(cfg)
	ec.Owner = "evaluator-1"
	ev, err := evaluator.New(pgtest.PoolFor(t, w.url), ec, slog.New(slog.NewTextHandler(w.logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if err := ev.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ev.Stop() })
	for _, r := range reps {
		w.start(r)
	}
	passes := func() (n int64) {
		for _, r := range reps {
			n += r.passes.Load()
		}
		return n
	}
	testsignal.Eventually(t, "every task Complete in the tool", func() bool {
		for _, id := range ids {
			if w.status(id) != "Complete" {
				return false
			}
		}
		return true
	})
	// Let the replicas run the source and its pass a few more times.
	after := passes()
	testsignal.Eventually(t, "six more passes", func() bool { return passes() >= after+6 })
	for _, r := range reps {
		_ = r.syncer.Stop()
		_ = r.runner.Stop()
	}
	calls := w.agent.calls(t)
	seen := map[string]int{}
	for _, c := range calls {
		seen[c.Record["id"].(string)]++
	}
	if len(calls) != 3 || len(seen) != 3 {
		t.Errorf("the agent ran %d times for %d tasks, want 3 for 3: %v", len(calls), len(seen), seen)
	}
	runs := w.runs()
	if len(runs) != 3 {
		t.Fatalf("%d task runs, want 3", len(runs))
	}
	claimers := map[string]bool{}
	for _, r := range runs {
		claimers[r.ClaimedBy] = true
		if r.Status != "completed" || r.Executions != 1 || r.Attempt != 1 {
			t.Errorf("task run %d: status %s, executions %d, attempt %d", r.ID, r.Status, r.Executions, r.Attempt)
		}
	}
	t.Logf("claimed by %d replica(s) in %d passes", len(claimers), passes())
	testsignal.Eventually(t, "the evaluator's notifications of the completions", func() bool {
		var n int
		err := w.pool.QueryRow(context.Background(), `SELECT count(*) FROM notifications WHERE watch = 'completed'`).Scan(&n)
		return err == nil && n == 3
	})
	var executed int
	if err := w.pool.QueryRow(context.Background(), `SELECT count(*) FROM report_task_runs WHERE executed_more_than_once`).Scan(&executed); err != nil || executed != 0 {
		t.Errorf("report_task_runs lists %d task runs executed more than once (%v)", executed, err)
	}
}

// Passes of three replicas over the same mirror at once (runs overlapping
// on different replicas): the claims in PostgreSQL let one of them have
// each task; take: 1 per pass and two tasks make two executions, never
// three.
func TestConcurrentPassesClaimEachTaskOnce(t *testing.T) {
	t.Parallel()
	w := newWorld(t, options{mode: modeOK})
	a, b := w.addTask("a", 1), w.addTask("b", 2)
	var reps []*replica
	for i := range 3 {
		reps = append(reps, w.replica(fmt.Sprintf("syncer-%d", i+1), pgtest.PoolFor(t, w.url), nil))
	}
	w.mirror(reps[0])
	var runID int64
	if err := w.pool.QueryRow(context.Background(), `SELECT run_id FROM sources WHERE name = 'tasks'`).Scan(&runID); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	for _, r := range reps[1:] {
		r.runner.AfterRun("tasks", runID)
		go func() {
			defer func() { done <- struct{}{} }()
			r.runner.Once(context.Background())
		}()
	}
	reps[0].runner.Once(context.Background())
	for range 2 {
		testsignal.Receive(t, done, "a replica's pass")
	}
	calls := w.agent.calls(t)
	if len(calls) != 2 || calls[0].Record["id"] == calls[1].Record["id"] {
		t.Fatalf("the agent ran %d times: %+v", len(calls), calls)
	}
	for _, id := range []string{a, b} {
		if r := w.run(id); r.Status != "completed" || r.Executions != 1 {
			t.Errorf("task %s: status %s, executions %d", id, r.Status, r.Executions)
		}
	}
}
