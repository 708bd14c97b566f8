package semantic

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/ollama/ollama/api"

	"github.com/lookout-dev/lookout/internal/metrics"
	"github.com/lookout-dev/lookout/internal/modelspec"
)

// PurposeBriefing is model_calls.purpose of a briefing request.
const PurposeBriefing = "briefing"

// Briefing states (briefings.state).
const (
	briefWriting = "writing"
	briefOK      = "ok"
	briefFailed  = "failed"
)

// MissingMaxChars bounds the one line that says why a summary is missing.
const MissingMaxChars = 300

// Briefer has the model write the briefings of digests. A briefing is
// cached in the briefings table by (prompt version, model digest, input
// hash): the digest's items as the model is shown them. Before asking the
// model, a replica claims the row (state 'writing', a lease of two calls),
// so a retry of the digest, another sink of the same matches or a second
// evaluator replica finds the briefing — or the claim, and waits for it —
// instead of asking again. Requests are reserved against the watch's
// budget (model_budgets, shared with its verdicts) and recorded in
// model_calls with purpose 'briefing'. A malformed answer, or one citing a
// record that is not in the digest, is retried once with a correction; a
// sentence that cites no item is dropped, and a briefing left with none
// is missing (modelspec.DroppedNote says how many sentences were left out).
type Briefer struct {
	pool   *pgxpool.Pool
	client *Client
	owner  string
	logger *slog.Logger
	// metrics counts model calls, tokens and latency; nil records nothing.
	metrics *metrics.Metrics
}

// NewBriefer returns a Briefer calling the model through client. owner
// names this replica in claims and in model_calls.evaluator.
func NewBriefer(pool *pgxpool.Pool, client *Client, owner string, logger *slog.Logger) *Briefer {
	return &Briefer{pool: pool, client: client, owner: owner, logger: logger.With("component", "briefer")}
}

// SetMetrics makes the briefer count its model calls in m (nil: nothing).
func (b *Briefer) SetMetrics(m *metrics.Metrics) { b.metrics = m }

// Client returns the model client.
func (b *Briefer) Client() *Client { return b.client }

// Brief returns the briefing of r: from the cache, or written by the
// model now, bounded by two model calls of the question's timeout. Model
// failures, invalid answers and an exhausted budget are Results with
// Missing set (and are cached: the same digest is not asked again); the
// error is a database failure or ctx's end, after which nothing is cached
// and the digest may be tried again.
func (b *Briefer) Brief(ctx context.Context, r *modelspec.BriefRequest) (modelspec.BriefResult, error) {
	q := r.Question
	msgs, hash := briefMessages(q, r.Source, r.Watch, r.Items)
	res := modelspec.BriefResult{Model: q.Model, PromptVersion: q.Version, InputHash: hash}
	if len(r.Items) == 0 {
		res.Missing = "the digest has no items"
		return res, nil
	}
	digest, err := b.client.Digest(ctx, q.Model, q.Timeout)
	if err != nil {
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		res.Missing = oneLine(err.Error())
		return res, nil
	}
	res.ModelDigest = digest
	key := []any{q.Version, digest, hash}
	lease := 2*q.Timeout + 30*time.Second
	var claimed bool
	err = b.pool.QueryRow(ctx, queryBriefClaim, q.Version, digest, hash, r.Source, r.Watch, q.Model, b.owner,
		lease.String(), len(r.Items)).Scan(&claimed)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return b.hit(ctx, key, res)
	case err != nil:
		return res, fmt.Errorf("claim the briefing of %s: %w", r.Ref, err)
	}
	res, err = b.write(ctx, r, msgs, res)
	if err != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if _, rerr := b.pool.Exec(rctx, queryBriefRelease, append(key, b.owner)...); rerr != nil {
			b.logger.Warn("give up a briefing claim", "source", r.Source, "watch", r.Watch, "error", rerr)
		}
		return res, err
	}
	state, doc := briefFailed, []byte(nil)
	if res.Briefing != nil {
		state = briefOK
		doc, _ = json.Marshal(res.Briefing)
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	tag, err := b.pool.Exec(rctx, queryBriefFinish, q.Version, digest, hash, b.owner, state, doc, res.Missing, res.ModelCallID)
	if err != nil {
		return res, fmt.Errorf("store the briefing of %s: %w", r.Ref, err)
	}
	if tag.RowsAffected() == 0 {
		// Our claim expired and another replica took it over: our answer
		// stands for this digest; theirs will be cached.
		b.logger.Warn("briefing claim expired before the answer was stored", "source", r.Source, "watch", r.Watch,
			"prompt_version", q.Version)
	}
	return res, nil
}

// hit reads a finished briefing of key, or reports that another replica
// is writing it.
func (b *Briefer) hit(ctx context.Context, key []any, res modelspec.BriefResult) (modelspec.BriefResult, error) {
	var state, missing string
	var doc []byte
	err := b.pool.QueryRow(ctx, queryBriefHit, key...).Scan(&state, &doc, &missing, &res.ModelCallID)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		res.Busy = true
		return res, nil
	case err != nil:
		return res, fmt.Errorf("read a cached briefing: %w", err)
	}
	res.Cached = true
	if state == briefFailed {
		res.Missing = missing
		return res, nil
	}
	var br modelspec.Briefing
	if err := json.Unmarshal(doc, &br); err != nil {
		return res, fmt.Errorf("read a cached briefing: %w", err)
	}
	res.Briefing = &br
	return res, nil
}

