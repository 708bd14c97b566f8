package semantic

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/ollama/ollama/api"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/metrics"
)

// PurposeReview is model_calls.purpose of a task review's criterion.
const PurposeReview = "review"

// reviewCommentMax bounds a criterion's comment.
const reviewCommentMax = 400

// reviewSystem is the system message of a task review's criterion.
const reviewSystem = `You review the result of a task an agent executed, against one acceptance criterion.
Judge only the criterion given; do not invent requirements. Answer with one JSON object:
"pass" (true when the result meets the criterion), "score" (an integer from 0, not met at all, to 10, fully met)
and "comment" (one or two sentences saying what is missing or why it is met).`

// ReviewRequest asks whether a task's result meets one acceptance criterion.
type ReviewRequest struct {
	// Source, Task and RecordID name the task; TaskRunID and Attempt the
	// attempt whose result is reviewed.
	Source, Task, RecordID string
	TaskRunID              int64
	Attempt                int
	// Title is the task's title; Result the executor's JSON object.
	Title  string
	Result json.RawMessage
	// Criterion and Text are the criterion's name and sentence.
	Criterion, Text string
	// Model, Timeout and Options are the resolved model settings.
	Model   string
	Timeout time.Duration
	Options map[string]any
	// Budget is the review's daily budget; zero values mean no limit.
	Budget config.Budget
}

// ReviewVerdict is the model's answer for one criterion.
type ReviewVerdict struct {
	Pass    bool   `json:"pass"`
	Score   int    `json:"score"`
	Comment string `json:"comment"`
}

// ReviewResult is the judgment of one ReviewRequest.
type ReviewResult struct {
	// Step is StepCache, StepModel, StepBudget or StepError.
	Step    string
	Verdict *ReviewVerdict
	// ModelCallID is the model_calls row of the verdict or of the last
	// failed call.
	ModelCallID *int64
	// Err says why there is no verdict; RetryAt is when an exhausted
	// budget resets (StepBudget).
	Err     error
	RetryAt time.Time
}

// Reviewer asks the model about task results (docs/tasks.md#review),
// under the verdict cache and the review's budget like a watch's ask: a
// cached verdict (verdicts, keyed by prompt version, model digest and
// input hash) is reused; a call is reserved in model_budgets first; every
// request is a model_calls row (purpose review). A model that cannot
// answer is a StepError result, never a verdict: the caller holds the
// review.
type Reviewer struct {
	pool    *pgxpool.Pool
	client  *Client
	owner   string
	logger  *slog.Logger
	metrics *metrics.Metrics
}

// NewReviewer returns a Reviewer calling the model through client; owner
// is recorded in model_calls.evaluator.
func NewReviewer(pool *pgxpool.Pool, client *Client, owner string, logger *slog.Logger) *Reviewer {
	return &Reviewer{pool: pool, client: client, owner: owner, logger: logger.With("component", "review")}
}

// SetMetrics makes the reviewer count its model calls in m (nil: nothing).
func (rv *Reviewer) SetMetrics(m *metrics.Metrics) { rv.metrics = m }

// Client returns the model client.
func (rv *Reviewer) Client() *Client { return rv.client }

// ReviewSchema is the JSON schema of a criterion's answer.
func ReviewSchema() json.RawMessage {
	return json.RawMessage(`{"type":"object","properties":{"pass":{"type":"boolean"},` +
		`"score":{"type":"integer","minimum":0,"maximum":10},` +
		`"comment":{"type":"string","maxLength":` + strconv.Itoa(reviewCommentMax) + `}},` +
		`"required":["pass","comment","score"]}`)
}

