package semantic

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/ollama/ollama/api"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/metrics"
	"github.com/lookout-dev/lookout/internal/modelspec"
)

// Steps a Result can end in. cache, model, budget and error are also the
// evaluations.step values the evaluator writes.
const (
	StepCache  = "cache"
	StepModel  = "model"
	StepBudget = "budget"
	StepError  = "error"
)

// Outcomes of one model call (model_calls.outcome).
const (
	OutcomeOK        = "ok"
	OutcomeMalformed = "malformed"
	OutcomeError     = "error"
	OutcomeTimeout   = "timeout"
)

// Purposes of a judgment (model_calls.purpose).
const (
	PurposeEvaluate = "evaluate"
	PurposeReplay   = "replay"
)

// Request asks whether one change satisfies one watch's question.
type Request struct {
	ChangeID int64
	Source   string
	RecordID string
	Watch    string
	// Owner is the user the watch belongs to ("" for the operator's),
	// stored in model_calls.owner.
	Owner string
	// ContentHash is the record's content hash at the change.
	ContentHash string
	Question    *modelspec.Question
	Input       modelspec.Input
	// Budget is the watch's daily budget; zero values mean no limit.
	Budget config.Budget
}

// Result is the judgment of one Request.
type Result struct {
	// Step is StepCache, StepModel, StepBudget or StepError.
	Step string
	// Verdict is set for StepCache and StepModel.
	Verdict *Verdict
	// ModelCallID is the model_calls row of the verdict (for a cache hit,
	// the call that produced it), or of the last failed call.
	ModelCallID *int64
	// Model, ModelDigest, PromptVersion and InputHash identify the question
	// and the model (ModelDigest is empty when the server could not be asked).
	Model, ModelDigest, PromptVersion, InputHash string
	// Outcome is the outcome of the last call this request made; empty when
	// it made none.
	Outcome string
	// Err says why there is no verdict (StepBudget, StepError).
	Err error
	// RetryAt is when an exhausted budget resets (StepBudget).
	RetryAt time.Time
	// Calls is the number of model requests made for this Request.
	Calls int
}

// Options tune one Judge call.
type Options struct {
	// Purpose is PurposeEvaluate (budgets apply) or PurposeReplay (they
	// don't; MaxCalls does). Defaults to PurposeEvaluate.
	Purpose string
	// MaxCalls caps the model requests of this call; 0 means no cap.
	MaxCalls int
}

// Judge decides Requests: verdict cache, budget, model. It writes
// model_calls, verdicts and model_budgets rows, never evaluations. A
// request of a budgeted watch is sent only after a call was reserved in
// model_budgets (a cap shared by every evaluator).
type Judge struct {
	pool   *pgxpool.Pool
	client *Client
	conc   int
	owner  string
	logger *slog.Logger
	// metrics counts model calls, tokens and latency; nil records nothing.
	metrics *metrics.Metrics
}

// NewJudge returns a Judge that calls the model through client with at
// most conc requests in flight. owner is recorded in model_calls.evaluator.
func NewJudge(db *pgxpool.Pool, client *Client, conc int, owner string, logger *slog.Logger) *Judge {
	return &Judge{pool: db, client: client, conc: max(conc, 1), owner: owner, logger: logger.With("component", "judge")}
}

// SetMetrics makes the judge count its model calls, tokens and latency in
// m (nil: nothing). Call it before the first Judge.
func (j *Judge) SetMetrics(m *metrics.Metrics) { j.metrics = m }

// Client returns the model client.
func (j *Judge) Client() *Client { return j.client }

type cacheKey struct{ version, digest, input string }

