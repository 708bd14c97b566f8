package syncer

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lookout-dev/lookout/internal/changes"
	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/connectors"
	"github.com/lookout-dev/lookout/internal/normalize"
	"github.com/lookout-dev/lookout/internal/schedule"
	"github.com/lookout-dev/lookout/internal/service"
	"github.com/lookout-dev/lookout/internal/sources"
)

// outcome is what a run ended with.
type outcome struct {
	status  sources.RunStatus // succeeded, not_modified, failed, deferred or abandoned
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

// run is a claimed run in progress: the claim and what it has recorded.
// Its sync_runs row is written only when the run writes a batch, lasts
// long enough to need its lease renewed, or ends in a way worth a row
// (changes, a failure, a deferral, a manual run or a takeover); a quiet
// run leaves no row and is counted in sync_run_hours.
type run struct {
	claim
	recorded atomic.Bool  // the sync_runs row exists
	repaired atomic.Int64 // changes committed that repaired a missed webhook event

	// batch is the claim batch that holds the run's source locked, until
	// the run needs a lease (lease) or the batch ends; nil for a run
	// claimed with a lease. Only the run's goroutines read it.
	batch *claimBatch
	// hb stops the lease's heartbeat once one runs (guarded by hbMu).
	hbMu      sync.Mutex
	hb        func()
	hbStopped bool

	mu           sync.Mutex
	pending      changes.Stats // counters of batches that wrote nothing, not in the row yet
	pendingPages int

	// leasedUntil is the lease's expiry written when the claim batch that
	// held the source ends while the run goes on (claimBatch.end, another
	// goroutine than the run's: never claim.leaseEnd, which the run's
	// goroutines copy).
	leasedUntil atomic.Pointer[time.Time]
}

// leaseExpiry is the lease's expiry as last set: by the claim batch's end,
// else as claimed.
func (r *run) leaseExpiry() time.Time {
	if t := r.leasedUntil.Load(); t != nil {
		return *t
	}
	return r.claim.leaseEnd
}

// addPending counts a batch that wrote nothing.
func (r *run) addPending(st changes.Stats, pages int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pending.Add(st)
	r.pendingPages += pages
}

// withPending returns st and pages plus the pending counters, which it
// takes, and a function to call with whether they were written: the row
// exists then, or the counters are pending again.
func (r *run) withPending(st changes.Stats, pages int) (changes.Stats, int, func(written bool)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	taken, takenPages := r.pending, r.pendingPages
	r.pending, r.pendingPages = changes.Stats{}, 0
	st.Add(taken)
	return st, pages + takenPages, func(written bool) {
		if written {
			r.recorded.Store(true)
			return
		}
		r.addPending(taken, takenPages)
	}
}

// leased makes sure the run holds a lease: a run of a claim batch waits
// for the batch to end (which leases it). After an error the run holds
// nothing and must not write.
func (r *run) leased(ctx context.Context) error {
	b := r.batch
	if b == nil {
		return nil
	}
	err := b.lease(ctx)
	r.batch = nil
	return err
}

// runClaim runs one claimed source and records the outcome. Errors are
// recorded in sync_runs and sources, and logged; they do not stop the loop.
func (s *Syncer) runClaim(ctx context.Context, r *run) {
	c := r.claim
	src := s.source(c.name)
	debug := s.logger.Enabled(ctx, slog.LevelDebug)
	var logger *slog.Logger
	logDetail := func() *slog.Logger {
		if logger == nil {
			logger = s.logger.With("source", c.name, "run_id", c.runID)
		}
		return logger
	}
	if debug {
		logDetail().Debug("run started", "reason", c.reason, "lateness_ms", c.lateness.Milliseconds(),
			slog.Group("claim", "owner", s.conf.Owner, "expires_at", r.leaseExpiry().UTC()), "cursor_before", logCursor(c.cursor))
	}

	rs := &runStats{}
	runCtx, cancelRun := context.WithCancelCause(ctx)
	defer cancelRun(nil)
	if s.conf.RunTimeout > 0 {
		var cancelTimeout context.CancelFunc
		runCtx, cancelTimeout = context.WithTimeoutCause(runCtx, s.conf.RunTimeout, errRunTimeout)
		defer cancelTimeout()
	}
	if b := r.batch; b == nil {
		r.startHeartbeat(s.heartbeat(runCtx, r, cancelRun, logDetail))
	} else {
		// A run still fetching when its batch ends holds a lease from then.
		fetched := make(chan struct{})
		defer close(fetched)
		go func() {
			select {
			case <-b.ended:
				if b.err == nil {
					r.startHeartbeat(s.heartbeat(runCtx, r, cancelRun, logDetail))
				} else {
					// The source is neither locked nor leased any more:
					// another replica may claim it, so stop fetching.
					cancelRun(b.err)
				}
			case <-fetched:
			}
		}()
	}
	out := s.fetch(withRunStats(runCtx, rs), r, src)
	r.stopHeartbeat()
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
			out.status, out.err = sources.RunAbandoned, fmt.Errorf("interrupted by shutdown: %w", out.err)
		case errors.Is(cause, errRunTimeout):
			out.status, out.err = sources.RunFailed, fmt.Errorf("%w (%s): %w", errRunTimeout, s.conf.RunTimeout, out.err)
		case errors.Is(cause, ErrLeaseLost):
			out.status, out.err = sources.RunFailed, fmt.Errorf("%w: %w", ErrLeaseLost, out.err)
		case errors.Is(cause, errBatchFailed):
			out.status, out.err = sources.RunFailed, fmt.Errorf("%w: %w", cause, out.err)
		}
	}
	if after := s.conf.AfterRun; after != nil && out.status.Succeeded() {
		defer after(c.name, c.runID)
	}
	// The outcome (next run, stop conditions) follows the source's
	// definition as it is now: it may have changed while the run went on.
	if cur := s.source(c.name); cur != nil {
		src = cur
	}
	if q, ok := s.quiet(r, src, out, rs); ok {
		if b := r.batch; b == nil || !b.finishQuiet(q) {
			if err := r.leased(ctx); err != nil {
				s.quietFailed(q, err)
				return
			}
			s.done.add(q)
		}
		return
	}
	s.recordFull(ctx, r, src, out, rs, logDetail())
}

