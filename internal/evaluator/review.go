package evaluator

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/normalize"
	"github.com/lookout-dev/lookout/internal/notify"
	"github.com/lookout-dev/lookout/internal/outbox"
	"github.com/lookout-dev/lookout/internal/semantic"
	"github.com/lookout-dev/lookout/internal/service"
	"github.com/lookout-dev/lookout/internal/tasks"
)

// Defaults of ReviewConfig.
const (
	ReviewIntervalDefault = 5 * time.Second
	ReviewLeaseDefault    = 5 * time.Minute
	ReviewBatchDefault    = 20
)

// ReviewConfig are the settings of the review of task results.
type ReviewConfig struct {
	// Interval is how often pending reviews are claimed. Defaults to 5s.
	Interval time.Duration
	// Lease is how long a claimed review is this evaluator's. Defaults to 5m.
	Lease time.Duration
	// Batch is how many reviews are claimed at once. Defaults to 20.
	Batch int
	// AlertSinks receive the alert of a task a review failed for good
	// (lookout.yaml's alerts.notify). Defaults to none: no alert.
	AlertSinks []string
	// OnAlert, when set, is called after an alert was enqueued (the
	// delivery wake-up).
	OnAlert func()
	// Now is the clock of claims and holds. Defaults to time.Now.
	Now func() time.Time
}

// Reviews is the evaluator's review of task results (docs/tasks.md#review):
// it claims the pending task_reviews (FOR UPDATE SKIP LOCKED, a lease),
// runs each criterion's deterministic check, then asks the model per
// criterion with a JSON schema (semantic.Reviewer: verdict cache, the
// review's budget), and records the decision; the syncer's task runner
// applies it. A review the model cannot judge is held and retried, never
// passed. A failure past max_corrections sends one alert.
type Reviews struct {
	e        *Evaluator
	conf     ReviewConfig
	reviewer *semantic.Reviewer
	logger   *slog.Logger
	loop     service.Loop
}

// Reviews returns the review service of the evaluator's task watches
// (their definitions are the evaluator's: files and API).
func (e *Evaluator) Reviews(conf ReviewConfig) (*Reviews, error) {
	conf.Interval = cmp.Or(conf.Interval, ReviewIntervalDefault)
	conf.Lease = cmp.Or(conf.Lease, ReviewLeaseDefault)
	conf.Batch = cmp.Or(conf.Batch, ReviewBatchDefault)
	if conf.Now == nil {
		conf.Now = time.Now
	}
	client, err := semantic.NewClient(e.conf.Model, e.logger)
	if err != nil {
		return nil, err
	}
	rv := semantic.NewReviewer(e.pool, client, e.conf.Owner, e.logger)
	rv.SetMetrics(e.conf.Metrics)
	return &Reviews{e: e, conf: conf, reviewer: rv, logger: e.logger.With("component", "review")}, nil
}

// Client returns the model client of the reviews (tests reset its
// breaker).
func (r *Reviews) Client() *semantic.Client { return r.reviewer.Client() }

// Start reviews in the background until Stop.
func (r *Reviews) Start(ctx context.Context) error {
	return r.loop.Start(ctx, func(ctx context.Context) error {
		backoff := service.LoopBackoff()
		stop := service.Every(ctx, r.conf.Interval, func(ctx context.Context) bool {
			if _, err := r.Once(ctx); err != nil && ctx.Err() == nil {
				r.logger.Error("review task results", "error", err)
				return service.RetrySleep(ctx, backoff.Next())
			}
			backoff.Reset()
			return true
		})
		<-ctx.Done()
		stop()
		return nil
	})
}

// Stop stops the loop and waits for it.
func (r *Reviews) Stop() error { return r.loop.Stop() }

// Done is closed when the loop ended.
func (r *Reviews) Done() <-chan struct{} { return r.loop.Done() }

