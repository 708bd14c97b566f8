package semantic_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/ollama/ollama/api"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/modelspec"
	"github.com/lookout-dev/lookout/internal/pgtest"
	"github.com/lookout-dev/lookout/internal/semantic"
	"github.com/lookout-dev/lookout/internal/semantic/ollamatest"
	"github.com/lookout-dev/lookout/internal/testsignal"
)

const digest1 = "sha256:1111111111111111111111111111111111111111111111111111111111111111"

type fixture struct {
	t     *testing.T
	pool  *pgxpool.Pool
	fake  *ollamatest.Server
	o     modelspec.Config
	judge *semantic.Judge
}

// setup returns a Judge on a fresh schema and a fake Ollama serving
// llama3.2 with digest1. tune adjusts the settings before the client is built.
func setup(t *testing.T, tune func(o *modelspec.Config)) *fixture {
	t.Helper()
	f := &fixture{t: t, pool: pgtest.Pool(t)}
	f.fake = ollamatest.New(t, map[string]string{"llama3.2:latest": digest1})
	f.o = modelspec.Config{
		Host: f.fake.URL, Model: "llama3.2", Timeout: 5 * time.Second, Concurrency: 2,
		Options:   map[string]any{"temperature": 0, "seed": 42},
		PerSecond: 1000, Burst: 10, HoldMin: 30 * time.Second, HoldMax: 15 * time.Minute,
		DigestTTL: time.Minute, ReasonMaxChars: 200,
	}
	if tune != nil {
		tune(&f.o)
	}
	client, err := semantic.NewClient(f.o, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	f.judge = semantic.NewJudge(f.pool, client, f.o.Concurrency, "test", slog.New(slog.DiscardHandler))
	return f
}

func (f *fixture) question(w *config.Watch) *modelspec.Question {
	f.t.Helper()
	q, err := modelspec.NewQuestion(f.o, w)
	if err != nil {
		f.t.Fatal(err)
	}
	return q
}

func request(q *modelspec.Question, watch, id, title string) *semantic.Request {
	return &semantic.Request{
		Source: "tasks", RecordID: id, Watch: watch, ContentHash: "hash-" + id + "-" + title, Question: q,
		Input: modelspec.Input{Source: "tasks", Kind: "created", Record: map[string]any{"id": id, "title": title}},
	}
}

func (f *fixture) judgeAll(opt semantic.Options, reqs ...*semantic.Request) []semantic.Result {
	f.t.Helper()
	res, err := f.judge.Judge(context.Background(), reqs, opt)
	if err != nil {
		f.t.Fatalf("Judge: %v", err)
	}
	return res
}

func (f *fixture) count(query string, args ...any) int {
	f.t.Helper()
	var n int
	if err := f.pool.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		f.t.Fatalf("%s: %v", query, err)
	}
	return n
}

