package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ollama/ollama/api"

	"github.com/lookout-dev/lookout/internal/clitest"
	"github.com/lookout-dev/lookout/internal/connectors/notion/notiontest"
	"github.com/lookout-dev/lookout/internal/semantic"
	"github.com/lookout-dev/lookout/internal/semantic/ollamatest"
	"github.com/lookout-dev/lookout/internal/testsignal"
)

// reviewAgent answers {"done": true, "summary": "<title> draft <n>"}, n
// counting the calls for that title.
const reviewAgent = `#!/bin/sh
D=%q
in=$(cat)
printf '%%s\n' "$in" >> "$D/calls.jsonl"
title=$(printf '%%s' "$in" | sed -n 's/.*"title":"\([^"]*\)".*/\1/p')
n=$(($(cat "$D/n-$title" 2>/dev/null || echo 0) + 1))
echo $n > "$D/n-$title"
echo "{\"done\": true, \"summary\": \"$title draft $n\"}"
`

// verdictProxy forwards every request to the real Ollama server and, for
// a task review's chat, checks that the real model's answer is
// schema-valid and replaces it with the verdict decide gives: the tiny
// test model proves the plumbing (request, structured output, digest),
// not judgment.
type verdictProxy struct {
	t       *testing.T
	decide  func(user string) (bool, int, string)
	mu      sync.Mutex
	reviews int
	invalid []string
}

func (p *verdictProxy) handler(target string) http.Handler {
	u, _ := url.Parse(target)
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.ModifyResponse = func(res *http.Response) error {
		if res.Request.URL.Path != "/api/chat" || res.StatusCode != http.StatusOK {
			return nil
		}
		body, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil {
			return err
		}
		var cr api.ChatResponse
		if err := json.Unmarshal(body, &cr); err != nil {
			return fmt.Errorf("the real server's chat answer: %w", err)
		}
		user, _ := res.Request.Context().Value(userKey{}).(string)
		p.mu.Lock()
		p.reviews++
		// Schema-valid, or cut off at num_predict (kept small: the tiny
		// model writes gibberish comments up to their maxLength) after
		// starting the schema's object.
		if _, _, err := semantic.ParseReview(cr.Message.Content); err != nil &&
			(cr.DoneReason != "length" || !strings.HasPrefix(strings.TrimSpace(cr.Message.Content), "{") ||
				!strings.Contains(cr.Message.Content, `"pass"`)) {
			p.invalid = append(p.invalid, fmt.Sprintf("%v (done_reason %q): %q", err, cr.DoneReason, cr.Message.Content))
		}
		p.mu.Unlock()
		pass, score, comment := p.decide(user)
		cr.Message.Content = ollamatest.Review(pass, score, comment)
		out, _ := json.Marshal(cr)
		res.Body, res.ContentLength = io.NopCloser(bytes.NewReader(out)), int64(len(out))
		res.Header.Set("Content-Length", fmt.Sprint(len(out)))
		return nil
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/chat" {
			body, _ := io.ReadAll(r.Body)
			var req api.ChatRequest
			if err := json.Unmarshal(body, &req); err != nil || !ollamatest.IsReview(&req) {
				p.t.Errorf("a chat that is not a task review's: %s", body)
			}
			user := ""
			for _, m := range req.Messages {
				if m.Role == "user" {
					user = m.Content
				}
			}
			r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
			r = r.WithContext(contextWith(r, user))
		}
		rp.ServeHTTP(w, r)
	})
}