// Judge decides every request. Requests with the same cache key are judged
// once: the first is sent to the model, the others share its verdict as
// cache hits. The error is a database failure; model failures are Results.
func (j *Judge) Judge(ctx context.Context, reqs []*Request, opt Options) ([]Result, error) {
	if opt.Purpose == "" {
		opt.Purpose = PurposeEvaluate
	}
	res := make([]Result, len(reqs))
	msgs := make([][]api.Message, len(reqs))
	keys := make([]cacheKey, len(reqs))
	type digestResult struct {
		digest string
		err    error
	}
	digests := map[string]digestResult{}
	var live []int
	for i, r := range reqs {
		q := r.Question
		m, hash := messages(q, r.Input)
		msgs[i] = m
		res[i] = Result{Model: q.Model, PromptVersion: q.Version, InputHash: hash}
		d, ok := digests[q.Model]
		if !ok {
			d.digest, d.err = j.client.Digest(ctx, q.Model, q.Timeout)
			digests[q.Model] = d
		}
		if d.err != nil {
			res[i].Step, res[i].Err = StepError, d.err
			continue
		}
		res[i].ModelDigest = d.digest
		keys[i] = cacheKey{q.Version, d.digest, hash}
		live = append(live, i)
	}

	hits, err := j.lookup(ctx, keys, live)
	if err != nil {
		return nil, err
	}
	var hitKeys []cacheKey
	var groups [][]int
	groupOf := map[cacheKey]int{}
	for _, i := range live {
		if v, ok := hits[keys[i]]; ok {
			res[i].Step, res[i].Verdict, res[i].ModelCallID = StepCache, &v.verdict, v.callID
			hitKeys = append(hitKeys, keys[i])
			continue
		}
		g, ok := groupOf[keys[i]]
		if !ok {
			g = len(groups)
			groupOf[keys[i]] = g
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], i)
	}
	if err := j.countHits(ctx, hitKeys); err != nil {
		return nil, err
	}
	if len(groups) == 0 {
		return res, nil
	}

	var budget *budgets
	if opt.Purpose == PurposeEvaluate {
		budget = &budgets{pool: j.pool, now: j.client.calendar}
	}
	var calls atomic.Int64
	limit := func() error {
		if opt.MaxCalls > 0 && calls.Add(1) > int64(opt.MaxCalls) {
			return &exhaustedError{fmt.Sprintf("call limit of %d reached", opt.MaxCalls)}
		}
		return nil
	}
	allow := func(r *Request) (*reservation, error) {
		if err := limit(); err != nil {
			return nil, err
		}
		return budget.reserve(ctx, r.Source, r.Watch, r.Budget)
	}
	// A call is reserved only once a slot is free to make it, so the
	// budget is spent by calls being made, not by calls waiting.
	slots := make(chan struct{}, j.conc)
	var wg sync.WaitGroup
	for _, g := range groups {
		slots <- struct{}{}
		leader := -1
		var rsv *reservation
		why := limit()
		if why == nil {
			for _, i := range g {
				if rsv, why = budget.reserve(ctx, reqs[i].Source, reqs[i].Watch, reqs[i].Budget); why == nil {
					leader = i
					break
				}
				if !errors.As(why, new(*exhaustedError)) {
					break // the database failed: no reservation is possible
				}
			}
		}
		if leader < 0 {
			<-slots
			step, retryAt := StepBudget, nextUTCDay(j.client.calendar())
			if !errors.As(why, new(*exhaustedError)) {
				step, retryAt = StepError, time.Time{}
			}
			for _, i := range g {
				res[i].Step, res[i].Err, res[i].RetryAt = step, why, retryAt
			}
			continue
		}
		wg.Go(func() {
			defer func() { <-slots }()
			r := j.call(ctx, reqs[leader], msgs[leader], res[leader], opt, rsv, allow)
			res[leader] = r
			for _, i := range g {
				if i == leader {
					continue
				}
				f := r
				f.Calls = 0
				if f.Step == StepModel {
					f.Step = StepCache
				}
				res[i] = f
			}
		})
	}
	wg.Wait()
	return res, nil
}