// recordFull records a run that is worth a sync_runs row, and logs it.
func (s *Syncer) recordFull(ctx context.Context, r *run, src *source, out outcome, rs *runStats, logger *slog.Logger) {
	c := r.claim
	claimAttr := slog.Group("claim", "owner", s.conf.Owner, "expires_at", r.leaseExpiry().UTC())
	fin, err := s.finish(context.WithoutCancel(ctx), r, src, out, rs)
	s.conf.Metrics.RecordsChanged(src.settings.connector, out.stats.Created, out.stats.Updated, out.stats.Deleted)
	repaired := int(r.repaired.Load())
	s.conf.Metrics.WebhookRepaired(repaired)
	if err != nil {
		status := sources.RunFailed
		if errors.Is(err, ErrLeaseLost) {
			status = sources.RunAbandoned
		}
		s.conf.Metrics.PollFinished(c.name, src.settings.connector, string(status), s.conf.Now().Sub(c.startedAt))
		s.stats.finished(status, false, out.stats.Changed())
		logger.Error("record run outcome", "status", string(status), claimAttr, "error", err)
		return
	}
	s.conf.Metrics.PollFinished(c.name, src.settings.connector, string(out.status), s.conf.Now().Sub(c.startedAt))
	s.stats.finished(out.status, false, out.stats.Changed())
	// A run requested (run-now) while this one held the source's lease was
	// skipped by the claims meanwhile: look for it now rather than at the
	// next poll or due time.
	s.Wake()
	attrs := []any{"status", string(out.status), "reason", c.reason, claimAttr, "cursor_before", logCursor(c.cursor), "cursor_after", logCursor(fin.cursorAfter),
		"seen", out.stats.Seen, "created", out.stats.Created,
		"updated", out.stats.Updated, "unchanged", out.stats.Unchanged, "deleted", out.stats.Deleted,
		"pages", out.pages, "requests", fin.requests, "rate_limit_waits", fin.waits, "lateness_ms", c.lateness.Milliseconds(),
		"duration_ms", s.conf.Now().Sub(c.startedAt).Milliseconds(), "next_run_at", fin.next.At, "interval_reason", fin.next.Reason}
	if repaired > 0 {
		attrs = append(attrs, "repaired", repaired)
		logger.Warn("reconciliation poll found changes no webhook event brought (missed or rejected deliveries); repaired",
			"repaired", repaired)
	}
	if out.stats.Repaired > 0 {
		logger.Warn("items held text PostgreSQL cannot store (invalid UTF-8 or NUL); it was replaced by U+FFFD",
			"items_repaired", out.stats.Repaired, "first_item", out.repairedAt)
	}
	switch {
	case out.err != nil && out.status == sources.RunDeferred:
		logger.Warn("run deferred by upstream", append(attrs, "error", out.err, "retry_at", fin.next.At)...)
	case out.status == sources.RunAbandoned:
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

// quiet decides whether a run is quiet — a scheduled run that succeeded
// (or was not modified), wrote nothing, followed a successful run and
// stops nothing — and if so returns its completion, its next run decided
// from the state the claim read. Anything else goes through finish.
func (s *Syncer) quiet(r *run, src *source, out outcome, rs *runStats) (quietRun, bool) {
	c := r.claim
	if c.reason != "schedule" || c.failures != 0 || r.recorded.Load() || out.err != nil || out.disable != "" ||
		!out.status.Succeeded() || out.stats.Changed() > 0 || out.stats.Repaired > 0 {
		return quietRun{}, false
	}
	now := s.conf.Now()
	var cur time.Duration
	if c.interval != nil {
		cur = time.Duration(*c.interval * float64(time.Second))
	}
	since := c.createdAt
	if c.lastChange != nil {
		since = *c.lastChange
	}
	next := src.schedule.Next(now, schedule.Run{Interval: cur, Quiet: now.Sub(since), MinInterval: out.result.MinInterval, Due: c.dueAt})
	if after := src.settings.stopAfter; after != nil && !next.At.Before(*after) {
		return quietRun{}, false // completes the source
	}
	fin := finished{requests: max(out.result.Requests, int(rs.requests.Load())), waits: int(rs.waits.Load())}
	if src.stopWhen != nil {
		stop, err := evalStopWhen(src, out, fin, c, c.startedAt, now, c.lastChange, &now)
		if err != nil || stop {
			return quietRun{}, false
		}
	}
	q := quietRun{c: c, status: out.status, finishedAt: now, next: next.At, interval: next.Interval.Seconds(), reason: next.Reason,
		requests: fin.requests, waits: fin.waits, seen: out.stats.Seen, pages: out.pages, unchangedN: out.stats.Unchanged,
		notModified: out.status == sources.RunNotModified}
	if out.status == sources.RunSucceeded {
		q.cursor = nullJSONBytes(out.result.Cursor)
	}
	return q, true
}

func (r *run) startHeartbeat(stop func()) {
	r.hbMu.Lock()
	defer r.hbMu.Unlock()
	if r.hbStopped {
		stop()
		return
	}
	r.hb = stop
}

func (r *run) stopHeartbeat() {
	r.hbMu.Lock()
	stop := r.hb
	r.hbStopped, r.hb = true, nil
	r.hbMu.Unlock()
	if stop != nil {
		stop()
	}
}

// heartbeat renews the run's lease every third of the lease while the run
// goes on, so that a slow page does not let another replica take the
// source over; if the lease was lost anyway it cancels the run with
// ErrLeaseLost. A run that needs its lease renewed is long enough to be
// listed: the first renewal writes its sync_runs row (status running).
// The returned function stops it and waits.
func (s *Syncer) heartbeat(ctx context.Context, r *run, lost context.CancelCauseFunc, logger func() *slog.Logger) func() {
	c := &r.claim
	return service.Every(ctx, max(s.conf.Lease/3, 10*time.Millisecond), func(ctx context.Context) bool {
		var held bool
		err := s.pool.QueryRow(ctx, sources.QueryHeartbeat, c.name, s.conf.Owner, c.runID, s.conf.Now(), s.conf.Lease,
			c.reason, c.startedAt, nullJSON(c.cursor), c.dueAt, nullText(c.dueReason)).Scan(&held)
		switch {
		case err == nil && !held:
			logger().Warn("lease lost while running; stopping the run")
			lost(ErrLeaseLost)
			return false
		case err == nil:
			r.recorded.Store(true)
		case ctx.Err() == nil:
			logger().Warn("renew lease", "error", err)
		}
		return true
	})
}

// fetch runs the connector and writes its pages. Mapping the next page
// (connector I/O, JSON decoding, hashing: Go's core) overlaps with writing
// the previous ones (Postgres's): a pageWriter commits batches in order
// while the pageMapper maps the next page; the batches queued when it
// begins a transaction share it, and on a first sync two transactions are
// in flight at once (docs/acquisition.md#writing-a-runs-pages). The
// connector's end decides the run's status (fetchStatus); a complete
// snapshot then deletes the records it did not see (tombstone).
func (s *Syncer) fetch(ctx context.Context, r *run, src *source) outcome {
	w := s.startPageWriter(ctx, r)
	defer w.stop()
	m := newPageMapper(s, r, src, w)
	res, err := s.fetchRecovering(ctx, r, src, m)
	written, writeErr := w.close()
	if writeErr != nil {
		err = writeErr // the root cause; the connector only saw errWriterFailed
	}
	out := outcome{stats: written, pages: m.pages, result: res, repairedAt: m.repairedAt}
	out.status, out.err, out.retryAt, out.disable = fetchStatus(err)
	if out.status == sources.RunSucceeded && res.Complete && m.seen != nil {
		st, err := s.tombstone(ctx, r, src, m.seen)
		out.stats.Add(st)
		if err != nil {
			out.status, out.err = sources.RunFailed, err
		}
	}
	if kc, ok := src.conn.(connectors.KeyChecker); ok && out.status == sources.RunSucceeded && res.CheckKeys {
		st, err := s.checkKeys(ctx, r, src, kc)
		out.stats.Add(st)
		if err != nil {
			out.status, out.err = sources.RunFailed, err
		}
	}
	return out
}

// fetchRecovering runs the connector's fetch (and, within it, the mapping
// of its pages). A panic there — a connector's bug, a library that
// panics on what an upstream sent — fails the run with an error that says
// so, logged with its stack, as any other failure: the pages written
// before it stay, the run backs off, and the process and its other
// sources go on.
func (s *Syncer) fetchRecovering(ctx context.Context, r *run, src *source, m *pageMapper) (res connectors.Result, err error) {
	defer func() {
		if p := recover(); p != nil {
			res, err = connectors.Result{}, s.connectorPanic(p, "the run", "source", r.name, "run_id", r.runID)
		}
	}()
	return src.conn.Fetch(ctx, r.cursor, m.emit)
}

// connectorPanic logs p, a panic of connector code recovered on this
// goroutine, with the goroutine's stack, and returns the error that
// fails what (the run, the event's mapping, the key check) instead of
// the process.
func (s *Syncer) connectorPanic(p any, what string, attrs ...any) error {
	s.logger.Error("the connector panicked; "+what+" failed", append(attrs, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))...)
	return fmt.Errorf("the connector panicked (a bug; the syncer's log has its stack): %v", p)
}

// fetchStatus classifies the error a fetch ended with: none succeeded; an
// upstream's "not modified" is no error; a RetryLaterError defers the run
// to its time; a refused authorization fails it and disables the source
// (disable says why); anything else fails it.
func fetchStatus(err error) (status sources.RunStatus, runErr error, retryAt time.Time, disable string) {
	var retry *connectors.RetryLaterError
	switch {
	case err == nil:
		return sources.RunSucceeded, nil, time.Time{}, ""
	case errors.Is(err, connectors.ErrNotModified):
		return sources.RunNotModified, nil, time.Time{}, ""
	case errors.As(err, &retry):
		return sources.RunDeferred, err, retry.RetryAt, ""
	case errors.Is(err, connectors.ErrUnauthorized):
		return sources.RunFailed, err, time.Time{}, "authorization refused by upstream: " + err.Error()
	default:
		return sources.RunFailed, err, time.Time{}, ""
	}
}

// pageMapper maps the pages the connector emits into records and queues
// them, in batches of syncer.batch_size, for the run's pageWriter. Only
// the connector's goroutine calls emit.
type pageMapper struct {
	s   *Syncer
	r   *run
	src *source
	w   *pageWriter

	pages      int
	repairedAt string // the first item whose text was repaired
	// seen are, for a snapshot source, the ids seen in this run (with
	// where, for duplicate errors): they decide which records were
	// deleted. Incremental sources check duplicates within a page only
	// and keep nothing per run (nil).
	seen map[string]string
	// probe is whether the first page with items asks if the source
	// stores any record yet (it never completed a run).
	probe bool
}

// newPageMapper returns the mapper of run r's pages of src, queueing
// them for w.
func newPageMapper(s *Syncer, r *run, src *source, w *pageWriter) *pageMapper {
	m := &pageMapper{s: s, r: r, src: src, w: w, probe: r.lastSuccess == nil}
	if sn, ok := src.conn.(connectors.Snapshotter); ok && sn.Snapshot() {
		m.seen = map[string]string{}
	}
	return m
}

// emit is the connector's emit function: it maps the page, probes
// whether the source is fresh, and queues the page's batches.
func (m *pageMapper) emit(ctx context.Context, page connectors.Page) error {
	m.pages++
	recs, deleted, err := m.mapPage(page)
	if err != nil {
		return err
	}
	if m.probe && len(recs) > 0 {
		m.probeFresh(ctx)
	}
	return m.queue(ctx, recs, deleted, page.Cursor)
}

// mapPage maps a page's items into records, and the items the connector
// says were deleted (Item.Deleted) into the ids of records to delete. A
// duplicate id within the page (or, for a snapshot source, the run) is an
// ItemError naming both locations; the ids of a snapshot source's page
// are added to seen (a deleted item's are not: it is gone).
func (m *pageMapper) mapPage(page connectors.Page) (recs []normalize.Record, deleted []string, err error) {
	recs = make([]normalize.Record, 0, len(page.Items))
	pageLocs := make(map[string]string, len(page.Items))
	for _, it := range page.Items {
		r, err := m.src.mapper.Map(it.Value, it.Raw)
		if err != nil {
			return nil, nil, &connectors.ItemError{Loc: it.Loc, Err: err}
		}
		if prev, dup := pageLocs[r.ID]; dup {
			return nil, nil, &connectors.ItemError{Loc: it.Loc, Err: fmt.Errorf("duplicate record id %q (also at %s)", r.ID, prev)}
		}
		if prev, dup := m.seen[r.ID]; dup {
			return nil, nil, &connectors.ItemError{Loc: it.Loc, Err: fmt.Errorf("duplicate record id %q (also at %s)", r.ID, prev)}
		}
		pageLocs[r.ID] = it.Loc
		if it.Deleted {
			deleted = append(deleted, r.ID)
			continue
		}
		if r.Repaired && m.repairedAt == "" {
			m.repairedAt = it.Loc
		}
		recs = append(recs, r)
	}
	if m.seen != nil {
		for _, r := range recs {
			m.seen[r.ID] = pageLocs[r.ID]
		}
	}
	return recs, deleted, nil
}

// probeFresh asks, once, whether the source stores no record yet (its
// first sync): its batches are then prepared as new records on this
// goroutine (changes.PrepareFresh) and written without reading stored
// hashes, until a batch finds a record stored after all
// (changes.ErrStored). A run that brings nothing asks nothing.
func (m *pageMapper) probeFresh(ctx context.Context) {
	m.probe = false
	empty, err := changes.SourceEmpty(ctx, m.s.pool, m.r.name)
	m.w.fresh.Store(err == nil && empty) // on error, the writer reads what is stored
}

// queue cuts a page's records into batches of syncer.batch_size and
// queues them for the writer; the page's last batch carries its cursor
// and the ids of its deleted items. A page without items but with a
// cursor or deleted items is queued as one batch without records.
func (m *pageMapper) queue(ctx context.Context, recs []normalize.Record, deleted []string, cursor json.RawMessage) error {
	size := m.s.conf.BatchSize
	for i := 0; i < len(recs) || (i == 0 && (cursor != nil || len(deleted) > 0)); i += size {
		j := job{recs: recs[i:min(i+size, len(recs))]}
		if i+size >= len(recs) {
			j.cursor, j.pageEnd, j.deleted = cursor, true, deleted
		}
		if m.w.fresh.Load() {
			j.fresh = changes.PrepareFresh(m.r.name, m.r.runID, j.recs, m.src.mapper.Hasher())
		}
		if err := m.w.send(ctx, j); err != nil {
			return err
		}
	}
	return nil
}

// errWriterFailed stops the connector when a batch write failed; the
// writer's own error is reported instead.
var errWriterFailed = errors.New("batch write failed")

// job is a batch of a page for the writer: its records, the page's cursor
// on the page's last batch, and its rows prepared as new records while
// the source stores none (nil: written with changes.Apply).
type job struct {
	recs    []normalize.Record
	fresh   *changes.Fresh
	cursor  json.RawMessage
	pageEnd bool // the last batch of a page: counts the page
	// deleted are the ids of the page's deleted items (its last batch),
	// recorded as deleted after the batch's records.
	deleted []string
}

// maxInFlight is the most transactions of a first sync in flight at once.
const maxInFlight = 2

// maxGroup is the most batches written in one transaction: those that
// waited for the writer while it wrote the one before.
const maxGroup = 4

// writeBatch commits a group of batches: the records and changes, the
// cursor of the last whole page, the run's counters and the lease
// extension, all or nothing. The lease check fences out a replica whose
// lease expired. A group in which every item was unchanged writes
// nothing: its counters wait for the next group that writes, or for the
// run's end. When a batch prepared as new records finds one stored
// (changes.ErrStored), the run stops preparing them and the group is
// written again with changes.Apply.
func (s *Syncer) writeBatch(ctx context.Context, r *run, group []job, fresh *atomic.Bool) (changes.Stats, error) {
	st, err := s.writeGroup(ctx, r, nil, group, fresh.Load(), nil)
	if errors.Is(err, changes.ErrStored) {
		fresh.Store(false)
		st, err = s.writeGroup(ctx, r, nil, group, false, nil)
	}
	if err != nil {
		return st, fmt.Errorf("write batch: %w", err)
	}
	return st, nil
}

// inflight is a transaction of the writer in flight: done is closed once
// it committed (err nil) or failed.
type inflight struct {
	done chan struct{}
	st   changes.Stats
	err  error
}

// errEarlierWriteFailed rolls back a transaction whose predecessor failed.
var errEarlierWriteFailed = errors.New("an earlier batch of the run failed")

// prepared reports whether every batch of group was prepared as new
// records.
func prepared(group []job) bool {
	for _, j := range group {
		if j.fresh == nil {
			return false
		}
	}
	return true
}

// writeFresh is writeBatch for a group of batches prepared as new records
// while the transaction after, if not nil, is in flight: it writes its
// rows beside it, then waits for it to commit before it touches the
// source's row (lease, cursor, counters) and commits, and rolls back if
// after failed. The commits, the cursors and the counters stay in order.
// A record stored after all is written again once after is done.
func (s *Syncer) writeFresh(ctx context.Context, r *run, conn *pgxpool.Conn, group []job, fresh *atomic.Bool, after *inflight) (changes.Stats, error) {
	st, err := s.writeGroup(ctx, r, conn, group, true, after)
	if errors.Is(err, changes.ErrStored) {
		fresh.Store(false)
		if err := waitFor(ctx, after); err != nil {
			return st, fmt.Errorf("write batch: %w", err)
		}
		st, err = s.writeGroup(ctx, r, conn, group, false, nil)
	}
	if err != nil {
		return st, fmt.Errorf("write batch: %w", err)
	}
	return st, nil
}

// waitFor waits until after, if not nil, is done, and fails if it failed.
func waitFor(ctx context.Context, after *inflight) error {
	if after == nil {
		return nil
	}
	select {
	case <-after.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	if after.err != nil {
		return errEarlierWriteFailed
	}
	return nil
}

// writingConn takes a writing slot and a connection, released together.
func (s *Syncer) writingConn(ctx context.Context) (func(), *pgxpool.Conn, error) {
	release, err := s.writing(ctx)
	if err != nil {
		return nil, nil, err
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		release()
		return nil, nil, err
	}
	return func() { conn.Release(); release() }, conn, nil
}

// writeGroup writes group in one transaction on conn (nil: a connection
// of the pool, in a writing slot of its own), with its prepared rows when
// fresh, after the transaction after (nil: none in flight).
func (s *Syncer) writeGroup(ctx context.Context, r *run, conn *pgxpool.Conn, group []job, fresh bool, after *inflight) (changes.Stats, error) {
	var st changes.Stats
	pages := 0
	var cur json.RawMessage
	for _, j := range group {
		if j.pageEnd {
			pages++
			cur = j.cursor
		}
	}
	var written func(bool)
	src := s.source(r.name)
	var db interface {
		Begin(context.Context) (pgx.Tx, error)
	} = conn
	if conn == nil {
		release, err := s.writing(ctx)
		if err != nil {
			return st, err
		}
		defer release()
		db = s.pool
	}
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if src.settings.webhook {
			// The source's events are written at the same time.
			if err := changes.Lock(ctx, tx, r.name); err != nil {
				return err
			}
		}
		st = changes.Stats{}
		if fresh && prepared(group) {
			fs := make([]*changes.Fresh, len(group))
			for i, j := range group {
				fs[i] = j.fresh
			}
			var err error
			if st, err = changes.WriteFresh(ctx, tx, fs...); err != nil {
				return err
			}
		} else {
			for _, j := range group {
				b, err := changes.Apply(ctx, tx, r.name, r.runID, j.recs, src.mapper.Hasher())
				if err != nil {
					return err
				}
				st.Add(b)
			}
		}
		for _, j := range group {
			if len(j.deleted) == 0 {
				continue
			}
			d, err := changes.Delete(ctx, tx, r.name, r.runID, j.deleted)
			if err != nil {
				return err
			}
			st.Add(d)
		}
		if err := waitFor(ctx, after); err != nil {
			return err
		}
		if st.Changed() == 0 && st.Repaired == 0 {
			return nil // read only
		}
		if err := r.leased(ctx); err != nil {
			return err
		}
		total, totalPages, done := r.withPending(st, pages)
		written = done
		return s.extendLease(ctx, tx, r, total, cur, totalPages)
	})
	switch {
	case written != nil:
		written(err == nil)
	case err == nil:
		r.addPending(st, pages)
	}
	return st, err
}

