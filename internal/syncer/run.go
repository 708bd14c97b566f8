package syncer

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lookout-dev/lookout/internal/changes"
	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/connectors"
	"github.com/lookout-dev/lookout/internal/normalize"
	"github.com/lookout-dev/lookout/internal/schedule"
	"github.com/lookout-dev/lookout/internal/service"
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
	// repairedAt is the first item whose text was repaired (invalid
	// UTF-8, NUL), for the run's warning.
	repairedAt string
}

// minDefer is the shortest deferral of a run the upstream postponed.
const minDefer = time.Second

// errRunTimeout cancels a run that outlived syncer.run_timeout.
var errRunTimeout = errors.New("run exceeded syncer.run_timeout")

// runClaim runs one claimed source and records the outcome. Errors are
// recorded in sync_runs and sources, and logged; they do not stop the loop.
func (s *Syncer) runClaim(ctx context.Context, c claim) {
	src := s.sources[c.name]
	logger := s.logger.With("source", c.name, "run_id", c.runID)
	started := s.conf.Now()
	claimAttr := slog.Group("claim", "owner", s.conf.Owner, "expires_at", c.leaseEnd.UTC())
	logger.Info("run started", "reason", c.reason, claimAttr, "cursor_before", json.RawMessage(c.cursor))

	rs := &runStats{}
	runCtx, cancelRun := context.WithCancelCause(ctx)
	defer cancelRun(nil)
	if s.conf.RunTimeout > 0 {
		var cancelTimeout context.CancelFunc
		runCtx, cancelTimeout = context.WithTimeoutCause(runCtx, s.conf.RunTimeout, errRunTimeout)
		defer cancelTimeout()
	}
	stopHeartbeat := s.heartbeat(runCtx, c, cancelRun, logger)
	out := s.fetch(withRunStats(runCtx, rs), c, src)
	stopHeartbeat()
	// An upstream may echo a configured secret in its error body: hide it
	// before the error is stored or logged.
	out.err, out.disable = s.conf.Redactor.Error(out.err), s.conf.Redactor.String(out.disable)
	if out.err != nil {
		switch cause := context.Cause(runCtx); {
		case ctx.Err() != nil:
			// Shutting down: give the source back at once rather than
			// leaving a lease for another replica to wait out. This is no
			// failure of the upstream: it resumes from its cursor at once,
			// without backoff and without counting towards max_failures.
			out.status, out.err = "abandoned", fmt.Errorf("interrupted by shutdown: %w", out.err)
		case errors.Is(cause, errRunTimeout):
			out.status, out.err = "failed", fmt.Errorf("%w (%s): %w", errRunTimeout, s.conf.RunTimeout, out.err)
		case errors.Is(cause, ErrLeaseLost):
			out.status, out.err = "failed", fmt.Errorf("%w: %w", ErrLeaseLost, out.err)
		}
	}
	fin, err := s.finish(context.WithoutCancel(ctx), c, src, out, started, rs)
	s.conf.Metrics.RecordsChanged(c.name, out.stats.Created, out.stats.Updated, out.stats.Deleted)
	if err != nil {
		status := "failed"
		if errors.Is(err, ErrLeaseLost) {
			status = "abandoned"
		}
		s.conf.Metrics.PollFinished(c.name, status, s.conf.Now().Sub(started))
		logger.Error("record run outcome", "status", status, claimAttr, "error", err)
		return
	}
	s.conf.Metrics.PollFinished(c.name, out.status, s.conf.Now().Sub(started))
	attrs := []any{"status", out.status, claimAttr, "cursor_before", json.RawMessage(c.cursor), "cursor_after", fin.cursorAfter,
		"seen", out.stats.Seen, "created", out.stats.Created,
		"updated", out.stats.Updated, "unchanged", out.stats.Unchanged, "deleted", out.stats.Deleted,
		"pages", out.pages, "requests", fin.requests, "rate_limit_waits", fin.waits,
		"duration_ms", s.conf.Now().Sub(started).Milliseconds(), "next_run_at", fin.next.At, "interval_reason", fin.next.Reason}
	if out.stats.Repaired > 0 {
		logger.Warn("items held text PostgreSQL cannot store (invalid UTF-8 or NUL); it was replaced by U+FFFD",
			"items_repaired", out.stats.Repaired, "first_item", out.repairedAt)
	}
	switch {
	case out.err != nil && out.status == "deferred":
		logger.Warn("run deferred by upstream", append(attrs, "error", out.err, "retry_at", fin.next.At)...)
	case out.status == "abandoned":
		logger.Warn("run interrupted by shutdown", append(attrs, "error", out.err)...)
	case out.err != nil:
		logger.Error("run failed", append(attrs, "error", out.err, "failure_count", fin.failures)...)
	default:
		logger.Info("run finished", attrs...)
	}
	switch fin.status {
	case "disabled":
		logger.Error("source disabled", "status", fin.status, "reason", fin.reason)
	case "completed":
		logger.Info("source completed", "status", fin.status, "reason", fin.reason)
	}
}

