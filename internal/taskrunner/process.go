package taskrunner

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strings"
	"time"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/connectors"
	"github.com/lookout-dev/lookout/internal/service"
	"github.com/lookout-dev/lookout/internal/tasks"
)

// Bounds of the calls to the tool.
const (
	// actTimeout bounds one call of an Actor method.
	actTimeout = time.Minute
	// actTries is how many times an error other than a RetryLater is tried.
	actTries = 3
	// terminalPatience is how long a run's own replica keeps trying its
	// terminal write before leaving it to the maintenance.
	terminalPatience = 10 * time.Minute
)

// process runs one claimed attempt: the visible claim, its confirmation,
// the execution and the end, in PostgreSQL and in the tool.
func (r *Runner) process(ctx context.Context, src *source, w *watch, run *tasks.Run, record map[string]any) {
	log := r.logger.With("source", run.Source, "task", run.Task, "record_id", run.RecordID, "task_run_id", run.ID,
		"run_id", run.RunID, "attempt", run.Attempt)
	claim := claimOf(run)
	// The lease covers the claim, its confirmation, the whole execution
	// and the end: the claim and the confirmation must be done by
	// latest, which leaves the executor its whole timeout and the end its
	// margin. Past it the attempt is given back, never run short.
	latest := latestStart(run, w.cfg)
	cctx, cancel := context.WithTimeout(ctx, max(latest.Sub(r.conf.Now()), 0))
	defer cancel()
	err := r.act(cctx, latest, func(ctx context.Context) error { return src.actor.Claim(ctx, run.RecordID, claim) })
	if err != nil {
		r.notExecuted(ctx, w, run, "write the claim", err, log)
		return
	}
	if ok, err := tasks.Confirming(ctx, r.pool, run, r.conf.Now()); err != nil || !ok {
		if err != nil {
			log.Error("record the visible claim", "error", err)
		}
		return // the claim expired and was recovered meanwhile
	}
	if h := r.conf.Hooks.AfterClaim; h != nil {
		h(run.Source, run.RecordID, run.RunID)
	}
	var confirmed bool
	err = r.act(cctx, latest, func(ctx context.Context) error {
		var err error
		confirmed, err = src.actor.Confirm(ctx, run.RecordID, claim)
		return err
	})
	if err != nil {
		r.notExecuted(ctx, w, run, "confirm the claim", err, log)
		return
	}
	if !confirmed {
		now := r.conf.Now()
		msg := fmt.Sprintf("the claim did not stick: the task no longer shows the in-progress status under %s "+
			"(a person moved it, or it was deleted); not executed", run.RunID)
		r.end(ctx, w, run, tasks.End{Status: tasks.StatusLost, At: now, Error: msg, Failures: run.Failures, RetryAt: &now},
			0, log, tasks.StatusConfirming)
		return
	}
	cancel()

	// Execute.
	var token, tokenHash string
	if w.exec.kind() == "webhook" {
		token = newToken()
		tokenHash = tasks.HashToken(token)
	}
	started := r.conf.Now()
	if started.After(latest) {
		// The claim and its confirmation took so long that the executor
		// would not have its whole timeout before the claim expires.
		msg := fmt.Sprintf("the claim and its confirmation in the tool ended at %s, past %s, the latest start that leaves "+
			"the executor its whole timeout (%s) within the lease (%s); not executed, given back",
			started.UTC().Format(time.RFC3339), latest.UTC().Format(time.RFC3339), w.cfg.Timeout, w.cfg.Lease)
		r.end(ctx, w, run, tasks.End{Status: tasks.StatusReleased, At: started, Error: msg, Failures: run.Failures,
			RetryAt: &started, ToolAction: tasks.ToolRelease}, 0, log, tasks.StatusConfirming)
		return
	}
	ok, err := tasks.Start(ctx, r.pool, run, started, tokenHash)
	if err != nil || !ok {
		if err != nil {
			log.Error("start the task", "error", err)
		}
		return
	}
	deadline := started.Add(w.cfg.Timeout) // within the lease, less the end's margin: latestStart
	in := input{run: run, record: record, deadline: deadline, token: token}
	in.json = taskJSON(run, record, deadline, token)
	log.Info("task executing", "executor", w.exec.kind(), "idempotency_key", run.IdempotencyKey, "deadline", deadline.UTC())
	withTimeout := context.WithTimeout
	if h := r.conf.Hooks.ExecTimeout; h != nil {
		withTimeout = h
	}
	ectx, ecancel := withTimeout(ctx, w.cfg.Timeout)
	out := w.exec.run(ectx, in)
	ecancel()
	took := r.conf.Now().Sub(started)
	if out.pending {
		log.Info("task accepted; waiting for the agent's report", "claim_expires_at", run.ClaimExpiresAt.UTC())
		r.conf.Metrics.TaskRun("accepted", took)
		return
	}
	if ctx.Err() != nil && out.err != "" {
		out.err = "interrupted: the syncer stopped while the task ran (" + out.err + ")"
	}
	r.finish(ctx, w, run, out, took, log)
}