// extendLease renews the lease, stores the cursor and adds the batch's
// counters (and pages) to the run's sync_runs row, written then if it was
// not yet, in tx; it fails with ErrLeaseLost when the lease is no longer
// this replica's.
func (s *Syncer) extendLease(ctx context.Context, tx pgx.Tx, r *run, st changes.Stats, cur json.RawMessage, pages int) error {
	var held bool
	repaired := r.repairs(s, st)
	err := tx.QueryRow(ctx, sources.QueryExtendLease,
		r.name, s.conf.Owner, r.runID, s.conf.Now(), s.conf.Lease, nullJSON(cur),
		st.Seen, st.Created, st.Updated, st.Unchanged, st.Deleted, pages, st.Repaired,
		r.reason, r.startedAt, nullJSON(r.cursor), r.dueAt, nullText(r.dueReason), repaired).Scan(&held)
	if err != nil {
		return fmt.Errorf("extend lease: %w", err)
	}
	if !held {
		return ErrLeaseLost
	}
	r.repaired.Add(int64(repaired))
	return nil
}

// repairs is the number of st's changes that repair what the source's
// webhook missed: every change a reconciliation poll writes (an event
// that had brought the content would have left the poll nothing to
// write). A webhook source's first poll (no successful run before) loads
// what exists and repairs nothing.
func (r *run) repairs(s *Syncer, st changes.Stats) int {
	src := s.source(r.name)
	if src == nil || !src.settings.webhook || r.lastSuccess == nil {
		return 0
	}
	return st.Changed()
}

