package evaluator

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ollama/ollama/api"

	"github.com/lookout-dev/lookout/internal/modelspec"
	"github.com/lookout-dev/lookout/internal/normalize"
	"github.com/lookout-dev/lookout/internal/pgtest"
	"github.com/lookout-dev/lookout/internal/semantic/ollamatest"
	"github.com/lookout-dev/lookout/internal/testsignal"
)

const tasksSource = `
name: tasks
connector: file
file:
  paths: ["data/*.json"]
volatile: [extra.views]
watches:
  - name: urgent
    when: record.status == "open"
    ask: Is this task urgent for the on-call engineer?
    examples: ["the production database is down"]
    counter_examples: ["a typo in the docs"]
  - name: closed
    when: record.status == "done"
`

const otherSource = `
name: other
connector: file
file:
  paths: ["other/*.json"]
watches:
  - name: anything
`

func TestModelIsAskedOnlyForFilterMatches(t *testing.T) {
	t.Parallel()
	h := newHarness(t, baseGlobal, map[string]string{"tasks.yaml": tasksSource})
	h.sync("tasks",
		rec("T-1", "URGENT: production database is down", "open"),
		rec("T-2", "Fix a typo", "open"),
		rec("T-3", "Old thing", "done"),
		rec("T-4", "Another old thing", "done"),
		rec("T-5", "Yet another", "done"),
	)
	if n := h.drain(); n != 5 {
		t.Fatalf("completed %d changes, want 5", n)
	}
	if n := h.fake.Chats(); n != 2 {
		t.Errorf("model calls = %d, want 2 (only the open tasks pass the filter)", n)
	}

	e := h.one("tasks", "T-1", "urgent")
	if e.Step != "model" || e.Decision != "notify" || e.Urgency != "high" || e.Reason != "The record is marked urgent." ||
		e.Confidence == nil || *e.Confidence != 0.9 || e.ModelCallID == nil || e.NoteID == nil || !e.Matched {
		t.Errorf("T-1 urgent: %+v", e)
	}
	if e := h.one("tasks", "T-2", "urgent"); e.Step != "model" || e.Decision != "skip" || e.Reason != "Nothing here needs the user." || e.ModelCallID == nil {
		t.Errorf("T-2 urgent: %+v", e)
	}
	if e := h.one("tasks", "T-3", "urgent"); e.Step != "filter" || e.Decision != "skip" || e.ModelCallID != nil || e.Matched {
		t.Errorf("T-3 urgent: %+v", e)
	}
	if e := h.one("tasks", "T-3", "closed"); e.Step != "filter" || e.Decision != "notify" {
		t.Errorf("T-3 closed: %+v", e)
	}
	// The notification carries the model's urgency and reason.
	var urgency, reason string
	if err := h.pool.QueryRow(h.ctx, `SELECT urgency, reason FROM notifications WHERE record_id = 'T-1' AND watch = 'urgent'`).Scan(&urgency, &reason); err != nil {
		t.Fatal(err)
	}
	if urgency != "high" || reason != "The record is marked urgent." {
		t.Errorf("notification urgency %q reason %q", urgency, reason)
	}
	if n := h.count(`SELECT count(*) FROM notifications WHERE record_id = 'T-1' AND (payload->>'confidence')::float8 = 0.9`); n != 1 {
		t.Errorf("payload confidence missing")
	}
	// The prompt holds the ask, the examples and the record, not the volatile field.
	req := h.fake.Requests()[0]
	if !strings.Contains(req.Messages[0].Content, "Is this task urgent for the on-call engineer?") ||
		!strings.Contains(req.Messages[0].Content, "- the production database is down") ||
		!strings.Contains(req.Messages[0].Content, "- a typo in the docs") ||
		!strings.Contains(req.Messages[1].Content, "Change: the record was created.") {
		t.Errorf("prompt:\n%s\n%s", req.Messages[0].Content, req.Messages[1].Content)
	}
	// model_calls references the change and the evaluation references the call.
	if n := h.count(`SELECT count(*) FROM evaluations e JOIN model_calls mc ON mc.source = e.source AND mc.id = e.model_call_id
		WHERE mc.change_id = e.change_id AND mc.model_digest = $1 AND mc.outcome = 'ok'`, testDigest); n != 2 {
		t.Errorf("evaluations joined to their model calls = %d, want 2", n)
	}
}

