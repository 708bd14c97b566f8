package taskrunner_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lookout-dev/lookout/internal/pgtest"
	"github.com/lookout-dev/lookout/internal/testsignal"
)

// A replica's executor is killed while the replica has lost its database
// (it can record nothing): the claim expires, another replica recovers it
// — back to Todo in the tool with RetryCount 1 and the reason — and the
// next run retries it once, with the same idempotency key.
func TestKilledExecutorClaimExpiresAndIsRetried(t *testing.T) {
	t.Parallel()
	// The lease and the timeout are long, and the lease ends when the test
	// moves the clock: with a 3 s lease and a 2 s timeout the execution
	// had to start within 0.7 s of the claim (the claim's confirmation in
	// the tool and its read-back), which a busy machine, or a Citus
	// coordinator, did not always do.
	clk := &clock{}
	w := newWorld(t, options{mode: modeHangOnce, now: clk.Now,
		task: "name: execute\n    when: record.status == \"Todo\"\n    lease: 10m\n    timeout: 1m\n    backoff: {min: 1ms, max: 1ms}\n"})
	id := w.addTask("fragile", 1)
	proxy, url := pgtest.NewProxy(t, w.url)
	a := w.replica("syncer-a", pgtest.PoolFor(t, url), nil)
	b := w.replica("syncer-b", nil, nil)

	w.mirror(a)
	go a.runner.Once(context.Background())
	pidFile := filepath.Join(w.agent.dir, "pid")
	// The agent writes its pid (the file exists, empty, before it does).
	var pid int
	testsignal.Eventually(t, "the first execution to start and write its pid", func() bool {
		raw, err := os.ReadFile(pidFile)
		if err != nil {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(raw)))
		return err == nil
	})
	proxy.Cut()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	a.runner.Wait()
	if r := w.run(id); r.Status != "running" {
		t.Fatalf("replica a recorded the end without its database: %s", r.Status)
	}

	// b's maintenance recovers the claim once it expired.
	clk.Advance(10*time.Minute + time.Second)
	if err := b.runner.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The tool's write lands before the run records it done (tool action
	// cleared): wait for both, or the check below can read in between.
	testsignal.Eventually(t, "the expired claim released in the tool and recorded", func() bool {
		return w.status(id) == "Todo" && w.fake.Value(id, "RetryCount") == float64(1) && w.run(id).ToolAction == ""
	})
	_ = b.runner.Stop()
	r := w.run(id)
	if r.Status != "expired" || r.Failures != 1 || !strings.Contains(r.LastError, "the claim expired at") || r.ToolAction != "" {
		t.Errorf("after the recovery: status %s, failures %d, last error %q, tool action %q", r.Status, r.Failures, r.LastError, r.ToolAction)
	}
	if le := w.fake.Value(id, "LastError").(string); !strings.Contains(le, "the claim expired at") {
		t.Errorf("LastError in the tool: %q", le)
	}
	var stuck int
	if err := w.pool.QueryRow(context.Background(), `SELECT count(*) FROM report_stuck WHERE kind LIKE 'task%'`).Scan(&stuck); err != nil || stuck != 0 {
		t.Errorf("report_stuck lists %d task rows after the recovery (%v)", stuck, err)
	}

	w.sync(b)
	calls := w.agent.calls(t)
	if len(calls) != 2 || calls[0].IdempotencyKey != calls[1].IdempotencyKey || calls[1].RetryCount != 1 {
		t.Fatalf("the agent ran %d times (keys differ or retry count wrong): %+v", len(calls), calls)
	}
	r = w.run(id)
	if r.Status != "completed" || r.Attempt != 2 || r.Executions != 2 || !strings.Contains(string(r.History), `"status": "expired"`) {
		t.Errorf("after the retry: status %s, attempt %d, executions %d, history %s", r.Status, r.Attempt, r.Executions, r.History)
	}
	if s := w.status(id); s != "Complete" {
		t.Errorf("Status %v", s)
	}
}
