package syncer

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

// Querier is what the operator commands need of a database handle; a
// *pgxpool.Pool, a *pgx.Conn and a pgx.Tx all are one.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// ErrUnknownSource is returned for a source name the sources table does
// not hold.
var ErrUnknownSource = errors.New("source is not registered")

// Pause stops scheduling the source until Resume; a run in progress
// finishes. The equivalent SQL is
//
//	UPDATE sources SET status = 'paused', status_reason = 'why', status_changed_at = now() WHERE name = 'x';
func Pause(ctx context.Context, q Querier, name, reason string, now time.Time) error {
	if reason == "" {
		reason = "paused by operator"
	}
	tag, err := q.Exec(ctx, `
		UPDATE sources SET status = 'paused', status_reason = $2, status_changed_at = $3, updated_at = now()
		WHERE name = $1`, name, reason, now)
	if err != nil {
		return fmt.Errorf("pause %s: %w", name, err)
	}
	if tag.RowsAffected() == 0 {
		return unknownSource(ctx, q, name)
	}
	return nil
}

// Resume makes a paused, disabled or completed source active again, clears
// its failure count and makes it due now. It reports whether the source
// was not active before. The equivalent SQL is
//
//	UPDATE sources SET status = 'active', status_reason = 'resumed by operator', failure_count = 0,
//	       next_run_at = now(), status_changed_at = now() WHERE name = 'x';
func Resume(ctx context.Context, q Querier, name string, now time.Time) (was string, err error) {
	err = q.QueryRow(ctx, `
		WITH prev AS (SELECT name, status FROM sources WHERE name = $1 FOR UPDATE)
		UPDATE sources s SET status = 'active', status_reason = 'resumed by operator (was ' || prev.status || ')',
		       failure_count = 0, next_run_at = $2, status_changed_at = $2, updated_at = now()
		FROM prev WHERE s.name = prev.name AND prev.status <> 'active'
		RETURNING prev.status`, name, now).Scan(&was)
	if errors.Is(err, pgx.ErrNoRows) {
		var status string
		err := q.QueryRow(ctx, `SELECT status FROM sources WHERE name = $1`, name).Scan(&status)
		if errors.Is(err, pgx.ErrNoRows) {
			return "", unknownSource(ctx, q, name)
		}
		if err != nil {
			return "", fmt.Errorf("resume %s: %w", name, err)
		}
		return status, nil
	}
	if err != nil {
		return "", fmt.Errorf("resume %s: %w", name, err)
	}
	return was, nil
}

// RunNow asks for a run of an active source at the next poll of any
// replica, whatever its schedule; a run in progress is followed by another.
// The equivalent SQL is
//
//	UPDATE sources SET run_requested_at = now() WHERE name = 'x' AND status = 'active';
func RunNow(ctx context.Context, q Querier, name string, now time.Time) error {
	var status string
	err := q.QueryRow(ctx, `
		UPDATE sources SET run_requested_at = CASE WHEN status = 'active' THEN $2 ELSE run_requested_at END,
		       updated_at = now()
		WHERE name = $1
		RETURNING status`, name, now).Scan(&status)
	if errors.Is(err, pgx.ErrNoRows) {
		return unknownSource(ctx, q, name)
	}
	if err != nil {
		return fmt.Errorf("run %s now: %w", name, err)
	}
	if status != "active" {
		return fmt.Errorf("source %q is %s: resume it first (resume also makes it due now)", name, status)
	}
	return nil
}

// SourceState is one row of the status report.
type SourceState struct {
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
func States(ctx context.Context, q Querier) ([]SourceState, error) {
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
	var out []SourceState
	for rows.Next() {
		var st SourceState
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
func WriteStatus(w io.Writer, states []SourceState, now time.Time) error {
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