func TestUnchangedContentIsNeverJudgedTwice(t *testing.T) {
	t.Parallel()
	h := newHarness(t, baseGlobal, map[string]string{"tasks.yaml": tasksSource})
	views := func(n int) normalize.Record {
		r := rec("T-1", "URGENT: disk full", "open")
		r.Extra = map[string]any{"views": int64(n)}
		return r
	}
	h.sync("tasks", views(1), rec("T-2", "Small thing", "open"))
	h.drain()
	if n := h.fake.Chats(); n != 2 {
		t.Fatalf("first pass: %d calls, want 2", n)
	}
	// The mirror is rebuilt (a re-created source): the same content arrives
	// as new changes; only the volatile view counter differs.
	h.resetMirror("tasks")
	if st := h.sync("tasks", views(7), rec("T-2", "Small thing", "open")); st.Created != 2 {
		t.Fatalf("re-sync created %d changes, want 2", st.Created)
	}
	h.drain()
	if n := h.fake.Chats(); n != 2 {
		t.Errorf("after re-sync: %d calls, want still 2", n)
	}
	// T-1's verdict came from the cache (and its notification was already
	// sent for this content: the dedupe step has the last word).
	evs := h.evaluations("tasks", "T-1", "urgent")
	if len(evs) != 2 || evs[0].Step != "model" || evs[1].Step != "dedupe" || *evs[1].ModelCallID != *evs[0].ModelCallID || evs[1].Decision != "duplicate" {
		t.Errorf("T-1 evaluations: %+v", evs)
	}
	if e := h.evaluations("tasks", "T-2", "urgent"); len(e) != 2 || e[1].Step != "cache" || e[1].Decision != "skip" || *e[1].ModelCallID != *e[0].ModelCallID {
		t.Errorf("T-2 evaluations: %+v", e)
	}
	if n := h.count(`SELECT sum(hits)::int FROM verdicts`); n != 2 {
		t.Errorf("verdict cache hits = %d, want 2", n)
	}
	// A real change of content is judged again.
	h.sync("tasks", rec("T-2", "Small thing, now URGENT", "open"))
	h.drain()
	if n := h.fake.Chats(); n != 3 {
		t.Errorf("after a content change: %d calls, want 3", n)
	}
}

