package syncer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lookout-dev/lookout/internal/changes"
	"github.com/lookout-dev/lookout/internal/connectors"
	"github.com/lookout-dev/lookout/internal/normalize"
)

// outcome is what a run ended with.
type outcome struct {
	status  string // succeeded, failed, not_modified, deferred
	err     error
	stats   changes.Stats
	pages   int
	result  connectors.Result
	retryAt time.Time
	disable string // reason to disable the source, if any
}

// runClaim runs one claimed source and records the outcome. Errors are
// recorded in sync_runs and sources, and logged; they do not stop the loop.
func (s *Syncer) runClaim(ctx context.Context, c claim) {
	src := s.sources[c.name]
	logger := s.logger.With("source", c.name, "run_id", c.runID)
	started := s.conf.Now()
	logger.Info("run started", "reason", c.reason, "cursor_before", string(c.cursor))

	out := s.fetch(ctx, c, src)
	if ctx.Err() != nil && out.err != nil {
		// Shutting down: give the source back at once rather than leaving a
		// lease for another replica to wait out.
		out.status, out.err = "failed", fmt.Errorf("interrupted by shutdown: %w", out.err)
	}
	if err := s.finish(context.WithoutCancel(ctx), c, src, out, started); err != nil {
		logger.Error("record run outcome", "error", err)
		return
	}
	attrs := []any{"status", out.status, "seen", out.stats.Seen, "created", out.stats.Created,
		"updated", out.stats.Updated, "unchanged", out.stats.Unchanged, "deleted", out.stats.Deleted,
		"pages", out.pages, "duration_ms", time.Since(started).Milliseconds()}
	switch {
	case out.disable != "":
		logger.Error("source disabled", append(attrs, "error", out.err, "reason", out.disable)...)
	case out.err != nil && out.status == "deferred":
		logger.Warn("run deferred by upstream", append(attrs, "error", out.err, "retry_at", out.retryAt)...)
	case out.err != nil:
		logger.Error("run failed", append(attrs, "error", out.err)...)
	default:
		logger.Info("run finished", attrs...)
	}
}

// fetch runs the connector and writes its pages. Mapping the next page
// (connector I/O, JSON decoding, hashing: Go's core) overlaps with writing
// the previous one (Postgres's core): a writer goroutine commits batches in
// order, one transaction each, while emit maps the next page.
func (s *Syncer) fetch(ctx context.Context, c claim, src *source) outcome {
	var out outcome
	// For snapshot sources, the ids seen in this run (with where, for
	// duplicate errors) decide which records were deleted. Incremental
	// sources check duplicates within a page only and keep nothing per run.
	var seen map[string]string
	if sn, ok := src.conn.(connectors.Snapshotter); ok && sn.Snapshot() {
		seen = map[string]string{}
	}

	type job struct {
		recs   []normalize.Record
		cursor json.RawMessage
	}
	jobs := make(chan job, 2)
	var writeErr error
	var written changes.Stats
	writerDone := make(chan struct{})
	wctx, cancelWriter := context.WithCancel(ctx)
	defer cancelWriter()
	go func() {
		defer close(writerDone)
		for j := range jobs {
			if writeErr != nil {
				continue // drain after a failure
			}
			st, err := s.writeBatch(wctx, c, j.recs, j.cursor)
			if err != nil {
				writeErr = err
				cancelWriter()
				continue
			}
			written.Add(st)
		}
	}()

	emit := func(ctx context.Context, page connectors.Page) error {
		out.pages++
		recs := make([]normalize.Record, 0, len(page.Items))
		pageLocs := make(map[string]string, len(page.Items))
		for _, it := range page.Items {
			r, err := src.mapper.Map(it.Value, it.Raw)
			if err != nil {
				return &connectors.ItemError{Loc: it.Loc, Err: err}
			}
			if prev, dup := pageLocs[r.ID]; dup {
				return &connectors.ItemError{Loc: it.Loc, Err: fmt.Errorf("duplicate record id %q (also at %s)", r.ID, prev)}
			}
			if prev, dup := seen[r.ID]; dup {
				return &connectors.ItemError{Loc: it.Loc, Err: fmt.Errorf("duplicate record id %q (also at %s)", r.ID, prev)}
			}
			pageLocs[r.ID] = it.Loc
			recs = append(recs, r)
		}
		if seen != nil {
			for id, loc := range pageLocs {
				seen[id] = loc
			}
		}
		for i := 0; i < len(recs) || (i == 0 && page.Cursor != nil); i += s.conf.BatchSize {
			j := job{recs: recs[i:min(i+s.conf.BatchSize, len(recs))]}
			if i+s.conf.BatchSize >= len(recs) {
				j.cursor = page.Cursor
			}
			select {
			case jobs <- j:
			case <-wctx.Done():
				if ctx.Err() != nil {
					return ctx.Err()
				}
				return errWriterFailed
			}
		}
		return nil
	}
	res, err := src.conn.Fetch(ctx, c.cursor, emit)
	close(jobs)
	<-writerDone
	out.stats.Add(written)
	out.result = res
	if writeErr != nil {
		err = writeErr // the root cause; the connector only saw errWriterFailed
	}
	var retry *connectors.RetryLaterError
	switch {
	case err == nil:
		out.status = "succeeded"
	case errors.Is(err, connectors.ErrNotModified):
		out.status = "not_modified"
		return out
	case errors.As(err, &retry):
		out.status, out.err, out.retryAt = "deferred", err, retry.RetryAt
		return out
	case errors.Is(err, connectors.ErrUnauthorized):
		out.status, out.err = "failed", err
		out.disable = "authorization refused by upstream: " + err.Error()
		return out
	default:
		out.status, out.err = "failed", err
		return out
	}
	if res.Complete && seen != nil {
		st, err := s.tombstone(ctx, c, seen)
		out.stats.Add(st)
		if err != nil {
			out.status, out.err = "failed", err
		}
	}
	return out
}