// TestTaskReviewWithRealBinaries runs the review of task results with the
// real binaries: a syncer executes the tasks, the evaluator reviews each
// result with the real Ollama server and its tiny test model (the
// verdicts faked by a proxy, the model's own answers checked against the
// schema), and the syncer applies the reviews:
//
//   - "good" fails its review twice and passes the third time:
//     correction_count 2, Complete in the tool, the agent ran three times;
//   - "hopeless" fails past max_corrections: Failed in the tool, its
//     LastError naming the failed criterion, one alert.
func TestTaskReviewWithRealBinaries(t *testing.T) {
	t.Parallel()
	real := ollamatest.Real(t)
	os.Setenv("LOOKOUT_TEST_NOTION_TOKEN", "secret_test")
	e := newEnv(t)
	fake := notiontest.New(t, taskProps()...)
	agentDir := t.TempDir()
	agent := filepath.Join(agentDir, "agent.sh")
	if err := os.WriteFile(agent, []byte(fmt.Sprintf(reviewAgent, agentDir)), 0o755); err != nil {
		t.Fatal(err)
	}
	proxy := &verdictProxy{t: t, decide: func(user string) (bool, int, string) {
		if strings.Contains(user, "good draft 3") {
			return true, 9, "the summary says what was done"
		}
		return false, 2, "the summary does not say what was done"
	}}
	srv := httptest.NewServer(proxy.handler(real))
	t.Cleanup(srv.Close)
	// The tiny model answers in seconds on a quiet machine; a minute then,
	// more when the machine is known to be slow (testsignal.Scaled, within
	// the evaluator's 5-minute review lease: 4 min on the Citus cluster,
	// where a minute ran out at load 12 to 36). A server that hangs still
	// fails the test: no review, no Complete.
	modelTimeout := min(testsignal.Scaled(time.Minute), 4*time.Minute)
	e.write("lookout.yaml", fmt.Sprintf(`sinks:
  log: {type: log}
alerts:
  notify: [log]
defaults:
  jitter: 0s
  host_rate_limit: {per_second: 1000, burst: 1000}
syncer:
  lease: 3s
  poll_interval: 100ms
  tasks_interval: 1s
  tasks_grace: 1s
evaluator:
  catch_up_interval: 1s
  lease: %s
ollama:
  host: %s
  model: tiny
  timeout: %s
  concurrency: 1
  options: {num_predict: 64}
`, 2*modelTimeout, srv.URL, modelTimeout))
	e.write("sources/tasks.yaml", fmt.Sprintf(`name: tasks
connector: notion
every: 1s
rate_limit: {per_second: 1000, burst: 1000}
notion:
  database: %s
  token: ${LOOKOUT_TEST_NOTION_TOKEN}
  base_url: %s
  task: {}
tasks:
  - name: execute
    when: record.status == "Todo"
    take: 2
    lease: 30s
    timeout: 10s
    backoff: {min: 1s, max: 1s}
    command: [%s]
    review:
      pass_score: 7
      max_corrections: 2
      criteria:
        - name: summary
          text: The result's summary says what was done.
          check: result.done == true
`, strings.ReplaceAll(fake.DatabaseID, "-", ""), fake.URL, agent))
	good := fake.AddPage(map[string]any{"Name": notiontest.Title("good"), "Status": notiontest.Status("Todo")})
	hopeless := fake.AddPage(map[string]any{"Name": notiontest.Title("hopeless"), "Status": notiontest.Status("Todo")})

	sb := clitest.BuildBinary(t, "github.com/lookout-dev/lookout/cmd/syncer")
	eb := clitest.BuildBinary(t, "github.com/lookout-dev/lookout/cmd/evaluator")
	sy := clitest.StartBinary(t, sb, e.dir, e.url)
	ev := clitest.StartBinary(t, eb, e.dir, e.url)
	tb := logsOnFailure{t: t, daemons: []*clitest.DaemonTest{sy, ev}}

	status := func(id string) any { return fake.Value(id, "Status") }
	// Six calls of the tiny model on a shared 2-core machine: about 5 s
	// each, and loading it first (5 minutes on a quiet machine; scaled as
	// the model's timeout is).
	testsignal.EventuallyWithin(tb, testsignal.Scaled(5*time.Minute), "good Complete and hopeless Failed in the tool", func() bool {
		return status(good) == "Complete" && status(hopeless) == "Failed"
	})
	type run struct {
		status, lastError string
		corrections       int
	}
	runs := map[string]run{}
	rows, err := e.pool.Query(t.Context(), `SELECT title, status, coalesce(last_error, ''), correction_count FROM task_runs`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var title string
		var r run
		if err := rows.Scan(&title, &r.status, &r.lastError, &r.corrections); err != nil {
			t.Fatal(err)
		}
		runs[title] = r
	}
	rows.Close()
	if r := runs["good"]; r.status != "completed" || r.corrections != 2 {
		t.Errorf("good: %+v, want completed after 2 corrections", r)
	}
	if r := runs["hopeless"]; r.status != "failed" || r.corrections != 2 || !strings.Contains(r.lastError, "summary (2/10): the summary does not say what was done") {
		t.Errorf("hopeless: %+v, want failed after 2 corrections, its LastError the failed criterion", r)
	}
	if le, _ := fake.Value(hopeless, "LastError").(string); !strings.Contains(le, "the summary does not say what was done") {
		t.Errorf("hopeless: LastError %q in the tool", le)
	}
	if n := e.count(`SELECT count(*) FROM notifications WHERE kind = 'alert' AND dedupe_key LIKE 'alert/task_review/%'`); n != 1 {
		t.Errorf("%d review alerts, want 1", n)
	}
	// Six reviews, one model call each, by the real server (its digest).
	if n := e.count(`SELECT count(*) FROM model_calls WHERE purpose = 'review' AND outcome = 'ok' AND model_digest ~ '^[0-9a-f]{64}$'`); n != 6 {
		t.Errorf("%d review model calls with the real server's digest, want 6", n)
	}
	if n := e.count(`SELECT count(*) FROM task_reviews`); n != 6 {
		t.Errorf("%d task reviews, want 6", n)
	}
	proxy.mu.Lock()
	defer proxy.mu.Unlock()
	if proxy.reviews != 6 || len(proxy.invalid) > 0 {
		t.Errorf("%d chats through the proxy (want 6); answers of the real model outside the schema: %v", proxy.reviews, proxy.invalid)
	}
	var titles []string
	for _, l := range lines(t, filepath.Join(agentDir, "calls.jsonl")) {
		var p struct {
			Record struct {
				Title string `json:"title"`
			} `json:"record"`
		}
		_ = json.Unmarshal([]byte(l), &p)
		titles = append(titles, p.Record.Title)
	}
	slices.Sort(titles)
	if want := []string{"good", "good", "good", "hopeless", "hopeless", "hopeless"}; !slices.Equal(titles, want) {
		t.Errorf("the agent ran for %v, want three times each", titles)
	}
}

type userKey struct{}

func contextWith(r *http.Request, user string) context.Context {
	return context.WithValue(r.Context(), userKey{}, user)
}
