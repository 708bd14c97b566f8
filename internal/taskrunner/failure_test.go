package taskrunner_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lookout-dev/lookout/internal/connectors/notion/notiontest"
	"github.com/lookout-dev/lookout/internal/taskrunner"
	"github.com/lookout-dev/lookout/internal/testsignal"
)

// A recoverable failure releases the task: back to Todo with RetryCount 1
// and LastError in the tool; the next run retries it with the same
// idempotency key, and it completes with LastError cleared.
func TestRetryKeepsTheIdempotencyKey(t *testing.T) {
	t.Parallel()
	w := newWorld(t, options{mode: modeFailOnce})
	id := w.addTask("flaky", 1)
	rep := w.replica("syncer-1", nil, nil)

	w.sync(rep)
	r := w.run(id)
	if r.Status != "released" || r.Failures != 1 || r.RetryAt == nil || !strings.Contains(r.LastError, "exited with status 3: first attempt fails") {
		t.Fatalf("after the failure: status %s, failures %d, retry_at %v, last error %q", r.Status, r.Failures, r.RetryAt, r.LastError)
	}
	if s, rc, le, by := w.status(id), w.fake.Value(id, "RetryCount"), w.fake.Value(id, "LastError"), w.fake.Value(id, "ClaimedBy"); s != "Todo" || rc != float64(1) || !strings.Contains(le.(string), "first attempt fails") || by != "" {
		t.Errorf("page after the failure: Status %v, RetryCount %v, LastError %v, ClaimedBy %v", s, rc, le, by)
	}
	w.sync(rep)
	calls := w.agent.calls(t)
	if len(calls) != 2 {
		t.Fatalf("the agent ran %d times, want 2", len(calls))
	}
	if calls[0].IdempotencyKey != calls[1].IdempotencyKey {
		t.Errorf("the retry's idempotency key %q differs from the first attempt's %q", calls[1].IdempotencyKey, calls[0].IdempotencyKey)
	}
	if calls[1].Attempt != 2 || calls[1].RetryCount != 1 || calls[0].RunID == calls[1].RunID {
		t.Errorf("retry: attempt %d, retry_count %d, run ids %s and %s", calls[1].Attempt, calls[1].RetryCount, calls[0].RunID, calls[1].RunID)
	}
	r = w.run(id)
	if r.Status != "completed" || r.Attempt != 2 || r.Executions != 2 || r.LastError != "" || !strings.Contains(string(r.History), `"status": "released"`) {
		t.Errorf("after the retry: status %s, attempt %d, executions %d, last error %q, history %s", r.Status, r.Attempt, r.Executions, r.LastError, r.History)
	}
	if s, le := w.status(id), w.fake.Value(id, "LastError"); s != "Complete" || le != "" {
		t.Errorf("page after the retry: Status %v, LastError %q", s, le)
	}
}

// Executors that misbehave: each failure is recorded on the task run with
// a clear LastError, the task is left in a state a person understands, and
// nothing runs twice unless a retry may help.
func TestBadExecutors(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		mode        string
		task        string
		status      string // task run status after one run
		page        string // Status in the tool
		lastError   string
		executions  int // after a second run
		retryCount  any
		exitCode    int
		stderrInErr bool
	}{
		{mode: modeNoResult, status: "failed", page: "Failed", executions: 1, retryCount: float64(1), exitCode: 0,
			lastError: "exited 0 but printed no result (a JSON object on the last line of its output); not retried, since it may have done its work"},
		{mode: modeGarbage, status: "failed", page: "Failed", executions: 1, retryCount: float64(1), exitCode: 0,
			lastError: `exited 0 but the last line of its output is not a JSON object ("all done, boss"); not retried`},
		{mode: modeNoRetry, status: "failed", page: "Failed", executions: 1, retryCount: float64(1), exitCode: 2,
			lastError: "exited with status 2: the task asks for something impossible"},
		{mode: modeFail, status: "released", page: "Todo", executions: 2, retryCount: float64(2), exitCode: 3,
			lastError: "exited with status 3: boom: the agent broke"},
		{mode: modeHang, task: "name: execute\n    when: record.status == \"Todo\"\n    lease: 30s\n    timeout: 300ms\n    max_attempts: 1\n",
			status: "failed", page: "Failed", executions: 1, retryCount: float64(1), exitCode: -1,
			lastError: "did not finish within its time"},
	} {
		t.Run(tt.mode, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, options{mode: tt.mode, task: tt.task})
			id := w.addTask("task", 1)
			rep := w.replica("syncer-1", nil, nil)
			w.sync(rep)
			r := w.run(id)
			if r.Status != tt.status || !strings.Contains(r.LastError, tt.lastError) {
				t.Errorf("task run: status %s, last error %q; want %s with %q", r.Status, r.LastError, tt.status, tt.lastError)
			}
			// The end is logged once, with retry_at only when there is one.
			if logs := w.logs.String(); strings.Count(logs, "retry_at=<nil>") > 0 || (r.RetryAt != nil) != strings.Contains(logs, "retry_at=") {
				t.Errorf("status %s, retry_at %v; the log says:\n%s", r.Status, r.RetryAt, logs)
			}
			if tt.exitCode >= 0 && (r.ExitCode == nil || *r.ExitCode != tt.exitCode) {
				t.Errorf("exit code %v, want %d", r.ExitCode, tt.exitCode)
			}
			if s, le := w.status(id), w.fake.Value(id, "LastError"); s != tt.page || !strings.Contains(le.(string), tt.lastError) {
				t.Errorf("page: Status %v, LastError %q; want %s", s, le, tt.page)
			}
			w.sync(rep)
			r = w.run(id)
			calls := len(w.agent.calls(t))
			if tt.mode == modeHang && calls < tt.executions {
				// Killed at its 300 ms timeout, the agent may not have
				// logged its input yet (a busy machine starts a shell
				// slower than that): it ran, and no more than once.
				calls = tt.executions
			}
			if r.Executions != tt.executions || calls != tt.executions {
				t.Errorf("after a second run: %d executions (%d calls), want %d; status %s, retry at %v, last error %q", r.Executions, len(w.agent.calls(t)), tt.executions, r.Status, r.RetryAt, r.LastError)
			}
			if rc := w.fake.Value(id, "RetryCount"); rc != tt.retryCount {
				t.Errorf("RetryCount %v, want %v", rc, tt.retryCount)
			}
		})
	}
}