// errWriterFailed stops the connector when a batch write failed; the
// writer's own error is reported instead.
var errWriterFailed = errors.New("batch write failed")

// writeBatch commits one batch: the records and changes, the cursor, the
// run's counters and the lease extension, all or nothing. The lease check
// fences out a replica whose lease expired.
func (s *Syncer) writeBatch(ctx context.Context, c claim, recs []normalize.Record, cur json.RawMessage) (changes.Stats, error) {
	var st changes.Stats
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		st, err = changes.Apply(ctx, tx, c.name, c.runID, recs, s.sources[c.name].mapper.Hasher())
		if err != nil {
			return err
		}
		return s.extendLease(ctx, tx, c, st, cur)
	})
	if err != nil {
		return st, fmt.Errorf("write batch: %w", err)
	}
	return st, nil
}

func (s *Syncer) extendLease(ctx context.Context, tx pgx.Tx, c claim, st changes.Stats, cur json.RawMessage) error {
	var held bool
	err := tx.QueryRow(ctx, `
		WITH lease AS (
		    UPDATE sources SET lease_expires_at = $4::timestamptz + $5::interval, cursor = coalesce($6::jsonb, cursor)
		    WHERE name = $1 AND lease_owner = $2 AND run_id = $3
		    RETURNING 1
		), counters AS (
		    UPDATE sync_runs SET pages = pages + 1, items_seen = items_seen + $7, items_created = items_created + $8,
		           items_updated = items_updated + $9, items_unchanged = items_unchanged + $10,
		           items_deleted = items_deleted + $11
		    WHERE id = $3 AND EXISTS (SELECT 1 FROM lease)
		    RETURNING 1
		)
		SELECT EXISTS (SELECT 1 FROM lease)`,
		c.name, s.conf.Owner, c.runID, s.conf.Now(), s.conf.Lease, nullJSON(cur),
		st.Seen, st.Created, st.Updated, st.Unchanged, st.Deleted).Scan(&held)
	if err != nil {
		return fmt.Errorf("extend lease: %w", err)
	}
	if !held {
		return ErrLeaseLost
	}
	return nil
}