// ErrMassDelete fails a snapshot run that would delete more of the
// source's live records than its max_delete_fraction allows (an empty or
// truncated answer far more often than real deletions): nothing is deleted.
var ErrMassDelete = errors.New("deletion guard")

// tombstone records deletions for records a complete run did not see,
// unless the deletion guard refuses them all.
func (s *Syncer) tombstone(ctx context.Context, r *run, src *source, seen map[string]string) (changes.Stats, error) {
	missing, live, err := changes.Missing(ctx, s.pool, r.name, seen)
	if err != nil {
		return changes.Stats{}, err
	}
	return s.deleteMissing(ctx, r, src, missing, live)
}

// keyCheckPage is the number of record ids checkKeys reads and asks the
// connector about at once: what it holds in memory, besides the ids found
// missing.
const keyCheckPage = 5000

// checkKeys asks the connector which of the source's live records are
// still upstream, keyCheckPage ids at a time in record id order, and
// records the others as deleted, unless the deletion guard refuses them
// all (connectors.KeyChecker).
func (s *Syncer) checkKeys(ctx context.Context, r *run, src *source, kc connectors.KeyChecker) (changes.Stats, error) {
	var missing []string
	live := 0
	after := ""
	for {
		ids, err := changes.LiveIDs(ctx, s.pool, r.name, after, keyCheckPage)
		if err != nil {
			return changes.Stats{}, err
		}
		if len(ids) == 0 {
			break
		}
		live += len(ids)
		present, err := s.present(ctx, r, kc, ids)
		if err != nil {
			return changes.Stats{}, fmt.Errorf("check which of %d records after %q are still upstream: %w", len(ids), after, err)
		}
		there := make(map[string]struct{}, len(present))
		for _, id := range present {
			there[id] = struct{}{}
		}
		for _, id := range ids {
			if _, ok := there[id]; !ok {
				missing = append(missing, id)
			}
		}
		if len(ids) < keyCheckPage {
			break
		}
		after = ids[len(ids)-1]
	}
	return s.deleteMissing(ctx, r, src, missing, live)
}