// call sends one request to the model under the reservation rsv,
// retrying a malformed answer once with a correction (under a reservation
// of its own from allow), and records every request in model_calls.
func (j *Judge) call(ctx context.Context, r *Request, msgs []api.Message, res Result, opt Options, rsv *reservation,
	allow func(*Request) (*reservation, error)) Result {
	q := r.Question
	for attempt := 1; attempt <= 2; attempt++ {
		if attempt > 1 {
			var err error
			if rsv, err = allow(r); err != nil {
				res.Step, res.Err = StepError, fmt.Errorf("%w; no retry: %v", res.Err, err)
				return res
			}
		}
		reply, err := j.client.Chat(ctx, q.Model, msgs, q.Schema(), q.Options, q.Timeout)
		if errors.Is(err, ErrUnavailable) || ctx.Err() != nil {
			// No request was made (breaker open), or we are shutting down:
			// the reserved call goes back to the budget.
			rsv.release(ctx, j.logger)
			res.Step, res.Err = StepError, cmpErr(err, ctx.Err())
			return res
		}
		row := callRow{
			purpose: opt.Purpose, req: r, model: q.Model, digest: res.ModelDigest, inputHash: res.InputHash,
			msgs: msgs, attempt: attempt, reply: reply, owner: j.owner,
		}
		var verdict Verdict
		var perr error
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			row.outcome, row.err = OutcomeTimeout, err
		case err != nil:
			row.outcome, row.err = OutcomeError, err
		default:
			verdict, row.output, perr = ParseVerdict(reply.Content, q.ReasonMax)
			if perr != nil && reply.DoneReason == "length" {
				perr = truncated(perr, q)
			}
			if perr != nil {
				row.outcome, row.err = OutcomeMalformed, perr
			} else {
				row.outcome, row.verdict = OutcomeOK, &verdict
			}
		}
		rsv.addTokens(ctx, reply.PromptTokens+reply.OutputTokens, j.logger)
		j.metrics.ModelCall(q.Model, row.outcome, reply.PromptTokens, reply.OutputTokens, reply.Latency)
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		id, ierr := j.insertCall(rctx, &row)
		if ierr == nil && row.verdict != nil {
			ierr = j.insertVerdict(rctx, r, res, id, verdict)
		}
		cancel()
		res.Calls++
		res.Outcome = row.outcome
		if ierr != nil {
			res.Step, res.Err = StepError, ierr
			return res
		}
		res.ModelCallID = &id
		j.logger.Debug("model call", "source", r.Source, "watch", r.Watch, "change_id", r.ChangeID, "model", q.Model,
			"outcome", row.outcome, "latency_ms", reply.Latency.Milliseconds(), "attempt", attempt)
		switch row.outcome {
		case OutcomeOK:
			res.Step, res.Verdict, res.Err = StepModel, &verdict, nil
			return res
		case OutcomeMalformed:
			res.Step, res.Err = StepError, perr
			msgs = append(slices.Clone(msgs), api.Message{Role: "assistant", Content: reply.Content},
				api.Message{Role: "user", Content: correction(perr)})
			continue
		default:
			res.Step, res.Err = StepError, err
			return res
		}
	}
	return res
}

// truncated explains a malformed answer the model server cut short
// (done_reason "length"): the answer hit num_predict.
func truncated(perr error, q *modelspec.Question) error {
	limit := "its default"
	if n, ok := q.Options["num_predict"]; ok {
		limit = fmt.Sprint(n)
	}
	return fmt.Errorf("%w (the answer was cut off: the model server stopped at num_predict = %s tokens, done_reason \"length\"; "+
		"raise ollama.options.num_predict (or the watch's model.options.num_predict), or lower ollama.reason_max_chars (%d) for shorter reasons)",
		perr, limit, q.ReasonMax)
}

func cmpErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

func nextUTCDay(now time.Time) time.Time {
	t := now.UTC()
	return time.Date(t.Year(), t.Month(), t.Day()+1, 0, 0, 0, 0, time.UTC)
}