func TestModelDownHoldsOnlyTheWatchThatNeedsIt(t *testing.T) {
	t.Parallel()
	// "opened" notifies without a model, on the same changes that "urgent" holds.
	tasks := tasksSource + `
  - name: opened
    when: record.status == "open" && change.kind == "created"
`
	h := newHarness(t, baseGlobal, map[string]string{"tasks.yaml": tasks, "other.yaml": otherSource})
	h.fake.SetAnswer(func(*api.ChatRequest) ollamatest.Answer {
		return ollamatest.Answer{Status: http.StatusServiceUnavailable, Error: "server overloaded"}
	})
	h.sync("tasks", rec("T-1", "URGENT: outage", "open"), rec("T-2", "Done thing", "done"), rec("T-3", "URGENT too", "open"))
	h.sync("other", rec("O-1", "x", ""))
	if n := h.drain(); n != 2 {
		t.Fatalf("completed %d changes, want 2 (T-2 and O-1; T-1 and T-3 held)", n)
	}
	// At most one request per concurrency slot reached the server; after
	// the first failure the breaker fails the rest fast.
	if n := h.fake.Chats(); n < 1 || n > 2 {
		t.Errorf("chats = %d, want 1 or 2 (ollama.concurrency is 2)", n)
	}
	held := h.lastChange("tasks", "T-1")
	e := h.one("tasks", "T-1", "urgent")
	if e.Decision != "hold" || e.Step != "error" || !strings.Contains(e.Reason, "on_model_error is hold: retry after") {
		t.Errorf("T-1 urgent: %+v", e)
	}
	if e := h.one("tasks", "T-1", "closed"); e.Decision != "skip" || e.Step != "filter" {
		t.Errorf("T-1 closed (decided while urgent is held): %+v", e)
	}
	st := h.change(held)
	if st.Status != "pending" || st.Owner != nil || !st.NextAt.After(time.Now()) || st.Error == nil || !strings.HasPrefix(*st.Error, "urgent: ") {
		t.Errorf("held change state: %+v", st)
	}
	if n := h.count(`SELECT count(*) FROM notifications`); n != 4 {
		t.Errorf("notifications = %d, want 4 (T-1 and T-3 opened, T-2 closed, O-1 anything)", n)
	}

	// A later change of the held record waits behind it; nothing else does.
	h.sync("tasks", rec("T-1", "URGENT: outage, now with details", "open"))
	h.sync("other", rec("O-2", "y", ""))
	if n := h.drain(); n != 1 {
		t.Fatalf("completed %d, want 1 (O-2)", n)
	}
	later := h.lastChange("tasks", "T-1")
	if st := h.change(later); st.Status != "pending" || st.Attempts != 0 {
		t.Errorf("later change of the held record: %+v", st)
	}

	// The model is back: the held watch is decided, nothing is decided twice.
	h.fake.SetAnswer(ollamatest.DefaultAnswer)
	h.makeDue()
	if n := h.drain(); n != 3 {
		t.Fatalf("completed %d, want 3 (T-1, T-3, and T-1's later change)", n)
	}
	e = h.evaluations("tasks", "T-1", "urgent")[0]
	if e.ChangeID != held || e.Decision != "notify" || e.Step != "model" || e.NoteID == nil {
		t.Errorf("T-1 urgent after the model came back: %+v", e)
	}
	if evs := h.evaluations("tasks", "T-1", "closed"); len(evs) != 2 {
		t.Errorf("T-1 closed evaluations: %d, want 2 (one per change)", len(evs))
	}
	if st := h.change(held); st.Status != "done" || st.Error != nil || st.Attempts != 2 {
		t.Errorf("held change after retry: %+v", st)
	}
	if n := h.count(`SELECT count(*) FROM notifications WHERE watch = 'urgent'`); n != 3 {
		t.Errorf("urgent notifications = %d, want 3 (T-1 twice, T-3)", n)
	}
	if n := h.count(`SELECT coalesce(sum(duplicates_suppressed), 0)::int FROM notifications`); n != 0 {
		t.Errorf("duplicates suppressed = %d, want 0: a decided watch was evaluated again", n)
	}
	if n := h.count(`SELECT count(*) FROM changes WHERE eval_status = 'pending'`); n != 0 {
		t.Errorf("pending changes = %d, want 0", n)
	}
	// The models page's drift (model_drift_days) and the overview's hourly
	// evaluations (activity_hour_totals) count the held decision the model
	// replaced once, as the evaluations do: the evaluator counts the rows
	// it inserts (migration 57), the update triggers the replaced one. On
	// Citus nothing is counted and the rollups stay empty (docs/scaling.md).
	if pgtest.OnCitus(t, h.pool) {
		return
	}
	const activityFromHistory = `
		SELECT date_trunc('hour', created_at, 'UTC'), count(*), count(*) FILTER (WHERE decision = 'notify')
		FROM evaluations GROUP BY 1`
	const activityTotals = `
		SELECT hour, sum(evaluations), sum(notify_decisions) FROM activity_hour_totals
		GROUP BY 1 HAVING sum(evaluations) <> 0 OR sum(notify_decisions) <> 0`
	if n := h.count(`SELECT count(*) FROM ((` + activityTotals + ` EXCEPT ` + activityFromHistory + `) UNION ALL (` +
		activityFromHistory + ` EXCEPT ` + activityTotals + `)) d`); n != 0 {
		t.Errorf("%d hours of the activity's evaluations differ from the evaluations (totals %v, history %v)", n,
			h.count(`SELECT coalesce(sum(evaluations), 0)::int FROM activity_hour_totals`), h.count(`SELECT count(*) FROM evaluations`))
	}
	const fromHistory = `
		SELECT date_trunc('day', e.created_at, 'UTC'), mc.model, mc.model_digest, mc.prompt_version, count(*),
		       count(*) FILTER (WHERE e.step = 'model'), count(*) FILTER (WHERE e.step = 'cache'),
		       count(*) FILTER (WHERE e.decision IN ('notify', 'duplicate')), count(*) FILTER (WHERE e.decision = 'skip')
		FROM evaluations e JOIN model_calls mc ON mc.source = e.source AND mc.id = e.model_call_id
		WHERE e.step IN ('model', 'cache') GROUP BY 1, 2, 3, 4`
	const fromRollup = `SELECT day, model, model_digest, prompt_version, evaluations, judged, cache_hits, notify, skip FROM report_model_drift_daily`
	if n := h.count(`SELECT count(*) FROM report_model_drift_daily WHERE judged > 0`); n == 0 {
		t.Errorf("the model drift counts no model step")
	}
	if n := h.count(`SELECT count(*) FROM ((` + fromRollup + ` EXCEPT ` + fromHistory + `) UNION ALL (` + fromHistory + ` EXCEPT ` + fromRollup + `)) d`); n != 0 {
		t.Errorf("%d rows of the model drift differ from the evaluations", n)
	}
}

