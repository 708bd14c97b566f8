package taskrunner_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/lookout-dev/lookout/internal/connectors/notion/notiontest"
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

// A person moving a finished card back to Todo, unchanged, asks for it
// again: the next run takes it as the next attempt of the same task run
// (the completed attempt in its history, its failures reset), executes
// it once more and moves it to Complete again. Lookout's own writes never
// do that (TestTakeOnePerRunInPriorityOrder).
func TestCardMovedBackToTodoRunsAgain(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mode, finished, tool string
	}{
		{modeOK, "completed", "Complete"},
		{modeNoRetry, "failed", "Failed"},
	} {
		t.Run(tc.finished, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, options{mode: tc.mode})
			id := w.addTask("again", 1)
			rep := w.replica("syncer-1", nil, nil)
			w.sync(rep)
			first := w.run(id)
			if first.Status != tc.finished || w.status(id) != tc.tool {
				t.Fatalf("first run: %s, the card %v", first.Status, w.status(id))
			}
			w.sync(rep) // the mirror shows lookout's write: nothing to do
			if n := len(w.agent.calls(t)); n != 1 {
				t.Fatalf("the agent ran %d times before the card came back", n)
			}
			w.fake.Edit(id, map[string]any{"Status": notiontest.Status("Todo")})
			w.sync(rep)
			r := w.run(id)
			calls := w.agent.calls(t)
			if len(calls) != 2 || r.Attempt != 2 || r.Executions != 2 || r.Status != tc.finished || w.status(id) != tc.tool {
				t.Fatalf("after the card came back: %d executions by the agent, run %s attempt %d executions %d, the card %v",
					len(calls), r.Status, r.Attempt, r.Executions, w.status(id))
			}
			if r.IdempotencyKey != first.IdempotencyKey || calls[1].IdempotencyKey != first.IdempotencyKey {
				t.Errorf("idempotency key %q, then %q (sent %q)", first.IdempotencyKey, r.IdempotencyKey, calls[1].IdempotencyKey)
			}
			if !strings.Contains(string(r.History), `"status": "`+tc.finished+`"`) {
				t.Errorf("history %s lacks the %s attempt", r.History, tc.finished)
			}
			if !strings.Contains(w.logs.String(), "moved back to its todo status after it "+tc.finished) {
				t.Errorf("no log line says why it ran again:\n%s", w.logs.String())
			}
			w.sync(rep)
			w.sync(rep)
			if n := len(w.agent.calls(t)); n != 2 {
				t.Errorf("the agent ran %d times after lookout's own writes, want 2", n)
			}
		})
	}
}