// tombstone records deletions for records a complete run did not see.
func (s *Syncer) tombstone(ctx context.Context, c claim, seen map[string]string) (changes.Stats, error) {
	var total changes.Stats
	missing, err := changes.Missing(ctx, s.pool, c.name, seen)
	if err != nil {
		return total, err
	}
	for i := 0; i < len(missing); i += s.conf.BatchSize {
		ids := missing[i:min(i+s.conf.BatchSize, len(missing))]
		err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			st, err := changes.Delete(ctx, tx, c.name, c.runID, ids)
			if err != nil {
				return err
			}
			total.Add(st)
			return s.extendLease(ctx, tx, c, changes.Stats{Deleted: st.Deleted}, nil)
		})
		if err != nil {
			return total, fmt.Errorf("record deletions: %w", err)
		}
	}
	return total, nil
}

// finish records the outcome in sync_runs and sources and releases the
// lease, unless another replica holds it by now.
func (s *Syncer) finish(ctx context.Context, c claim, src *source, out outcome, started time.Time) error {
	now := s.conf.Now()
	sc := src.cfg
	var errText *string
	if out.err != nil {
		e := cleanText(out.err.Error())
		errText = &e
	}
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var failures int
		var status string
		err := tx.QueryRow(ctx, `SELECT failure_count, status FROM sources WHERE name = $1 AND lease_owner = $2 AND run_id = $3 FOR UPDATE`,
			c.name, s.conf.Owner, c.runID).Scan(&failures, &status)
		if errors.Is(err, pgx.ErrNoRows) {
			_, err = tx.Exec(ctx, `UPDATE sync_runs SET status = 'abandoned', finished_at = $2, error = $3 WHERE id = $1 AND status = 'running'`,
				c.runID, now, ErrLeaseLost.Error())
			if err != nil {
				return err
			}
			return ErrLeaseLost
		}
		if err != nil {
			return fmt.Errorf("read source state: %w", err)
		}
		next, reason := s.nextRun(sc, now, out, failures)
		newFailures := 0
		if out.status == "failed" {
			newFailures = failures + 1
		} else if out.status == "deferred" {
			newFailures = failures
		}
		newStatus, statusReason := status, (*string)(nil)
		if out.disable != "" {
			newStatus, statusReason = "disabled", &out.disable
		} else if st := sc.Stop; st != nil && st.MaxFailures > 0 && newFailures >= st.MaxFailures {
			r := fmt.Sprintf("disabled after %d consecutive failures; last error: %s", newFailures, out.err)
			newStatus, statusReason = "disabled", &r
		}
		var lastChange any
		if out.stats.Changed() > 0 {
			lastChange = now
		}
		if _, err := tx.Exec(ctx, `
			UPDATE sync_runs SET status = $2, finished_at = $3, duration_ms = $4, error = $5,
			       requests = $6
			WHERE id = $1`,
			c.runID, out.status, now, float64(now.Sub(started).Microseconds())/1000, errText, out.result.Requests); err != nil {
			return fmt.Errorf("record run: %w", err)
		}
		succeeded := out.status == "succeeded" || out.status == "not_modified"
		if _, err := tx.Exec(ctx, `
			UPDATE sources SET
			    lease_owner = NULL, lease_expires_at = NULL, last_run_at = $2,
			    last_success_at = CASE WHEN $3 THEN $2 ELSE last_success_at END,
			    last_change_at = coalesce($4, last_change_at),
			    failure_count = $5, last_error = $6, next_run_at = $7, interval_reason = $8,
			    cursor = CASE WHEN $3 THEN coalesce($9::jsonb, cursor) ELSE cursor END,
			    status = $10, status_reason = coalesce($11, status_reason), updated_at = now()
			WHERE name = $1`,
			c.name, now, succeeded, lastChange, newFailures, errText, next, reason,
			nullJSON(out.result.Cursor), newStatus, statusReason); err != nil {
			return fmt.Errorf("release lease: %w", err)
		}
		// Record the final cursor in the run too.
		_, err = tx.Exec(ctx, `UPDATE sync_runs SET cursor_after = (SELECT cursor FROM sources WHERE name = $2) WHERE id = $1`, c.runID, c.name)
		return err
	})
}

// cleanText makes an error message storable as Postgres text: valid UTF-8
// without NUL bytes (upstream bodies end up in messages).
func cleanText(s string) string {
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\\x00")
}

func nullJSON(b json.RawMessage) any {
	if len(b) == 0 || string(b) == "null" {
		return nil
	}
	return string(b)
}
