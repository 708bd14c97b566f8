package control

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lookout-dev/lookout/internal/audit"
	"github.com/lookout-dev/lookout/internal/outbox"
	"github.com/lookout-dev/lookout/internal/sources"
)

// The operator's actions on sources (pause, resume) and on dead
// notifications (retry), for admins: the admin page's buttons. Pause is
// the operator's pause of the source's row whoever manages its definition
// (sources.Pause, as `syncer pause`); resume is the one resume of a source
// (definitions.Store.ResumeSource, as `syncer resume` and the API's):
// a definition paused through the API is resumed with it, so that a
// resumed source runs. Each action is audited in its transaction. Run now
// is RunNow.

// SourceState is a source's status as an action left it.
type SourceState = sources.State

func (s *Service) admin(p Principal, what string) error {
	if !p.Admin {
		return &ForbiddenError{Detail: what + " needs a token with the admin scope"}
	}
	return nil
}

// OperatorPauseSource stops scheduling a source until it is resumed; a run
// in progress finishes.
func (s *Service) OperatorPauseSource(ctx context.Context, p Principal, name, reason string) (*SourceState, error) {
	if err := s.admin(p, "pausing a source"); err != nil {
		return nil, err
	}
	if reason == "" {
		reason = "paused by " + p.Owner
	}
	return s.sourceAction(ctx, p, "pause", name, func(tx pgx.Tx) (*SourceState, error) {
		return sources.Pause(ctx, tx, name, reason, time.Now())
	})
}

// OperatorResumeSource makes a paused, disabled or completed source active
// again, clears its failures and makes it due now; resuming an active
// source changes nothing. A source paused in its definition through the
// API is resumed there too (and audited as the admin's); one paused in
// its file is refused, naming the file.
func (s *Service) OperatorResumeSource(ctx context.Context, p Principal, name string) (*SourceState, error) {
	if err := s.admin(p, "resuming a source"); err != nil {
		return nil, err
	}
	return s.sourceAction(ctx, p, "resume", name, func(tx pgx.Tx) (*SourceState, error) {
		_, st, err := s.store.In(tx).ResumeSource(ctx, actor(p), name, time.Now())
		if errors.Is(err, sources.ErrUnknownSource) {
			return nil, pgx.ErrNoRows
		}
		return st, err
	})
}

func (s *Service) sourceAction(ctx context.Context, p Principal, action, name string, do func(tx pgx.Tx) (*SourceState, error)) (*SourceState, error) {
	var out *SourceState
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		st, err := do(tx)
		if err != nil {
			return err
		}
		out = st
		return audit.Record(ctx, tx, entry(p, action, "source", name, ""), nil, st)
	})
	var dp *sources.DefinitionPausedError
	var removed *sources.RemovedError
	switch {
	case errors.Is(err, pgx.ErrNoRows), errors.Is(err, sources.ErrUnknownSource):
		return nil, &NotFoundError{Kind: "source", Name: name, Hint: "it is not registered (the syncer registers the sources of its configuration when it starts)"}
	case errors.As(err, &dp):
		return nil, &ConflictError{Detail: dp.Error()}
	case errors.As(err, &removed):
		return nil, &ConflictError{Detail: removed.Error()}
	case err != nil:
		var ce *ConflictError
		if errors.As(err, &ce) {
			return nil, ce
		}
		if e := fromStore(err, "", "source", name); e != err {
			return nil, e
		}
		return nil, fmt.Errorf("%s source %s: %w", action, name, err)
	}
	return out, nil
}

// RetryDead sends the dead notifications f selects back to pending (due
// now, attempts from zero; outbox.RetryDead) and returns how many. f.ID
// selects one, f.IDs those listed (the admin page's bulk retry); a zero
// Filter retries every dead notification.
func (s *Service) RetryDead(ctx context.Context, p Principal, f outbox.Filter) (int64, error) {
	if err := s.admin(p, "retrying dead notifications"); err != nil {
		return 0, err
	}
	target := "all"
	switch {
	case f.ID != 0:
		target = strconv.FormatInt(f.ID, 10)
	case f.IDs != nil:
		target = strconv.Itoa(len(f.IDs)) + " listed"
	}
	var n int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		if n, err = outbox.RetryDead(ctx, tx, f); err != nil {
			return err
		}
		after := map[string]any{"retried": n, "sink": f.Sink, "source": f.Source, "watch": f.Watch, "owner": f.Owner}
		if f.IDs != nil {
			after["ids"] = f.IDs
		}
		return audit.Record(ctx, tx, entry(p, "retry_dead", "notification", target, ""), nil, after)
	})
	if err != nil {
		return 0, fmt.Errorf("retry dead notifications (%s): %w", target, err)
	}
	return n, nil
}