func TestJudgeAsksTheModelOnceThenUsesTheCache(t *testing.T) {
	t.Parallel()
	f := setup(t, nil)
	q := f.question(&config.Watch{Ask: "Is it urgent?"})
	res := f.judgeAll(semantic.Options{}, request(q, "w", "1", "URGENT: server down"), request(q, "w", "2", "weekly newsletter"))

	if r := res[0]; r.Step != semantic.StepModel || !r.Verdict.ShouldNotify || r.Verdict.Urgency != "high" || r.Calls != 1 || r.ModelCallID == nil {
		t.Fatalf("urgent: %+v", r)
	}
	if r := res[1]; r.Step != semantic.StepModel || r.Verdict.ShouldNotify || r.Outcome != semantic.OutcomeOK {
		t.Fatalf("newsletter: %+v", r)
	}
	if res[0].ModelDigest != digest1 || res[0].PromptVersion != q.Version {
		t.Errorf("digest %q prompt version %q", res[0].ModelDigest, res[0].PromptVersion)
	}
	reqs := f.fake.Requests()
	if len(reqs) != 2 || reqs[0].Model != "llama3.2" || reqs[0].Options["seed"] != float64(42) || string(reqs[0].Format) != string(q.Schema()) {
		t.Fatalf("requests: %d, first %+v", len(reqs), reqs[0])
	}

	// Every call is on record.
	var (
		model, digest, version, inputRef, inputHash, outcome, urgency, reason, purpose string
		shouldNotify                                                                   bool
		promptTokens, outputTokens, attempt                                            int
		latency, confidence                                                            float64
	)
	err := f.pool.QueryRow(context.Background(), `
		SELECT model, model_digest, prompt_version, input_ref, input_hash, outcome, urgency, reason, purpose,
		       should_notify, prompt_tokens, output_tokens, attempt, latency_ms, confidence
		FROM model_calls WHERE id = $1`, *res[0].ModelCallID).Scan(
		&model, &digest, &version, &inputRef, &inputHash, &outcome, &urgency, &reason, &purpose,
		&shouldNotify, &promptTokens, &outputTokens, &attempt, &latency, &confidence)
	if err != nil {
		t.Fatal(err)
	}
	if model != "llama3.2" || digest != digest1 || version != q.Version || inputRef != "change:0" || inputHash != res[0].InputHash ||
		outcome != "ok" || urgency != "high" || !shouldNotify || promptTokens != 50 || outputTokens != 20 || attempt != 1 ||
		latency <= 0 || confidence != 0.9 || purpose != "evaluate" || reason != "The record is marked urgent." {
		t.Errorf("model_calls row: %s %s %s %s %s %s %s %v %d %d %d %v %v %s %q", model, digest, version, inputRef, inputHash, outcome,
			urgency, shouldNotify, promptTokens, outputTokens, attempt, latency, confidence, purpose, reason)
	}
	if n := f.count(`SELECT count(*) FROM verdicts`); n != 2 {
		t.Errorf("verdicts: %d rows, want 2", n)
	}

	// The same content, question and model again: no call.
	again := f.judgeAll(semantic.Options{}, request(q, "w", "1", "URGENT: server down"), request(q, "w", "2", "weekly newsletter"))
	for i, r := range again {
		if r.Step != semantic.StepCache || r.Calls != 0 || *r.ModelCallID != *res[i].ModelCallID || *r.Verdict != *res[i].Verdict {
			t.Errorf("second judgment %d: %+v", i, r)
		}
	}
	if n := f.fake.Chats(); n != 2 {
		t.Errorf("chats after re-judging = %d, want 2", n)
	}
	if n := f.count(`SELECT sum(hits)::int FROM verdicts`); n != 2 {
		t.Errorf("verdict hits = %d, want 2", n)
	}
	if n := f.count(`SELECT count(*) FROM model_calls`); n != 2 {
		t.Errorf("model_calls = %d, want 2", n)
	}
}

func TestJudgeAsksAgainWhenModelDigestOrPromptChanges(t *testing.T) {
	t.Parallel()
	f := setup(t, func(o *modelspec.Config) { o.DigestTTL = time.Nanosecond })
	q := f.question(&config.Watch{Ask: "Is it urgent?"})
	r := func(q *modelspec.Question) *semantic.Request { return request(q, "w", "1", "URGENT") }

	f.judgeAll(semantic.Options{}, r(q))
	if res := f.judgeAll(semantic.Options{}, r(q)); res[0].Step != semantic.StepCache {
		t.Fatalf("unchanged: step %s", res[0].Step)
	}
	// The model was updated on the server (same name, new digest).
	const digest2 = "sha256:2222222222222222222222222222222222222222222222222222222222222222"
	f.fake.SetDigest("llama3.2:latest", digest2)
	if res := f.judgeAll(semantic.Options{}, r(q)); res[0].Step != semantic.StepModel || res[0].ModelDigest != digest2 {
		t.Fatalf("new digest: %+v", res[0])
	}
	// A changed question (here: examples) is a new prompt version.
	q2 := f.question(&config.Watch{Ask: "Is it urgent?", Examples: []string{"the server is down"}})
	if res := f.judgeAll(semantic.Options{}, r(q2)); res[0].Step != semantic.StepModel || res[0].PromptVersion == q.Version {
		t.Fatalf("new prompt: %+v", res[0])
	}
	if n := f.fake.Chats(); n != 3 {
		t.Errorf("chats = %d, want 3", n)
	}
	if n := f.count(`SELECT count(DISTINCT (model_digest, prompt_version)) FROM model_calls`); n != 3 {
		t.Errorf("distinct (digest, prompt version) on record = %d, want 3", n)
	}
}

