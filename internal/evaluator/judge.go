package evaluator

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lookout-dev/lookout/internal/modelspec"
	"github.com/lookout-dev/lookout/internal/semantic"
	"github.com/lookout-dev/lookout/internal/service"
)

// decidedWatches returns, for claimed changes that were attempted before
// (a held change coming back, or a leased change taken over after its
// deterministic decisions were committed with its claim), the watches an
// earlier attempt already decided: they are not evaluated again.
// It reads through tx, the claim's transaction, so that a batch never
// waits for a second connection while holding one.
func (e *Evaluator) decidedWatches(ctx context.Context, tx pgx.Tx, claimed []*change) (map[int64]map[string]bool, error) {
	var again []*change
	for _, c := range claimed {
		if c.Attempts > 1 {
			again = append(again, c)
		}
	}
	out := map[int64]map[string]bool{}
	if len(again) == 0 {
		return out, nil
	}
	k := keysOf(again)
	rows, err := tx.Query(ctx, `
		SELECT change_id, watch FROM evaluations
		WHERE change_id = ANY($1) AND source = ANY($2) AND change_created_at >= $3 AND decision <> 'hold'`,
		k.ids, k.sources, k.since)
	if err != nil {
		return nil, fmt.Errorf("read earlier decisions: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		var w string
		if err := rows.Scan(&id, &w); err != nil {
			return nil, fmt.Errorf("read earlier decisions: %w", err)
		}
		if out[id] == nil {
			out[id] = map[string]bool{}
		}
		out[id][w] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read earlier decisions: %w", err)
	}
	return out, nil
}

// request builds the model request of a decision.
func (e *Evaluator) request(d *decision) *semantic.Request {
	c, w := d.change, d.watch
	r := &semantic.Request{
		ChangeID: c.ID, Source: c.Source, RecordID: c.RecordID, Watch: w.Config.Name, Owner: w.Owner, ContentHash: c.NewHash,
		Question: w.Question,
		Input: modelspec.Input{Source: c.Source, Kind: c.Kind, ChangedFields: c.ChangedFields,
			Record: c.Record, Previous: c.Previous, Omit: e.index.volatile(c.Source)},
	}
	if b := w.Config.Budget; b != nil {
		r.Budget = *b
	}
	return r
}

// needsModel reports whether the decision waits for the model step: its
// filter matched and its watch has an ask.
func (d *decision) needsModel() bool {
	return d.matched && d.verdict == "notify" && d.watch.Question != nil
}

// modelRequests builds the model requests of the decisions that need the
// model, and their indexes in decs.
func (e *Evaluator) modelRequests(decs []decision) (reqs []*semantic.Request, idx []int) {
	for i := range decs {
		if decs[i].needsModel() {
			reqs = append(reqs, e.request(&decs[i]))
			idx = append(idx, i)
		}
	}
	return reqs, idx
}

// judgeDecisions runs the model step for the decisions whose filter matched
// and whose watch has an ask: verdict cache, budget, model. It runs outside
// any transaction and keeps the claim on the batch alive meanwhile. A
// failed model step becomes the watch's on_model_error decision.
func (e *Evaluator) judgeDecisions(ctx context.Context, claimed []*change, decs []decision, owner string) error {
	if e.judge == nil {
		return nil
	}
	reqs, idx := e.modelRequests(decs)
	if len(reqs) == 0 {
		return nil
	}
	stop := e.keepLease(ctx, claimed, owner)
	results, err := e.judge.Judge(ctx, reqs, semantic.Options{Purpose: semantic.PurposeEvaluate})
	stop()
	if err != nil {
		return err
	}
	now := time.Now()
	for k, r := range results {
		e.applyResult(&decs[idx[k]], r, now)
	}
	return nil
}

// applyResult turns the model step's result into the decision.
func (e *Evaluator) applyResult(d *decision, r semantic.Result, now time.Time) {
	d.modelCallID = r.ModelCallID
	d.step = r.Step
	if v := r.Verdict; v != nil {
		conf := v.Confidence
		d.urgency, d.confidence, d.reason = v.Urgency, &conf, v.Reason
		d.verdict = "skip"
		if v.ShouldNotify {
			d.verdict = "notify"
		}
		return
	}
	if d.step != semantic.StepBudget {
		d.step = semantic.StepError
	}
	why := "model step failed"
	if r.Err != nil {
		why = r.Err.Error()
	}
	policy := d.watch.Config.OnModelError
	switch {
	case policy == "hold" && r.Outcome == semantic.OutcomeMalformed && d.change.Attempts >= e.conf.MaxAttempts:
		// A model that keeps answering outside the schema would hold the
		// change forever; after evaluator.max_attempts it is an error.
		d.verdict = "error"
		d.reason = fmt.Sprintf("%s; malformed on %d attempts (evaluator.max_attempts), giving up", why, d.change.Attempts)
	case policy == "notify":
		d.verdict, d.reason = "notify", why+"; on_model_error is notify"
	case policy == "skip":
		d.verdict, d.reason = "skip", why+"; on_model_error is skip"
	default:
		d.verdict = "hold"
		d.retryAt = r.RetryAt
		if d.retryAt.IsZero() {
			d.retryAt = now.Add(e.holdBackoff(d.change.Attempts))
		}
		d.reason = fmt.Sprintf("%s; on_model_error is hold: retry after %s", why, d.retryAt.UTC().Format(time.RFC3339))
	}
}

// holdBackoff is the wait before a held change's next attempt
// (ollama.hold_backoff, service.Backoff after attempts failures).
func (e *Evaluator) holdBackoff(attempts int) time.Duration {
	return service.Backoff{Min: e.conf.Model.HoldMin, Max: e.conf.Model.HoldMax}.Delay(attempts)
}

// keepLease extends the lease on the claimed changes every third of the
// lease until stop is called, so that a long model step does not let
// another evaluator take them over.
func (e *Evaluator) keepLease(ctx context.Context, claimed []*change, owner string) (stop func()) {
	k := keysOf(claimed)
	return service.Every(ctx, max(e.conf.Lease/3, 10*time.Millisecond), func(ctx context.Context) bool {
		if _, err := e.pool.Exec(ctx, `
			UPDATE changes SET eval_lease_expires_at = now() + $3::interval
			WHERE id = ANY($1) AND source = ANY($4) AND created_at >= $5 AND eval_owner = $2 AND eval_status = 'pending'`,
			k.ids, owner, e.conf.Lease, k.sources, k.since); err != nil && ctx.Err() == nil {
			e.logger.Warn("extend change leases", "error", err)
		}
		return true
	})
}