// heartbeat renews the run's lease every third of the lease while the run
// goes on, so that a slow page does not let another replica take the
// source over; if the lease was lost anyway it cancels the run with
// ErrLeaseLost. The returned function stops it and waits.
func (s *Syncer) heartbeat(ctx context.Context, c claim, lost context.CancelCauseFunc, logger *slog.Logger) func() {
	return service.Every(ctx, max(s.conf.Lease/3, 10*time.Millisecond), func(ctx context.Context) bool {
		var held bool
		err := s.pool.QueryRow(ctx, `
			UPDATE sources SET lease_expires_at = $4::timestamptz + $5::interval
			WHERE name = $1 AND lease_owner = $2 AND run_id = $3
			RETURNING true`, c.name, s.conf.Owner, c.runID, s.conf.Now(), s.conf.Lease).Scan(&held)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			logger.Warn("lease lost while running; stopping the run")
			lost(ErrLeaseLost)
			return false
		case err != nil && ctx.Err() == nil:
			logger.Warn("renew lease", "error", err)
		}
		return true
	})
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
		recs    []normalize.Record
		cursor  json.RawMessage
		pageEnd bool // the last batch of a page: counts the page
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
			st, err := s.writeBatch(wctx, c, j.recs, j.cursor, j.pageEnd)
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
			if r.Repaired && out.repairedAt == "" {
				out.repairedAt = it.Loc
			}
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
				j.cursor, j.pageEnd = page.Cursor, true
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
		st, err := s.tombstone(ctx, c, src, seen)
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
func (s *Syncer) writeBatch(ctx context.Context, c claim, recs []normalize.Record, cur json.RawMessage, pageEnd bool) (changes.Stats, error) {
	var st changes.Stats
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		st, err = changes.Apply(ctx, tx, c.name, c.runID, recs, s.sources[c.name].mapper.Hasher())
		if err != nil {
			return err
		}
		pages := 0
		if pageEnd {
			pages = 1
		}
		return s.extendLease(ctx, tx, c, st, cur, pages)
	})
	if err != nil {
		return st, fmt.Errorf("write batch: %w", err)
	}
	return st, nil
}

