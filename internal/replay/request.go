package replay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lookout-dev/lookout/internal/db"
	"github.com/lookout-dev/lookout/internal/service"
)

// Request is a dry run with the model that the api asks the evaluator
// deployment to answer: a row of dry_run_requests.
type Request struct {
	ID int64
	// Owner is the user who asked.
	Owner string
	// Source and Watch name the source replayed and the watch tested.
	Source, Watch string
	// Definition is the source's definition (JSON) holding the one watch
	// to test, validated by the api.
	Definition json.RawMessage
	// Since and Until bound the changes replayed.
	Since, Until time.Time
	// MaxCalls bounds the model calls (1 to 50).
	MaxCalls int
}

// Statuses of dry_run_requests.status.
const (
	StatusPending = "pending"
	StatusRunning = "running"
	StatusDone    = "done"
	StatusFailed  = "failed"
)

// RequestsChannel is the NOTIFY channel of new requests in schema.
func RequestsChannel(schema string) string { return schema + requestsChannel }

// ReportsChannel is the NOTIFY channel of answered requests in schema.
func ReportsChannel(schema string) string { return schema + reportsChannel }

// Submit records r (its ID is ignored), to be claimed until expires, and
// wakes the evaluators (NOTIFY <schema>.dryrun). It returns the request's id.
func Submit(ctx context.Context, q Querier, r Request, expires time.Time) (int64, error) {
	var id int64
	var ignored string
	if err := q.QueryRow(ctx, querySubmit, r.Owner, r.Source, r.Watch, []byte(r.Definition), r.Since, r.Until, r.MaxCalls, expires).
		Scan(&id, &ignored); err != nil {
		return 0, fmt.Errorf("record the dry run of %s/%s: %w", r.Source, r.Watch, err)
	}
	return id, nil
}

// Claim takes the oldest pending request that has not expired for by (FOR
// UPDATE SKIP LOCKED: each request goes to one evaluator); nil when there
// is none. It first forgets requests an hour past their expiry.
func Claim(ctx context.Context, q Querier, by string) (*Request, error) {
	if _, err := q.Exec(ctx, queryDeleteStale); err != nil {
		return nil, fmt.Errorf("forget stale dry run requests: %w", err)
	}
	r := &Request{}
	var def []byte
	err := q.QueryRow(ctx, queryClaim, by).Scan(&r.ID, &r.Owner, &r.Source, &r.Watch, &def, &r.Since, &r.Until, &r.MaxCalls)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("claim a dry run request: %w", err)
	}
	r.Definition = def
	return r, nil
}

// Finish writes the answer of request id that by claimed: the report, or
// the error that prevented it. It wakes the api (NOTIFY
// <schema>.dryrun_done). A request no longer claimed by by (forgotten) is
// left alone.
func Finish(ctx context.Context, q Querier, id int64, by string, rep *Report, runErr error) error {
	status, report, msg := StatusDone, []byte(nil), ""
	if runErr != nil {
		status, msg = StatusFailed, runErr.Error()
	} else {
		var err error
		if report, err = json.Marshal(rep); err != nil {
			return fmt.Errorf("dry run request %d: encode the report: %w", id, err)
		}
	}
	var ignored string
	err := q.QueryRow(ctx, queryFinish, id, by, status, report, msg).Scan(&id, &ignored)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("dry run request %d: write the answer: %w", id, err)
	}
	return nil
}

// PendingError is a request that got no answer in time: no evaluator
// claimed it (Status pending; the request is withdrawn), or the one that
// did has not finished (Status running).
type PendingError struct {
	ID     int64
	Status string
	// By is the evaluator running it.
	By   string
	Wait time.Duration
}

func (e *PendingError) Error() string {
	if e.Status == StatusRunning {
		return fmt.Sprintf("dry run request %d is still running in evaluator %s after %s; its report will not be kept: "+
			"try a smaller since or max_calls", e.ID, e.By, e.Wait)
	}
	return fmt.Sprintf("dry run request %d was not taken by any evaluator within %s, and was withdrawn: "+
		"a dry run with use_model is answered by the evaluator deployment (is an evaluator running?); without use_model it needs none", e.ID, e.Wait)
}

// FailedError is a request the evaluator could not answer.
type FailedError struct {
	ID  int64
	Msg string
}

func (e *FailedError) Error() string {
	return fmt.Sprintf("dry run request %d failed in the evaluator: %s", e.ID, e.Msg)
}

// Await waits at most wait for the answer of request id: LISTEN on
// <schema>.dryrun_done, and the row re-read on every wake-up (the
// listener's first one included, so an answer written before it listened
// is seen). The answered request is deleted. Past wait it returns a
// *PendingError (a request still pending is withdrawn); a request the
// evaluator failed is a *FailedError.
func Await(ctx context.Context, pool *pgxpool.Pool, id int64, wait time.Duration, logger *slog.Logger) (*Report, error) {
	schema, err := db.CurrentSchema(ctx, pool)
	if err != nil {
		return nil, fmt.Errorf("dry run request %d: %w", id, err)
	}
	l := db.NewListener(pool, ReportsChannel(schema), logger)
	if err := l.Start(ctx); err != nil {
		return nil, fmt.Errorf("dry run request %d: %w", id, err)
	}
	defer l.Stop()
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	// The listener's wake-ups are the signal; a slow re-read covers a
	// listener that cannot connect.
	tick := time.NewTicker(max(wait/10, 100*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-deadline.C:
			return giveUp(ctx, pool, id, wait)
		case <-l.Wake():
		case <-tick.C:
		}
		rep, _, done, err := answer(ctx, pool, id)
		if done || err != nil {
			return rep, err
		}
	}
}

