package notify

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/modelspec"
	"github.com/lookout-dev/lookout/internal/pgtest"
	"github.com/lookout-dev/lookout/internal/semantic"
	"github.com/lookout-dev/lookout/internal/semantic/ollamatest"
	"github.com/lookout-dev/lookout/internal/testsignal"
)

// briefSource is a watch whose morning digest the model summarizes.
const briefSource = `name: tasks
connector: file
file:
  paths: [x.json]
watches:
  - name: morning
    notify: [log, hook]
%s    digest:
      cron: "0 8 * * *"
      timezone: Europe/Paris
      summarize:
        ask: Messages from my team that need an answer today.
        max_items: 5
        model:
          options: {num_predict: 512}
`

// briefFixture is a database with held matches of tasks/morning whose
// period ended, and a fake Ollama.
type briefFixture struct {
	t      *testing.T
	ctx    context.Context
	pool   *pgxpool.Pool
	ollama *ollamatest.Server
	cfg    *config.Config
	comp   *Composer
}

// setupBriefing loads the configuration (watch holds extra watch keys,
// e.g. a budget) against a fake Ollama and holds n matches r0..r<n-1> for
// each of the sinks.
func setupBriefing(t *testing.T, watch string, n int, sinks ...string) *briefFixture {
	t.Helper()
	f := &briefFixture{t: t, ctx: context.Background(), pool: pgtest.Pool(t)}
	f.ollama = ollamatest.New(t, map[string]string{"llama3.2:latest": "sha256:aaa"})
	global := fmt.Sprintf(`ollama:
  host: %s
  timeout: 1m
sinks:
  log: {type: log}
  hook: {type: log}
`, f.ollama.URL)
	var err error
	if f.cfg, err = loadConfig(t, global, fmt.Sprintf(briefSource, watch)); err != nil {
		t.Fatal(err)
	}
	if f.comp, err = NewComposer(f.cfg.Global.Sinks, f.cfg.Sources); err != nil {
		t.Fatal(err)
	}
	for _, s := range sinks {
		insertNotificationsOf(t, f.pool, "tasks", s, s, n)
	}
	if _, err := f.pool.Exec(f.ctx, `
		UPDATE notifications SET status = 'held', watch = 'morning',
		       digest_due_at = date_trunc('second', now()) - interval '1 minute'`); err != nil {
		t.Fatal(err)
	}
	return f
}

// briefNow is the briefing fixtures' model clock (modelspec.Config.Now):
// 2026-12-01 09:30 UTC, a month's first day (docs/development.md#tests),
// so that the watches' budgets have one day (2026-12-01) in a run across
// 00:00 UTC. It is in the past: the model calls the database records now
// are of that day or later.
var briefNow = time.Date(2026, 12, 1, 9, 30, 0, 0, time.UTC)

// testBriefer is the model path the evaluator gives the digester
// (evaluator's Briefer): semantic's briefer of replica owner over a model
// client of mc.
func testBriefer(t *testing.T, pool *pgxpool.Pool, mc modelspec.Config, owner string) *semantic.Briefer {
	t.Helper()
	client, err := semantic.NewClient(mc, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	return semantic.NewBriefer(pool, client, owner, testLogger(t))
}

// digester returns a digester of replica owner, its model clock at briefNow.
func (f *briefFixture) digester(owner string) *Digester {
	f.t.Helper()
	mc := modelspec.FromConfig(f.cfg.Global.Ollama)
	mc.Now = func() time.Time { return briefNow }
	s, err := SummarizerFrom(f.cfg, testBriefer(f.t, f.pool, mc, owner), testLogger(f.t))
	if err != nil {
		f.t.Fatal(err)
	}
	return NewDigester(f.pool, f.comp, DigesterConfig{PollInterval: time.Second, BatchSize: DigestBatchDefault, Summarizer: s}, testLogger(f.t))
}

func (f *briefFixture) runDue(g *Digester, want int) {
	f.t.Helper()
	if n, err := g.RunDue(f.ctx); n != want || err != nil {
		f.t.Fatalf("RunDue = %d, %v; want %d summaries", n, err, want)
	}
}

// summary returns the body and payload of the summary for sink.
func (f *briefFixture) summary(sink string) (string, *PayloadDigest) {
	f.t.Helper()
	var body string
	var raw []byte
	if err := f.pool.QueryRow(f.ctx, `SELECT body, payload FROM notifications WHERE kind = 'digest' AND sink = $1`, sink).
		Scan(&body, &raw); err != nil {
		f.t.Fatalf("summary of %s: %v", sink, err)
	}
	var p Payload
	if err := json.Unmarshal(raw, &p); err != nil {
		f.t.Fatal(err)
	}
	return body, p.Digest
}

// calls returns the outcomes of the briefing model calls, in order.
func (f *briefFixture) calls() []string {
	f.t.Helper()
	rows, err := f.pool.Query(f.ctx, `SELECT outcome || ':' || attempt FROM model_calls WHERE purpose = 'briefing' ORDER BY id`)
	if err != nil {
		f.t.Fatal(err)
	}
	out := []string{}
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			f.t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		f.t.Fatal(err)
	}
	return out
}