// present is kc.Present, a panic of which fails the run (connectorPanic).
func (s *Syncer) present(ctx context.Context, r *run, kc connectors.KeyChecker, ids []string) (present []string, err error) {
	defer func() {
		if p := recover(); p != nil {
			present, err = nil, s.connectorPanic(p, "the key check", "source", r.name, "run_id", r.runID)
		}
	}()
	return kc.Present(ctx, ids)
}

// deleteMissing records deletions for the missing ones of live records,
// in batches, unless the deletion guard refuses them all.
func (s *Syncer) deleteMissing(ctx context.Context, r *run, src *source, missing []string, live int) (changes.Stats, error) {
	var total changes.Stats
	if err := guardDeletes(src, len(missing), live); err != nil {
		return total, err
	}
	if len(missing) > 0 {
		if err := r.leased(ctx); err != nil {
			return total, err
		}
	}
	for i := 0; i < len(missing); i += s.conf.BatchSize {
		ids := missing[i:min(i+s.conf.BatchSize, len(missing))]
		var st changes.Stats
		var written func(bool)
		err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			if src.settings.webhook {
				if err := changes.Lock(ctx, tx, r.name); err != nil {
					return err
				}
			}
			var err error
			if st, err = changes.Delete(ctx, tx, r.name, r.runID, ids); err != nil {
				return err
			}
			add, pages, done := r.withPending(changes.Stats{Deleted: st.Deleted}, 0)
			written = done
			return s.extendLease(ctx, tx, r, add, nil, pages)
		})
		if written != nil {
			written(err == nil)
		}
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
func guardDeletes(src *source, n, live int) error {
	limit := src.settings.maxDeleteFraction
	if n < config.MinGuardedDeletes || live == 0 || float64(n) <= limit*float64(live) {
		return nil
	}
	return fmt.Errorf("%w: source %s: this complete run would delete %d of %d live records (%.0f%%), more than max_delete_fraction %g allows; "+
		"nothing was deleted (records created or updated by the run are kept). If the upstream really lost them, "+
		"set max_delete_fraction: 1 in %s for one run, or raise it", ErrMassDelete, src.name, n, live, 100*float64(n)/float64(live), limit, cmp.Or(src.path, "the source's file"))
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
// complete it. Its steps, in one transaction: readLeased, then nextRun,
// stopConditions and recordOutcome, or recordLeaseLost.
func (s *Syncer) finish(ctx context.Context, r *run, src *source, out outcome, rs *runStats) (finished, error) {
	now := s.conf.Now()
	fin := finished{requests: max(out.result.Requests, int(rs.requests.Load())), waits: int(rs.waits.Load())}
	if err := r.leased(ctx); err != nil {
		return fin, err
	}
	release, err := s.writing(ctx)
	if err != nil {
		return fin, err
	}
	defer release()
	lost := false
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		prev, held, err := s.readLeased(ctx, tx, r.claim)
		if err != nil {
			return err
		}
		if !held {
			// Another replica holds the source now: record that this run was
			// abandoned (committed), and report the lost lease afterwards.
			err := s.recordLeaseLost(ctx, tx, r, fin, now)
			lost = err == nil
			return err
		}
		after := prev.after(r.claim, out, now)
		fin.failures, fin.next, after.interval = s.nextRun(src, out, prev, after.run, rs, now)
		fin.status, fin.reason, after.lastError = s.stopConditions(src, r.claim, out, fin, prev.status, after, now)
		return s.recordOutcome(ctx, tx, r, out, &fin, prev.status, after, now)
	})
	if err == nil && lost {
		err = ErrLeaseLost
	}
	return fin, err
}