// extendLease renews the lease, stores the cursor and adds the batch's
// counters (and pages) to the run, in tx; it fails with ErrLeaseLost when
// the lease is no longer this replica's.
func (s *Syncer) extendLease(ctx context.Context, tx pgx.Tx, c claim, st changes.Stats, cur json.RawMessage, pages int) error {
	var held bool
	err := tx.QueryRow(ctx, `
		WITH lease AS (
		    UPDATE sources SET lease_expires_at = $4::timestamptz + $5::interval, cursor = coalesce($6::jsonb, cursor)
		    WHERE name = $1 AND lease_owner = $2 AND run_id = $3
		    RETURNING 1
		), counters AS (
		    UPDATE sync_runs SET pages = pages + $12, items_seen = items_seen + $7, items_created = items_created + $8,
		           items_updated = items_updated + $9, items_unchanged = items_unchanged + $10,
		           items_deleted = items_deleted + $11, items_repaired = items_repaired + $13
		    WHERE id = $3 AND EXISTS (SELECT 1 FROM lease)
		    RETURNING 1
		)
		SELECT EXISTS (SELECT 1 FROM lease)`,
		c.name, s.conf.Owner, c.runID, s.conf.Now(), s.conf.Lease, nullJSON(cur),
		st.Seen, st.Created, st.Updated, st.Unchanged, st.Deleted, pages, st.Repaired).Scan(&held)
	if err != nil {
		return fmt.Errorf("extend lease: %w", err)
	}
	if !held {
		return ErrLeaseLost
	}
	return nil
}

// ErrMassDelete fails a snapshot run that would delete more of the
// source's live records than its max_delete_fraction allows (an empty or
// truncated answer far more often than real deletions): nothing is deleted.
var ErrMassDelete = errors.New("deletion guard")

// tombstone records deletions for records a complete run did not see,
// unless the deletion guard refuses them all.
func (s *Syncer) tombstone(ctx context.Context, c claim, src *source, seen map[string]string) (changes.Stats, error) {
	var total changes.Stats
	missing, live, err := changes.Missing(ctx, s.pool, c.name, seen)
	if err != nil {
		return total, err
	}
	if err := guardDeletes(src.cfg, len(missing), live); err != nil {
		return total, err
	}
	for i := 0; i < len(missing); i += s.conf.BatchSize {
		ids := missing[i:min(i+s.conf.BatchSize, len(missing))]
		var st changes.Stats
		err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			var err error
			if st, err = changes.Delete(ctx, tx, c.name, c.runID, ids); err != nil {
				return err
			}
			return s.extendLease(ctx, tx, c, changes.Stats{Deleted: st.Deleted}, nil, 0)
		})
		if err != nil {
			return total, fmt.Errorf("record deletions: %w", err)
		}
		total.Add(st) // counted once committed
	}
	return total, nil
}

// guardDeletes refuses n deletions out of live records when they are at
// least config.MinGuardedDeletes and more than the source's
// max_delete_fraction of live.
func guardDeletes(sc *config.Source, n, live int) error {
	limit := config.MaxDeleteFractionDefault
	if sc.MaxDeleteFraction != nil {
		limit = *sc.MaxDeleteFraction
	}
	if n < config.MinGuardedDeletes || live == 0 || float64(n) <= limit*float64(live) {
		return nil
	}
	return fmt.Errorf("%w: source %s: this complete run would delete %d of %d live records (%.0f%%), more than max_delete_fraction %g allows; "+
		"nothing was deleted (records created or updated by the run are kept). If the upstream really lost them, "+
		"set max_delete_fraction: 1 in %s for one run, or raise it", ErrMassDelete, sc.Name, n, live, 100*float64(n)/float64(live), limit, cmp.Or(sc.Path, "the source's file"))
}

// finished is what finish decided.
type finished struct {
	status, reason  string // the source's status after the run, and why if it changed
	next            schedule.Decision
	failures        int
	requests, waits int
	cursorAfter     json.RawMessage // the source's cursor after the run
}