// lastCall returns the id and error of the last briefing model call.
func (f *briefFixture) lastCall() (int64, string) {
	f.t.Helper()
	var id int64
	var reason *string
	if err := f.pool.QueryRow(f.ctx, `SELECT id, error FROM model_calls WHERE purpose = 'briefing' ORDER BY id DESC LIMIT 1`).
		Scan(&id, &reason); err != nil {
		f.t.Fatalf("last briefing model call: %v", err)
	}
	if reason == nil {
		return id, ""
	}
	return id, *reason
}

// assertPlain checks a summary without a briefing: the reason on its
// first line, then every item listed.
func assertPlain(t *testing.T, body string, pd *PayloadDigest, n int, reason string) {
	t.Helper()
	first, _, _ := strings.Cut(body, "\n")
	if first != "summary missing: "+reason || pd.SummaryMissing != reason || pd.Briefing != nil {
		t.Errorf("first line %q, payload summary_missing %q, briefing %v; want the reason %q", first, pd.SummaryMissing, pd.Briefing, reason)
	}
	for i := range n {
		if !strings.Contains(body+"\n", fmt.Sprintf("- Record %d https://example.com/r%d\n", i, i)) {
			t.Errorf("item r%d is not listed:\n%s", i, body)
		}
	}
	if len(pd.Items) != n {
		t.Errorf("payload lists %d items, want %d", len(pd.Items), n)
	}
}

type captureSink struct {
	mu   sync.Mutex
	seen []*Notification
}

func (c *captureSink) Deliver(_ context.Context, n *Notification) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seen = append(c.seen, n)
	return nil
}

func TestBriefingIsDeliveredWithTheDigest(t *testing.T) {
	t.Parallel()
	f := setupBriefing(t, "", 6, "log")
	f.ollama.Answers(ollamatest.Answer{Content: ollamatest.Briefing("Two messages need an answer today.",
		[2]string{"r3", "r3 asks for a decision by noon."}, [2]string{"r1", "r1 is blocked on you."})})
	f.runDue(f.digester("a"), 1)

	// The request: the ask in the system message, at most max_items (5)
	// items shown, their ids the only ones the schema allows.
	reqs := f.ollama.Requests()
	if len(reqs) != 1 || !ollamatest.IsBriefing(reqs[0]) {
		t.Fatalf("chat requests = %d, want 1 briefing", len(reqs))
	}
	if sys := reqs[0].Messages[0].Content; !strings.Contains(sys, "Messages from my team that need an answer today.") {
		t.Errorf("system message lacks the ask:\n%s", sys)
	}
	if user := reqs[0].Messages[1].Content; !strings.Contains(user, `"id":"r4"`) || strings.Contains(user, `"id":"r5"`) {
		t.Errorf("user message should show r0..r4 (max_items 5):\n%s", user)
	}
	if !strings.Contains(string(reqs[0].Format), `"enum":["r0","r1","r2","r3","r4"]`) {
		t.Errorf("format does not limit record_id to the items shown: %s", reqs[0].Format)
	}

	body, pd := f.summary("log")
	want := "Two messages need an answer today.\n\n" +
		"- Record 3: r3 asks for a decision by noon. https://example.com/r3\n" +
		"- Record 1: r1 is blocked on you. https://example.com/r1\n\n" +
		"Also in this digest:\n" +
		"- Record 0 https://example.com/r0\n- Record 2 https://example.com/r2\n- Record 4 https://example.com/r4\n- Record 5 https://example.com/r5"
	if body != want {
		t.Errorf("body:\n%s\nwant:\n%s", body, want)
	}
	b := pd.Briefing
	if b == nil || b.Headline != "Two messages need an answer today." || len(b.Items) != 2 || b.Items[0].RecordID != "r3" ||
		b.Items[1].RecordID != "r1" || b.Items[0].NotificationID != pd.Items[3].NotificationID || b.ModelCallID == nil ||
		b.ModelDigest != "sha256:aaa" || !strings.HasPrefix(b.PromptVersion, "pb-") || pd.SummaryMissing != "" || len(pd.Items) != 6 {
		t.Errorf("payload briefing = %+v (items %d, missing %q)", b, len(pd.Items), pd.SummaryMissing)
	}
	if got := f.calls(); !slices.Equal(got, []string{"ok:1"}) {
		t.Errorf("briefing calls = %v, want [ok:1]", got)
	}
	var ref, state string
	if err := f.pool.QueryRow(f.ctx, `SELECT mc.input_ref, b.state FROM briefings b JOIN model_calls mc ON mc.id = b.model_call_id`).
		Scan(&ref, &state); err != nil || !strings.HasPrefix(ref, "digest:tasks/morning/") || state != "ok" {
		t.Errorf("briefings row: %q %q %v", ref, state, err)
	}

	// Delivered like any digest, with the briefing in body and payload.
	capt := &captureSink{}
	d := newDeliverer(t, f.pool, map[string]Sink{"log": capt}, map[string]*config.Sink{"log": sinkConf("log", 5*time.Second, 3, 1)}, DelivererConfig{})
	if n, err := d.DeliverDue(f.ctx); n != 1 || err != nil {
		t.Fatalf("DeliverDue = %d, %v", n, err)
	}
	if len(capt.seen) != 1 || capt.seen[0].Body != want || capt.seen[0].Payload.Digest.Briefing.Headline != b.Headline {
		t.Errorf("delivered %+v", capt.seen)
	}
}

