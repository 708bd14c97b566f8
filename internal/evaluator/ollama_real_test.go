package evaluator

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"testing"
	"time"

	"github.com/ollama/ollama/api"

	"github.com/lookout-dev/lookout/internal/pgtest"
	"github.com/lookout-dev/lookout/internal/semantic/ollamatest"
	"github.com/lookout-dev/lookout/internal/testsignal"
)

// TestRealOllama runs the evaluator against a real Ollama server with a
// tiny random-weight model: the request is accepted, the structured output
// parses, the server's digest is recorded, and unchanged content is not
// sent a second time. The model's judgment is gibberish; only the wiring
// is under test.
func TestRealOllama(t *testing.T) {
	t.Parallel()
	base := ollamatest.Real(t)
	// The tiny model answers in seconds on a quiet machine; on a busy one
	// (a Citus cluster beside it: 2m4s for the first pass) an answer can
	// take longer than the 2 minutes set for a quiet machine, and the call
	// then fails as a timeout and is retried later, which is not what the
	// test is about: the bound grows as testsignal's does (Scaled), and the
	// lease outlasts two calls. A hung server still fails the test.
	modelTimeout := testsignal.Scaled(2 * time.Minute)
	global := fmt.Sprintf(`
ollama:
  host: %s
  model: tiny
  timeout: %s
  concurrency: 1
  reason_max_chars: 40
  options: {num_predict: 128}
evaluator:
  lease: %s
sinks:
  log: {type: log}
`, base, modelTimeout, 2*modelTimeout+time.Minute)
	h := &harness{t: t, ctx: context.Background()}
	h.cfg = loadConfig(t, global, map[string]string{"tasks.yaml": tasksSource})
	h.pool = pgtest.Pool(t)
	h.exec(`INSERT INTO sources (name, connector, config_hash) VALUES ('tasks', 'file', 'x')`)
	ev, err := New(h.pool, testConfig(h.cfg, Config{Owner: "real-ollama-test"}), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	h.ev = ev

	h.sync("tasks", rec("T-1", "URGENT: the production database is down", "open"),
		rec("T-2", "Payment failed for customer 42", "open"), rec("T-3", "Closed long ago", "done"))
	start := time.Now()
	h.drain()
	t.Logf("first pass: %s", time.Since(start).Round(time.Millisecond))

	// The server's digest, as /api/tags reports it.
	u, _ := url.Parse(base)
	list, err := api.NewClient(u, http.DefaultClient).List(h.ctx)
	if err != nil {
		t.Fatal(err)
	}
	var digest string
	for _, m := range list.Models {
		if m.Name == "tiny:latest" {
			digest = m.Digest
		}
	}
	if !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(digest) {
		t.Fatalf("tiny:latest digest %q from /api/tags", digest)
	}

	type call struct {
		record, digest, outcome, errText, output string
		promptTokens, outputTokens               int
		latency                                  float64
	}
	calls := func() []call {
		rows, err := h.pool.Query(h.ctx, `SELECT record_id, model_digest, outcome, coalesce(error, ''), coalesce(output::text, ''),
			prompt_tokens, output_tokens, latency_ms FROM model_calls ORDER BY id`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out []call
		for rows.Next() {
			var c call
			if err := rows.Scan(&c.record, &c.digest, &c.outcome, &c.errText, &c.output, &c.promptTokens, &c.outputTokens, &c.latency); err != nil {
				t.Fatal(err)
			}
			out = append(out, c)
		}
		return out
	}
	first := calls()
	if len(first) < 2 {
		t.Fatalf("model calls = %d, want at least 2 (T-1 and T-2 pass the filter)", len(first))
	}
	okRecords := map[string]bool{}
	for _, c := range first {
		t.Logf("call: %s outcome=%s tokens=%d+%d latency=%.0fms output=%s %s", c.record, c.outcome, c.promptTokens, c.outputTokens, c.latency, c.output, c.errText)
		if c.record == "T-3" {
			t.Errorf("T-3 fails the filter but was sent to the model")
		}
		// Accepted (no transport or HTTP error) and the output is JSON.
		if c.outcome != "ok" && c.outcome != "malformed" {
			t.Errorf("%s: outcome %s: %s", c.record, c.outcome, c.errText)
		}
		if c.output == "" {
			t.Errorf("%s: output is not JSON: %s", c.record, c.errText)
		}
		if c.digest != digest {
			t.Errorf("%s: recorded digest %q, server reports %q", c.record, c.digest, digest)
		}
		if c.outputTokens <= 0 || c.latency <= 0 {
			t.Errorf("%s: tokens %d, latency %v", c.record, c.outputTokens, c.latency)
		}
		if c.outcome == "ok" {
			okRecords[c.record] = true
		}
	}
	if len(okRecords) == 0 {
		t.Fatalf("no call produced a schema-valid verdict")
	}
	for r := range okRecords {
		if e := h.one("tasks", r, "urgent"); e.Step != "model" || (e.Decision != "notify" && e.Decision != "skip") || e.Confidence == nil {
			t.Errorf("%s urgent: %+v", r, e)
		}
	}

	// The same content again (a rebuilt mirror): answered from the cache.
	h.resetMirror("tasks")
	h.sync("tasks", rec("T-1", "URGENT: the production database is down", "open"),
		rec("T-2", "Payment failed for customer 42", "open"), rec("T-3", "Closed long ago", "done"))
	h.makeDue()
	h.drain()
	second := calls()[len(first):]
	for _, c := range second {
		if okRecords[c.record] {
			t.Errorf("%s was judged before but the model was called again", c.record)
		}
	}
	for r := range okRecords {
		evs := h.evaluations("tasks", r, "urgent")
		last := evs[len(evs)-1]
		if last.ModelCallID == nil || *last.ModelCallID != *evs[0].ModelCallID || (last.Step != "cache" && last.Step != "dedupe") {
			t.Errorf("%s second evaluation: %+v (first %+v)", r, last, evs[0])
		}
	}
	if n := h.count(`SELECT coalesce(sum(hits), 0)::int FROM verdicts`); n < len(okRecords) {
		t.Errorf("verdict cache hits = %d, want %d", n, len(okRecords))
	}
	t.Logf("records with a valid verdict: %d, cache hits on re-sync: %d, new calls on re-sync: %d", len(okRecords), h.count(`SELECT sum(hits)::int FROM verdicts`), len(second))
}
