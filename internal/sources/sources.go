// Package sources is the one owner of the sources table: the named
// queries of the syncer's registrations, claims, leases and outcomes, and
// the operator's actions on a source (Pause, Resume, RunNow), which the
// CLI, the API, MCP and the admin page all call.
package sources

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Querier is what the actions need of a database handle; a
// *pgxpool.Pool, a *pgx.Conn and a pgx.Tx all are one.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// ErrUnknownSource is returned for a source name the sources table does
// not hold.
var ErrUnknownSource = errors.New("source is not registered")

// DefinitionPaused is sources.status_reason of a source paused in its
// definition. The one rule: a source is paused in its definition when
// source_definitions.paused is set (its owner paused it through the API or
// MCP, or its file says paused); the syncer registers it 'paused' with
// this reason and claims it not, whatever sources.status says, until the
// definition is resumed.
const DefinitionPaused = "paused in its definition"

// DefinitionPausedError is Resume's refusal of a source paused in its
// definition: making its row active would not make it run.
type DefinitionPausedError struct {
	Source    string
	Owner     string // "" for a shared source
	ManagedBy string // "api" or "file:<path>"
	Reason    string
}

func (e *DefinitionPausedError) Error() string {
	who := "its owner " + e.Owner
	if e.Owner == "" {
		who = "an admin"
	}
	how := fmt.Sprintf("resume the definition (POST /v1/sources/%s/resume as %s, or an admin's Resume on the admin page)", e.Source, who)
	by := " by " + who + " through the API"
	if f, ok := strings.CutPrefix(e.ManagedBy, "file:"); ok {
		by = " in its file " + f
		how = "remove paused from " + f + " and apply the directory"
	}
	reason := ""
	if e.Reason != "" {
		reason = fmt.Sprintf(" (%q)", e.Reason)
	}
	return fmt.Sprintf("source %q is paused in its definition%s%s: the syncers do not run it until then; %s", e.Source, by, reason, how)
}

// State is a source's status as an action left it.
type State struct {
	Name           string `json:"name"`
	Status         string `json:"status"`
	StatusReason   string `json:"status_reason,omitempty"`
	RunRequested   bool   `json:"run_requested"`
	PreviousStatus string `json:"previous_status,omitempty"`
}

const (
	queryPause = `
		UPDATE sources SET status = 'paused', status_reason = $2, status_changed_at = $3, updated_at = now()
		WHERE name = $1
		RETURNING name, status, coalesce(status_reason, ''), run_requested_at IS NOT NULL, status`

	// queryResumeLock locks the source's row and reads its definition's
	// pause.
	queryResumeLock = `
		SELECT s.status, coalesce(d.paused, false), coalesce(d.owner, ''), coalesce(d.managed_by, ''), coalesce(d.paused_reason, '')
		FROM sources s LEFT JOIN source_definitions d ON d.name = s.name
		WHERE s.name = $1
		FOR UPDATE OF s`

	queryResume = `
		UPDATE sources s SET status = 'active',
		       status_reason = CASE WHEN s.status <> 'active' THEN 'resumed by operator (was ' || s.status || ')' ELSE s.status_reason END,
		       failure_count = CASE WHEN s.status <> 'active' THEN 0 ELSE s.failure_count END,
		       next_run_at = CASE WHEN s.status <> 'active' THEN $2 ELSE s.next_run_at END,
		       status_changed_at = CASE WHEN s.status <> 'active' THEN $2 ELSE s.status_changed_at END,
		       updated_at = now()
		WHERE s.name = $1
		RETURNING s.name, s.status, coalesce(s.status_reason, ''), s.run_requested_at IS NOT NULL`

	queryRunNow = `
		UPDATE sources SET run_requested_at = CASE WHEN status = 'active' THEN $2 ELSE run_requested_at END,
		       updated_at = now()
		WHERE name = $1
		RETURNING status`
)

// Pause stops scheduling the source until Resume; a run in progress
// finishes. An empty reason is "paused by operator". It is the operator's
// pause (`syncer pause`, the admin page), of the source's row whoever
// manages its definition; an owner pauses the definition instead
// (definitions.Store.PauseSource).
func Pause(ctx context.Context, q Querier, name, reason string, now time.Time) (*State, error) {
	if reason == "" {
		reason = "paused by operator"
	}
	var st State
	err := q.QueryRow(ctx, queryPause, name, reason, now).Scan(&st.Name, &st.Status, &st.StatusReason, &st.RunRequested, &st.PreviousStatus)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, unknownSource(ctx, q, name)
	}
	if err != nil {
		return nil, fmt.Errorf("pause %s: %w", name, err)
	}
	return &st, nil
}