// leasedState is the row of a source this replica leases, as finish reads
// it before deciding the run's outcome.
type leasedState struct {
	failures                int    // failure_count before the run
	status                  string // the source's status before the run
	interval                *float64
	lastChange, lastSuccess *time.Time
	createdAt               time.Time
}

// sourceAfter is the source's row after a run, as finish decides it.
type sourceAfter struct {
	lastChange, lastSuccess *time.Time
	run                     schedule.Run // what the schedule decides the next run from
	interval                *float64     // interval_seconds after the run
	lastError               string       // last_error: the run's error and a failed stop.when's
}

// readLeased locks the row of c's source and reads its state, if this
// replica still leases it for c's run; held is false when another replica
// holds it by now.
func (s *Syncer) readLeased(ctx context.Context, tx pgx.Tx, c claim) (st leasedState, held bool, err error) {
	err = tx.QueryRow(ctx, sources.QueryLeasedState, c.name, s.conf.Owner, c.runID).Scan(
		&st.failures, &st.status, &st.interval, &st.lastChange, &st.lastSuccess, &st.createdAt)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return st, false, nil
	case err != nil:
		return st, false, fmt.Errorf("read source state: %w", err)
	}
	return st, true, nil
}

// recordLeaseLost records in run r's sync_runs row that it was abandoned: its
// lease is another replica's.
func (s *Syncer) recordLeaseLost(ctx context.Context, tx pgx.Tx, r *run, fin finished, now time.Time) error {
	sql, args := s.runRowSQL(r, runEnd{status: sources.RunAbandoned, finishedAt: now, err: ErrLeaseLost.Error(),
		requests: fin.requests, waits: fin.waits})
	_, err := tx.Exec(ctx, sql, args...)
	return err
}

