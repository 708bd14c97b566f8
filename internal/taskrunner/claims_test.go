package taskrunner_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lookout-dev/lookout/internal/connectors/notion/notiontest"
	"github.com/lookout-dev/lookout/internal/taskrunner"
	"github.com/lookout-dev/lookout/internal/tasks"
)

// pageRequests returns the method of each request the fake received for
// page id, in order.
func (w *world) pageRequests(id string) []string {
	var out []string
	compact := strings.ReplaceAll(id, "-", "")
	for _, r := range w.fake.Requests() {
		if strings.HasSuffix(r.Path, "/pages/"+compact) || strings.HasSuffix(r.Path, "/pages/"+id) {
			out = append(out, r.Method)
		}
	}
	return out
}

var blocked = map[string]any{"Status": notiontest.Status("Blocked")}

// A person moves the card to Blocked right after lookout's claim landed,
// and lookout's read back is refused (429) with a Retry-After past the
// time the claim has left before its execution must start. lookout gives
// the attempt up — but its release is conditional on its own claim, which
// the card no longer shows: Blocked stays, and nothing is executed, then
// or at a later run.
func TestConfirmRefusedLeavesThePersonsMove(t *testing.T) {
	t.Parallel()
	w := newWorld(t, options{mode: modeOK,
		task: "name: execute\n    when: record.status == \"Todo\"\n    lease: 20s\n    timeout: 16s\n    backoff: {min: 1ms, max: 1ms}\n"})
	id := w.addTask("contested", 1)
	w.fake.On(notiontest.Rule{Method: http.MethodPatch, Page: id, After: blocked,
		Then: &notiontest.Rule{Method: http.MethodGet, Page: id, Fail: http.StatusTooManyRequests, RetryAfter: 4}})
	rep := w.replica("syncer-1", nil, nil)
	w.sync(rep)
	if s := w.status(id); s != "Blocked" {
		t.Errorf("after the refused read back the card shows %v: lookout wrote over the person's Blocked", s)
	}
	r := w.run(id)
	if r.Executions != 0 || r.ToolAction != "" || !strings.Contains(r.LastError, "not executed") {
		t.Errorf("task run: status %s, executions %d, tool action %q, last error %q", r.Status, r.Executions, r.ToolAction, r.LastError)
	}
	w.sync(rep) // the mirror shows Blocked: not eligible
	if n := len(w.agent.calls(t)); n != 0 {
		t.Errorf("the agent ran %d times on a card a person moved to Blocked", n)
	}
	if s := w.status(id); s != "Blocked" {
		t.Errorf("after a later run the card shows %v, want the person's Blocked", s)
	}
}

// A person moves the card just before lookout's claim: the claim reads the
// card first, writes nothing over the person's status, and the run is
// lost, never executed.
func TestCardMovedBeforeTheClaimIsNotClaimed(t *testing.T) {
	t.Parallel()
	w := newWorld(t, options{mode: modeOK})
	id := w.addTask("contested", 1)
	w.fake.On(notiontest.Rule{Page: id, Before: blocked}) // at lookout's next request of the page
	rep := w.replica("syncer-1", nil, nil)
	w.sync(rep)
	if s := w.status(id); s != "Blocked" {
		t.Errorf("the card shows %v: the claim was written over the person's Blocked", s)
	}
	if got := w.pageRequests(id); len(got) != 1 || got[0] != http.MethodGet {
		t.Errorf("requests of the page: %v, want one read and no write", got)
	}
	r := w.run(id)
	if r.Status != tasks.StatusLost || r.Executions != 0 || !strings.Contains(r.LastError, `shows "Blocked"`) {
		t.Errorf("task run: status %s, executions %d, last error %q; want lost, not executed, naming Blocked", r.Status, r.Executions, r.LastError)
	}
	w.sync(rep)
	if n := len(w.agent.calls(t)); n != 0 {
		t.Errorf("the agent ran %d times on a card a person moved to Blocked", n)
	}
}

// The normal path: the claim reads the card and writes, the read back
// confirms, the agent runs once, and the end is written over lookout's own
// claim after reading it: Complete, CompletedAt, one execution.
func TestClaimReadsBeforeItWrites(t *testing.T) {
	t.Parallel()
	w := newWorld(t, options{mode: modeOK})
	id := w.addTask("plain", 1)
	rep := w.replica("syncer-1", nil, nil)
	w.sync(rep)
	want := []string{http.MethodGet, http.MethodPatch, http.MethodGet, http.MethodGet, http.MethodPatch}
	if got := w.pageRequests(id); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("requests of the page: %v, want %v (read, claim, read back, read, complete)", got, want)
	}
	// The window a person's edit could fall in: from the read's arrival to
	// the write's (docs/tasks.md#what-is-left-tools-have-no-compare-and-set).
	var reads []time.Time
	for _, q := range w.fake.Requests() {
		if strings.Contains(q.Path, "/pages/") && q.Method == http.MethodGet {
			reads = append(reads, q.At)
		} else if strings.Contains(q.Path, "/pages/") && len(reads) > 0 {
			t.Logf("%s %s after its read", q.Method, q.At.Sub(reads[len(reads)-1]).Round(time.Microsecond))
		}
	}
	r := w.run(id)
	if r.Status != tasks.StatusCompleted || r.Executions != 1 || r.ToolAction != "" {
		t.Errorf("task run: status %s, executions %d, tool action %q", r.Status, r.Executions, r.ToolAction)
	}
	if s, at := w.status(id), w.fake.Value(id, "CompletedAt"); s != "Complete" || at == nil {
		t.Errorf("page: Status %v, CompletedAt %v", s, at)
	}
	w.sync(rep)
	if n := len(w.agent.calls(t)); n != 1 {
		t.Errorf("the agent ran %d times, want 1", n)
	}
}