// A summarized watch that is not in the files the evaluator started with
// (made through the API, or added to a file later) is briefed: the
// summarizer reads the watch from the composer, which follows the
// definitions (evaluator.Apply calls SetWatch), not from the files.
func TestBriefingOfAWatchFromTheDefinitions(t *testing.T) {
	t.Parallel()
	f := setupBriefing(t, "", 3, "log")
	files := &config.Config{Dir: f.cfg.Dir, Global: f.cfg.Global} // no source in the files
	s, err := SummarizerFrom(files, testBriefer(t, f.pool, modelspec.FromConfig(files.Global.Ollama), "a"), testLogger(t))
	if err != nil || s == nil {
		t.Fatalf("SummarizerFrom with a briefer = %v, %v; want a summarizer that follows the composer", s, err)
	}
	comp, err := NewComposer(f.cfg.Global.Sinks, nil)
	if err != nil {
		t.Fatal(err)
	}
	src := f.cfg.Sources[0]
	if err := comp.SetWatch(src, 0, src.Watches[0]); err != nil {
		t.Fatal(err)
	}
	f.ollama.Answers(ollamatest.Answer{Content: ollamatest.Briefing("One message needs an answer.", [2]string{"r1", "r1 waits for you."})})
	g := NewDigester(f.pool, comp, DigesterConfig{PollInterval: time.Second, BatchSize: DigestBatchDefault, Summarizer: s}, testLogger(t))
	f.runDue(g, 1)
	if _, pd := f.summary("log"); pd.Briefing == nil || pd.Briefing.Headline != "One message needs an answer." || pd.SummaryMissing != "" {
		t.Errorf("digest of a watch from the definitions: briefing %+v, summary_missing %q", pd.Briefing, pd.SummaryMissing)
	}
	if got := f.calls(); !slices.Equal(got, []string{"ok:1"}) {
		t.Errorf("briefing model calls %v, want [ok:1]", got)
	}
}