func TestJudgeRetriesAMalformedAnswerOnce(t *testing.T) {
	t.Parallel()
	f := setup(t, nil)
	q := f.question(&config.Watch{Ask: "Is it urgent?"})

	f.fake.Answers(ollamatest.Answer{Content: `{"should_notify": "maybe"`}, ollamatest.Answer{Content: ollamatest.Verdict(true, "medium", "Fixed.", 0.5)})
	res := f.judgeAll(semantic.Options{}, request(q, "w", "1", "a"))
	if r := res[0]; r.Step != semantic.StepModel || r.Calls != 2 || r.Verdict.Reason != "Fixed." {
		t.Fatalf("retried: %+v", r)
	}
	reqs := f.fake.Requests()
	if len(reqs[1].Messages) != 4 || reqs[1].Messages[2].Role != "assistant" || !strings.Contains(reqs[1].Messages[3].Content, "not valid (malformed answer: not JSON") {
		t.Errorf("retry request messages: %+v", reqs[1].Messages)
	}
	rows, err := f.pool.Query(context.Background(), `SELECT attempt, outcome, coalesce(raw_output, ''), output IS NULL FROM model_calls ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		attempt  int
		outcome  string
		raw      string
		noOutput bool
	}
	var got []row
	for rows.Next() {
		var r row
		if err := rows.Scan(&r.attempt, &r.outcome, &r.raw, &r.noOutput); err != nil {
			t.Fatal(err)
		}
		got = append(got, r)
	}
	want := []row{{1, "malformed", `{"should_notify": "maybe"`, true}, {2, "ok", "", false}}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("model_calls = %+v, want %+v", got, want)
	}

	// Malformed twice: an error, both calls recorded, nothing cached.
	bad := ollamatest.Answer{Content: `{"should_notify":true,"urgency":"high","reason":"r","confidence":7}`}
	f.fake.Answers(bad, bad)
	res = f.judgeAll(semantic.Options{}, request(q, "w", "2", "b"))
	if r := res[0]; r.Step != semantic.StepError || r.Outcome != semantic.OutcomeMalformed || r.Calls != 2 || !errors.Is(r.Err, semantic.ErrMalformed) || r.ModelCallID == nil {
		t.Fatalf("malformed twice: %+v", r)
	}
	if n := f.count(`SELECT count(*) FROM model_calls WHERE outcome = 'malformed' AND output->>'confidence' = '7'`); n != 2 {
		t.Errorf("malformed rows with their JSON output = %d, want 2", n)
	}
	if n := f.count(`SELECT count(*) FROM verdicts`); n != 1 {
		t.Errorf("verdicts = %d, want 1 (a malformed answer is not cached)", n)
	}
}

// An answer the model server cut off at num_predict (done_reason
// "length") is malformed, and the error says it was truncated and which
// settings to change.
func TestJudgeSaysWhenTheAnswerWasCutOff(t *testing.T) {
	t.Parallel()
	f := setup(t, func(o *modelspec.Config) { o.Options["num_predict"] = 24 })
	q := f.question(&config.Watch{Ask: "Is it urgent?"})
	cut := ollamatest.Answer{Content: `{"should_notify": true, "urgency": "high", "reason": "The customer writes that the`, DoneReason: "length"}
	f.fake.Answers(cut, cut)
	res := f.judgeAll(semantic.Options{}, request(q, "w", "1", "a"))
	r := res[0]
	if r.Step != semantic.StepError || r.Outcome != semantic.OutcomeMalformed || !errors.Is(r.Err, semantic.ErrMalformed) {
		t.Fatalf("cut off: %+v", r)
	}
	for _, want := range []string{"cut off", "num_predict = 24", `done_reason "length"`, "ollama.options.num_predict", "ollama.reason_max_chars (200)"} {
		if !strings.Contains(r.Err.Error(), want) {
			t.Errorf("error %q does not say %q", r.Err, want)
		}
	}
	if n := f.count(`SELECT count(*) FROM model_calls WHERE outcome = 'malformed' AND error LIKE '%cut off%num_predict%'`); n != 2 {
		t.Errorf("model_calls saying the answer was cut off = %d, want 2", n)
	}
	// A malformed answer that was not cut off does not say so.
	f.fake.Answers(ollamatest.Answer{Content: `{"should_notify": "maybe"}`}, ollamatest.Answer{Content: `{"should_notify": "maybe"}`})
	res = f.judgeAll(semantic.Options{}, request(q, "w", "2", "b"))
	if err := res[0].Err; err == nil || strings.Contains(err.Error(), "cut off") {
		t.Errorf("a malformed answer that stopped normally: %v", err)
	}
}

func TestJudgeServerErrorOpensTheBreaker(t *testing.T) {
	t.Parallel()
	f := setup(t, nil)
	q := f.question(&config.Watch{Ask: "Is it urgent?"})
	f.fake.Answers(ollamatest.Answer{Status: http.StatusInternalServerError, Error: "llama runner process has terminated"})
	res := f.judgeAll(semantic.Options{}, request(q, "w", "1", "a"))
	if r := res[0]; r.Step != semantic.StepError || r.Outcome != semantic.OutcomeError || !strings.Contains(r.Err.Error(), "llama runner process has terminated") {
		t.Fatalf("500: %+v", r)
	}
	// The next request fails fast: no request reaches the server, none is recorded.
	res = f.judgeAll(semantic.Options{}, request(q, "w", "2", "b"))
	if r := res[0]; r.Step != semantic.StepError || !errors.Is(r.Err, semantic.ErrUnavailable) || r.Calls != 0 || r.Outcome != "" {
		t.Fatalf("while down: %+v", r)
	}
	if n := f.fake.Chats(); n != 1 {
		t.Errorf("chats = %d, want 1", n)
	}
	if n := f.count(`SELECT count(*) FROM model_calls WHERE outcome = 'error' AND error LIKE '%llama runner process has terminated%'`); n != 1 {
		t.Errorf("error rows = %d, want 1", n)
	}
	// Once the breaker closes again the server is asked.
	f.judge.Client().ResetBreaker()
	if res := f.judgeAll(semantic.Options{}, request(q, "w", "2", "b")); res[0].Step != semantic.StepModel {
		t.Fatalf("after reset: %+v", res[0])
	}
}

func TestJudgeTimesOutASlowModel(t *testing.T) {
	t.Parallel()
	f := setup(t, func(o *modelspec.Config) { o.Timeout = 200 * time.Millisecond })
	q := f.question(&config.Watch{Ask: "Is it urgent?"})
	f.fake.Answers(ollamatest.Answer{Hang: true})
	start := time.Now()
	res := f.judgeAll(semantic.Options{}, request(q, "w", "1", "a"))
	if r := res[0]; r.Step != semantic.StepError || r.Outcome != semantic.OutcomeTimeout || !errors.Is(r.Err, context.DeadlineExceeded) {
		t.Fatalf("slow: %+v", r)
	}
	// Not before the 200 ms; and well before the 60 s default, with room
	// for a busy machine (a 3 s bound failed at load 60).
	if d := time.Since(start); d < 200*time.Millisecond || d > config.OllamaTimeoutDefault/2 {
		t.Errorf("gave up after %s, want 200ms (and far less than the default %s)", d, config.OllamaTimeoutDefault)
	}
	if n := f.count(`SELECT count(*) FROM model_calls WHERE outcome = 'timeout' AND latency_ms >= 200`); n != 1 {
		t.Errorf("timeout rows = %d, want 1", n)
	}
}

func TestJudgeModelNotOnServer(t *testing.T) {
	t.Parallel()
	f := setup(t, nil)
	q := f.question(&config.Watch{Ask: "a", Model: &config.WatchModel{Name: "mistral"}})
	res := f.judgeAll(semantic.Options{}, request(q, "w", "1", "a"))
	if r := res[0]; r.Step != semantic.StepError || !errors.Is(r.Err, semantic.ErrModelNotFound) ||
		!strings.Contains(r.Err.Error(), `"mistral" is not on `+f.fake.URL+` (it has: llama3.2:latest)`) {
		t.Fatalf("missing model: %+v", r)
	}
	if f.fake.Chats() != 0 {
		t.Errorf("chat sent for a missing model")
	}
}

func TestJudgeBudgets(t *testing.T) {
	t.Parallel()
	// One day for the whole test: a run across midnight UTC does not move
	// the budget's day between two calls.
	now := time.Now().UTC()
	f := setup(t, func(o *modelspec.Config) { o.Now = func() time.Time { return now } })
	q := f.question(&config.Watch{Ask: "Is it urgent?"})
	calls := func(id string) *semantic.Request {
		r := request(q, "calls", id, id)
		r.Budget = config.Budget{CallsPerDay: 1}
		return r
	}
	res := f.judgeAll(semantic.Options{}, calls("1"), calls("2"))
	if res[0].Step != semantic.StepModel || res[1].Step != semantic.StepBudget {
		t.Fatalf("steps %s, %s; want model, budget", res[0].Step, res[1].Step)
	}
	midnight := time.Date(now.Year(), now.Month(), now.Day()+1, 0, 0, 0, 0, time.UTC)
	if r := res[1]; r.Err.Error() != "budget exhausted: 1 of calls_per_day 1 used" || !r.RetryAt.Equal(midnight) {
		t.Errorf("budget result: %v, retry at %s", r.Err, r.RetryAt)
	}
	// Usage is kept in model_budgets: a later batch is held too, but a
	// cached verdict needs no budget.
	res = f.judgeAll(semantic.Options{}, calls("3"), calls("1"))
	if res[0].Step != semantic.StepBudget || res[1].Step != semantic.StepCache {
		t.Fatalf("next batch: %s, %s; want budget, cache", res[0].Step, res[1].Step)
	}
	// Replays do not spend the budget of live evaluation.
	if res := f.judgeAll(semantic.Options{Purpose: semantic.PurposeReplay}, calls("4")); res[0].Step != semantic.StepModel {
		t.Fatalf("replay: %s", res[0].Step)
	}

	tokens := func(id string) *semantic.Request {
		r := request(q, "tokens", id, id)
		r.Budget = config.Budget{TokensPerDay: 60}
		return r
	}
	res = f.judgeAll(semantic.Options{}, tokens("5"))
	res2 := f.judgeAll(semantic.Options{}, tokens("6"))
	if res[0].Step != semantic.StepModel || res2[0].Step != semantic.StepBudget || res2[0].Err.Error() != "budget exhausted: 70 of tokens_per_day 60 used" {
		t.Fatalf("tokens: %s, %s %v", res[0].Step, res2[0].Step, res2[0].Err)
	}
	if n := f.fake.Chats(); n != 3 {
		t.Errorf("chats = %d, want 3", n)
	}
}

// TestBudgetDaysAtCalendarEdges exhausts a watch's daily budget with the
// clock (modelspec.Config.Now) at the last instant of the days around the
// dates every calendar rule is tested at (docs/development.md#tests): the
// call counts against that UTC day, and the budget resets at the next
// midnight UTC, also into a month's first day, a new year and across 29
// February; DST days in Paris and New York change nothing (budgets keep
// UTC days).
func TestBudgetDaysAtCalendarEdges(t *testing.T) {
	t.Parallel()
	last := func(y int, m time.Month, d int) time.Time {
		return time.Date(y, m, d, 23, 59, 59, 999_000_000, time.UTC)
	}
	for _, tc := range []struct {
		name    string
		now     time.Time
		day     string
		resetAt time.Time
	}{
		{"2026-11-30, the eve of 2026-12-01, a month's first day", last(2026, 11, 30), "2026-11-30", time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)},
		{"2026-12-01 09:30 UTC, a month's first day", time.Date(2026, 12, 1, 9, 30, 0, 0, time.UTC), "2026-12-01", time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)},
		{"2026-12-31, the eve of 2027-01-01, a new year", last(2026, 12, 31), "2026-12-31", time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)},
		{"2027-01-04, ISO week 1 of 2027", time.Date(2027, 1, 4, 0, 0, 0, 0, time.UTC), "2027-01-04", time.Date(2027, 1, 5, 0, 0, 0, 0, time.UTC)},
		{"2027-03-28 01:30 UTC, Europe/Paris springs forward", time.Date(2027, 3, 28, 1, 30, 0, 0, time.UTC), "2027-03-28", time.Date(2027, 3, 29, 0, 0, 0, 0, time.UTC)},
		{"2027-10-31, Europe/Paris falls back", last(2027, 10, 31), "2027-10-31", time.Date(2027, 11, 1, 0, 0, 0, 0, time.UTC)},
		{"2027-03-14, America/New_York springs forward", last(2027, 3, 14), "2027-03-14", time.Date(2027, 3, 15, 0, 0, 0, 0, time.UTC)},
		{"2027-11-07, America/New_York falls back", last(2027, 11, 7), "2027-11-07", time.Date(2027, 11, 8, 0, 0, 0, 0, time.UTC)},
		{"2028-02-28, the eve of 2028-02-29, a leap day", last(2028, 2, 28), "2028-02-28", time.Date(2028, 2, 29, 0, 0, 0, 0, time.UTC)},
		{"2028-02-29, a leap day", last(2028, 2, 29), "2028-02-29", time.Date(2028, 3, 1, 0, 0, 0, 0, time.UTC)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := setup(t, func(o *modelspec.Config) { o.Now = func() time.Time { return tc.now } })
			q := f.question(&config.Watch{Ask: "Is it urgent?"})
			calls := func(id string) *semantic.Request {
				r := request(q, "w", id, id)
				r.Budget = config.Budget{CallsPerDay: 1}
				return r
			}
			res := f.judgeAll(semantic.Options{}, calls("1"), calls("2"))
			if res[0].Step != semantic.StepModel || res[1].Step != semantic.StepBudget {
				t.Fatalf("steps %s, %s; want model, budget", res[0].Step, res[1].Step)
			}
			if !res[1].RetryAt.Equal(tc.resetAt) {
				t.Errorf("an exhausted budget resets at %s, want %s", res[1].RetryAt.UTC().Format(time.RFC3339), tc.resetAt.Format(time.RFC3339))
			}
			var day string
			var used int
			if err := f.pool.QueryRow(context.Background(), `SELECT day::text, calls FROM model_budgets WHERE source = 'tasks' AND watch = 'w'`).Scan(&day, &used); err != nil {
				t.Fatal(err)
			}
			if day != tc.day || used != 1 {
				t.Errorf("model_budgets: %d call(s) on %s, want 1 on %s", used, day, tc.day)
			}
		})
	}
}

