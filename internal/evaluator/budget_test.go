package evaluator

import (
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ollama/ollama/api"

	"github.com/lookout-dev/lookout/internal/modelspec"
	"github.com/lookout-dev/lookout/internal/normalize"
	"github.com/lookout-dev/lookout/internal/semantic/ollamatest"
	"github.com/lookout-dev/lookout/internal/testsignal"
)

// TestBudgetIsACapAcrossEvaluators: calls_per_day holds for 2 evaluators
// with 2 workers each, all judging at once: the model is asked exactly
// budget times. The model's answers are held until the budget is spent,
// so that every batch judges while no call has finished yet. The budget's
// day is that of one fixed clock (modelspec.Config.Now): a run across
// 00:00 UTC would otherwise start a second day's budget.
func TestBudgetIsACapAcrossEvaluators(t *testing.T) {
	t.Parallel()
	const budget, records = 5, 40
	// 2099-12-01 09:30 UTC, a month's first day in the future
	// (docs/development.md#tests): a hold until the clock's next midnight
	// must not be past on the database's real clock, or the drain claims
	// the held changes again and never ends.
	day := modelspec.Config{Now: func() time.Time { return time.Date(2099, 12, 1, 9, 30, 0, 0, time.UTC) }}
	global := strings.Replace(strings.Replace(baseGlobal, "timeout: 2s", "timeout: 60s", 1), "lease: 10s", "lease: 2m", 1)
	h := newHarness(t, global, map[string]string{"tasks.yaml": fmt.Sprintf(`
name: tasks
connector: file
file: {paths: [x.jsonl]}
watches:
  - name: urgent
    ask: Is it urgent?
    budget: {calls_per_day: %d}
`, budget)})
	h.fake.SetAnswer(func(req *api.ChatRequest) ollamatest.Answer {
		a := ollamatest.DefaultAnswer(req)
		a.Hang = true
		return a
	})
	var recs []normalize.Record
	for i := range records {
		recs = append(recs, rec(fmt.Sprintf("T-%02d", i), fmt.Sprintf("task %d", i), "open"))
	}
	h.sync("tasks", recs...)

	var wg sync.WaitGroup
	for _, owner := range []string{"ev-a", "ev-b"} {
		ev, err := New(h.pool, testConfig(h.cfg, Config{Owner: owner, Workers: 2, BatchSize: records / 4, Model: day}), slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			if _, err := ev.Drain(h.ctx); err != nil {
				t.Errorf("%s: Drain: %v", owner, err)
			}
		})
	}
	testsignal.Eventually(t, "the budget's calls to reach the model", func() bool { return h.fake.Chats() >= budget })
	h.fake.Release()
	wg.Wait()

	if n := h.fake.Chats(); n != budget {
		t.Errorf("model asked %d times, want %d (calls_per_day)", n, budget)
	}
	if n := h.count(`SELECT count(*) FROM model_calls WHERE purpose = 'evaluate'`); n != budget {
		t.Errorf("model_calls = %d, want %d", n, budget)
	}
	if n := h.count(`SELECT count(*) FROM evaluations WHERE step = 'budget' AND decision = 'hold'`); n != records-budget {
		t.Errorf("held for the budget: %d, want %d", n, records-budget)
	}
	if n := h.count(`SELECT calls FROM model_budgets WHERE source = 'tasks' AND watch = 'urgent' AND day = '2099-12-01'`); n != budget {
		t.Errorf("model_budgets.calls of 2099-12-01 = %d, want %d", n, budget)
	}
	if n := h.count(`SELECT count(*) FROM model_budgets`); n != 1 {
		t.Errorf("model_budgets rows = %d, want 1 (one day)", n)
	}
}