func TestBriefingCitingAnItemNotInTheDigestIsRejected(t *testing.T) {
	t.Parallel()
	t.Run("retry corrects it", func(t *testing.T) {
		t.Parallel()
		f := setupBriefing(t, "", 3, "log")
		f.ollama.Answers(
			ollamatest.Answer{Content: ollamatest.Briefing("Invented.", [2]string{"r99", "There is no r99."})},
			ollamatest.Answer{Content: ollamatest.Briefing("One thing.", [2]string{"r2", "It is real."})})
		f.runDue(f.digester("a"), 1)
		reqs := f.ollama.Requests()
		if len(reqs) != 2 || len(reqs[1].Messages) != 4 ||
			!strings.Contains(reqs[1].Messages[3].Content, `items[0].record_id "r99" is not one of the digest's items`) {
			t.Fatalf("want a retry with the correction, got %d requests", len(reqs))
		}
		_, pd := f.summary("log")
		if pd.Briefing == nil || len(pd.Briefing.Items) != 1 || pd.Briefing.Items[0].RecordID != "r2" {
			t.Errorf("briefing = %+v", pd.Briefing)
		}
		if got := f.calls(); !slices.Equal(got, []string{"malformed:1", "ok:2"}) {
			t.Errorf("calls = %v", got)
		}
	})
	t.Run("twice: the plain digest", func(t *testing.T) {
		t.Parallel()
		f := setupBriefing(t, "", 3, "log")
		f.ollama.Answers(
			ollamatest.Answer{Content: ollamatest.Briefing("Invented.", [2]string{"r99", "There is no r99."})},
			ollamatest.Answer{Content: ollamatest.Briefing("Still invented.", [2]string{"r1", "Real."}, [2]string{"r42", "Not real."})})
		f.runDue(f.digester("a"), 1)
		body, pd := f.summary("log")
		// The reader gets no quote of the model; the record says why.
		id, reason := f.lastCall()
		assertPlain(t, body, pd, 3, fmt.Sprintf("the model's answer was invalid twice (model call %d says why)", id))
		if want := `malformed answer: headline.citations[1] "r42" is not one of the digest's items; ` +
			`items[1].record_id "r42" is not one of the digest's items`; reason != want {
			t.Errorf("model_calls.error = %q, want %q", reason, want)
		}
		if strings.Contains(body, "invented") {
			t.Errorf("the plain digest quotes the model:\n%s", body)
		}
		if got := f.calls(); !slices.Equal(got, []string{"malformed:1", "malformed:2"}) {
			t.Errorf("calls = %v", got)
		}
	})
}

func TestBriefingMalformedTwiceFallsBack(t *testing.T) {
	t.Parallel()
	f := setupBriefing(t, "", 2, "log")
	f.ollama.Answers(ollamatest.Answer{Content: `{"headline": "cut`}, ollamatest.Answer{Content: `{"headline": "x"}`})
	f.runDue(f.digester("a"), 1)
	body, pd := f.summary("log")
	id, reason := f.lastCall()
	assertPlain(t, body, pd, 2, fmt.Sprintf("the model's answer was invalid twice (model call %d says why)", id))
	if want := `malformed answer: headline must be an object with text and citations, not "x"; items is missing`; reason != want {
		t.Errorf("model_calls.error = %q, want %q", reason, want)
	}
	if got := f.calls(); !slices.Equal(got, []string{"malformed:1", "malformed:2"}) {
		t.Errorf("calls = %v", got)
	}
}

func TestBriefingModelDownSendsThePlainDigest(t *testing.T) {
	t.Parallel()
	t.Run("chat fails", func(t *testing.T) {
		t.Parallel()
		f := setupBriefing(t, "", 2, "log")
		f.ollama.Answers(ollamatest.Answer{Status: http.StatusInternalServerError, Error: "out of memory"})
		f.runDue(f.digester("a"), 1)
		body, pd := f.summary("log")
		reason := fmt.Sprintf(`chat with "llama3.2" at %s: out of memory`, f.ollama.URL)
		assertPlain(t, body, pd, 2, reason)
		if got := f.calls(); !slices.Equal(got, []string{"error:1"}) {
			t.Errorf("calls = %v (an error is not retried)", got)
		}
	})
	t.Run("server unreachable", func(t *testing.T) {
		t.Parallel()
		f := setupBriefing(t, "", 2, "log")
		f.ollama.Close()
		f.runDue(f.digester("a"), 1)
		body, pd := f.summary("log")
		if !strings.HasPrefix(pd.SummaryMissing, "list models at "+f.ollama.URL) || !strings.Contains(pd.SummaryMissing, "connection refused") {
			t.Fatalf("summary_missing = %q", pd.SummaryMissing)
		}
		assertPlain(t, body, pd, 2, pd.SummaryMissing)
	})
}