// Once claims the due pending reviews and decides or holds each; it
// returns how many it decided.
func (r *Reviews) Once(ctx context.Context) (int, error) {
	claimed, err := tasks.ClaimReviews(ctx, r.e.pool, r.e.conf.Owner, r.conf.Now(), r.conf.Lease, r.conf.Batch)
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for _, p := range claimed {
		ok, err := r.review(ctx, p)
		if err != nil {
			errs = append(errs, fmt.Errorf("task run %d attempt %d: %w", p.TaskRunID, p.Attempt, err))
		}
		if ok {
			n++
		}
	}
	return n, errors.Join(errs...)
}

// reviewOf returns the review block of p's task watch, or nil.
func (r *Reviews) reviewOf(p *tasks.PendingReview) *config.Review {
	src := r.e.source(p.Source)
	if src == nil {
		return nil
	}
	for _, t := range src.Tasks {
		if t != nil && t.Name == p.Task {
			return t.Review
		}
	}
	return nil
}

// review decides or holds one claimed review; it reports whether it
// decided it.
func (r *Reviews) review(ctx context.Context, p *tasks.PendingReview) (bool, error) {
	log := r.logger.With("source", p.Source, "task", p.Task, "record_id", p.RecordID, "task_run_id", p.TaskRunID, "attempt", p.Attempt)
	now := r.conf.Now()
	hold := func(why string, at time.Time, crit []tasks.Criterion) (bool, error) {
		if at.IsZero() {
			at = now.Add(r.e.holdBackoff(p.Holds + 1))
		}
		log.Warn("task review held", "error", why, "retry_at", at.UTC())
		return false, tasks.Hold(ctx, r.e.pool, p, why, at, crit)
	}
	rc := r.reviewOf(p)
	if rc == nil {
		return hold(fmt.Sprintf("the task watch %s of source %s has no review: block in this evaluator's definitions", p.Task, p.Source),
			time.Time{}, nil)
	}
	var result any
	if len(p.Result) > 0 {
		if err := json.Unmarshal(p.Result, &result); err != nil {
			return false, fmt.Errorf("read the result: %w", err)
		}
	}
	env := map[string]any{"result": result, "source": p.Source, "task": p.Task}
	crit := make([]tasks.Criterion, len(rc.Criteria))
	checkFailed := false
	for i, c := range rc.Criteria {
		crit[i] = tasks.Criterion{Name: c.Name, Step: tasks.StepSkip}
		if c.Check == "" {
			continue
		}
		ok, err := runCheck(c.Check, env)
		if ok {
			continue
		}
		checkFailed = true
		crit[i] = tasks.Criterion{Name: c.Name, Step: tasks.StepCheck, Comment: "check " + c.Check + " is false"}
		if err != nil {
			crit[i].Comment = fmt.Sprintf("check %s failed: %v", c.Check, err)
		}
	}
	if !checkFailed {
		model, timeout, opts, err := r.e.conf.Model.Resolve(rc.Model)
		if err != nil {
			return hold(fmt.Sprintf("review.model: %v", err), time.Time{}, nil)
		}
		var budget config.Budget
		if rc.Budget != nil {
			budget = *rc.Budget
		}
		for i, c := range rc.Criteria {
			res, err := r.reviewer.Review(ctx, &semantic.ReviewRequest{Source: p.Source, Task: p.Task, RecordID: p.RecordID,
				TaskRunID: p.TaskRunID, Attempt: p.Attempt, Title: p.Title, Result: p.Result, Criterion: c.Name, Text: c.Text,
				Model: model, Timeout: timeout, Options: opts, Budget: budget})
			if err != nil {
				return false, err
			}
			if res.Verdict == nil {
				why := "the model could not judge criterion " + c.Name
				if res.Err != nil {
					why += ": " + res.Err.Error()
				}
				return hold(why+"; the review is held, never passed", res.RetryAt, crit[:i])
			}
			v := res.Verdict
			step := tasks.StepModel
			if res.Step == semantic.StepCache {
				step = tasks.StepCache
			}
			// A criterion passes when the model says so and its score
			// reaches pass_score.
			crit[i] = tasks.Criterion{Name: c.Name, Pass: v.Pass && v.Score >= rc.Pass(), Score: v.Score, Comment: v.Comment,
				Step: step, ModelCallID: res.ModelCallID}
		}
	}
	d := tasks.Decision{Passed: true, Score: 10, Criteria: crit, At: now}
	for _, c := range crit {
		if c.Step == tasks.StepSkip {
			continue
		}
		d.Score = min(d.Score, c.Score)
		d.Passed = d.Passed && c.Pass
	}
	d.Final = !d.Passed && p.CorrectionCount >= rc.Corrections()
	alerted := false
	err := pgx.BeginFunc(ctx, r.e.pool, func(tx pgx.Tx) error {
		ok, err := tasks.Decide(ctx, tx, p, d)
		if err != nil || !ok {
			return err
		}
		if d.Final && len(r.conf.AlertSinks) > 0 {
			alerted, err = r.alert(ctx, tx, p, d)
		}
		return err
	})
	if err != nil {
		return false, err
	}
	log.Info("task review decided", "passed", d.Passed, "score", d.Score, "final", d.Final, "correction_count", p.CorrectionCount)
	if alerted && r.conf.OnAlert != nil {
		r.conf.OnAlert()
	}
	return true, nil
}