// write asks the model under the claim: a reservation per request, the
// answer validated, a malformed one retried once with a correction.
func (b *Briefer) write(ctx context.Context, r *modelspec.BriefRequest, msgs []api.Message, res modelspec.BriefResult) (modelspec.BriefResult, error) {
	q := r.Question
	ids := make([]string, 0, len(r.Items))
	for _, it := range r.Items {
		if !slices.Contains(ids, it.RecordID) {
			ids = append(ids, it.RecordID)
		}
	}
	schema := BriefSchema(ids, q.MaxItems)
	budget := &budgets{pool: b.pool, now: b.client.calendar}
	var lastErr error
	for attempt := 1; attempt <= 2; attempt++ {
		rsv, err := budget.reserve(ctx, r.Source, r.Watch, r.Budget)
		if err != nil {
			if ex := new(exhaustedError); errors.As(err, &ex) {
				res.Missing = ex.msg
				if lastErr != nil {
					res.Missing = fmt.Sprintf("the model's answer was invalid (model call %d says why) and %s", *res.ModelCallID, ex.msg)
				}
				res.Missing = oneLine(res.Missing)
				return res, nil
			}
			return res, err
		}
		reply, err := b.client.Chat(ctx, q.Model, msgs, schema, q.Options, q.Timeout)
		if errors.Is(err, ErrUnavailable) || ctx.Err() != nil {
			rsv.release(ctx, b.logger)
			if ctx.Err() != nil {
				return res, ctx.Err()
			}
			res.Missing = oneLine(err.Error())
			return res, nil
		}
		row := briefCall{attempt: attempt, reply: reply, msgs: msgs}
		var br modelspec.Briefing
		var perr error
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			row.outcome, row.err = OutcomeTimeout, err
		case err != nil:
			row.outcome, row.err = OutcomeError, err
		default:
			br, row.output, perr = ParseBriefing(reply.Content, ids, q.MaxItems)
			if perr != nil && reply.DoneReason == "length" {
				perr = fmt.Errorf("%w (the answer was cut off at num_predict; raise digest.summarize.model.options.num_predict)", perr)
			}
			if perr != nil {
				row.outcome, row.err = OutcomeMalformed, perr
			} else {
				row.outcome = OutcomeOK
			}
		}
		rsv.addTokens(ctx, reply.PromptTokens+reply.OutputTokens, b.logger)
		b.metrics.ModelCall(q.Model, row.outcome, reply.PromptTokens, reply.OutputTokens, reply.Latency)
		id, err := b.insertCall(ctx, r, res, &row)
		if err != nil {
			return res, err
		}
		res.Calls++
		res.ModelCallID = &id
		b.logger.Debug("model call", "source", r.Source, "watch", r.Watch, "purpose", PurposeBriefing, "model", q.Model,
			"outcome", row.outcome, "latency_ms", reply.Latency.Milliseconds(), "attempt", attempt)
		switch row.outcome {
		case OutcomeOK:
			if br.Dropped > 0 {
				b.logger.Info("briefing sentences dropped: they cite no item of the digest", "source", r.Source, "watch", r.Watch,
					"dropped", br.Dropped, "model_call_id", id)
			}
			if !br.Grounded() {
				// Not one sentence cites an item: nothing of it is shown,
				// and the reader learns only how much was left out.
				res.Missing = modelspec.DroppedNote(br.Dropped)
				return res, nil
			}
			res.Briefing = &br
			return res, nil
		case OutcomeMalformed:
			lastErr = perr
			msgs = append(slices.Clone(msgs), api.Message{Role: "assistant", Content: reply.Content},
				api.Message{Role: "user", Content: correction(perr)})
		default:
			res.Missing = oneLine(row.err.Error())
			return res, nil
		}
	}
	// The reader is not shown the model's words: the reasons, which quote
	// the answer, are in the model call's row (model_calls.error).
	res.Missing = fmt.Sprintf("the model's answer was invalid twice (model call %d says why)", *res.ModelCallID)
	return res, nil
}

type briefCall struct {
	attempt int
	reply   Reply
	msgs    []api.Message
	outcome string
	output  json.RawMessage
	err     error
}

func (b *Briefer) insertCall(ctx context.Context, r *modelspec.BriefRequest, res modelspec.BriefResult, c *briefCall) (int64, error) {
	q := r.Question
	sizes := make([]map[string]any, len(c.msgs))
	for i, m := range c.msgs {
		sizes[i] = map[string]any{"role": m.Role, "chars": len(m.Content)}
	}
	request, _ := json.Marshal(map[string]any{
		"options": q.Options, "format": fmt.Sprintf("briefing schema, %d item(s), max_items %d", len(r.Items), q.MaxItems),
		"stream": false, "messages": sizes, "timeout_ms": q.Timeout.Milliseconds(), "done_reason": c.reply.DoneReason,
	})
	var output any
	var raw, errText *string
	if c.output != nil {
		output = c.output
	} else if c.reply.Content != "" {
		s := snippet(c.reply.Content, maxRawOutput)
		raw = &s
	}
	if c.err != nil {
		s := c.err.Error()
		errText = &s
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	var id int64
	err := b.pool.QueryRow(ctx, queryBriefCall, r.Source, r.Watch, q.Model, res.ModelDigest, q.Version, r.Ref,
		res.InputHash, request, output, raw, c.reply.PromptTokens, c.reply.OutputTokens,
		float64(c.reply.Latency.Microseconds())/1000, c.outcome, errText, c.attempt, b.owner).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("record briefing model call: %w", err)
	}
	return id, nil
}

// oneLine makes s one line of at most MissingMaxChars characters.
func oneLine(s string) string {
	return snippet(strings.Join(strings.Fields(s), " "), MissingMaxChars)
}
