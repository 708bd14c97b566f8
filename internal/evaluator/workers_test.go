package evaluator

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ollama/ollama/api"

	"github.com/lookout-dev/lookout/internal/semantic/ollamatest"
	"github.com/lookout-dev/lookout/internal/testsignal"
)

// TestIdleWorkerTakesANotifyWhileAnotherIsBusy: a change committed while
// one worker waits for a slow model call is decided by the idle worker on
// its NOTIFY, without waiting for the busy batch to end (nor for the
// catch-up timer, an hour here).
func TestIdleWorkerTakesANotifyWhileAnotherIsBusy(t *testing.T) {
	t.Parallel()
	global := strings.Replace(strings.Replace(baseGlobal, "timeout: 2s", "timeout: 60s", 1), "lease: 10s", "lease: 2m", 1)
	h := newHarness(t, global, map[string]string{"tasks.yaml": tasksSource})
	h.fake.SetAnswer(func(req *api.ChatRequest) ollamatest.Answer {
		a := ollamatest.DefaultAnswer(req)
		a.Hang = strings.Contains(req.Messages[1].Content, "SLOW")
		return a
	})
	ev, err := New(h.pool, testConfig(h.cfg, Config{Owner: "workers", Workers: 2, CatchUpInterval: time.Hour}),
		slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := ev.Start(h.ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		h.fake.Release()
		_ = ev.Stop()
	})
	testsignal.Eventually(t, "listener connected", ev.Listening)

	// One worker takes a batch whose model call does not return.
	h.sync("tasks", rec("S-1", "SLOW", "open"))
	testsignal.Eventually(t, "the worker's slow model call", func() bool { n, _ := h.fake.InFlight(); return n == 1 })

	// A change that needs no model, committed (and NOTIFYed) meanwhile.
	h.sync("tasks", rec("N-1", "shipped", "done"))
	testsignal.Eventually(t, "the new change decided by the idle worker", func() bool {
		return h.change(h.lastChange("tasks", "N-1")).Status == "done"
	})
	if n, _ := h.fake.InFlight(); n != 1 {
		t.Errorf("the slow model call ended (%d in flight) before the new change was checked", n)
	}
	if st := h.change(h.lastChange("tasks", "S-1")); st.Status != "pending" {
		t.Errorf("S-1 is %s: the busy worker's batch had ended", st.Status)
	}
	if e := h.one("tasks", "N-1", "closed"); e.Decision != "notify" {
		t.Errorf("N-1 closed: %+v", e)
	}
	h.fake.Release()
	testsignal.Eventually(t, "the slow batch to finish", func() bool {
		return h.change(h.lastChange("tasks", "S-1")).Status == "done"
	})
}
