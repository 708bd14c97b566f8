package taskrunner

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lookout-dev/lookout/internal/tasks"
)

// applyReviews applies the decided reviews of reviewing runs
// (docs/tasks.md#review): a passed review completes the run; a failed one
// sends the task back to todo with one more correction and the failed
// criteria as its LastError while max_corrections allows, else fails it
// with the review attached (the evaluator sent the alert when it decided
// so). The tool is written like any end: only over the run's own claim
// (ErrMoved leaves a person's move alone).
func (r *Runner) applyReviews(ctx context.Context) error {
	type applied struct {
		w   *watch
		run *tasks.Run
	}
	var done []applied
	if err := r.dropReviews(ctx); err != nil {
		return err
	}
	err := pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		done = nil
		revs, err := tasks.DecidedReviews(ctx, tx, r.srcs.TaskSources(), maintainBatch)
		if err != nil {
			return err
		}
		now := r.conf.Now()
		for _, rv := range revs {
			w := r.watch(rv.Run)
			if w == nil {
				continue
			}
			run := rv.Run
			e := tasks.End{At: now, ExitCode: run.ExitCode, Result: run.Result, StderrTail: run.StderrTail, Failures: run.Failures}
			switch {
			case rv.Passed:
				e.Status, e.ToolAction = tasks.StatusCompleted, tasks.ToolComplete
			case !rv.Final && w.cfg.Review != nil && run.CorrectionCount < w.cfg.Review.Corrections():
				e.Status, e.RetryAt, e.ToolAction, e.Correction = tasks.StatusReleased, &now, tasks.ToolRelease, true
				e.Error = fmt.Sprintf("%s (correction %d of %d)", rv.Failed(), run.CorrectionCount+1, w.cfg.Review.Corrections())
			default:
				e.Status, e.ToolAction = tasks.StatusFailed, tasks.ToolFail
				e.Error = fmt.Sprintf("%s (after %d corrections: none left)", rv.Failed(), run.CorrectionCount)
			}
			e.Error = r.conf.Redactor.String(e.Error)
			e.ToolDue = now.Add(r.conf.Grace)
			got, err := tasks.EndAttempt(ctx, tx, run, e, tasks.StatusReviewing)
			if err != nil {
				return err
			}
			if err := tasks.ReviewApplied(ctx, tx, rv.ReviewID, now); err != nil {
				return err
			}
			if got != nil {
				done = append(done, applied{w, got})
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, d := range done {
		r.conf.Metrics.TaskRun(d.run.Status, 0)
		log := r.runLogger(d.run)
		switch d.run.Status {
		case tasks.StatusCompleted:
			log.Info("task review passed, or dropped (its review: block removed); task completed")
		case tasks.StatusReleased:
			log.Warn("task review failed; task sent back for a correction", "correction_count", d.run.CorrectionCount,
				"error", d.run.LastError)
		default:
			log.Error("task review failed; no corrections left, task failed", "correction_count", d.run.CorrectionCount,
				"error", d.run.LastError)
		}
		r.writeTool(ctx, d.w, d.run, r.conf.Now().Add(terminalPatience), log)
	}
	return nil
}

// dropAfter is how old a pending review must be before the task runner
// drops it because its task watch has no review: block: longer than the
// definitions take to reach every replica (seconds), so that a replica
// that has not yet read a review: block another one wrote the review
// under does not drop it.
const dropAfter = time.Minute

// whyDropped is a dropped review's last_error.
const whyDropped = "dropped: the task watch has no review: block any more (its definition was edited); the result was accepted unreviewed"

// dropReviews drops the pending reviews of this runner's task watches
// that no longer have a review: block (docs/tasks.md#review): without
// it, no evaluator would ever decide them and the task would stay
// InProgress. The decided-review pass then completes their runs.
func (r *Runner) dropReviews(ctx context.Context) error {
	var srcs, names []string
	for _, src := range r.srcs.TaskSources() {
		s := r.source(src)
		if s == nil {
			continue
		}
		for _, w := range s.watches {
			if w.cfg.Review == nil {
				srcs, names = append(srcs, src), append(names, w.cfg.Name)
			}
		}
	}
	now := r.conf.Now()
	n, err := tasks.DropReviews(ctx, r.pool, srcs, names, whyDropped, now.Add(-dropAfter), now)
	if n > 0 {
		r.logger.Warn("task reviews dropped: their task watch has no review: block any more", "dropped", n)
	}
	return err
}