func TestOnModelErrorNotifyAndSkip(t *testing.T) {
	t.Parallel()
	h := newHarness(t, baseGlobal, map[string]string{"tasks.yaml": `
name: tasks
connector: file
file: {paths: ["x"]}
watches:
  - name: loud
    ask: Is it urgent?
    on_model_error: notify
    urgency: high
  - name: quiet
    ask: Is it urgent?
    on_model_error: skip
`})
	h.fake.SetAnswer(func(*api.ChatRequest) ollamatest.Answer {
		return ollamatest.Answer{Status: http.StatusInternalServerError, Error: "boom"}
	})
	h.sync("tasks", rec("T-1", "x", "open"))
	if n := h.drain(); n != 1 {
		t.Fatalf("completed %d, want 1", n)
	}
	if e := h.one("tasks", "T-1", "loud"); e.Decision != "notify" || e.Step != "error" || e.Urgency != "high" ||
		!strings.Contains(e.Reason, "boom") || !strings.HasSuffix(e.Reason, "; on_model_error is notify") || e.NoteID == nil {
		t.Errorf("loud: %+v", e)
	}
	if e := h.one("tasks", "T-1", "quiet"); e.Decision != "skip" || e.Step != "error" || !strings.HasSuffix(e.Reason, "; on_model_error is skip") {
		t.Errorf("quiet: %+v", e)
	}
}

// TestBudgetExhaustedHoldsUntilTheNextDay: a change past its watch's
// calls_per_day is held until the next UTC midnight of the model's clock
// (modelspec.Config.Now), at fixed dates named below (docs/development.md#tests).
func TestBudgetExhaustedHoldsUntilTheNextDay(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		date string
		now  time.Time
		// midnight is the next UTC midnight, when the budget resets.
		midnight time.Time
	}{
		// Dates in the future: a hold until a midnight already past on the
		// database's real clock would be claimed again at once.
		{"2099-12-01 09:30 UTC, a month's first day", time.Date(2099, 12, 1, 9, 30, 0, 0, time.UTC), time.Date(2099, 12, 2, 0, 0, 0, 0, time.UTC)},
		{"2099-01-01 00:00 UTC, a new year's first instant", time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2099, 1, 2, 0, 0, 0, 0, time.UTC)},
		{"2096-02-29 23:59:59 UTC, a leap day's last second", time.Date(2096, 2, 29, 23, 59, 59, 0, time.UTC), time.Date(2096, 3, 1, 0, 0, 0, 0, time.UTC)},
	} {
		t.Run(tc.date, func(t *testing.T) {
			t.Parallel()
			h := newHarnessWith(t, Config{Model: modelspec.Config{Now: func() time.Time { return tc.now }}}, baseGlobal,
				map[string]string{"tasks.yaml": `
name: tasks
connector: file
file: {paths: ["x"]}
watches:
  - name: urgent
    ask: Is it urgent?
    budget: {calls_per_day: 2}
`})
			h.sync("tasks", rec("T-1", "a", ""), rec("T-2", "b", ""), rec("T-3", "c", ""))
			if n := h.drain(); n != 2 {
				t.Fatalf("completed %d, want 2", n)
			}
			e := h.one("tasks", "T-3", "urgent")
			if e.Step != "budget" || e.Decision != "hold" || !strings.HasPrefix(e.Reason, "budget exhausted: 2 of calls_per_day 2 used; on_model_error is hold") {
				t.Errorf("T-3: %+v", e)
			}
			if st := h.change(h.lastChange("tasks", "T-3")); !st.NextAt.Equal(tc.midnight) {
				t.Errorf("held until %s, want %s", st.NextAt.UTC().Format(time.RFC3339), tc.midnight.Format(time.RFC3339))
			}
			if n := h.fake.Chats(); n != 2 {
				t.Errorf("chats = %d, want 2", n)
			}
		})
	}
}