// An executor that hangs past its timeout is killed with its whole
// process group — a child it started too — and, with attempts left, the
// task goes back to Todo with RetryCount 1 and a LastError that says so.
// The execution's time runs out when the agent has started its child
// (Hooks.ExecTimeout, given the task's timeout), not when a 500 ms timer
// fires: on a busy machine the shell was killed before it had started
// the child, and the test had no child to look at. The real timer is
// TestExecutorFailures/hang's.
func TestHangingExecutorIsKilledWithItsChildren(t *testing.T) {
	t.Parallel()
	w := newWorld(t, options{mode: modeHangTree,
		task: "name: execute\n    when: record.status == \"Todo\"\n    lease: 30s\n    timeout: 500ms\n    max_attempts: 2\n    backoff: {min: 1h, max: 1h}\n"})
	id := w.addTask("slow", 1)
	childFile := filepath.Join(w.agent.dir, "child")
	rep := w.replica("syncer-1", nil, func(c *taskrunner.Config) {
		c.Hooks.ExecTimeout = func(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
			if timeout != 500*time.Millisecond {
				t.Errorf("the execution's timeout is %s, want the task's 500ms", timeout)
			}
			ctx, cancel := context.WithCancel(ctx)
			testsignal.CancelWhen(ctx, cancel, func() bool { // the agent hangs with its child
				_, err := os.Stat(childFile)
				return err == nil
			})
			return ctx, cancel
		}
	})
	w.sync(rep)
	r := w.run(id)
	if r.Status != "released" || r.Failures != 1 || !strings.Contains(r.LastError, "did not finish within its time (") ||
		!strings.Contains(r.LastError, "its process group was killed") {
		t.Errorf("task run: status %s, failures %d, last error %q", r.Status, r.Failures, r.LastError)
	}
	if s, rc, le := w.status(id), w.fake.Value(id, "RetryCount"), w.fake.Value(id, "LastError"); s != "Todo" || rc != float64(1) ||
		!strings.Contains(le.(string), "did not finish within its time") {
		t.Errorf("page: Status %v, RetryCount %v, LastError %q; want Todo, 1, the timeout", s, rc, le)
	}
	raw, err := os.ReadFile(childFile)
	if err != nil {
		t.Fatalf("the agent's child: %v", err)
	}
	child := strings.TrimSpace(string(raw))
	// Dead: gone, or a zombie waiting for whoever adopted it.
	testsignal.Eventually(t, "the agent's child "+child+" killed with its group", func() bool {
		stat, err := os.ReadFile("/proc/" + child + "/stat")
		if err != nil {
			return true
		}
		f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		return len(f) > 0 && (f[0] == "Z" || f[0] == "X")
	})
	// Within its backoff the task is not taken again.
	w.sync(rep)
	if n := len(w.agent.calls(t)); n != 1 {
		t.Errorf("the agent ran %d times, want 1 (the retry waits for its backoff)", n)
	}
}

