package taskrunner

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"

	"github.com/lookout-dev/lookout/internal/metrics"
	"github.com/lookout-dev/lookout/internal/tasks"
)

// maintainBatch is the most rows one maintenance step handles.
const maintainBatch = 100

// maintain finishes the runs agents reported on, recovers expired claims
// and writes to the tool what is due. Errors are logged; it reports
// whether every step succeeded (the loop backs off when one failed).
func (r *Runner) maintain(ctx context.Context) (ok bool) {
	ok = true
	for _, step := range []struct {
		what string
		fn   func(context.Context) error
	}{{"finish reported task runs", r.finishReported}, {"apply task reviews", r.applyReviews},
		{"recover expired task claims", r.recoverExpired},
		{"write due task states to the tool", r.writeDue}} {
		if err := step.fn(ctx); err != nil && ctx.Err() == nil {
			r.logger.Error(step.what, "error", err)
			ok = false
		}
	}
	return ok
}

// finishReported ends the running attempts an agent reported on.
func (r *Runner) finishReported(ctx context.Context) error {
	type ended struct {
		w   *watch
		run *tasks.Run
	}
	var done []ended
	err := pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		done = nil
		runs, err := tasks.Reported(ctx, tx, r.srcs.TaskSources(), maintainBatch)
		if err != nil {
			return err
		}
		for _, run := range runs {
			w := r.watch(run)
			if w == nil {
				continue
			}
			var rep tasks.Report
			out := output{}
			if err := json.Unmarshal(run.Report, &rep); err != nil {
				out.err = fmt.Sprintf("the agent's report is not readable: %v", err)
			}
			switch rep.Status {
			case tasks.StatusCompleted:
				out.result = rep.Result
			default:
				out.err = "the agent reported a failure: " + rep.Error
				out.retry = rep.Retry == nil || *rep.Retry
			}
			e := r.endOf(w, run, out)
			got, err := tasks.EndAttempt(ctx, tx, run, e, tasks.StatusRunning)
			if err != nil {
				return err
			}
			if got != nil {
				done = append(done, ended{w, got})
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, d := range done {
		var took = r.conf.Now().Sub(*d.run.StartedAt)
		r.conf.Metrics.TaskRun(d.run.Status, took)
		r.logger.Info("task reported", "source", d.run.Source, "task", d.run.Task, "record_id", d.run.RecordID,
			"task_run_id", d.run.ID, "run_id", d.run.RunID, "status", d.run.Status, "error", d.run.LastError)
		r.writeTool(ctx, d.w, d.run, r.conf.Now().Add(terminalPatience), r.runLogger(d.run))
	}
	return nil
}

// endOf is how an executed attempt ends, given its output.
func (r *Runner) endOf(w *watch, run *tasks.Run, out output) tasks.End {
	now := r.conf.Now()
	e := tasks.End{At: now, ExitCode: out.exitCode, Result: out.result, StderrTail: out.stderr, Failures: run.Failures}
	if out.err == "" {
		e.Status, e.ToolAction = tasks.StatusCompleted, tasks.ToolComplete
		if w.cfg.Review != nil {
			// The evaluator reviews the result first; the tool keeps
			// showing the claim until the review is applied.
			e.Status, e.ToolAction = tasks.StatusReviewing, ""
		}
		return e
	}
	e.Failures = run.Failures + 1
	e.Error = r.conf.Redactor.String(out.err)
	if out.retry && e.Failures < w.cfg.MaxAttempts {
		at := now.Add(w.backoff.Delay(e.Failures))
		e.Status, e.RetryAt, e.ToolAction = tasks.StatusReleased, &at, tasks.ToolRelease
		return e
	}
	e.Status, e.ToolAction = tasks.StatusFailed, tasks.ToolFail
	if out.retry {
		e.Error = fmt.Sprintf("%s (attempt %d of %d: no attempts left)", e.Error, e.Failures, w.cfg.MaxAttempts)
	}
	return e
}

// recoverExpired ends the attempts whose claim expired more than the
// grace ago: one that was running counts as a failed execution and goes
// back to todo (on_expiry: retry, while attempts are left) or fails; one
// that never ran goes back to todo. The tool is written by writeDue.
func (r *Runner) recoverExpired(ctx context.Context) error {
	var n int
	err := pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		n = 0
		now := r.conf.Now()
		runs, err := tasks.Expired(ctx, tx, r.srcs.TaskSources(), now.Add(-r.conf.Grace), maintainBatch)
		if err != nil {
			return err
		}
		for _, run := range runs {
			w := r.watch(run)
			if w == nil {
				continue
			}
			msg := fmt.Sprintf("the claim expired at %s while the task was %s (its executor crashed or was killed, or its syncer stopped)",
				run.ClaimExpiresAt.UTC().Format("2006-01-02T15:04:05Z"), run.Status)
			e := tasks.End{Status: tasks.StatusExpired, At: now, Error: msg, Failures: run.Failures, ToolAction: tasks.ToolRelease, ToolDue: now}
			if run.Status == tasks.StatusRunning {
				e.Failures++
				if w.cfg.OnExpiry == "fail" || e.Failures >= w.cfg.MaxAttempts {
					e.Status, e.ToolAction = tasks.StatusFailed, tasks.ToolFail
					if w.cfg.OnExpiry != "fail" {
						e.Error = fmt.Sprintf("%s (attempt %d of %d: no attempts left)", msg, e.Failures, w.cfg.MaxAttempts)
					} else {
						e.Error = msg + " (on_expiry: fail)"
					}
				} else {
					at := now.Add(w.backoff.Delay(e.Failures))
					e.RetryAt = &at
				}
			} else {
				e.RetryAt = &now
			}
			got, err := tasks.EndAttempt(ctx, tx, run, e, tasks.Active...)
			if err != nil {
				return err
			}
			if got != nil {
				n++
				r.conf.Metrics.TaskRun(e.Status, 0)
				r.runLogger(run).Warn("task claim expired", "status", e.Status, "error", e.Error, "retry_count", e.Failures)
			}
		}
		return nil
	})
	if n > 0 {
		r.conf.Metrics.ClaimsExpired(metrics.ComponentTasks, n)
	}
	return err
}

// writeDue writes to the tool the states it does not show yet: ends
// recorded by the maintenance, and writes that failed or whose replica
// stopped.
func (r *Runner) writeDue(ctx context.Context) error {
	now := r.conf.Now()
	runs, err := tasks.ToolDue(ctx, r.pool, r.srcs.TaskSources(), now, now.Add(actTimeout*actTries), maintainBatch)
	if err != nil {
		return err
	}
	for _, run := range runs {
		if ctx.Err() != nil {
			return nil
		}
		w := r.watch(run)
		if w == nil {
			continue
		}
		r.writeTool(ctx, w, run, r.conf.Now().Add(actTimeout), r.runLogger(run))
	}
	return nil
}

// watch returns the task watch of run, or nil when this replica does not
// know it.
func (r *Runner) watch(run *tasks.Run) *watch {
	src := r.source(run.Source)
	if src == nil {
		return nil
	}
	for _, w := range src.watches {
		if w.cfg.Name == run.Task {
			return w
		}
	}
	return nil
}

func (r *Runner) runLogger(run *tasks.Run) *slog.Logger {
	return r.logger.With("source", run.Source, "task", run.Task, "record_id", run.RecordID, "task_run_id", run.ID,
		"run_id", run.RunID, "attempt", run.Attempt)
}
