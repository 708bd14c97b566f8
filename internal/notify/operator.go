package notify

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Filter selects notifications for the operator commands; zero fields
// match everything.
type Filter struct {
	ID     int64
	Sink   string
	Source string
	Watch  string
	Status string
	// Limit bounds a listing. Defaults to 50.
	Limit int
}

// where returns the filter as SQL conditions starting at placeholder $n.
func (f Filter) where(args []any) (string, []any) {
	cond := "TRUE"
	add := func(col string, v any) {
		args = append(args, v)
		cond += fmt.Sprintf(" AND %s = $%d", col, len(args))
	}
	if f.ID != 0 {
		add("id", f.ID)
	}
	if f.Sink != "" {
		add("sink", f.Sink)
	}
	if f.Source != "" {
		add("source", f.Source)
	}
	if f.Watch != "" {
		add("watch", f.Watch)
	}
	if f.Status != "" {
		add("status", f.Status)
	}
	return cond, args
}

// RetryDead sends the dead notifications f selects back to pending: due
// now, attempts from zero, manual_retries counted, last_error kept until
// the next attempt. It wakes the deliverers and returns how many rows it
// reset.
func RetryDead(ctx context.Context, p *pgxpool.Pool, f Filter) (int64, error) {
	f.Status = ""
	cond, args := f.where(nil)
	var n int64
	err := pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `
			UPDATE notifications SET status = 'pending', attempts = 0, next_attempt_at = now(), dead_at = NULL,
			       lease_owner = NULL, lease_expires_at = NULL, manual_retries = manual_retries + 1
			WHERE status = 'dead' AND `+cond, args...)
		if err != nil {
			return err
		}
		n = tag.RowsAffected()
		if n > 0 {
			_, err = tx.Exec(ctx, `SELECT pg_notify(current_schema() || '.outbox', '')`)
		}
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("retry dead notifications: %w", err)
	}
	return n, nil
}

// DeliveryRow is one line of the deliveries listing.
type DeliveryRow struct {
	ID            int64
	Status        string
	Kind          string
	Sink          string
	Source        string
	Watch         string
	RecordID      string
	DedupeKey     string
	Title         string
	Attempts      int
	Duplicates    int
	CreatedAt     time.Time
	NextAttemptAt time.Time
	DeliveredAt   *time.Time
	DigestDueAt   *time.Time
	DeadAt        *time.Time
	LastError     *string
}

// ListDeliveries returns the newest notifications f selects.
func ListDeliveries(ctx context.Context, p *pgxpool.Pool, f Filter) ([]DeliveryRow, error) {
	cond, args := f.where(nil)
	limit := f.Limit
	if limit <= 0 {
		limit = 50
	}
	args = append(args, limit)
	rows, err := p.Query(ctx, `
		SELECT id, status, kind, sink, source, watch, record_id, dedupe_key, title, attempts, duplicates_suppressed,
		       created_at, next_attempt_at, delivered_at, digest_due_at, dead_at, last_error
		FROM notifications WHERE `+cond+fmt.Sprintf(` ORDER BY id DESC LIMIT $%d`, len(args)), args...)
	if err != nil {
		return nil, fmt.Errorf("list notifications: %w", err)
	}
	defer rows.Close()
	var out []DeliveryRow
	for rows.Next() {
		var r DeliveryRow
		if err := rows.Scan(&r.ID, &r.Status, &r.Kind, &r.Sink, &r.Source, &r.Watch, &r.RecordID, &r.DedupeKey, &r.Title,
			&r.Attempts, &r.Duplicates, &r.CreatedAt, &r.NextAttemptAt, &r.DeliveredAt, &r.DigestDueAt, &r.DeadAt, &r.LastError); err != nil {
			return nil, fmt.Errorf("list notifications: %w", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list notifications: %w", err)
	}
	return out, nil
}