// max_attempts bounds the retries: the third failure is final, Failed in
// the tool with the attempts said.
func TestMaxAttempts(t *testing.T) {
	t.Parallel()
	w := newWorld(t, options{mode: modeFail})
	id := w.addTask("doomed", 1)
	rep := w.replica("syncer-1", nil, nil)
	for range 5 {
		w.sync(rep)
	}
	r := w.run(id)
	if r.Status != "failed" || r.Executions != 3 || r.Failures != 3 || !strings.HasSuffix(r.LastError, "(attempt 3 of 3: no attempts left)") {
		t.Errorf("status %s, executions %d, failures %d, last error %q", r.Status, r.Executions, r.Failures, r.LastError)
	}
	if s, rc := w.status(id), w.fake.Value(id, "RetryCount"); s != "Failed" || rc != float64(3) {
		t.Errorf("page: Status %v, RetryCount %v", s, rc)
	}
	if n := len(w.agent.calls(t)); n != 3 {
		t.Errorf("the agent ran %d times, want 3", n)
	}
}

// A person moves the card between the claim and its confirmation: the run
// is recorded lost and nothing is executed; when the card is back in Todo
// a later run takes it again.
func TestCardMovedBeforeConfirmIsNotExecuted(t *testing.T) {
	t.Parallel()
	w := newWorld(t, options{mode: modeOK})
	id := w.addTask("contested", 1)
	moved := false
	rep := w.replica("syncer-1", nil, func(c *taskrunner.Config) {
		c.Hooks.AfterClaim = func(source, recordID, runID string) {
			if !moved {
				moved = true
				w.fake.Edit(recordID, map[string]any{"Status": notiontest.Status("Complete")}) // a person did it by hand
			}
		}
	})
	w.sync(rep)
	r := w.run(id)
	if r.Status != "lost" || r.Executions != 0 || !strings.Contains(r.LastError, "the claim did not stick") {
		t.Errorf("task run: status %s, executions %d, last error %q", r.Status, r.Executions, r.LastError)
	}
	if n := len(w.agent.calls(t)); n != 0 {
		t.Fatalf("the agent ran %d times", n)
	}
	if s := w.status(id); s != "Complete" {
		t.Errorf("lookout overwrote the person's Status: %v", s)
	}
	w.sync(rep) // the mirror now shows Complete: not eligible
	if n := len(w.agent.calls(t)); n != 0 {
		t.Fatalf("the agent ran %d times after the card was completed by hand", n)
	}
	// The person puts it back in Todo: the next run takes it (attempt 2).
	w.fake.Edit(id, map[string]any{"Status": notiontest.Status("Todo")})
	w.sync(rep)
	r = w.run(id)
	if r.Status != "completed" || r.Attempt != 2 || r.Executions != 1 || len(w.agent.calls(t)) != 1 {
		t.Errorf("after the card came back: status %s, attempt %d, executions %d", r.Status, r.Attempt, r.Executions)
	}
}

// A storm of 429 and 529 answers delays the claims and terminal writes
// but loses nothing: every task completes once.
func TestRateLimitStormLosesNothing(t *testing.T) {
	t.Parallel()
	w := newWorld(t, options{mode: modeOK, task: "name: execute\n    when: record.status == \"Todo\"\n    take: 5\n    lease: 1m\n    timeout: 10s\n"})
	var ids []string
	for i := range 5 {
		ids = append(ids, w.addTask("t", float64(i)))
	}
	rep := w.replica("syncer-1", nil, nil)
	w.mirror(rep) // before the storm, which would defer the run itself
	before := len(w.fake.Requests())
	// Every third request is refused. (Every other one would refuse each
	// write of a lone action forever: a write is sent right after the read
	// it is conditional on, and a refused write is tried again from its
	// read — the pair needs two requests in a row to pass.)
	w.fake.Storm(3, 1, 429, 529)
	rep.runner.Once(t.Context()) // the pass: claims, confirms, executions, completions
	w.fake.Storm(0, 0)
	failed := len(w.fake.Requests()) - before
	if n := len(w.agent.calls(t)); n != 5 {
		t.Fatalf("the agent ran %d times, want 5", n)
	}
	for _, id := range ids {
		if r := w.run(id); r.Status != "completed" || r.Executions != 1 || r.ToolAction != "" {
			t.Errorf("task %s: status %s, executions %d, tool action %q", id, r.Status, r.Executions, r.ToolAction)
		}
		if s := w.status(id); s != "Complete" {
			t.Errorf("task %s: Status %v", id, s)
		}
	}
	// Every third request was refused: more than the 25 a calm pass sends
	// (read and claim, confirm, read and complete per task).
	if failed < 30 {
		t.Errorf("%d requests during the storm; the storm did not hit the pass", failed)
	}
	t.Logf("%d requests for 5 tasks during the storm", failed)
}
