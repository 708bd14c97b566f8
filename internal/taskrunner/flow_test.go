package taskrunner_test

import (
	"encoding/json"
	"strings"
	"testing"
)

// take: 1 claims exactly one task per run, in priority order (then
// creation); each is executed once with its idempotency key and moved to
// Complete with CompletedAt, RunId and ClaimedBy; lookout's own writes
// (which change the pages) never make a finished task eligible again.
func TestTakeOnePerRunInPriorityOrder(t *testing.T) {
	t.Parallel()
	w := newWorld(t, options{mode: modeOK})
	low := w.addTask("low", 1)
	high := w.addTask("high", 3)
	mid := w.addTask("mid", 2)
	rep := w.replica("syncer-1", nil, nil)

	for i, want := range []string{high, mid, low} {
		w.sync(rep)
		calls := w.agent.calls(t)
		if len(calls) != i+1 {
			t.Fatalf("after run %d the agent ran %d times, want %d", i+1, len(calls), i+1)
		}
		c := calls[i]
		if c.Record["id"] != want {
			t.Errorf("run %d executed %v, want %s (priority order)", i+1, c.Record["id"], want)
		}
		r := w.run(want)
		if r.Status != "completed" || r.Executions != 1 || r.Attempt != 1 || string(r.Result) == "" {
			t.Errorf("task run of %s: status %s, executions %d, attempt %d, result %s", want, r.Status, r.Executions, r.Attempt, r.Result)
		}
		if c.IdempotencyKey != r.IdempotencyKey || !strings.HasPrefix(c.IdempotencyKey, "tasks:"+want+":v") || !strings.HasSuffix(c.IdempotencyKey, ":execute") {
			t.Errorf("idempotency key %q (stored %q)", c.IdempotencyKey, r.IdempotencyKey)
		}
		var res map[string]any
		if err := json.Unmarshal(r.Result, &res); err != nil || res["done"] != true {
			t.Errorf("result %s", r.Result)
		}
		if s, at, run, by := w.status(want), w.fake.Value(want, "CompletedAt"), w.fake.Value(want, "RunId"), w.fake.Value(want, "ClaimedBy"); s != "Complete" || at == nil || run != r.RunID || by != "lookout@syncer-1" {
			t.Errorf("page %s: Status %v, CompletedAt %v, RunId %v, ClaimedBy %v", want, s, at, run, by)
		}
		if r.ToolAction != "" {
			t.Errorf("tool action %q pending", r.ToolAction)
		}
	}
	// More runs read the pages lookout changed; nothing is eligible.
	w.sync(rep)
	w.sync(rep)
	if n := len(w.agent.calls(t)); n != 3 {
		t.Errorf("the agent ran %d times, want 3", n)
	}
	if n := len(w.runs()); n != 3 {
		t.Errorf("%d task runs, want 3", n)
	}
}