// finish records the outcome in sync_runs and sources and releases the
// lease, unless another replica holds it by now. It decides the next run
// (schedule, backoff or deferral) and applies the stop conditions: 401/403
// and stop.max_failures disable the source, stop.when and stop.after
// complete it.
func (s *Syncer) finish(ctx context.Context, c claim, src *source, out outcome, started time.Time, rs *runStats) (finished, error) {
	now := s.conf.Now()
	sc := src.cfg
	fin := finished{requests: max(out.result.Requests, int(rs.requests.Load())), waits: int(rs.waits.Load())}
	lost := false
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var prevFailures int
		var status string
		var interval *float64
		var lastChange, lastSuccess *time.Time
		var since time.Time
		err := tx.QueryRow(ctx, `
			SELECT failure_count, status, interval_seconds, last_change_at, last_success_at, created_at
			FROM sources WHERE name = $1 AND lease_owner = $2 AND run_id = $3 FOR UPDATE`,
			c.name, s.conf.Owner, c.runID).Scan(&prevFailures, &status, &interval, &lastChange, &lastSuccess, &since)
		if errors.Is(err, pgx.ErrNoRows) {
			// Another replica holds the source now: record that this run was
			// abandoned (committed), and report the lost lease afterwards.
			_, err = tx.Exec(ctx, `UPDATE sync_runs SET status = 'abandoned', finished_at = $2, error = $3 WHERE id = $1 AND status = 'running'`,
				c.runID, now, ErrLeaseLost.Error())
			lost = err == nil
			return err
		}
		if err != nil {
			return fmt.Errorf("read source state: %w", err)
		}
		succeeded := out.status == "succeeded" || out.status == "not_modified"
		cur := time.Duration(0)
		if interval != nil {
			cur = time.Duration(*interval * float64(time.Second))
		}
		if out.stats.Changed() > 0 {
			lastChange = &now
		}
		if lastChange != nil {
			since = *lastChange
		}
		if succeeded {
			lastSuccess = &now
		}
		run := schedule.Run{Interval: cur, Changes: out.stats.Changed(), Quiet: now.Sub(since), MinInterval: out.result.MinInterval}

		// Failures and the next run.
		fin.failures = 0
		newInterval := interval
		switch out.status {
		case "deferred":
			fin.failures = prevFailures
			at := out.retryAt
			if b := rs.blockedUntil(); b.After(at) {
				at = b
			}
			switch {
			case at.IsZero():
				at = now.Add(DefaultBlock)
			case at.Before(now.Add(minDefer)):
				// "Retry-After: 0" must not turn into a request per poll.
				at = now.Add(minDefer)
			}
			fin.next = schedule.Deferred(now, at, errText(out.err))
		case "abandoned":
			fin.failures = prevFailures
			fin.next = schedule.Deferred(now, now, "interrupted by shutdown; due again at once")
		case "failed":
			fin.failures = prevFailures + 1
			fin.next = src.schedule.Retry(now, fin.failures, s.conf.Backoff, run)
		default:
			fin.next = src.schedule.Next(now, run)
			secs := fin.next.Interval.Seconds()
			newInterval = &secs
		}

		// Stop conditions.
		fin.status = status
		lastError := errText(out.err)
		maxFailures := 0
		if sc.Stop != nil && sc.Stop.MaxFailures != nil {
			maxFailures = *sc.Stop.MaxFailures
		}
		switch {
		case out.disable != "":
			fin.status, fin.reason = "disabled", out.disable
		case out.status == "failed" && maxFailures > 0 && fin.failures >= maxFailures:
			fin.status = "disabled"
			fin.reason = fmt.Sprintf("stop.max_failures: disabled after %d consecutive failures; last error: %s", fin.failures, lastError)
		default:
			if src.stopWhen != nil {
				stop, err := evalStopWhen(src, out, fin, c, started, now, lastChange, lastSuccess)
				switch {
				case err != nil:
					lastError = strings.TrimPrefix(lastError+"; ", "; ") + err.Error()
					s.logger.Warn("stop.when failed; the source keeps running", "source", c.name, "run_id", c.runID, "error", err)
				case stop:
					fin.status = "completed"
					fin.reason = fmt.Sprintf("stop.when %q was true after run %d", sc.Stop.When, c.runID)
				}
			}
			if fin.status == status && sc.Stop != nil && sc.Stop.After != nil && !fin.next.At.Before(*sc.Stop.After) {
				fin.status = "completed"
				fin.reason = fmt.Sprintf("stop.after %s reached: no run after it", sc.Stop.After.UTC().Format(time.RFC3339))
			}
		}
		var statusReason, statusChanged any
		if fin.status != status {
			statusReason, statusChanged = fin.reason, now
		}

		if _, err := tx.Exec(ctx, `
			UPDATE sync_runs SET status = $2, finished_at = $3, duration_ms = $4, error = $5,
			       requests = $6, rate_limit_waits = $7
			WHERE id = $1`,
			c.runID, out.status, now, float64(now.Sub(started).Microseconds())/1000, nullText(errText(out.err)),
			fin.requests, fin.waits); err != nil {
			return fmt.Errorf("record run: %w", err)
		}
		if _, err := tx.Exec(ctx, `
			UPDATE sources SET
			    lease_owner = NULL, lease_expires_at = NULL, last_run_at = $2,
			    last_success_at = CASE WHEN $3 THEN $2 ELSE last_success_at END,
			    last_change_at = $4,
			    failure_count = $5, last_error = $6, next_run_at = $7,
			    interval_seconds = $8, interval_reason = $9,
			    cursor = CASE WHEN $3 THEN coalesce($10::jsonb, cursor) ELSE cursor END,
			    status = $11, status_reason = coalesce($12, status_reason),
			    status_changed_at = coalesce($13, status_changed_at), updated_at = now()
			WHERE name = $1`,
			c.name, now, succeeded, lastChange, fin.failures, nullText(lastError), fin.next.At,
			newInterval, fin.next.Reason, nullJSON(out.result.Cursor), fin.status, statusReason, statusChanged); err != nil {
			return fmt.Errorf("release lease: %w", err)
		}
		// Record the final cursor in the run too.
		return tx.QueryRow(ctx, `UPDATE sync_runs SET cursor_after = (SELECT cursor FROM sources WHERE name = $2) WHERE id = $1
			RETURNING cursor_after`, c.runID, c.name).Scan(&fin.cursorAfter)
	})
	if err == nil && lost {
		err = ErrLeaseLost
	}
	return fin, err
}