func TestMalformedAnswersGiveUpAfterMaxAttempts(t *testing.T) {
	t.Parallel()
	global := strings.Replace(baseGlobal, "max_attempts: 3", "max_attempts: 2", 1)
	h := newHarness(t, global, map[string]string{"tasks.yaml": `
name: tasks
connector: file
file: {paths: ["x"]}
watches:
  - name: urgent
    ask: Is it urgent?
`})
	h.fake.SetAnswer(func(*api.ChatRequest) ollamatest.Answer { return ollamatest.Answer{Content: "I think so!"} })
	h.sync("tasks", rec("T-1", "a", ""))
	h.drain()
	if e := h.one("tasks", "T-1", "urgent"); e.Decision != "hold" || !strings.Contains(e.Reason, "malformed answer: not JSON") {
		t.Fatalf("first attempt: %+v", e)
	}
	h.makeDue()
	if n := h.drain(); n != 1 {
		t.Fatalf("completed %d, want 1", n)
	}
	if e := h.one("tasks", "T-1", "urgent"); e.Decision != "error" || e.Step != "error" || !strings.Contains(e.Reason, "malformed on 2 attempts (evaluator.max_attempts), giving up") {
		t.Errorf("second attempt: %+v", e)
	}
	if n := h.count(`SELECT count(*) FROM model_calls WHERE outcome = 'malformed'`); n != 4 {
		t.Errorf("malformed calls on record = %d, want 4 (2 attempts x retry once)", n)
	}
}

func TestLeaseIsKeptDuringASlowModelStep(t *testing.T) {
	t.Parallel()
	// The lease is also the statement timeout of the claim's transaction:
	// on Citus, whose claim reads its candidates on every shard first, a
	// busy machine (load 40 on 2 cores) took longer than 600 ms for it, so
	// there the lease and the model's timeout are ten times longer.
	lease, timeout := "600ms", "500ms"
	if pgtest.OnCitus(t, pgtest.PoolFor(t, pgtest.URL(t))) {
		lease, timeout = "6s", "5s"
	}
	global := strings.Replace(strings.Replace(baseGlobal, "lease: 10s", "lease: "+lease, 1), "timeout: 2s", "timeout: "+timeout, 1)
	h := newHarness(t, global, map[string]string{"tasks.yaml": tasksSource})
	h.fake.SetAnswer(func(req *api.ChatRequest) ollamatest.Answer {
		a := ollamatest.DefaultAnswer(req)
		a.Hang = true
		return a
	})
	h.sync("tasks", rec("T-1", "URGENT", "open"))
	id := h.lastChange("tasks", "T-1")
	var wg sync.WaitGroup
	wg.Go(func() { h.drain() })
	testsignal.Eventually(t, "the model call", func() bool { n, _ := h.fake.InFlight(); return n == 1 })
	var first time.Time
	if err := h.pool.QueryRow(h.ctx, `SELECT eval_lease_expires_at FROM changes WHERE id = $1`, id).Scan(&first); err != nil {
		t.Fatal(err)
	}
	testsignal.Eventually(t, "the lease to be extended", func() bool {
		var now time.Time
		if err := h.pool.QueryRow(h.ctx, `SELECT coalesce(eval_lease_expires_at, 'infinity') FROM changes WHERE id = $1`, id).Scan(&now); err != nil {
			t.Fatal(err)
		}
		return now.After(first)
	})
	wg.Wait()
	// The call timed out (500ms): held, not lost.
	if e := h.one("tasks", "T-1", "urgent"); e.Decision != "hold" || !strings.Contains(e.Reason, "no answer within "+timeout) {
		t.Errorf("after the timeout: %+v", e)
	}
}

