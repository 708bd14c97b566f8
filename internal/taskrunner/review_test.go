package taskrunner_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ollama/ollama/api"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/connectors/notion/notiontest"
	"github.com/lookout-dev/lookout/internal/evaluator"
	"github.com/lookout-dev/lookout/internal/explain"
	"github.com/lookout-dev/lookout/internal/modelspec"
	"github.com/lookout-dev/lookout/internal/outbox"
	"github.com/lookout-dev/lookout/internal/semantic/ollamatest"
	"github.com/lookout-dev/lookout/internal/tasks"
	"github.com/lookout-dev/lookout/internal/testsignal"
)

// reviewTask is a task watch with a review: two criteria, the first with a
// deterministic check.
func reviewTask(check string, maxCorrections int) string {
	return "name: execute\n    when: record.status == \"Todo\"\n    lease: 30s\n    timeout: 10s\n    backoff: {min: 1ms, max: 1ms}\n" +
		"    review:\n      pass_score: 6\n      max_corrections: " + itoa(int64(maxCorrections)) + "\n      criteria:\n" +
		"        - name: done\n          text: The agent reports the task done.\n          check: '" + check + "'\n" +
		"        - name: useful\n          text: The result says what was done.\n"
}

// reviewer is an evaluator's review service over the world's definitions
// and a fake Ollama, on a clock the test moves.
type reviewer struct {
	rev   *evaluator.Reviews
	model *ollamatest.Server
	clock *clock
}

func (w *world) reviewer(alertSinks ...string) *reviewer {
	w.t.Helper()
	cfg, err := config.Load(w.dir)
	if err != nil {
		w.t.Fatalf("load config: %v", err)
	}
	r := &reviewer{model: ollamatest.New(w.t, map[string]string{"reviewer:latest": "sha256:rev"}), clock: &clock{}}
	logger := slog.New(slog.NewTextHandler(w.logs, &slog.HandlerOptions{Level: slog.LevelDebug})).With("replica", "evaluator")
	ev, err := evaluator.New(w.pool, evaluator.Config{Sources: cfg.Sources, Owner: "evaluator-1", Lease: time.Minute,
		Model: modelspec.Config{Host: r.model.URL, Model: "reviewer", Timeout: 5 * time.Second, Concurrency: 1,
			Options: map[string]any{"temperature": 0.0, "seed": 1.0}, PerSecond: 1000, Burst: 1000, HoldMin: time.Minute,
			HoldMax: time.Hour, ReasonMaxChars: 200, DigestTTL: time.Millisecond, Now: r.clock.Now}}, logger)
	if err != nil {
		w.t.Fatalf("build evaluator: %v", err)
	}
	if r.rev, err = ev.Reviews(evaluator.ReviewConfig{AlertSinks: alertSinks, Now: r.clock.Now}); err != nil {
		w.t.Fatalf("build reviews: %v", err)
	}
	return r
}

// once runs one round of reviews and returns how many it decided.
func (r *reviewer) once(t *testing.T) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testsignal.Timeout())
	defer cancel()
	n, err := r.rev.Once(ctx)
	if err != nil {
		t.Fatalf("review: %v", err)
	}
	return n
}

// verdicts makes the fake answer every criterion with pass and score.
func (r *reviewer) verdicts(pass bool, score int, comment string) {
	r.model.SetAnswer(func(req *api.ChatRequest) ollamatest.Answer {
		return ollamatest.Answer{Content: ollamatest.Review(pass, score, comment)}
	})
}

func (w *world) reviews(runID int64) []tasks.Review {
	w.t.Helper()
	rs, err := tasks.ReviewsOf(context.Background(), w.pool, runID)
	if err != nil {
		w.t.Fatal(err)
	}
	return rs
}

