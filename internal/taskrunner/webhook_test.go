package taskrunner_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lookout-dev/lookout/internal/api"
	"github.com/lookout-dev/lookout/internal/control"
	"github.com/lookout-dev/lookout/internal/signature"
	"github.com/lookout-dev/lookout/internal/taskrunner"
	"github.com/lookout-dev/lookout/internal/testsignal"
)

// agentServer is an agent behind a webhook: it verifies the signature and
// answers with the statuses given, in turn (the last one repeats).
type agentServer struct {
	*httptest.Server
	mu       sync.Mutex
	statuses []int
	bodies   []string
	got      []taskrunner.Payload
	badSigs  int
}

func newAgentServer(t *testing.T, secret string, statuses []int, bodies []string) *agentServer {
	a := &agentServer{statuses: statuses, bodies: bodies}
	a.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		a.mu.Lock()
		defer a.mu.Unlock()
		if err := signature.VerifyStandard(secret, r.Header, body, 5*time.Minute, time.Now()); err != nil {
			a.badSigs++
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		var p taskrunner.Payload
		if err := json.Unmarshal(body, &p); err != nil || r.Header.Get(signature.HeaderID) != p.IdempotencyKey {
			http.Error(w, "bad payload", http.StatusBadRequest)
			return
		}
		a.got = append(a.got, p)
		i := min(len(a.got)-1, len(a.statuses)-1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(a.statuses[i])
		io.WriteString(w, a.bodies[i])
	}))
	t.Cleanup(a.Close)
	return a
}

func (a *agentServer) calls() []taskrunner.Payload {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]taskrunner.Payload(nil), a.got...)
}

// The webhook executor signs the task like the webhook sink (webhook-id =
// the idempotency key); a 5xx is retried with the same key, a 2xx with a
// JSON object completes the task with it as the result.
func TestWebhookExecutor(t *testing.T) {
	t.Parallel()
	srv := newAgentServer(t, "whsec_c2VjcmV0LWtleS1vZi10aGUtYWdlbnQ=", []int{503, 200}, []string{`{"error":"busy"}`, `{"answer": 42}`})
	w := newWorld(t, options{task: "name: execute\n    when: record.status == \"Todo\"\n    lease: 30s\n    timeout: 5s\n    backoff: {min: 1ms, max: 1ms}\n" +
		"    webhook:\n      url: " + srv.URL + "\n      secret: ${LOOKOUT_TEST_AGENT_SECRET}\n"})
	id := w.addTask("ask the agent", 1)
	rep := w.replica("syncer-1", nil, nil)
	w.sync(rep)
	r := w.run(id)
	if r.Status != "released" || !strings.Contains(r.LastError, "the webhook answered 503") || r.ExitCode == nil || *r.ExitCode != 503 {
		t.Fatalf("after a 503: status %s, last error %q, code %v", r.Status, r.LastError, r.ExitCode)
	}
	w.sync(rep)
	r = w.run(id)
	if r.Status != "completed" || string(r.Result) != `{"answer": 42}` || r.Executor != "webhook" {
		t.Errorf("after a 200: status %s, result %s, executor %s", r.Status, r.Result, r.Executor)
	}
	calls := srv.calls()
	if len(calls) != 2 || calls[0].IdempotencyKey != calls[1].IdempotencyKey || calls[1].Report == nil ||
		calls[1].Report.Path != "/v1/task-runs/"+itoa(r.ID)+"/result" || calls[1].Report.Token == calls[0].Report.Token {
		t.Errorf("calls: %+v", calls)
	}
	if srv.badSigs != 0 {
		t.Errorf("%d requests failed the signature check", srv.badSigs)
	}
	if s := w.status(id); s != "Complete" {
		t.Errorf("Status %v", s)
	}
}

// An agent that answers 202 reports later through the api with the
// attempt's token: the report is stored once (a retried request is a
// no-op, a different one a 409, a wrong token a 401), and the task runner
// finishes the run from it and writes Complete to the tool.
func TestWebhookAcceptedThenReported(t *testing.T) {
	t.Parallel()
	srv := newAgentServer(t, "whsec_c2VjcmV0LWtleS1vZi10aGUtYWdlbnQ=", []int{202}, []string{`{"accepted": true}`})
	w := newWorld(t, options{task: "name: execute\n    when: record.status == \"Todo\"\n    lease: 1m\n    timeout: 5s\n" +
		"    webhook:\n      url: " + srv.URL + "\n      secret: ${LOOKOUT_TEST_AGENT_SECRET}\n"})
	id := w.addTask("long job", 1)
	rep := w.replica("syncer-1", nil, nil)
	w.sync(rep)
	r := w.run(id)
	if r.Status != "running" || w.status(id) != "InProgress" {
		t.Fatalf("after the 202: status %s, page %v", r.Status, w.status(id))
	}
	logger := slog.New(slog.DiscardHandler)
	apiSrv := httptest.NewServer(api.New(control.New(w.pool, nil, nil, control.Config{}, logger), logger).Handler())
	t.Cleanup(apiSrv.Close)
	p := srv.calls()[0]
	post := func(token, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, apiSrv.URL+p.Report.Path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	report := `{"status": "completed", "result": {"summary": "done in the background"}}`
	if code, body := post("not-the-token", report); code != http.StatusUnauthorized {
		t.Errorf("wrong token: %d %s", code, body)
	}
	if code, body := post(p.Report.Token, `{"status": "completed"}`); code != http.StatusUnprocessableEntity || !strings.Contains(body, "/result") {
		t.Errorf("no result: %d %s", code, body)
	}
	if code, body := post(p.Report.Token, report); code != http.StatusOK || !strings.Contains(body, `"stored":true`) {
		t.Fatalf("report: %d %s", code, body)
	}
	if code, body := post(p.Report.Token, report); code != http.StatusOK || !strings.Contains(body, `"stored":false`) {
		t.Errorf("the same report again: %d %s", code, body)
	}
	if code, body := post(p.Report.Token, `{"status": "failed", "error": "changed my mind"}`); code != http.StatusConflict {
		t.Errorf("another report: %d %s", code, body)
	}
	w.start(rep)
	testsignal.Eventually(t, "the reported run completed in the tool", func() bool { return w.status(id) == "Complete" })
	r = w.run(id)
	if r.Status != "completed" || string(r.Result) != `{"summary": "done in the background"}` || r.Executions != 1 {
		t.Errorf("after the report: status %s, result %s, executions %d", r.Status, r.Result, r.Executions)
	}
	if code, body := post(p.Report.Token, report); code != http.StatusOK || !strings.Contains(body, `"stored":false`) {
		t.Errorf("the same report after the run finished: %d %s", code, body)
	}
}