// TestSemanticFigures measures what the model step costs on a realistic
// mix: most changes fail the deterministic filter, and a re-sync of
// unchanged content is answered from the verdict cache. The figures are
// logged (go test -v -run TestSemanticFigures ./internal/evaluator/).
func TestSemanticFigures(t *testing.T) {
	t.Parallel()
	h := newHarness(t, baseGlobal, map[string]string{"tasks.yaml": tasksSource})
	const n = 500
	recs := func() []normalize.Record {
		var out []normalize.Record
		for i := range n {
			status := "done" // fails the urgent watch's filter
			if i%10 == 0 {
				status = "open" // 1 in 10 passes it
			}
			title := fmt.Sprintf("task %d", i)
			if i%30 == 0 {
				title = "URGENT " + title
			}
			out = append(out, rec(fmt.Sprintf("T-%03d", i), title, status))
		}
		return out
	}
	h.sync("tasks", recs()...)
	start := time.Now()
	evaluated := h.drain()
	first := time.Since(start)
	calls := h.fake.Chats()
	filtered := h.count(`SELECT count(*) FROM evaluations WHERE watch = 'urgent' AND step = 'filter'`)
	t.Logf("first sync: %d changes evaluated, %d failed the urgent watch's `when`, %d model calls (%.1f%% of changes), %s",
		evaluated, filtered, calls, 100*float64(calls)/float64(evaluated), first.Round(time.Millisecond))
	if evaluated != n || calls != n/10 || filtered != n-n/10 {
		t.Errorf("evaluated %d, calls %d, filtered %d; want %d, %d, %d", evaluated, calls, filtered, n, n/10, n-n/10)
	}

	h.resetMirror("tasks")
	h.sync("tasks", recs()...)
	start = time.Now()
	evaluated = h.drain()
	again := time.Since(start)
	newCalls := h.fake.Chats() - calls
	hits := h.count(`SELECT coalesce(sum(hits), 0)::int FROM verdicts`)
	judged := hits + newCalls
	t.Logf("re-sync of unchanged content: %d changes evaluated, %d needed a verdict, %d cache hits, %d model calls: cache hit rate %.1f%%, %s",
		evaluated, judged, hits, newCalls, 100*float64(hits)/float64(judged), again.Round(time.Millisecond))
	if evaluated != n || newCalls != 0 || hits != n/10 {
		t.Errorf("re-sync: evaluated %d, calls %d, hits %d; want %d, 0, %d", evaluated, newCalls, hits, n, n/10)
	}
}

func TestReportsShowModelDriftAndCost(t *testing.T) {
	t.Parallel()
	global := strings.Replace(baseGlobal, "model: llama3.2", "model: llama3.2\n  digest_ttl: 1ns", 1)
	h := newHarness(t, global, map[string]string{"tasks.yaml": tasksSource})
	h.sync("tasks", rec("T-1", "URGENT one", "open"), rec("T-2", "two", "open"))
	h.drain()
	// The model is updated on the server: same name, new weights.
	const digest2 = "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
	h.fake.SetDigest("llama3.2:latest", digest2)
	h.fake.SetAnswer(func(*api.ChatRequest) ollamatest.Answer {
		return ollamatest.Answer{Content: ollamatest.Verdict(true, "high", "Everything is urgent now.", 1), PromptTokens: 900, OutputTokens: 100}
	})
	h.sync("tasks", rec("T-3", "three", "open"), rec("T-4", "four", "open"))
	h.drain()

	rows, err := h.pool.Query(h.ctx, `
		SELECT model_digest, evaluations, judged, notify, skip, notify_rate::float8, avg_confidence::float8
		FROM report_model_drift WHERE watch = 'urgent' ORDER BY first_seen`)
	if err != nil {
		t.Fatal(err)
	}
	type drift struct {
		digest                      string
		evals, judged, notify, skip int
		notifyRate, avgConfidence   float64
	}
	var got []drift
	for rows.Next() {
		var d drift
		if err := rows.Scan(&d.digest, &d.evals, &d.judged, &d.notify, &d.skip, &d.notifyRate, &d.avgConfidence); err != nil {
			t.Fatal(err)
		}
		got = append(got, d)
	}
	want := []drift{{testDigest, 2, 2, 1, 1, 0.5, 0.85}, {digest2, 2, 2, 2, 0, 1, 1}}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("report_model_drift:\n got %+v\nwant %+v", got, want)
	}

	var top string
	var total int
	if err := h.pool.QueryRow(h.ctx, `SELECT record_id, total_tokens FROM report_expensive_evaluations ORDER BY total_tokens DESC, record_id LIMIT 1`).Scan(&top, &total); err != nil {
		t.Fatal(err)
	}
	if top != "T-3" || total != 1000 {
		t.Errorf("most expensive: %s with %d tokens", top, total)
	}
	if n := h.count(`SELECT sum(calls)::int FROM report_model_usage WHERE watch = 'urgent' AND purpose = 'evaluate'`); n != 4 {
		t.Errorf("report_model_usage calls = %d, want 4", n)
	}
}