// TestJudgeGivesBackUnusedReservations: a call reserved but not made (the
// breaker is open) goes back to the budget; the calls made before the
// budget row existed today are counted when it is created. The budget's
// day is that of a fixed clock, 2026-12-01 09:30 UTC (a month's first day,
// docs/development.md#tests; in the past, so the model calls the database
// records now are of that day or later): a run across 00:00 UTC no longer
// starts a second day between the calls.
func TestJudgeGivesBackUnusedReservations(t *testing.T) {
	t.Parallel()
	f := setup(t, func(o *modelspec.Config) {
		o.Now = func() time.Time { return time.Date(2026, 12, 1, 9, 30, 0, 0, time.UTC) }
	})
	q := f.question(&config.Watch{Ask: "Is it urgent?"})
	calls := func(id string, perDay int) *semantic.Request {
		r := request(q, "w", id, id)
		r.Budget = config.Budget{CallsPerDay: perDay}
		return r
	}
	// One call without a budget, then the breaker opens.
	f.fake.Answers(ollamatest.Answer{Status: http.StatusInternalServerError, Error: "llama runner process has terminated"})
	f.judgeAll(semantic.Options{}, request(q, "w", "1", "a"))
	res := f.judgeAll(semantic.Options{}, calls("2", 2))
	if r := res[0]; !errors.Is(r.Err, semantic.ErrUnavailable) {
		t.Fatalf("while down: %+v", r)
	}
	used := func() int {
		return f.count(`SELECT calls FROM model_budgets WHERE source = 'tasks' AND watch = 'w' AND day = '2026-12-01'`)
	}
	if n := used(); n != 1 {
		t.Errorf("calls used = %d, want 1 (the call before the budget; the unmade one given back)", n)
	}
	f.judge.Client().ResetBreaker()
	res = f.judgeAll(semantic.Options{}, calls("3", 2), calls("4", 2))
	if res[0].Step != semantic.StepModel || res[1].Step != semantic.StepBudget {
		t.Fatalf("steps %s, %s; want model, budget", res[0].Step, res[1].Step)
	}
	if n := used(); n != 2 {
		t.Errorf("calls used = %d, want 2", n)
	}
}