// evalStopWhen evaluates stop.when over the run that just ended and the
// source's state after it.
func evalStopWhen(src *source, out outcome, fin finished, c claim, started, now time.Time, lastChange, lastSuccess *time.Time) (bool, error) {
	run := map[string]any{
		"id":               c.runID,
		"reason":           c.reason,
		"status":           out.status,
		"error":            errText(out.err),
		"pages":            out.pages,
		"requests":         fin.requests,
		"rate_limit_waits": fin.waits,
		"seen":             out.stats.Seen,
		"created":          out.stats.Created,
		"updated":          out.stats.Updated,
		"unchanged":        out.stats.Unchanged,
		"deleted":          out.stats.Deleted,
		"changes":          out.stats.Changed(),
		"started_at":       started,
		"finished_at":      now,
		"duration_seconds": now.Sub(started).Seconds(),
	}
	source := map[string]any{
		"name":            src.cfg.Name,
		"connector":       src.cfg.Connector,
		"failure_count":   fin.failures,
		"last_change_at":  timeOrNil(lastChange),
		"last_success_at": timeOrNil(lastSuccess),
	}
	v, err := src.stopWhen.Run(run, source)
	if err != nil {
		return false, fmt.Errorf("stop.when: %w", err)
	}
	b, ok := v.(bool)
	if !ok {
		return false, fmt.Errorf("stop.when: %q returned %T, want a boolean", src.cfg.Stop.When, v)
	}
	return b, nil
}

func timeOrNil(t *time.Time) any {
	if t == nil {
		return nil
	}
	return *t
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return cleanText(err.Error())
}

func nullText(s string) any {
	if s == "" {
		return nil
	}
	return s
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
