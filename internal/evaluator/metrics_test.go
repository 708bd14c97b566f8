package evaluator

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/lookout-dev/lookout/internal/metrics"
)

// The evaluator counts decisions by step, model calls with their tokens
// and latency, and the change-to-decision lag.
func TestMetricsOfDecisionsAndModelCalls(t *testing.T) {
	t.Parallel()
	h := newHarness(t, baseGlobal, map[string]string{"tasks.yaml": tasksSource})
	m := metrics.New()
	ev, err := New(h.pool, testConfig(h.cfg, Config{Owner: "test-metrics", Metrics: m}), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	h.ev = ev
	h.sync("tasks", rec("T-1", "URGENT: production database is down", "open"), rec("T-2", "Fix a typo", "open"), rec("T-3", "Old", "done"))
	if n := h.drain(); n != 3 {
		t.Fatalf("completed %d, want 3", n)
	}
	// The same content again (a re-created mirror): the verdict comes from
	// the cache, not the model.
	h.resetMirror("tasks")
	h.sync("tasks", rec("T-1", "URGENT: production database is down", "open"))
	if n := h.drain(); n != 1 {
		t.Fatalf("completed %d, want 1", n)
	}
	rec := httptest.NewRecorder()
	m.Handler(nil).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	body := rec.Body.String()
	for _, want := range []string{
		`lookout_model_calls_total{model="llama3.2",outcome="ok"} 2`,
		`lookout_model_tokens_total{kind="prompt",model="llama3.2"} 100`,
		`lookout_model_tokens_total{kind="output",model="llama3.2"} 40`,
		`lookout_model_latency_seconds_count{model="llama3.2"} 2`,
		// By step and decision, whatever the source and watch (those are
		// in the evaluations table).
		`lookout_decisions_total{decision="notify",step="model"} 1`,
		`lookout_decisions_total{decision="skip",step="model"} 1`,
		// The cached verdict says notify, but v1 of T-1 already notified.
		`lookout_decisions_total{decision="duplicate",step="dedupe"} 1`,
		`lookout_duplicates_suppressed_total 1`,
		// urgent's filter skips T-3 (done); closed's skips T-1, T-2, T-1.
		`lookout_decisions_total{decision="skip",step="filter"} 4`,
		`lookout_decisions_total{decision="notify",step="filter"} 1`,
		`lookout_change_decision_lag_seconds_count 4`,
	} {
		if !strings.Contains(body, "\n"+want+"\n") {
			t.Errorf("metrics lack %s\n%s", want, body)
		}
	}
	if n := h.fake.Chats(); n != 2 {
		t.Errorf("model calls = %d, want 2", n)
	}
}