// ParseReview decodes and validates an answer against ReviewSchema; the
// error wraps ErrMalformed.
func ParseReview(content string) (ReviewVerdict, json.RawMessage, error) {
	var v ReviewVerdict
	content = strings.TrimSpace(content)
	if !json.Valid([]byte(content)) {
		return v, nil, fmt.Errorf("%w: not JSON: %q", ErrMalformed, snippet(content, 120))
	}
	raw := json.RawMessage(content)
	var f map[string]json.RawMessage
	if err := json.Unmarshal(raw, &f); err != nil {
		return v, raw, fmt.Errorf("%w: not a JSON object", ErrMalformed)
	}
	var problems []string
	for _, k := range []string{"pass", "comment", "score"} {
		if _, ok := f[k]; !ok {
			problems = append(problems, k+" is missing")
		}
	}
	if b, ok := f["pass"]; ok && json.Unmarshal(b, &v.Pass) != nil {
		problems = append(problems, "pass must be a boolean")
	}
	if b, ok := f["comment"]; ok && json.Unmarshal(b, &v.Comment) != nil {
		problems = append(problems, "comment must be a string")
	}
	if b, ok := f["score"]; ok {
		var n float64
		if json.Unmarshal(b, &n) != nil || n != math.Trunc(n) || n < 0 || n > 10 {
			problems = append(problems, "score must be an integer from 0 to 10")
		}
		v.Score = int(n)
	}
	if len(problems) > 0 {
		return v, raw, fmt.Errorf("%w: %s", ErrMalformed, strings.Join(problems, "; "))
	}
	v.Comment = snippet(strings.TrimSpace(v.Comment), reviewCommentMax)
	return v, raw, nil
}

func hashOf(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))[:32]
}

// reviewPrompt returns the messages, prompt version and input hash of r.
func reviewPrompt(r *ReviewRequest) ([]api.Message, string, string) {
	opts, _ := json.Marshal(r.Options)
	version := "review-v1:" + hashOf(reviewSystem, r.Criterion, r.Text, r.Model, string(opts))
	user := fmt.Sprintf("Acceptance criterion %q: %s\n\nTask: %s\n\nResult (JSON):\n%s", r.Criterion, r.Text, r.Title, r.Result)
	return []api.Message{{Role: "system", Content: reviewSystem}, {Role: "user", Content: user}}, version, hashOf(user)
}

// watchKey is the watch name a task review's budget, cache rows and model
// calls are kept under.
func reviewWatch(task string) string { return "review:" + task }

// Review judges one criterion: the verdict cache, the budget, the model
// (a malformed answer is asked again once). The error is a database
// failure; the model's failures are in the result.
func (rv *Reviewer) Review(ctx context.Context, r *ReviewRequest) (ReviewResult, error) {
	msgs, version, input := reviewPrompt(r)
	digest, err := rv.client.Digest(ctx, r.Model, r.Timeout)
	if err != nil {
		return ReviewResult{Step: StepError, Err: err}, nil
	}
	var v ReviewVerdict
	var pass bool
	var conf float64
	var callID *int64
	err = rv.pool.QueryRow(ctx, `
		SELECT should_notify, confidence, reason, model_call_id FROM verdicts
		WHERE prompt_version = $1 AND model_digest = $2 AND input_hash = $3`, version, digest, input).Scan(&pass, &conf, &v.Comment, &callID)
	switch {
	case err == nil:
		v.Pass, v.Score = pass, int(math.Round(conf*10))
		if _, err := rv.pool.Exec(ctx, `
			UPDATE verdicts SET hits = hits + 1, last_hit_at = now()
			WHERE prompt_version = $1 AND model_digest = $2 AND input_hash = $3`, version, digest, input); err != nil {
			return ReviewResult{}, fmt.Errorf("count a review cache hit: %w", err)
		}
		return ReviewResult{Step: StepCache, Verdict: &v, ModelCallID: callID}, nil
	case !errors.Is(err, pgx.ErrNoRows):
		return ReviewResult{}, fmt.Errorf("look up a cached review verdict: %w", err)
	}
	b := &budgets{pool: rv.pool, now: rv.client.calendar}
	res := ReviewResult{}
	for attempt := 1; attempt <= 2; attempt++ {
		rsv, err := b.reserve(ctx, r.Source, reviewWatch(r.Task), r.Budget)
		if err != nil {
			if errors.As(err, new(*exhaustedError)) {
				return ReviewResult{Step: StepBudget, Err: err, RetryAt: nextUTCDay(rv.client.calendar())}, nil
			}
			return ReviewResult{}, err
		}
		reply, err := rv.client.Chat(ctx, r.Model, msgs, ReviewSchema(), r.Options, r.Timeout)
		if errors.Is(err, ErrUnavailable) || ctx.Err() != nil {
			rsv.release(ctx, rv.logger)
			return ReviewResult{Step: StepError, Err: cmpErr(err, ctx.Err())}, nil
		}
		outcome, verr := OutcomeOK, error(nil)
		var output json.RawMessage
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			outcome, verr = OutcomeTimeout, err
		case err != nil:
			outcome, verr = OutcomeError, err
		default:
			v, output, verr = ParseReview(reply.Content)
			if verr != nil {
				outcome = OutcomeMalformed
			}
		}
		rsv.addTokens(ctx, reply.PromptTokens+reply.OutputTokens, rv.logger)
		rv.metrics.ModelCall(r.Model, outcome, reply.PromptTokens, reply.OutputTokens, reply.Latency)
		id, ierr := rv.insertCall(ctx, r, digest, version, input, msgs, attempt, reply, outcome, output, verr, &v)
		if ierr != nil {
			return ReviewResult{}, ierr
		}
		res.ModelCallID = &id
		switch outcome {
		case OutcomeOK:
			if err := rv.cache(ctx, r, digest, version, input, id, v); err != nil {
				return ReviewResult{}, err
			}
			res.Step, res.Verdict, res.Err = StepModel, &v, nil
			return res, nil
		case OutcomeMalformed:
			res.Step, res.Err = StepError, verr
			msgs = append(slices.Clone(msgs), api.Message{Role: "assistant", Content: reply.Content},
				api.Message{Role: "user", Content: correction(verr)})
		default:
			res.Step, res.Err = StepError, verr
			return res, nil
		}
	}
	return res, nil
}