// Two task runner replicas share Notion's budget (5 requests/s, burst 1,
// as the host's budget) while the fake answers every fifth request 429
// with Retry-After: 1. By the clock the fake, the syncers and the task
// runners share, no request arrives after a 429 was answered and before
// the Retry-After it named ran out — whichever replica sends it — but
// one: the other replica's request that passed the host's block check
// before the 429's block was recorded, still in flight (on a stalled
// machine it arrived 63 ms after the 429). The block holds every
// replica from its recording on; a second early request after one 429
// would be a replica ignoring it.
func TestRetryAfterHoldsEveryReplica(t *testing.T) {
	t.Parallel()
	clk := &clock{}
	w := newWorld(t, options{mode: modeOK, now: clk.Now, lookout: "hosts:\n  \"FAKE_HOST\": {per_second: 5, burst: 1}\n",
		task: "name: execute\n    when: record.status == \"Todo\"\n    take: 4\n    lease: 2m\n    timeout: 10s\n    backoff: {min: 1ms, max: 1ms}\n"})
	for i := range 8 {
		w.addTask(fmt.Sprint("task ", i), float64(i))
	}
	r1 := w.replica("syncer-1", nil, nil)
	r2 := w.replica("syncer-2", nil, nil)
	w.mirror(r1) // both passes due, on the same mirror
	w.mirror(r2)
	w.fake.Storm(5, 1, http.StatusTooManyRequests)
	done := make(chan struct{})
	go func() {
		defer close(done)
		r2.runner.Once(t.Context())
	}()
	r1.runner.Once(t.Context())
	<-done
	w.fake.Storm(0, 0)

	reqs := w.fake.Requests()
	var refused, early int
	for i, q := range reqs {
		if q.Status != http.StatusTooManyRequests {
			continue
		}
		refused++
		until := q.At.Add(time.Second) // what Retry-After: 1 asked, at the latest
		var inside []string
		for _, later := range reqs[i+1:] {
			if later.At.After(q.At) && later.At.Before(until) {
				inside = append(inside, fmt.Sprintf("%s %s arrived at %s, %s after a 429 answered at %s with Retry-After: 1",
					later.Method, later.Path, later.At.Format("15:04:05.000000"), later.At.Sub(q.At), q.At.Format("15:04:05.000000")))
			}
		}
		early += len(inside)
		switch {
		case len(inside) == 1:
			t.Logf("%s (in flight from the other replica before the block was recorded)", inside[0])
		case len(inside) > 1:
			t.Errorf("%d requests inside one 429's Retry-After, one in flight at most:\n%s", len(inside), strings.Join(inside, "\n"))
		}
	}
	if refused < 3 {
		t.Fatalf("%d requests refused; the storm did not hit the passes", refused)
	}
	t.Logf("%d requests, %d refused with 429, %d early", len(reqs), refused, early)
	for _, r := range w.runs() {
		if r.Status != tasks.StatusCompleted || r.Executions != 1 {
			t.Errorf("task %s: status %s, executions %d", r.RecordID, r.Status, r.Executions)
		}
	}
}

// A claim that takes longer than the lease leaves beside the timeout (and
// the margin kept for the end) does not shorten the execution: the agent
// is not started on that attempt, which is given back without a failure,
// and every execution gets its whole timeout.
func TestSlowClaimDoesNotShortenTheTimeout(t *testing.T) {
	t.Parallel()
	clk := &clock{}
	w := newWorld(t, options{mode: modeOK})
	id := w.addTask("slow", 1)
	slow := true
	rep := w.replica("syncer-1", nil, func(c *taskrunner.Config) {
		c.Now = clk.Now
		c.Hooks.AfterClaim = func(source, recordID, runID string) {
			if slow {
				slow = false
				clk.Advance(18 * time.Second) // the claim took 18s of the lease's 30s
			}
		}
	})
	w.sync(rep)
	w.sync(rep)
	r := w.run(id)
	calls := w.agent.calls(t)
	if len(calls) == 0 {
		t.Fatalf("the agent never ran; task run %s, last error %q", r.Status, r.LastError)
	}
	var history []struct {
		Attempt   int        `json:"attempt"`
		StartedAt *time.Time `json:"started_at"`
	}
	if err := json.Unmarshal(r.History, &history); err != nil {
		t.Fatal(err)
	}
	for _, c := range calls {
		started := r.StartedAt
		for _, h := range history {
			if h.Attempt == c.Attempt {
				started = h.StartedAt
			}
		}
		deadline, err := time.Parse(time.RFC3339Nano, c.Deadline)
		if err != nil || started == nil {
			t.Fatalf("attempt %d: deadline %q (%v), started at %v", c.Attempt, c.Deadline, err, started)
		}
		// started_at is stored to the microsecond.
		if got := deadline.Sub(*started); got < 10*time.Second || got >= 10*time.Second+time.Microsecond {
			t.Errorf("attempt %d ran with %s of its 10s timeout", c.Attempt, got)
		}
	}
	if r.Status != tasks.StatusCompleted || r.Failures != 0 || r.Executions != 1 {
		t.Errorf("task run: status %s, attempt %d, executions %d, failures %d, history %s", r.Status, r.Attempt, r.Executions, r.Failures, r.History)
	}
}