// runCheck runs a criterion's deterministic check (config.Load compiled
// it before).
func runCheck(src string, env map[string]any) (bool, error) {
	c, err := normalize.CompileReviewCheck(src)
	if err != nil {
		return false, err
	}
	return c.Run(env)
}

// alert enqueues, in tx, the alert of a task its review failed past
// max_corrections: one per attempt (the dedupe key), to every alert sink.
func (r *Reviews) alert(ctx context.Context, tx pgx.Tx, p *tasks.PendingReview, d tasks.Decision) (bool, error) {
	key := fmt.Sprintf("alert/task_review/%d.%d", p.TaskRunID, p.Attempt)
	failed := tasks.FailedCriteria(d.Score, d.Criteria)
	title := fmt.Sprintf("[lookout] task %s of %s failed its review after %d corrections", p.Title, p.Source, p.CorrectionCount)
	body := fmt.Sprintf("Task %s (record %s, task watch %s, %s) failed its review with no corrections left: %s",
		cmp.Or(p.Title, p.RecordID), p.RecordID, p.Task, p.RunID, strings.TrimSpace(failed))
	now := d.At.UTC()
	pl := notify.Payload{DedupeKey: key, Kind: notify.KindAlert, Watch: "review:" + p.Task, Source: p.Source,
		Title: title, Body: body, Record: notify.PayloadRecord{ID: p.RecordID, Title: p.Title},
		Change: notify.PayloadChange{ChangedFields: []string{}}, Urgency: "high", Reason: "task_review_failed", CreatedAt: now,
		Alert: &notify.PayloadAlert{Type: "task_review_failed", Subject: p.RecordID, Since: &now,
			Details: map[string]any{"task_run_id": p.TaskRunID, "attempt": p.Attempt, "score": d.Score,
				"correction_count": p.CorrectionCount, "criteria": d.Criteria}}}
	payload := pl.Marshal()
	var rows []outbox.Notification
	for _, s := range r.conf.AlertSinks {
		rows = append(rows, outbox.Notification{DedupeKey: key, Sink: s, Source: p.Source, RecordID: p.RecordID,
			Watch: "review:" + p.Task, Kind: outbox.KindAlert, Title: title, Body: body, Urgency: "high",
			Reason: "task_review_failed", Payload: payload, Status: outbox.StatusPending})
	}
	res, err := outbox.EnqueueNew(ctx, tx, rows)
	if err != nil {
		return false, fmt.Errorf("enqueue the review alert: %w", err)
	}
	for _, e := range res {
		if e.Inserted {
			return true, nil
		}
	}
	return false, nil
}
