package control

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/lookout-dev/lookout/internal/audit"
	"github.com/lookout-dev/lookout/internal/outbox"
)

// The operator's actions on sources (pause, resume) and on dead
// notifications (retry), for admins: the admin page's buttons. They act on
// the source's operational status, whoever manages its definition (a
// configuration file included) — the statements of `syncer pause` and
// `syncer resume` (internal/syncer/operator.go), which the api binary does
// not link — where PauseSource pauses a definition the API may change.
// Each action is audited in its transaction. Run now is RunNow.

// SourceState is a source's status as an action left it.
type SourceState struct {
	Name           string `json:"name"`
	Status         string `json:"status"`
	StatusReason   string `json:"status_reason,omitempty"`
	RunRequested   bool   `json:"run_requested"`
	PreviousStatus string `json:"previous_status,omitempty"`
}

const (
	// queryPauseSource is syncer.Pause's statement.
	queryPauseSource = `
		UPDATE sources SET status = 'paused', status_reason = $2, status_changed_at = now(), updated_at = now()
		WHERE name = $1
		RETURNING name, status, coalesce(status_reason, ''), run_requested_at IS NOT NULL`
	// queryResumeSource is syncer.Resume's statement: active again,
	// failures cleared, due now.
	queryResumeSource = `
		WITH prev AS (SELECT name, status FROM sources WHERE name = $1 FOR UPDATE)
		UPDATE sources s SET status = 'active',
		       status_reason = CASE WHEN prev.status <> 'active' THEN 'resumed by operator (was ' || prev.status || ')' ELSE s.status_reason END,
		       failure_count = CASE WHEN prev.status <> 'active' THEN 0 ELSE s.failure_count END,
		       next_run_at = CASE WHEN prev.status <> 'active' THEN now() ELSE s.next_run_at END,
		       status_changed_at = CASE WHEN prev.status <> 'active' THEN now() ELSE s.status_changed_at END,
		       updated_at = now()
		FROM prev WHERE s.name = prev.name
		RETURNING s.name, s.status, coalesce(s.status_reason, ''), s.run_requested_at IS NOT NULL, prev.status`
)

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
		var st SourceState
		err := tx.QueryRow(ctx, queryPauseSource, name, reason).Scan(&st.Name, &st.Status, &st.StatusReason, &st.RunRequested)
		return &st, err
	})
}

// OperatorResumeSource makes a paused, disabled or completed source active
// again, clears its failures and makes it due now; resuming an active
// source changes nothing. A source whose definition is paused stays
// paused: its owner resumes it (PauseSource).
func (s *Service) OperatorResumeSource(ctx context.Context, p Principal, name string) (*SourceState, error) {
	if err := s.admin(p, "resuming a source"); err != nil {
		return nil, err
	}
	return s.sourceAction(ctx, p, "resume", name, func(tx pgx.Tx) (*SourceState, error) {
		var st SourceState
		err := tx.QueryRow(ctx, queryResumeSource, name).Scan(&st.Name, &st.Status, &st.StatusReason, &st.RunRequested, &st.PreviousStatus)
		return &st, err
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
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, &NotFoundError{Kind: "source", Name: name, Hint: "it is not registered (the syncer registers the sources of its configuration when it starts)"}
	}
	if err != nil {
		var ce *ConflictError
		if errors.As(err, &ce) {
			return nil, ce
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