// finish ends an attempt that executed, by its output.
func (r *Runner) finish(ctx context.Context, w *watch, run *tasks.Run, out output, took time.Duration, log *slog.Logger) {
	r.end(ctx, w, run, r.endOf(w, run, out), took, log, tasks.StatusRunning, tasks.StatusExpired)
}

// notExecuted ends an attempt whose claim could not be written or
// confirmed: nothing ran.
func (r *Runner) notExecuted(ctx context.Context, w *watch, run *tasks.Run, what string, err error, log *slog.Logger) {
	now := r.conf.Now()
	msg := r.conf.Redactor.String(fmt.Sprintf("%s in the tool: %v; not executed", what, err))
	e := tasks.End{At: now, Error: msg, Failures: run.Failures}
	var ve *connectors.ValidationError
	switch {
	case errors.As(err, &ve):
		// The tool refuses what lookout was configured to write: a person
		// must fix the configuration or the tool.
		e.Status = tasks.StatusFailed
	case errors.Is(err, connectors.ErrNotFound):
		e.Status = tasks.StatusLost
	case errors.Is(err, connectors.ErrMoved):
		// A person moved the task before the claim: nothing was written;
		// a later pass takes it again if it is eligible again.
		e.Status, e.RetryAt = tasks.StatusLost, &now
	default:
		// Unauthorized, a storm outlasting the claim, a network failure,
		// a shutdown: give the task back; the claim may have landed.
		at := now.Add(w.backoff.Delay(1))
		if ctx.Err() != nil {
			at = now
		}
		e.Status, e.RetryAt, e.ToolAction = tasks.StatusReleased, &at, tasks.ToolRelease
	}
	r.end(ctx, w, run, e, 0, log, tasks.StatusClaimed, tasks.StatusConfirming)
}

// end records an attempt's end and writes it to the tool.
func (r *Runner) end(ctx context.Context, w *watch, run *tasks.Run, e tasks.End, took time.Duration, log *slog.Logger, from ...string) {
	e.ToolDue = e.At.Add(r.conf.Grace)
	dbctx := context.WithoutCancel(ctx)
	done, err := tasks.EndAttempt(dbctx, r.pool, run, e, from...)
	if err != nil {
		log.Error("record the end of a task run", "status", e.Status, "error", err)
		return
	}
	if done == nil {
		log.Warn("the task run moved on before its end was recorded (its claim expired and was recovered)", "status", e.Status)
		return
	}
	r.conf.Metrics.TaskRun(e.Status, took)
	attrs := []any{"status", e.Status, "duration_ms", took.Milliseconds(), "retry_count", e.Failures}
	if e.ExitCode != nil {
		attrs = append(attrs, "exit_code", *e.ExitCode)
	}
	switch e.Status {
	case tasks.StatusCompleted:
		log.Info("task completed", attrs...)
	case tasks.StatusReviewing:
		log.Info("task awaiting review", attrs...)
	case tasks.StatusLost:
		log.Warn("task lost", append(attrs, "error", e.Error)...)
	default:
		attrs = append(attrs, "error", e.Error)
		if e.RetryAt != nil { // a failed task has none: it is not retried
			attrs = append(attrs, "retry_at", e.RetryAt.UTC())
		}
		log.Error("task failed", attrs...)
	}
	if done.ToolAction != "" {
		if ctx.Err() != nil {
			return // shutting down: the maintenance of any replica writes it
		}
		r.writeTool(ctx, w, done, r.conf.Now().Add(terminalPatience), log)
	}
}