func (rv *Reviewer) insertCall(ctx context.Context, r *ReviewRequest, digest, version, input string, msgs []api.Message,
	attempt int, reply Reply, outcome string, output json.RawMessage, verr error, v *ReviewVerdict) (int64, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	request, _ := json.Marshal(map[string]any{"options": r.Options, "format": "review schema", "stream": false,
		"messages": len(msgs), "timeout_ms": r.Timeout.Milliseconds(), "done_reason": reply.DoneReason, "criterion": r.Criterion})
	var out any
	var raw *string
	if output != nil {
		out = output
	} else if reply.Content != "" {
		s := snippet(reply.Content, maxRawOutput)
		raw = &s
	}
	var pass *bool
	var reason *string
	var conf *float64
	if outcome == OutcomeOK {
		c := float64(v.Score) / 10
		pass, reason, conf = &v.Pass, &v.Comment, &c
	}
	var errText *string
	if verr != nil {
		s := verr.Error()
		errText = &s
	}
	var id int64
	err := rv.pool.QueryRow(ctx, `
		INSERT INTO model_calls (purpose, source, record_id, watch, model, model_digest, prompt_version, input_ref,
		                         input_hash, request, output, raw_output, should_notify, confidence, reason,
		                         prompt_tokens, output_tokens, latency_ms, outcome, error, attempt, evaluator)
		VALUES ('review', $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21)
		RETURNING id`,
		r.Source, r.RecordID, reviewWatch(r.Task), r.Model, digest, version,
		fmt.Sprintf("task_run:%d.%d:%s", r.TaskRunID, r.Attempt, r.Criterion), input, request, out, raw, pass, conf, reason,
		reply.PromptTokens, reply.OutputTokens, float64(reply.Latency.Microseconds())/1000, outcome, errText, attempt,
		rv.owner).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("record the review's model call: %w", err)
	}
	return id, nil
}

// cache keeps a criterion's verdict in the verdict cache: pass as
// should_notify, score/10 as confidence, the comment as reason.
func (rv *Reviewer) cache(ctx context.Context, r *ReviewRequest, digest, version, input string, callID int64, v ReviewVerdict) error {
	_, err := rv.pool.Exec(ctx, `
		INSERT INTO verdicts (prompt_version, model_digest, input_hash, model, source, watch, should_notify, urgency,
		                      confidence, reason, model_call_id)
		VALUES ($1, $2, $3, $4, $5, $6, $7, 'low', $8, $9, $10)
		ON CONFLICT ON CONSTRAINT verdicts_pkey DO NOTHING`,
		version, digest, input, r.Model, r.Source, reviewWatch(r.Task), v.Pass, float64(v.Score)/10, v.Comment, callID)
	if err != nil {
		return fmt.Errorf("cache the review verdict: %w", err)
	}
	return nil
}