// Resume makes a paused, disabled or completed source active again, clears
// its failure count and makes it due at now; resuming an active source
// changes nothing (State.PreviousStatus says what it was). A source paused
// in its definition is refused with a *DefinitionPausedError (no syncer
// would run it): resume its definition first, in the same transaction
// (definitions.Store.ResumeSource does both).
func Resume(ctx context.Context, q Querier, name string, now time.Time) (*State, error) {
	var prev string
	var dp DefinitionPausedError
	var paused bool
	err := q.QueryRow(ctx, queryResumeLock, name).Scan(&prev, &paused, &dp.Owner, &dp.ManagedBy, &dp.Reason)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, unknownSource(ctx, q, name)
	}
	if err != nil {
		return nil, fmt.Errorf("resume %s: %w", name, err)
	}
	if paused {
		dp.Source = name
		return nil, &dp
	}
	if prev == "removed" {
		return nil, &RemovedError{Source: name}
	}
	st := State{PreviousStatus: prev}
	if err := q.QueryRow(ctx, queryResume, name, now).Scan(&st.Name, &st.Status, &st.StatusReason, &st.RunRequested); err != nil {
		return nil, fmt.Errorf("resume %s: %w", name, err)
	}
	return &st, nil
}

// RunNow asks for a run of an active source at the next poll of any
// replica, whatever its schedule; a run in progress is followed by another.
// A source that is not active is refused: resume it first.
func RunNow(ctx context.Context, q Querier, name string, now time.Time) error {
	var status string
	err := q.QueryRow(ctx, queryRunNow, name, now).Scan(&status)
	if errors.Is(err, pgx.ErrNoRows) {
		return unknownSource(ctx, q, name)
	}
	if err != nil {
		return fmt.Errorf("run %s now: %w", name, err)
	}
	if status != "active" {
		return &NotActiveError{Source: name, Status: status}
	}
	return nil
}

// NotActiveError is RunNow's refusal of a source that is not active.
type NotActiveError struct {
	Source, Status string
}

func (e *NotActiveError) Error() string {
	return fmt.Sprintf("source %q is %s: resume it first (resume also makes it due now)", e.Source, e.Status)
}

// Row is one row of the status report.
type Row struct {
	Name           string
	Connector      string
	Status         string
	StatusReason   string
	Schedule       string
	NextRunAt      time.Time
	RunRequested   bool
	Interval       time.Duration // 0 when unknown
	IntervalReason string
	LastRunAt      *time.Time
	LastSuccessAt  *time.Time
	FailureCount   int
	LastError      string
	LeaseOwner     string
	LeaseExpiresAt *time.Time
	RunID          *int64
}