// writeTool makes the tool show run's state (its ToolAction).
func (r *Runner) writeTool(ctx context.Context, w *watch, run *tasks.Run, until time.Time, log *slog.Logger) {
	src := r.source(run.Source)
	if src == nil {
		return
	}
	claim := claimOf(run)
	o := connectors.Outcome{At: r.conf.Now(), Error: run.LastError, RetryCount: run.Failures}
	if run.FinishedAt != nil {
		o.At = *run.FinishedAt
	}
	var fn func(ctx context.Context) error
	switch run.ToolAction {
	case tasks.ToolComplete:
		fn = func(ctx context.Context) error { return src.actor.Complete(ctx, run.RecordID, claim, o) }
	case tasks.ToolFail:
		fn = func(ctx context.Context) error { return src.actor.Fail(ctx, run.RecordID, claim, o) }
	case tasks.ToolRelease:
		fn = func(ctx context.Context) error { return src.actor.Release(ctx, run.RecordID, claim, o) }
	default:
		return
	}
	err := r.act(ctx, until, fn)
	dbctx := context.WithoutCancel(ctx)
	if err == nil {
		if err := tasks.ToolDone(dbctx, r.pool, run, run.ToolAction); err != nil {
			log.Error("record the write to the tool", "error", err)
		}
		return
	}
	if errors.Is(err, connectors.ErrMoved) {
		// A person moved the task: lookout writes only over its own claim.
		_ = tasks.ToolDone(dbctx, r.pool, run, run.ToolAction)
		log.Warn("the task was moved in the tool; it is left as the person set it", "tool_action", run.ToolAction,
			"error", r.conf.Redactor.String(err.Error()))
		return
	}
	if errors.Is(err, connectors.ErrNotFound) {
		// The task is gone from the tool: nothing left to show it on.
		_ = tasks.ToolDone(dbctx, r.pool, run, run.ToolAction)
		log.Warn("the task is gone from the tool; its state stays in task_runs", "tool_action", run.ToolAction)
		return
	}
	due := r.conf.Now().Add(w.backoff.Delay(1))
	msg := r.conf.Redactor.String(err.Error())
	if err := tasks.ToolFailed(dbctx, r.pool, run, run.ToolAction, msg, due); err != nil {
		log.Error("record the failed write to the tool", "error", err)
	}
	if ctx.Err() == nil {
		log.Warn("write to the tool failed; retried later", "tool_action", run.ToolAction, "retry_at", due.UTC(), "error", msg)
	}
}

// act calls fn until it succeeds: after a *RetryLaterError at its RetryAt
// (unless that is after until), after other errors up to actTries times
// with a short backoff; ErrUnauthorized, ErrNotFound, ErrMoved,
// *ValidationError and a panic of the connector are returned at once.
func (r *Runner) act(ctx context.Context, until time.Time, fn func(ctx context.Context) error) error {
	b := service.Backoff{Min: 500 * time.Millisecond, Max: 10 * time.Second}
	for tries := 1; ; {
		cctx, cancel := context.WithTimeout(ctx, actTimeout)
		err := r.call(cctx, fn)
		cancel()
		if err == nil {
			return nil
		}
		var rl *connectors.RetryLaterError
		var ve *connectors.ValidationError
		var pe *panicked
		switch {
		case errors.As(err, &pe):
			return err
		case ctx.Err() != nil:
			return fmt.Errorf("%w (%w)", ctx.Err(), err)
		case errors.As(err, &rl):
			if rl.RetryAt.After(until) {
				return fmt.Errorf("the tool asked to wait until %s, past the time left: %w", rl.RetryAt.UTC().Format(time.RFC3339), err)
			}
			if !service.Sleep(ctx, max(rl.RetryAt.Sub(r.conf.Now()), 0)) {
				return fmt.Errorf("%w (%w)", ctx.Err(), err)
			}
		case errors.Is(err, connectors.ErrUnauthorized), errors.Is(err, connectors.ErrNotFound), errors.Is(err, connectors.ErrMoved),
			errors.As(err, &ve):
			return err
		case tries >= actTries:
			return err
		default:
			tries++
			if !service.Sleep(ctx, b.Next()) {
				return fmt.Errorf("%w (%w)", ctx.Err(), err)
			}
		}
	}
}