func TestJudgeSameInputInOneBatchIsAskedOnce(t *testing.T) {
	t.Parallel()
	f := setup(t, nil)
	q := f.question(&config.Watch{Ask: "Is it urgent?"})
	// Two watches with the same question share the verdict.
	res := f.judgeAll(semantic.Options{}, request(q, "a", "1", "URGENT"), request(q, "b", "1", "URGENT"))
	if res[0].Step != semantic.StepModel || res[1].Step != semantic.StepCache || *res[0].ModelCallID != *res[1].ModelCallID || res[1].Calls != 0 {
		t.Fatalf("results %+v / %+v", res[0], res[1])
	}
	if n := f.fake.Chats(); n != 1 {
		t.Errorf("chats = %d, want 1", n)
	}
}

func TestJudgeBoundsConcurrency(t *testing.T) {
	t.Parallel()
	f := setup(t, func(o *modelspec.Config) { o.Concurrency = 2; o.Timeout = 10 * time.Second })
	q := f.question(&config.Watch{Ask: "Is it urgent?"})
	f.fake.SetAnswer(func(req *api.ChatRequest) ollamatest.Answer {
		a := ollamatest.DefaultAnswer(req)
		a.Hang = true
		return a
	})
	var reqs []*semantic.Request
	for _, id := range []string{"1", "2", "3", "4", "5", "6"} {
		reqs = append(reqs, request(q, "w", id, id))
	}
	var wg sync.WaitGroup
	var res []semantic.Result
	wg.Go(func() { res = f.judgeAll(semantic.Options{}, reqs...) })
	testsignal.Eventually(t, "2 requests in flight", func() bool { n, _ := f.fake.InFlight(); return n == 2 })
	// Give a broken bound the chance to show: no third request arrives.
	deadline := time.Now().Add(200 * time.Millisecond)
	for time.Now().Before(deadline) {
		if n, _ := f.fake.InFlight(); n > 2 {
			t.Fatalf("%d requests in flight, concurrency is 2", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	f.fake.Release()
	wg.Wait()
	if _, most := f.fake.InFlight(); most != 2 {
		t.Errorf("most in flight = %d, want 2", most)
	}
	for i, r := range res {
		if r.Step != semantic.StepModel {
			t.Errorf("result %d: %+v", i, r)
		}
	}
}

func TestJudgeRateLimit(t *testing.T) {
	t.Parallel()
	f := setup(t, func(o *modelspec.Config) { o.PerSecond, o.Burst = 20, 1 })
	q := f.question(&config.Watch{Ask: "Is it urgent?"})
	start := time.Now()
	f.judgeAll(semantic.Options{}, request(q, "w", "1", "1"), request(q, "w", "2", "2"), request(q, "w", "3", "3"), request(q, "w", "4", "4"))
	// 4 calls at 20/s with a burst of 1: at least 3 intervals of 50ms.
	if d := time.Since(start); d < 140*time.Millisecond {
		t.Errorf("4 calls took %s, the rate limit allows no less than 150ms", d)
	}
}

// A replay's judgment stops at its call limit. (A replay without the
// model does not reach the judge: internal/replay reads the cache.)
func TestJudgeCallLimit(t *testing.T) {
	t.Parallel()
	f := setup(t, nil)
	q := f.question(&config.Watch{Ask: "Is it urgent?"})
	f.judgeAll(semantic.Options{}, request(q, "w", "1", "URGENT"))
	res := f.judgeAll(semantic.Options{Purpose: semantic.PurposeReplay, MaxCalls: 1}, request(q, "w", "3", "x"), request(q, "w", "4", "y"))
	if res[0].Step != semantic.StepModel || res[1].Step != semantic.StepBudget || res[1].Err.Error() != "call limit of 1 reached" {
		t.Fatalf("call limit: %+v / %+v", res[0], res[1])
	}
	if n := f.count(`SELECT count(*) FROM model_calls WHERE purpose = 'replay'`); n != 1 {
		t.Errorf("replay calls on record = %d, want 1", n)
	}
	if n := f.fake.Chats(); n != 2 {
		t.Errorf("chats = %d, want 2", n)
	}
}

func TestJudgeUsesTheLastDigestWhileTagsFail(t *testing.T) {
	t.Parallel()
	f := setup(t, func(o *modelspec.Config) { o.DigestTTL = time.Nanosecond })
	q := f.question(&config.Watch{Ask: "Is it urgent?"})
	f.judgeAll(semantic.Options{}, request(q, "w", "1", "URGENT"))
	f.fake.TagsDown(true)
	res := f.judgeAll(semantic.Options{}, request(q, "w", "1", "URGENT"))
	if r := res[0]; r.Step != semantic.StepCache || r.ModelDigest != digest1 {
		t.Fatalf("cached verdict while /api/tags fails: %+v", r)
	}
	if f.fake.TagsCalls() < 2 {
		t.Errorf("/api/tags was not asked again")
	}
}