// after returns the source's last change and success after outcome out
// at now, and the run the schedule decides the next one from; interval
// stays the one before the run until nextRun decides.
func (p leasedState) after(c claim, out outcome, now time.Time) sourceAfter {
	a := sourceAfter{lastChange: p.lastChange, lastSuccess: p.lastSuccess, interval: p.interval}
	cur := time.Duration(0)
	if p.interval != nil {
		cur = time.Duration(*p.interval * float64(time.Second))
	}
	if out.stats.Changed() > 0 {
		a.lastChange = &now
	}
	since := p.createdAt
	if a.lastChange != nil {
		since = *a.lastChange
	}
	if out.status.Succeeded() {
		a.lastSuccess = &now
	}
	a.run = schedule.Run{Interval: cur, Changes: out.stats.Changed(), Quiet: now.Sub(since), MinInterval: out.result.MinInterval, Due: c.dueAt}
	return a
}

// nextRun decides the source's failure count and next run after outcome
// out: a deferral at the time the upstream (or the host's budget) gave,
// at least minDefer away; an abandoned run due again at once; a failure
// backed off; otherwise the schedule's next run and interval. Only a
// success changes the interval (prev's is returned otherwise).
func (s *Syncer) nextRun(src *source, out outcome, prev leasedState, run schedule.Run, rs *runStats, now time.Time) (failures int, next schedule.Decision, interval *float64) {
	switch out.status {
	case sources.RunDeferred:
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
		return prev.failures, schedule.Deferred(now, at, errText(out.err)), prev.interval
	case sources.RunAbandoned:
		return prev.failures, schedule.Deferred(now, now, "interrupted by shutdown; due again at once"), prev.interval
	case sources.RunFailed:
		failures = prev.failures + 1
		return failures, src.schedule.Retry(now, failures, s.conf.Backoff, run), prev.interval
	default:
		next = src.schedule.Next(now, run)
		secs := next.Interval.Seconds()
		return 0, next, &secs
	}
}