// panicked is the error of a tool action whose connector panicked: not
// tried again within the attempt.
type panicked struct{ error }

// call is fn; a panic in it (the connector's bug) is logged with its
// stack and returned as a *panicked error, so that the attempt ends as
// after any failed write to the tool instead of the process.
func (r *Runner) call(ctx context.Context, fn func(ctx context.Context) error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			r.logger.Error("the connector panicked; the tool action failed", "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			err = &panicked{fmt.Errorf("the connector panicked (a bug; the log has its stack): %v", p)}
		}
	}()
	return fn(ctx)
}

func claimOf(run *tasks.Run) connectors.Claim {
	return connectors.Claim{RunID: run.RunID, By: run.ClaimedBy, At: run.ClaimedAt, ExpiresAt: run.ClaimExpiresAt}
}

// margin is how long before its claim expires an execution must have
// ended, to leave time for the terminal write: a tenth of the lease, at
// most a minute, and at most half of what the lease leaves beside the
// timeout (the other half is the claim's).
func margin(t *config.Task) time.Duration {
	return max(min(t.Lease/10, time.Minute, (t.Lease-t.Timeout)/2), 0)
}

// latestStart is when an attempt's executor must start at the latest: its
// whole timeout and the margin of its end fit before the claim expires.
// The claim and its confirmation are done by then, or the attempt is
// given back.
func latestStart(run *tasks.Run, t *config.Task) time.Time {
	return run.ClaimExpiresAt.Add(-t.Timeout - margin(t))
}

func newToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// Payload is the task as an executor receives it (JSON on a command's
// stdin, a webhook's body).
type Payload struct {
	// IdempotencyKey is the same on every attempt of a task version.
	IdempotencyKey string `json:"idempotency_key"`
	TaskRunID      int64  `json:"task_run_id"`
	RunID          string `json:"run_id"`
	Attempt        int    `json:"attempt"`
	RetryCount     int    `json:"retry_count"`
	Source         string `json:"source"`
	Task           string `json:"task"`
	ClaimedBy      string `json:"claimed_by"`
	ClaimedAt      string `json:"claimed_at"`
	ClaimExpiresAt string `json:"claim_expires_at"`
	// Deadline is when the execution is stopped.
	Deadline string `json:"deadline"`
	// Record is the task's record as mirrored.
	Record map[string]any `json:"record"`
	// CorrectionCount is how often a review sent the task back; LastError
	// then says which criteria failed and why (docs/tasks.md#review).
	CorrectionCount int    `json:"correction_count"`
	LastError       string `json:"last_error,omitempty"`
	// Report is set for webhook executors: where and with which bearer
	// token an agent that answered 202 reports the result.
	Report *ReportRef `json:"report,omitempty"`
}

// ReportRef tells an agent how to report a run later.
type ReportRef struct {
	Path  string `json:"path"`
	Token string `json:"token"`
}

func taskJSON(run *tasks.Run, record map[string]any, deadline time.Time, token string) []byte {
	p := Payload{IdempotencyKey: run.IdempotencyKey, TaskRunID: run.ID, RunID: run.RunID, Attempt: run.Attempt,
		RetryCount: run.Failures, Source: run.Source, Task: run.Task, ClaimedBy: run.ClaimedBy,
		ClaimedAt: run.ClaimedAt.UTC().Format(time.RFC3339), ClaimExpiresAt: run.ClaimExpiresAt.UTC().Format(time.RFC3339),
		Deadline: deadline.UTC().Format(time.RFC3339Nano), Record: record, CorrectionCount: run.CorrectionCount,
		LastError: run.LastError}
	if token != "" {
		p.Report = &ReportRef{Path: fmt.Sprintf("/v1/task-runs/%d/result", run.ID), Token: token}
	}
	b, _ := json.Marshal(p)
	return b
}

// lastLine returns the last non-empty line of s.
func lastLine(s string) string {
	s = strings.TrimRight(s, "\r\n\t ")
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return strings.TrimSpace(s)
}