// TestDeterministicDecisionsDoNotWaitForTheModel: in a batch that also
// needs the model, the decisions that need none — of other changes, and of
// the same change's other watches — are committed (their notifications
// visible to the deliverer) before the model answers; the model's decision
// follows under the lease.
func TestDeterministicDecisionsDoNotWaitForTheModel(t *testing.T) {
	t.Parallel()
	global := strings.Replace(strings.Replace(baseGlobal, "timeout: 2s", "timeout: 60s", 1), "lease: 10s", "lease: 2m", 1)
	h := newHarness(t, global, map[string]string{"tasks.yaml": `
name: tasks
connector: file
file: {paths: [x.jsonl]}
watches:
  - name: urgent
    when: record.status == "open"
    ask: Is this task urgent?
    notify: [log]
  - name: opened
    when: record.status == "open"
    notify: [log]
  - name: closed
    when: record.status == "done"
    notify: [log]
`})
	h.fake.SetAnswer(func(req *api.ChatRequest) ollamatest.Answer {
		a := ollamatest.DefaultAnswer(req)
		a.Hang = true
		return a
	})
	h.sync("tasks", rec("T-1", "URGENT: database down", "open"), rec("T-2", "Old", "done"))
	var wg sync.WaitGroup
	wg.Go(func() { h.drain() })
	testsignal.Eventually(t, "the model call", func() bool { n, _ := h.fake.InFlight(); return n == 1 })

	// The model has not answered: the deterministic decisions are committed.
	notes := func() map[string]int {
		rows, err := h.pool.Query(h.ctx, `SELECT record_id || ' ' || watch FROM notifications`)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]int{}
		for rows.Next() {
			var k string
			if err := rows.Scan(&k); err != nil {
				t.Fatal(err)
			}
			out[k]++
		}
		return out
	}
	if got := notes(); got["T-1 opened"] != 1 || got["T-2 closed"] != 1 || len(got) != 2 {
		t.Errorf("notifications while the model is asked: %v, want T-1 opened and T-2 closed", got)
	}
	if st := h.change(h.lastChange("tasks", "T-2")); st.Status != "done" {
		t.Errorf("T-2 (no model) is %s while the model is asked, want done", st.Status)
	}
	if st := h.change(h.lastChange("tasks", "T-1")); st.Status != "pending" || st.Owner == nil {
		t.Errorf("T-1 (waits for the model) is %+v, want pending and leased", st)
	}
	if n, _ := h.fake.InFlight(); n != 1 {
		t.Fatalf("the model answered before the check (%d in flight)", n)
	}

	h.fake.Release()
	wg.Wait()
	if e := h.one("tasks", "T-1", "urgent"); e.Decision != "notify" || e.Step != "model" {
		t.Errorf("T-1 urgent: %+v", e)
	}
	if e := h.one("tasks", "T-1", "opened"); e.Decision != "notify" || e.Step != "filter" {
		t.Errorf("T-1 opened: %+v", e)
	}
	if st := h.change(h.lastChange("tasks", "T-1")); st.Status != "done" || st.Owner != nil {
		t.Errorf("T-1 after the model: %+v", st)
	}
	if got := notes(); got["T-1 urgent"] != 1 || len(got) != 3 {
		t.Errorf("notifications: %v", got)
	}
}
