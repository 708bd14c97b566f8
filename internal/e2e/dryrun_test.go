package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/lookout-dev/lookout/internal/clitest"
	"github.com/lookout-dev/lookout/internal/definitions"
	"github.com/lookout-dev/lookout/internal/semantic/ollamatest"
	"github.com/lookout-dev/lookout/internal/tokens"
)

// dryRunReport is the part of dry_run's answer the tests read.
type dryRunReport struct {
	Changes     int            `json:"changes"`
	WouldNotify int            `json:"would_notify"`
	Filter      map[string]int `json:"filter"`
	Model       map[string]int `json:"model"`
	Calls       int            `json:"model_calls"`
	Summary     string         `json:"summary"`
}

// askedWatch is a watch with an ask: its `when` matches the urgent tasks.
const askedWatch = `{"name": "asked", "when": "\"urgent\" in record.labels", "ask": "Does this task need someone now?"}`

// dryRunEnv writes lookout.yaml with ollama (a host), applies the
// definitions, stores the changes of 10 tasks (2 urgent) and returns a
// token of alice.
func dryRunEnv(t *testing.T, ollama string) (*env, string) {
	e := newEnv(t)
	e.write("lookout.yaml", fmt.Sprintf(`ollama:
  host: %s
  model: tiny
  timeout: 2m
  concurrency: 1
  reason_max_chars: 40
  options: {num_predict: 128}
evaluator:
  lease: 5m
sinks:
  log: {type: log}
  rec: {type: log}
defaults:
  jitter: 0s
`, ollama))
	e.write("sources/tasks.yaml", tasksSource)
	e.write("data/a.jsonl", tasks(10, nil))
	ctx := context.Background()
	if _, err := definitions.Apply(ctx, e.pool, e.config(), definitions.ApplyOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	e.sync()
	_, tok, err := tokens.Create(ctx, e.pool, tokens.NewToken{Owner: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	return e, tok
}

// deadAddress is a loopback address nothing listens on.
func deadAddress(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr
}

// Without an evaluator: a dry run without use_model is answered by the
// api alone, with Ollama down (cached verdicts only, none asked); with
// use_model the api says that no evaluator took the request, naming it,
// and leaves no request behind.
func TestDryRunWithoutEvaluator(t *testing.T) {
	t.Parallel()
	e, tok := dryRunEnv(t, deadAddress(t))
	apid := clitest.StartBinaryEnv(t, clitest.BuildBinary(t, "github.com/lookout-dev/lookout/cmd/api"), e.dir, e.url, "LOOKOUT_DRY_RUN_WAIT=1s")
	alice := &client{t: t, base: "http://" + apid.Addr, token: tok}

	var rep dryRunReport
	if code := alice.call(http.MethodPost, "/v1/dry_run", `{"source": "tasks", "since": "1h", "watch": `+askedWatch+`}`, &rep); code != http.StatusOK ||
		rep.Changes != 10 || rep.Filter["skip"] != 8 || rep.Model["unknown"] != 2 || rep.Calls != 0 || !strings.Contains(rep.Summary, "set use_model to ask it") {
		t.Fatalf("dry_run without use_model: %d %+v\n%s", code, rep, apid.Logs())
	}
	var p struct {
		Type, Detail string
		Status       int
	}
	code := alice.call(http.MethodPost, "/v1/dry_run", `{"source": "tasks", "since": "1h", "use_model": true, "watch": `+askedWatch+`}`, &p)
	re := regexp.MustCompile(`^dry run request \d+ was not taken by any evaluator within 1s, and was withdrawn: a dry run with use_model is answered by the evaluator deployment \(is an evaluator running\?\)`)
	if code != http.StatusServiceUnavailable || p.Type != "https://lookout.dev/problems/unavailable" || !re.MatchString(p.Detail) {
		t.Errorf("dry_run with use_model and no evaluator: %d %+v", code, p)
	}
	if n := e.count(`SELECT count(*) FROM dry_run_requests`); n != 0 {
		t.Errorf("%d dry run request(s) left behind", n)
	}
	if n := e.count(`SELECT count(*) FROM model_calls`); n != 0 {
		t.Errorf("%d model call(s) made", n)
	}
}

// A dry run with use_model through the api binary is answered by a
// running evaluator binary, which asks a real Ollama (the tiny model of
// models/: its verdicts are noise, the wiring is under test); the api
// links no model client. Skips without LOOKOUT_TEST_OLLAMA and
// LOOKOUT_TEST_MODEL (scripts/test.sh sets both).
func TestDryRunWithModelIsAnsweredByTheEvaluator(t *testing.T) {
	t.Parallel()
	base := ollamatest.Real(t)
	e, tok := dryRunEnv(t, base)
	evaluatord := clitest.StartBinary(t, clitest.BuildBinary(t, "github.com/lookout-dev/lookout/cmd/evaluator"), e.dir, e.url)
	apid := clitest.StartBinaryEnv(t, clitest.BuildBinary(t, "github.com/lookout-dev/lookout/cmd/api"), e.dir, e.url, "LOOKOUT_DRY_RUN_WAIT=5m")
	alice := &client{t: t, base: "http://" + apid.Addr, token: tok}

	var rep dryRunReport
	code := alice.call(http.MethodPost, "/v1/dry_run", `{"source": "tasks", "since": "1h", "use_model": true, "max_calls": 5, "watch": `+askedWatch+`}`, &rep)
	model := 0
	for _, n := range rep.Model {
		model += n
	}
	if code != http.StatusOK || rep.Changes != 10 || rep.Filter["skip"] != 8 || model != 2 || rep.Model["unknown"] != 0 || rep.Calls < 1 {
		t.Fatalf("dry_run with use_model: %d %+v\napi:\n%s\nevaluator:\n%s", code, rep, apid.Logs(), evaluatord.Logs())
	}
	// The calls were the evaluator binary's (its owner is host:pid),
	// recorded as a replay's; the api made none.
	if n := e.count(`SELECT count(*) FROM model_calls WHERE purpose = 'replay' AND evaluator LIKE '%:' || $1`, fmt.Sprint(evaluatord.Pid())); n != rep.Calls {
		t.Errorf("model_calls of the replay by the evaluator (pid %d) = %d, the report says %d", evaluatord.Pid(), n, rep.Calls)
	}
	if n := e.count(`SELECT count(*) FROM model_calls`); n != rep.Calls {
		t.Errorf("model_calls = %d, the report says %d", n, rep.Calls)
	}
	if n := e.count(`SELECT count(*) FROM dry_run_requests`); n != 0 {
		t.Errorf("%d dry run request(s) left behind", n)
	}
	if n := e.count(`SELECT count(*) FROM evaluations WHERE watch = 'asked'`); n != 0 {
		t.Errorf("the dry run wrote %d evaluation(s)", n)
	}
}