// A review that fails twice, then passes: each failure sends the task back
// (Todo in the tool, LastError naming the failed criterion and its
// comment, correction_count + 1), the agent gets the comment and runs
// again, and the third result completes the task with correction_count 2.
func TestReviewFailsTwiceThenPasses(t *testing.T) {
	t.Parallel()
	w := newWorld(t, options{mode: modeDrafts, task: reviewTask("result.done == true", 2)})
	id := w.addTask("write the report", 1)
	rep := w.replica("syncer-1", nil, nil)
	rv := w.reviewer()

	for i := 1; i <= 3; i++ {
		w.sync(rep)
		r := w.run(id)
		if r.Status != tasks.StatusReviewing || r.Attempt != i {
			t.Fatalf("round %d: run %s attempt %d, want reviewing attempt %d", i, r.Status, r.Attempt, i)
		}
		if s := w.status(id); s != "InProgress" {
			t.Errorf("round %d: the tool shows %v while the review is pending, want InProgress", i, s)
		}
		if i < 3 {
			rv.verdicts(false, 3, "the summary is missing")
		} else {
			rv.verdicts(true, 9, "the summary says what was done")
		}
		if n := rv.once(t); n != 1 {
			t.Fatalf("round %d: %d reviews decided, want 1", i, n)
		}
		ctx, cancel := context.WithTimeout(context.Background(), testsignal.Timeout())
		rep.runner.Once(ctx) // the maintenance applies the review
		cancel()
		r = w.run(id)
		if i < 3 {
			if r.Status != tasks.StatusReleased || r.CorrectionCount != i {
				t.Fatalf("round %d: run %s, correction_count %d; want released, %d", i, r.Status, r.CorrectionCount, i)
			}
			if !strings.Contains(r.LastError, "useful (3/10): the summary is missing") || s(w.status(id)) != "Todo" {
				t.Errorf("round %d: LastError %q, tool %v", i, r.LastError, w.status(id))
			}
			if le := s(w.fake.Value(id, "LastError")); !strings.Contains(le, "the summary is missing") {
				t.Errorf("round %d: the tool's LastError %q", i, le)
			}
		}
	}
	r := w.run(id)
	if r.Status != tasks.StatusCompleted || r.CorrectionCount != 2 || s(w.status(id)) != "Complete" {
		t.Fatalf("run %s, correction_count %d, tool %v; want completed, 2, Complete", r.Status, r.CorrectionCount, w.status(id))
	}
	calls := w.agent.calls(t)
	if len(calls) != 3 || calls[1].CorrectionCount != 1 || !strings.Contains(calls[2].LastError, "the summary is missing") {
		t.Errorf("agent calls: %d; the second's correction_count %d, the third's last_error %q", len(calls), calls[1].CorrectionCount, calls[len(calls)-1].LastError)
	}
	revs := w.reviews(r.ID)
	if len(revs) != 3 || revs[0].Status != tasks.ReviewFailed || revs[2].Status != tasks.ReviewPassed || *revs[2].Score != 9 {
		t.Fatalf("reviews %+v", revs)
	}
	// A passing check leaves the criterion to the model.
	if c := revs[0].Criteria; len(c) != 2 || c[0].Step != tasks.StepModel || c[0].Pass || c[1].Step != tasks.StepModel || c[1].ModelCallID == nil {
		t.Errorf("first review's criteria %+v", c)
	}
	if c := revs[2].Criteria; !c[0].Pass || !c[1].Pass || c[1].Score != 9 {
		t.Errorf("last review's criteria %+v", c)
	}
	// 3 drafts × 2 criteria, each a new input.
	if n := rv.model.Chats(); n != 6 {
		t.Errorf("%d model calls, want 6", n)
	}
	// explain shows the record's reviews with each criterion's judgment.
	trails, err := explain.Trails(context.Background(), w.pool, nil, explain.Query{Source: "tasks", RecordID: id})
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	explain.WriteTrails(&out, trails)
	for _, want := range []string{"task reviews:", "attempt 1 (execute)", "failed, score 3/10", "useful: fail 3/10 by model (model call",
		": the summary is missing", "attempt 3 (execute)", "passed, score 9/10"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("explain lacks %q:\n%s", want, out.String())
		}
	}
}

func s(v any) string {
	if v == nil {
		return ""
	}
	return v.(string)
}