// answer reads request id: done when it was answered (then deleted), by
// the evaluator that claimed it.
func answer(ctx context.Context, q Querier, id int64) (rep *Report, by string, done bool, err error) {
	var status, msg string
	var report []byte
	err = q.QueryRow(ctx, queryState, id).Scan(&status, &by, &report, &msg)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, "", true, fmt.Errorf("dry run request %d is gone (forgotten past its expiry)", id)
	}
	if err != nil {
		return nil, "", false, fmt.Errorf("dry run request %d: read its state: %w", id, err)
	}
	if status != StatusDone && status != StatusFailed {
		return nil, by, false, nil
	}
	if _, err := q.Exec(ctx, queryForget, id); err != nil {
		return nil, by, true, fmt.Errorf("dry run request %d: forget it: %w", id, err)
	}
	if status == StatusFailed {
		return nil, by, true, &FailedError{ID: id, Msg: msg}
	}
	rep = &Report{}
	if err := json.Unmarshal(report, rep); err != nil {
		return nil, by, true, fmt.Errorf("dry run request %d: decode the report: %w", id, err)
	}
	return rep, by, true, nil
}

// giveUp withdraws request id when no evaluator claimed it, and says why
// there is no answer; a request answered meanwhile gives its answer.
func giveUp(ctx context.Context, q Querier, id int64, wait time.Duration) (*Report, error) {
	tag, err := q.Exec(ctx, queryGiveUp, id)
	if err != nil {
		return nil, fmt.Errorf("dry run request %d: withdraw it: %w", id, err)
	}
	if tag.RowsAffected() == 1 {
		return nil, &PendingError{ID: id, Status: StatusPending, Wait: wait}
	}
	rep, by, done, err := answer(ctx, q, id)
	if done || err != nil {
		return rep, err
	}
	return nil, &PendingError{ID: id, Status: StatusRunning, By: by, Wait: wait}
}

// RunFunc answers one claimed request (the evaluator's DryRun).
type RunFunc func(ctx context.Context, r *Request) (*Report, error)

// Worker answers dry run requests in the evaluator deployment: it LISTENs
// on <schema>.dryrun, claims requests one at a time (SKIP LOCKED, so
// replicas share them) and writes each answer with Finish.
type Worker struct {
	pool   *pgxpool.Pool
	by     string
	run    RunFunc
	logger *slog.Logger
	loop   service.Loop
	// Poll is how often it looks for requests without a wake-up.
	// Defaults to 30s.
	Poll time.Duration
}

// NewWorker returns a worker that claims requests as by and answers them
// with run.
func NewWorker(pool *pgxpool.Pool, by string, run RunFunc, logger *slog.Logger) *Worker {
	return &Worker{pool: pool, by: by, run: run, logger: logger.With("component", "dry_runs"), Poll: 30 * time.Second}
}

// Start listens and answers requests in the background.
func (w *Worker) Start(ctx context.Context) error {
	schema, err := db.CurrentSchema(ctx, w.pool)
	if err != nil {
		return fmt.Errorf("start the dry run worker: %w", err)
	}
	l := db.NewListener(w.pool, RequestsChannel(schema), w.logger)
	if err := l.Start(ctx); err != nil {
		return fmt.Errorf("start the dry run worker: %w", err)
	}
	return w.loop.Start(ctx, func(ctx context.Context) error {
		defer l.Stop()
		tick := time.NewTicker(w.Poll)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-l.Wake():
			case <-tick.C:
			}
			w.drain(ctx)
		}
	})
}

// Stop ends the worker and waits for the request it runs.
func (w *Worker) Stop() error { return w.loop.Stop() }

// Done is closed when the worker ended.
func (w *Worker) Done() <-chan struct{} { return w.loop.Done() }

// drain answers requests until none is pending.
func (w *Worker) drain(ctx context.Context) {
	for ctx.Err() == nil {
		r, err := Claim(ctx, w.pool, w.by)
		if err != nil {
			if ctx.Err() == nil {
				w.logger.Warn("claim a dry run request", "error", err)
			}
			return
		}
		if r == nil {
			return
		}
		rep, runErr := w.run(ctx, r)
		if runErr != nil {
			w.logger.Info("dry run request failed", "request_id", r.ID, "owner", r.Owner, "source", r.Source, "watch", r.Watch, "error", runErr)
		}
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		if err := Finish(fctx, w.pool, r.ID, w.by, rep, runErr); err != nil {
			w.logger.Warn("answer a dry run request", "request_id", r.ID, "error", err)
		}
		cancel()
	}
}