// stopConditions decides the source's status after the run (fin holds its
// failures and next run) and why it changed: a refused authorization
// (out.disable) or stop.max_failures disables it; stop.when or stop.after
// completes it. A stop.when that fails to evaluate is logged and added to
// lastError, and the source keeps running.
func (s *Syncer) stopConditions(src *source, c claim, out outcome, fin finished, prevStatus string, after sourceAfter, now time.Time) (status, reason, lastError string) {
	set := src.settings
	status, lastError = prevStatus, errText(out.err)
	maxFailures := set.maxFailures
	switch {
	case out.disable != "":
		return "disabled", out.disable, lastError
	case out.status == sources.RunFailed && maxFailures > 0 && fin.failures >= maxFailures:
		return "disabled", fmt.Sprintf("stop.max_failures: disabled after %d consecutive failures; last error: %s", fin.failures, lastError), lastError
	}
	if src.stopWhen != nil {
		stop, err := evalStopWhen(src, out, fin, c, c.startedAt, now, after.lastChange, after.lastSuccess)
		switch {
		case err != nil:
			lastError = strings.TrimPrefix(lastError+"; ", "; ") + err.Error()
			s.logger.Warn("stop.when failed; the source keeps running", "source", c.name, "run_id", c.runID, "error", err)
		case stop:
			status = "completed"
			reason = fmt.Sprintf("stop.when %q was true after run %d", set.stopWhen, c.runID)
		}
	}
	if status == prevStatus && set.stopAfter != nil && !fin.next.At.Before(*set.stopAfter) {
		status = "completed"
		reason = fmt.Sprintf("stop.after %s reached: no run after it", set.stopAfter.UTC().Format(time.RFC3339))
	}
	return status, reason, lastError
}

// recordOutcome writes run r's end into its sync_runs row, writes the
// source's row after it (fin, after) and releases the lease, then reads
// the source's cursor into the run's row and fin.cursorAfter.
func (s *Syncer) recordOutcome(ctx context.Context, tx pgx.Tx, r *run, out outcome, fin *finished, prevStatus string, after sourceAfter, now time.Time) error {
	c := r.claim
	var statusReason, statusChanged any
	if fin.status != prevStatus {
		statusReason, statusChanged = fin.reason, now
	}
	sql, args := s.runRowSQL(r, runEnd{status: out.status, finishedAt: now, err: errText(out.err),
		requests: fin.requests, waits: fin.waits})
	if _, err := tx.Exec(ctx, sql, args...); err != nil {
		return fmt.Errorf("record run: %w", err)
	}
	if _, err := tx.Exec(ctx, sources.QueryReleaseLease,
		c.name, now, out.status.Succeeded(), after.lastChange, fin.failures, nullText(after.lastError), fin.next.At,
		after.interval, fin.next.Reason, nullJSON(out.result.Cursor), fin.status, statusReason, statusChanged); err != nil {
		return fmt.Errorf("release lease: %w", err)
	}
	// Record the final cursor in the run too.
	return tx.QueryRow(ctx, sources.QueryRunCursorAfter, c.runID, c.name, c.startedAt).Scan(&fin.cursorAfter)
}

// runEnd is the end of a run, for its sync_runs row.
type runEnd struct {
	status     sources.RunStatus
	finishedAt time.Time
	err        string
	requests   int
	waits      int
	// Counters not yet in the row (a run without a row has all of them here).
	pages, seen, unchanged int
}

// runRowSQL writes the end of run r into its sync_runs row, creating it
// (with the counters of the batches that wrote nothing) if the run had
// none. A row another replica already marked abandoned stays so: the row
// of (id, started_at) is not updated unless running, and a row the taker
// wrote with the id and its estimate of started_at is left alone
// (sync_runs is partitioned by started_at: its key is (id, started_at)).
func (s *Syncer) runRowSQL(r *run, e runEnd) (string, []any) {
	st, pages, _ := r.withPending(changes.Stats{Seen: e.seen, Unchanged: e.unchanged}, e.pages)
	return sources.QueryRunEnd, []any{
		r.runID, r.name, s.conf.Owner, r.reason, r.startedAt, nullJSON(r.cursor), r.dueAt, nullText(r.dueReason),
		string(e.status), e.finishedAt, float64(e.finishedAt.Sub(r.startedAt).Microseconds()) / 1000, nullText(e.err), e.requests, e.waits,
		pages, st.Seen, st.Created, st.Updated, st.Unchanged, st.Deleted, st.Repaired}
}

// evalStopWhen evaluates stop.when over the run that just ended and the
// source's state after it.
func evalStopWhen(src *source, out outcome, fin finished, c claim, started, now time.Time, lastChange, lastSuccess *time.Time) (bool, error) {
	run := map[string]any{
		"id":               c.runID,
		"reason":           c.reason,
		"status":           string(out.status),
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
		"name":            src.name,
		"connector":       src.settings.connector,
		"failure_count":   fin.failures,
		"last_change_at":  timeOrNil(lastChange),
		"last_success_at": timeOrNil(lastSuccess),
	}
	b, err := src.stopWhen.Run(map[string]any{"run": run, "source": source})
	if err != nil {
		return false, fmt.Errorf("stop.when: %w", err)
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

func nullJSONBytes(b json.RawMessage) []byte {
	if len(b) == 0 || string(b) == "null" {
		return nil
	}
	return b
}

func nullJSON(b json.RawMessage) any {
	if len(b) == 0 || string(b) == "null" {
		return nil
	}
	return string(b)
}

// maxLoggedCursor is the largest cursor a run's log lines show whole.
const maxLoggedCursor = 1 << 10

// logCursor is a cursor as a run's log lines show it: whole up to
// maxLoggedCursor bytes, else its size and the start of its SHA-256 (a web
// source's whole-page cursor keeps the page's last text, up to 128 KiB
// compressed: logged whole, every run of it would log the page). The
// sync_runs row keeps the cursor whole.
func logCursor(c json.RawMessage) any {
	if len(c) <= maxLoggedCursor {
		return c
	}
	sum := sha256.Sum256(c)
	return slog.GroupValue(slog.Int("bytes", len(c)), slog.String("sha256", hex.EncodeToString(sum[:8])))
}