func TestBriefingCacheAsksTheModelOncePerDigest(t *testing.T) {
	t.Parallel()
	f := setupBriefing(t, "", 4, "log", "hook")
	// The model thinks until released; meanwhile a second replica runs.
	f.ollama.Answers(ollamatest.Answer{Hang: true, Content: ollamatest.Briefing("One thing.", [2]string{"r0", "First."})})
	a, b := f.digester("replica-a"), f.digester("replica-b")
	done := make(chan int, 1)
	go func() {
		n, err := a.RunDue(f.ctx)
		if err != nil {
			t.Error(err)
		}
		done <- n
	}()
	testsignal.Eventually(t, "replica a asks the model", func() bool { return f.ollama.Chats() == 1 })
	// Replica b finds the claim: it neither asks nor folds the matches.
	f.runDue(b, 0)
	f.ollama.Release()
	if n := testsignal.Receive(t, done, "replica a's RunDue"); n != 2 {
		t.Fatalf("replica a created %d summaries, want 2 (one per sink)", n)
	}
	f.runDue(b, 0)
	for _, sink := range []string{"log", "hook"} {
		if _, pd := f.summary(sink); pd.Briefing == nil || pd.Briefing.Headline != "One thing." {
			t.Errorf("%s summary briefing = %+v, missing %q", sink, pd.Briefing, pd.SummaryMissing)
		}
	}
	// A retry of the same digest (its summaries lost, say, by a crash
	// between the answer and the fold) finds the briefing in the cache.
	if _, err := f.pool.Exec(f.ctx, `
		WITH s AS (DELETE FROM notifications WHERE kind = 'digest' RETURNING id),
		     k AS (DELETE FROM notification_keys WHERE notification_id IN (SELECT id FROM s)) -- lost with them
		UPDATE notifications SET status = 'held', digest_id = NULL WHERE digest_id IN (SELECT id FROM s)`); err != nil {
		t.Fatal(err)
	}
	f.runDue(b, 2)
	if n := f.ollama.Chats(); n != 1 {
		t.Errorf("model asked %d times for one digest, want 1", n)
	}
	var hits int
	if err := f.pool.QueryRow(f.ctx, `SELECT sum(hits) FROM briefings`).Scan(&hits); err != nil || hits != 3 {
		t.Errorf("briefing cache hits = %d, %v; want 3 (the second sink, then both sinks of the retry)", hits, err)
	}
	if _, pd := f.summary("hook"); pd.Briefing == nil || pd.Briefing.Headline != "One thing." {
		t.Errorf("retried summary briefing = %+v", pd.Briefing)
	}
}

func TestBriefingBudgetExhaustedSendsThePlainDigest(t *testing.T) {
	t.Parallel()
	f := setupBriefing(t, "    budget: {calls_per_day: 2}\n", 2, "log")
	if _, err := f.pool.Exec(f.ctx, `INSERT INTO model_budgets (source, watch, day, calls) VALUES ('tasks', 'morning', '2026-12-01', 2)`); err != nil {
		t.Fatal(err)
	}
	f.runDue(f.digester("a"), 1)
	body, pd := f.summary("log")
	assertPlain(t, body, pd, 2, "budget exhausted: 2 of calls_per_day 2 used")
	if n := f.ollama.Chats(); n != 0 {
		t.Errorf("model asked %d times with the budget spent", n)
	}
}

func TestBriefingBudgetCountsEachRequest(t *testing.T) {
	t.Parallel()
	// One call left: a malformed answer's retry cannot be reserved.
	f := setupBriefing(t, "    budget: {calls_per_day: 1}\n", 2, "log")
	f.ollama.Answers(ollamatest.Answer{Content: `not json`})
	f.runDue(f.digester("a"), 1)
	_, pd := f.summary("log")
	id, _ := f.lastCall()
	want := fmt.Sprintf(`the model's answer was invalid (model call %d says why) and budget exhausted: 1 of calls_per_day 1 used`, id)
	if pd.SummaryMissing != want {
		t.Errorf("summary_missing = %q, want %q", pd.SummaryMissing, want)
	}
	var calls int
	if err := f.pool.QueryRow(f.ctx, `SELECT calls FROM model_budgets WHERE source = 'tasks' AND watch = 'morning' AND day = '2026-12-01'`).Scan(&calls); err != nil || calls != 1 {
		t.Errorf("model_budgets calls of 2026-12-01 = %d, %v; want 1", calls, err)
	}
}