// States reads every registered source, by name.
func States(ctx context.Context, q Querier) ([]Row, error) {
	rows, err := q.Query(ctx, `
		SELECT name, connector, status, coalesce(status_reason, ''), schedule, next_run_at,
		       run_requested_at IS NOT NULL, coalesce(interval_seconds, 0), coalesce(interval_reason, ''),
		       last_run_at, last_success_at, failure_count, coalesce(last_error, ''),
		       coalesce(lease_owner, ''), lease_expires_at, run_id
		FROM sources ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("read sources: %w", err)
	}
	defer rows.Close()
	var out []Row
	for rows.Next() {
		var st Row
		var secs float64
		if err := rows.Scan(&st.Name, &st.Connector, &st.Status, &st.StatusReason, &st.Schedule, &st.NextRunAt,
			&st.RunRequested, &secs, &st.IntervalReason, &st.LastRunAt, &st.LastSuccessAt, &st.FailureCount,
			&st.LastError, &st.LeaseOwner, &st.LeaseExpiresAt, &st.RunID); err != nil {
			return nil, fmt.Errorf("read sources: %w", err)
		}
		st.Interval = time.Duration(secs * float64(time.Second))
		out = append(out, st)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read sources: %w", err)
	}
	return out, nil
}

// WriteStatus prints states as a table: one line per source, then the
// reasons, errors and leases that do not fit in a column.
func WriteStatus(w io.Writer, states []Row, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SOURCE\tSTATUS\tNEXT RUN\tINTERVAL\tFAILURES\tLEASE\tLAST ERROR")
	for _, st := range states {
		next := "in " + ago(st.NextRunAt.Sub(now))
		leased := st.LeaseOwner != "" && st.LeaseExpiresAt != nil && st.LeaseExpiresAt.After(now)
		switch {
		case leased:
			next = "running"
		case st.Status != "active":
			next = "-"
		case st.RunRequested:
			next = "requested"
		case !st.NextRunAt.After(now):
			next = "due"
		}
		interval := "-"
		if st.Interval > 0 {
			interval = ago(st.Interval)
		}
		lease := "-"
		if st.LeaseOwner != "" && st.LeaseExpiresAt != nil {
			lease = fmt.Sprintf("%s (run %d, expires in %s)", st.LeaseOwner, deref(st.RunID), ago(st.LeaseExpiresAt.Sub(now)))
			if st.LeaseExpiresAt.Before(now) {
				lease = fmt.Sprintf("%s (run %d, EXPIRED %s ago)", st.LeaseOwner, deref(st.RunID), ago(now.Sub(*st.LeaseExpiresAt)))
			}
		}
		lastError := "-"
		if st.LastError != "" {
			lastError = clip(st.LastError, 60)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", st.Name, st.Status, next, interval, st.FailureCount, lease, lastError)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, st := range states {
		if st.Status != "active" && st.StatusReason != "" {
			fmt.Fprintf(w, "\n%s is %s: %s", st.Name, st.Status, st.StatusReason)
		}
	}
	for _, st := range states {
		if st.Status == "active" && st.IntervalReason != "" {
			fmt.Fprintf(w, "\n%s: %s", st.Name, st.IntervalReason)
		}
	}
	fmt.Fprintln(w)
	return nil
}

func ago(d time.Duration) string {
	if d < 0 {
		d = -d
	}
	switch {
	case d >= time.Hour:
		return d.Round(time.Minute).String()
	case d >= time.Second:
		return d.Round(time.Second).String()
	}
	return d.Round(time.Millisecond).String()
}

func clip(s string, n int) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

func deref(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

func unknownSource(ctx context.Context, q Querier, name string) error {
	var known []string
	_ = q.QueryRow(ctx, `SELECT coalesce(array_agg(name ORDER BY name), '{}') FROM sources`).Scan(&known)
	return fmt.Errorf("%w: %q (known: %s)", ErrUnknownSource, name, strings.Join(known, ", "))
}

// MakeAllDue makes every source due now and asked for (tests and tools
// that run the sources at once, as syncertest.SyncNow).
func MakeAllDue(ctx context.Context, q Querier) error {
	if _, err := q.Exec(ctx, `UPDATE sources SET next_run_at = now() - interval '1 second', run_requested_at = now()`); err != nil {
		return fmt.Errorf("make sources due: %w", err)
	}
	return nil
}

// MarkRemoved marks the source's row removed (its definition is deleted,
// in the caller's transaction): no syncer claims it, nothing counts it as
// due, and a resume refuses it; the syncer registers it active again when
// it is defined again. A source without a row is left alone.
func MarkRemoved(ctx context.Context, q Querier, name, reason string) error {
	if _, err := q.Exec(ctx, QueryMarkRemoved, name, reason); err != nil {
		return fmt.Errorf("mark source %s removed: %w", name, err)
	}
	return nil
}

// Ensure registers a source row called name for connector if there is
// none (a row the records of name refer to, for writers without a syncer,
// as conntest.Mirror).
func Ensure(ctx context.Context, q Querier, name, connector string) error {
	if _, err := q.Exec(ctx, `INSERT INTO sources (name, connector, config_hash) VALUES ($1, $2, 'x') ON CONFLICT DO NOTHING`, name, connector); err != nil {
		return fmt.Errorf("register source %s: %w", name, err)
	}
	return nil
}

// RemovedError is Resume's refusal of a source whose definition is gone
// (status 'removed'): no syncer runs it.
type RemovedError struct {
	Source string
}

func (e *RemovedError) Error() string {
	return fmt.Sprintf("source %q was removed (its definition is gone): no syncer runs it; define it again to run it", e.Source)
}
