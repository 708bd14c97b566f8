package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	ollama "github.com/ollama/ollama/api"

	"github.com/lookout-dev/lookout/internal/api"
	"github.com/lookout-dev/lookout/internal/control"
	"github.com/lookout-dev/lookout/internal/definitions"
	"github.com/lookout-dev/lookout/internal/evaluator"
	"github.com/lookout-dev/lookout/internal/semantic/ollamatest"
	"github.com/lookout-dev/lookout/internal/tokens"
)

// An owner's model_calls_per_day holds in the evaluator, not only at the
// create: alice's watch made through the API gets her whole allowance (3)
// as its budget, the evaluator asks the model 3 times for her 5 changes
// and holds the rest on the budget; deleting the watch and making another
// with an ask the same day buys no second allowance (403 naming the calls
// her deleted watch made).
func TestOwnerModelCallsPerDay(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	fake := ollamatest.New(t, map[string]string{"llama3.2:latest": "sha256:" + strings.Repeat("a", 64)})
	fake.SetAnswer(func(*ollama.ChatRequest) ollamatest.Answer {
		return ollamatest.Answer{Content: ollamatest.Verdict(true, "high", "It is urgent.", 0.9)}
	})
	e.write("lookout.yaml", fmt.Sprintf("ollama:\n  host: %s\n  model: llama3.2\n  timeout: 5s\nsinks:\n  log: {type: log}\ndefaults:\n  jitter: 0s\n", fake.URL))
	e.write("sources/tasks.yaml", "name: tasks\nconnector: file\nevery: 1h\nfile:\n  paths: [data/tasks.jsonl]\nfields:\n  status: item.state\n")
	e.write("data/tasks.jsonl", tasks(5, nil))
	cfg := e.config()
	ctx := context.Background()
	if _, err := definitions.Apply(ctx, e.pool, cfg, definitions.ApplyOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	store := definitions.NewStore(e.pool, control.NewValidator(&cfg.Global))
	svc := control.New(e.pool, store, nil, control.Config{Limits: control.Limits{Watches: 10, Sources: 2, ModelCallsPerDay: 3}}, e.log)
	a := api.New(svc, e.log)
	srv := httptest.NewServer(a.Handler())
	t.Cleanup(srv.Close)
	t.Cleanup(a.Shutdown)
	_, secret, err := tokens.Create(ctx, e.pool, tokens.NewToken{Owner: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	alice := &client{t: t, base: srv.URL, token: secret}

	var created control.CreatedWatch
	if code := alice.call(http.MethodPost, "/v1/watches", `{"source": "tasks", "watch": {"name": "urgent", "ask": "Is this task urgent?", "notify": ["log"]}}`, &created); code != http.StatusCreated ||
		!strings.Contains(string(created.Watch.Definition), `"calls_per_day":3`) {
		t.Fatalf("create: %d %s", code, created.Watch.Definition)
	}
	e.sync()

	// The evaluator follows the definitions, as `evaluator run` does.
	econf := evaluator.FromConfig(cfg)
	econf.Sources, econf.Owner = nil, "evaluator-1"
	ev, err := evaluator.New(e.pool, econf, e.log)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := definitions.Load(ctx, e.pool, &cfg.Global)
	if err != nil {
		t.Fatal(err)
	}
	if err := ev.Apply(ctx, snap.Delta()); err != nil {
		t.Fatal(err)
	}
	if _, err := ev.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if n := e.count(`SELECT count(*) FROM model_calls WHERE owner = 'alice' AND purpose = 'evaluate'`); n != 3 {
		t.Errorf("alice's model calls = %d, want her 3 of the day", n)
	}
	if n := fake.Chats(); n != 3 {
		t.Errorf("the model was asked %d times, want 3", n)
	}
	if n := e.count(`SELECT count(*) FROM evaluations WHERE owner = 'alice' AND watch = 'urgent' AND step = 'model' AND decision = 'notify'`); n != 3 {
		t.Errorf("decisions by the model = %d, want 3", n)
	}
	if n := e.count(`SELECT count(*) FROM changes WHERE source = 'tasks' AND eval_status = 'pending' AND eval_error LIKE '%budget exhausted%'`); n != 2 {
		t.Errorf("changes held on the budget = %d, want 2", n)
	}

	// Delete and make another: the day's allowance is spent.
	if code := alice.call(http.MethodDelete, "/v1/watches/tasks/urgent", "", nil); code != http.StatusNoContent {
		t.Fatalf("delete: %d", code)
	}
	var p struct {
		Type, Detail string
		Errors       []struct{ Pointer, Detail string }
	}
	if code := alice.call(http.MethodPost, "/v1/watches", `{"source": "tasks", "watch": {"name": "urgent-again", "ask": "Is this task urgent?"}}`, &p); code != http.StatusForbidden ||
		!strings.HasSuffix(p.Type, "/limit-exceeded") || len(p.Errors) != 1 || p.Errors[0].Pointer != "/watch/ask" ||
		!strings.Contains(p.Detail, "watches of yours that no longer ask (deleted, or changed) made 3 calls today, your limit of 3") {
		t.Errorf("a second allowance the same day: %d %+v", code, p)
	}
	// A watch without an ask costs no model call: still allowed.
	if code := alice.call(http.MethodPost, "/v1/watches", `{"source": "tasks", "watch": {"name": "open", "when": "record.status == \"open\""}}`, nil); code != http.StatusCreated {
		t.Errorf("a watch without an ask: %d", code)
	}
}