func TestSummarizerFromNamesBadModelOptions(t *testing.T) {
	t.Parallel()
	src := strings.Replace(briefSource, "{num_predict: 512}", "{temprature: 0}", 1)
	cfg, err := loadConfig(t, "sinks:\n  log: {type: log}\n  hook: {type: log}\n", fmt.Sprintf(src, ""))
	if err != nil {
		t.Fatal(err)
	}
	_, err = SummarizerFrom(cfg, nil, testLogger(t))
	want := `sources/tasks.yaml:15: watches[0].digest.summarize.model.options model option "temprature" is not an Ollama option`
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("error = %v\nwant %s…", err, want)
	}
	if s, err := SummarizerFrom(mustLoad(t, composerGlobal, composerSource), nil, testLogger(t)); s != nil || err != nil {
		t.Errorf("no summarized digest: SummarizerFrom = %v, %v; want nil, nil", s, err)
	}
}

func mustLoad(t *testing.T, global, source string) *config.Config {
	t.Helper()
	cfg, err := loadConfig(t, global, source)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestBriefingWithRealOllama runs a summarized digest through a real
// Ollama server and the tiny random-weight model. Its answers are
// nonsense, so the test asserts the pipeline: every request is recorded,
// an answer is accepted only when it passes validation (schema and
// citations), an invalid one is retried once, and the digest goes out
// either way with every item listed.
func TestBriefingWithRealOllama(t *testing.T) {
	t.Parallel()
	base := ollamatest.Real(t)
	f := &briefFixture{t: t, ctx: context.Background(), pool: pgtest.Pool(t)}
	global := fmt.Sprintf(`ollama:
  host: %s
  model: tiny
  timeout: 90s
sinks:
  log: {type: log}
  hook: {type: log}
`, base)
	var err error
	if f.cfg, err = loadConfig(t, global, fmt.Sprintf(strings.Replace(briefSource, "512", "160", 1), "")); err != nil {
		t.Fatal(err)
	}
	if f.comp, err = NewComposer(f.cfg.Global.Sinks, f.cfg.Sources); err != nil {
		t.Fatal(err)
	}
	insertNotificationsOf(t, f.pool, "tasks", "log", "log", 4)
	if _, err := f.pool.Exec(f.ctx, `UPDATE notifications SET status = 'held', watch = 'morning',
		digest_due_at = date_trunc('second', now()) - interval '1 minute'`); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	f.runDue(f.digester("real"), 1)
	t.Logf("briefing step took %s", time.Since(start).Round(time.Millisecond))

	body, pd := f.summary("log")
	calls := f.calls()
	t.Logf("calls %v; summary:\n%s", calls, body)
	if len(pd.Items) != 4 {
		t.Errorf("payload lists %d items, want 4 (nothing lost)", len(pd.Items))
	}
	switch {
	case pd.Briefing != nil:
		// Accepted: it passed validation, so every citation is an item.
		if calls[len(calls)-1] != fmt.Sprintf("ok:%d", len(calls)) || pd.SummaryMissing != "" {
			t.Errorf("a briefing without a valid last call: %v", calls)
		}
		for _, c := range pd.Briefing.Items {
			if !slices.Contains([]string{"r0", "r1", "r2", "r3"}, c.RecordID) {
				t.Errorf("briefing cites %q, not an item", c.RecordID)
			}
		}
		for i := range 4 {
			if !strings.Contains(body, fmt.Sprintf("Record %d", i)) {
				t.Errorf("item r%d missing from the body", i)
			}
		}
	default:
		// Rejected: retried once when malformed, then the plain digest.
		if len(calls) == 0 || len(calls) > 2 || (len(calls) == 2 && calls[0] != "malformed:1") {
			t.Errorf("calls %v: want a malformed first answer before a retry, at most 2", calls)
		}
		assertPlain(t, body, pd, 4, pd.SummaryMissing)
		if pd.SummaryMissing == "" {
			t.Errorf("no briefing and no reason")
		}
	}
	var digest string
	if err := f.pool.QueryRow(f.ctx, `SELECT model_digest FROM model_calls WHERE purpose = 'briefing' LIMIT 1`).Scan(&digest); err != nil || len(digest) != 64 {
		t.Errorf("model_calls.model_digest = %q, %v; want the server's digest", digest, err)
	}
	// The same digest again (a retry): answered from the cache.
	if _, err := f.pool.Exec(f.ctx, `
		WITH s AS (DELETE FROM notifications WHERE kind = 'digest' RETURNING id),
		     k AS (DELETE FROM notification_keys WHERE notification_id IN (SELECT id FROM s)) -- lost with them
		UPDATE notifications SET status = 'held', digest_id = NULL WHERE digest_id IN (SELECT id FROM s)`); err != nil {
		t.Fatal(err)
	}
	f.runDue(f.digester("real-2"), 1)
	if again := f.calls(); len(again) != len(calls) {
		t.Errorf("the retry asked the model again: %v after %v", again, calls)
	}
}

// TestBriefingSentencesMustBeGrounded: every sentence of a briefing the
// reader sees cites an item of the digest (the headline its citations,
// each item its record_id); an uncited one is dropped, the drop is said
// without quoting it, and a briefing left with no sentence is not shown.
func TestBriefingSentencesMustBeGrounded(t *testing.T) {
	t.Parallel()
	const gibberish = "The production database is down"
	t.Run("an uncited headline is dropped, the cited items kept", func(t *testing.T) {
		t.Parallel()
		f := setupBriefing(t, "", 3, "log")
		f.ollama.Answers(ollamatest.Answer{Content: ollamatest.BriefingCiting(gibberish+", restore it now.", nil,
			[2]string{"r2", "r2 waits for your review."}, [2]string{"r0", "r0 asks for a decision."})})
		f.runDue(f.digester("a"), 1)
		body, pd := f.summary("log")
		want := "- Record 2: r2 waits for your review. https://example.com/r2\n" +
			"- Record 0: r0 asks for a decision. https://example.com/r0\n\n" +
			"1 sentence of the model's briefing was dropped: not grounded in the items.\n\n" +
			"Also in this digest:\n" +
			"- Record 1 https://example.com/r1"
		if body != want {
			t.Errorf("body:\n%s\nwant:\n%s", body, want)
		}
		b := pd.Briefing
		if b == nil || b.Headline != "" || b.DroppedSentences != 1 || len(b.Items) != 2 || pd.SummaryMissing != "" {
			t.Errorf("payload briefing = %+v, summary_missing %q; want no headline, 1 dropped, 2 items", b, pd.SummaryMissing)
		}
		raw, _ := json.Marshal(pd)
		if strings.Contains(string(raw), gibberish) {
			t.Errorf("the payload quotes the dropped sentence: %s", raw)
		}
		if got := f.calls(); !slices.Equal(got, []string{"ok:1"}) {
			t.Errorf("calls = %v, want [ok:1] (a drop is not a retry)", got)
		}
	})
	t.Run("nothing grounded: the plain digest says what was dropped", func(t *testing.T) {
		t.Parallel()
		f := setupBriefing(t, "", 2, "log")
		f.ollama.Answers(ollamatest.Answer{Content: ollamatest.BriefingCiting(gibberish+".", nil,
			[2]string{"", "Everything is on fire."})})
		f.runDue(f.digester("a"), 1)
		body, pd := f.summary("log")
		assertPlain(t, body, pd, 2, "2 sentences of the model's briefing were dropped: not grounded in the items")
		if strings.Contains(body, gibberish) || strings.Contains(body, "on fire") {
			t.Errorf("the plain digest quotes the model:\n%s", body)
		}
	})
	t.Run("a fully cited briefing is unchanged", func(t *testing.T) {
		t.Parallel()
		f := setupBriefing(t, "", 3, "log")
		f.ollama.Answers(ollamatest.Answer{Content: ollamatest.BriefingCiting("One review waits for you.", []string{"r1"},
			[2]string{"r1", "r1 waits for your review."})})
		f.runDue(f.digester("a"), 1)
		body, pd := f.summary("log")
		want := "One review waits for you.\n\n" +
			"- Record 1: r1 waits for your review. https://example.com/r1\n\n" +
			"Also in this digest:\n" +
			"- Record 0 https://example.com/r0\n- Record 2 https://example.com/r2"
		if body != want {
			t.Errorf("body:\n%s\nwant:\n%s", body, want)
		}
		if b := pd.Briefing; b == nil || b.Headline != "One review waits for you." || !slices.Equal(b.HeadlineCitations, []string{"r1"}) ||
			b.DroppedSentences != 0 || len(b.Items) != 1 {
			t.Errorf("payload briefing = %+v", b)
		}
	})
}