// A failing deterministic check fails the review without asking the model.
func TestReviewCheckShortCircuits(t *testing.T) {
	t.Parallel()
	w := newWorld(t, options{mode: modeOK, task: reviewTask(`"summary" in result`, 2)})
	id := w.addTask("write the report", 1)
	rep := w.replica("syncer-1", nil, nil)
	rv := w.reviewer()
	rv.verdicts(true, 10, "fine")
	w.sync(rep)
	if n := rv.once(t); n != 1 {
		t.Fatalf("%d reviews decided, want 1", n)
	}
	if n := rv.model.Chats(); n != 0 {
		t.Errorf("the model was asked %d times; a failed check asks it nothing", n)
	}
	revs := w.reviews(w.run(id).ID)
	if len(revs) != 1 || revs[0].Status != tasks.ReviewFailed {
		t.Fatalf("reviews %+v", revs)
	}
	c := revs[0].Criteria
	if c[0].Step != tasks.StepCheck || c[0].Pass || !strings.Contains(c[0].Comment, `"summary" in result`) || c[1].Step != tasks.StepSkip {
		t.Errorf("criteria %+v", c)
	}
}

// A review failing past max_corrections fails the task (Failed in the
// tool, the review in LastError) and alerts once.
func TestReviewFailsPastMaxCorrections(t *testing.T) {
	t.Parallel()
	w := newWorld(t, options{mode: modeOK, task: reviewTask("result.done == true", 1)})
	id := w.addTask("write the report", 1)
	rep := w.replica("syncer-1", nil, nil)
	rv := w.reviewer("ops")
	rv.verdicts(false, 2, "nothing useful")
	ctx, cancel := context.WithTimeout(context.Background(), testsignal.Timeout())
	defer cancel()
	for i := 1; i <= 2; i++ {
		w.sync(rep)
		if n := rv.once(t); n != 1 {
			t.Fatalf("round %d: %d reviews decided, want 1", i, n)
		}
		rep.runner.Once(ctx)
		rv.once(t) // nothing left to decide: no second alert
	}
	r := w.run(id)
	if r.Status != tasks.StatusFailed || r.CorrectionCount != 1 || s(w.status(id)) != "Failed" {
		t.Fatalf("run %s, correction_count %d, tool %v; want failed, 1, Failed", r.Status, r.CorrectionCount, w.status(id))
	}
	if !strings.Contains(r.LastError, "useful (2/10): nothing useful") || !strings.Contains(r.LastError, "none left") {
		t.Errorf("LastError %q", r.LastError)
	}
	// The second attempt printed the same result: both criteria were
	// answered by the verdict cache, as any model call.
	if n := rv.model.Chats(); n != 2 {
		t.Errorf("%d model calls, want 2 (the second review from the verdict cache)", n)
	}
	if c := w.reviews(r.ID)[1].Criteria; c[1].Step != tasks.StepCache {
		t.Errorf("second review's criteria %+v, want cache hits", c)
	}
	notes, err := outbox.List(ctx, w.pool, outbox.Filter{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(notes) != 1 || notes[0].Kind != outbox.KindAlert || notes[0].Sink != "ops" || !strings.Contains(notes[0].Title, "failed its review") {
		t.Fatalf("notifications %+v, want one alert to ops", notes)
	}
	w.sync(rep) // a failed task is not taken again
	if n := len(w.agent.calls(t)); n != 2 {
		t.Errorf("the agent ran %d times, want 2", n)
	}
}

// A model outage holds the review (the run stays reviewing, the tool
// InProgress); it is never passed, and it passes once the model is back.
func TestReviewHeldWhileTheModelIsDown(t *testing.T) {
	t.Parallel()
	w := newWorld(t, options{mode: modeOK, task: reviewTask("result.done == true", 2)})
	id := w.addTask("write the report", 1)
	rep := w.replica("syncer-1", nil, nil)
	rv := w.reviewer()
	w.sync(rep)
	rv.model.SetAnswer(func(*api.ChatRequest) ollamatest.Answer {
		return ollamatest.Answer{Status: 503, Error: "loading model"}
	})
	if n := rv.once(t); n != 0 {
		t.Fatalf("%d reviews decided while the model is down, want 0", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testsignal.Timeout())
	defer cancel()
	rep.runner.Once(ctx)
	r := w.run(id)
	revs := w.reviews(r.ID)
	if r.Status != tasks.StatusReviewing || s(w.status(id)) != "InProgress" || len(revs) != 1 || revs[0].Status != tasks.ReviewPending ||
		revs[0].Holds != 1 || !strings.Contains(revs[0].HeldBecause, "never passed") {
		t.Fatalf("run %s, tool %v, reviews %+v; want reviewing, InProgress, one held review", r.Status, w.status(id), revs)
	}
	if n := rv.once(t); n != 0 { // held until its retry time
		t.Fatalf("%d reviews decided before the hold's retry time", n)
	}
	rv.verdicts(true, 8, "done and said so")
	rv.clock.Advance(2 * time.Hour) // past the hold
	rv.rev.Client().ResetBreaker()  // the breaker runs on the wall clock
	if n := rv.once(t); n != 1 {
		t.Fatalf("%d reviews decided once the model is back, want 1", n)
	}
	rep.runner.Once(ctx)
	if r := w.run(id); r.Status != tasks.StatusCompleted || s(w.status(id)) != "Complete" {
		t.Fatalf("run %s, tool %v; want completed, Complete", r.Status, w.status(id))
	}
}

// A card a person moves while its result is reviewed keeps what the
// person set: the review's outcome is recorded, not written over the move.
func TestReviewLeavesAPersonsMove(t *testing.T) {
	t.Parallel()
	w := newWorld(t, options{mode: modeOK, task: reviewTask("result.done == true", 2)})
	id := w.addTask("write the report", 1)
	rep := w.replica("syncer-1", nil, nil)
	rv := w.reviewer()
	w.sync(rep)
	w.fake.Edit(id, map[string]any{"Status": notiontest.Status("Blocked")})
	rv.verdicts(false, 1, "not done")
	if n := rv.once(t); n != 1 {
		t.Fatalf("%d reviews decided, want 1", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testsignal.Timeout())
	defer cancel()
	rep.runner.Once(ctx)
	r := w.run(id)
	if r.Status != tasks.StatusReleased || r.CorrectionCount != 1 || r.ToolAction != "" {
		t.Fatalf("run %s, correction_count %d, tool action %q; want released, 1, none pending", r.Status, r.CorrectionCount, r.ToolAction)
	}
	if st := s(w.status(id)); st != "Blocked" {
		t.Errorf("the tool shows %q, want Blocked (the person's move)", st)
	}
	w.sync(rep) // not Todo: not taken again
	if n := len(w.agent.calls(t)); n != 1 {
		t.Errorf("the agent ran %d times, want 1", n)
	}
}

// A pending review whose task watch lost its review: block (the source
// file edited while the result waited) is not held forever: the task
// runner that reads the edited definition drops it once the definitions
// have had time to reach every replica (a minute after the review was
// written), and the task completes as if unreviewed; the review row says
// dropped and why.
func TestReviewDroppedWhenTheReviewBlockIsRemoved(t *testing.T) {
	t.Parallel()
	clk := &clock{}
	w := newWorld(t, options{mode: modeDrafts, now: clk.Now, task: reviewTask("result.done == true", 2)})
	id := w.addTask("write the report", 1)
	w.sync(w.replica("syncer-1", nil, nil))
	if r := w.run(id); r.Status != tasks.StatusReviewing {
		t.Fatalf("run %s, want reviewing", r.Status)
	}

	path := filepath.Join(w.dir, "sources", "tasks.yaml")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	edited := regexp.MustCompile(`(?m)^    review:\n(^      .*\n)*`).ReplaceAllString(string(b), "")
	if edited == string(b) || strings.Contains(edited, "review") {
		t.Fatalf("the review: block was not removed:\n%s", edited)
	}
	if err := os.WriteFile(path, []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	rep := w.replica("syncer-2", nil, nil)
	once := func() {
		ctx, cancel := context.WithTimeout(context.Background(), testsignal.Timeout())
		defer cancel()
		rep.runner.Once(ctx)
	}
	once()
	if r := w.run(id); r.Status != tasks.StatusReviewing {
		t.Fatalf("right after the edit: run %s, want still reviewing (another replica may not have the edit yet)", r.Status)
	}
	clk.Advance(2 * time.Minute)
	once()
	r := w.run(id)
	if r.Status != tasks.StatusCompleted || s(w.status(id)) != "Complete" {
		t.Fatalf("run %s, tool %v; want completed, Complete", r.Status, w.status(id))
	}
	revs := w.reviews(r.ID)
	if len(revs) != 1 || revs[0].Status != tasks.ReviewDropped || !strings.Contains(revs[0].HeldBecause, "no review: block") {
		t.Fatalf("reviews %+v, want one dropped saying why", revs)
	}
}
