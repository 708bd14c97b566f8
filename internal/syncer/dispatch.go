package syncer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/sourcegraph/conc/pool"

	"github.com/lookout-dev/lookout/internal/service"
	"github.com/lookout-dev/lookout/internal/sources"
)

// claimGap is the shortest time between two claims that found fewer due
// sources than they could take: sources that fall due within it are
// claimed together, one statement for many, at the cost of up to claimGap
// of lateness.
const claimGap = 20 * time.Millisecond

// summaryEvery is how often a replica logs its summary line.
const summaryEvery = time.Minute

// run is the daemon's loop. It keeps up to Concurrency runs going: as soon
// as a slot is free it claims due sources, many in one statement, and when
// none is due it sleeps until the next source falls due (at most
// PollInterval, so that run-now requests and expired leases are seen).
// A run's slot is free when its fetch ends: a quiet run's completion is
// written by the completer, batched with others.
func (s *Syncer) run(ctx context.Context) error {
	s.logger.Info("syncer started", "owner", s.conf.Owner, "sources", len(s.claimable()), "concurrency", s.conf.Concurrency)
	s.done.start(ctx)
	slots := make(chan struct{}, s.conf.Concurrency)
	freed := make(chan struct{}, 1)
	var wg sync.WaitGroup
	rollupCtx, stopRollup := context.WithCancel(ctx)
	rollupDone := make(chan struct{})
	go func() {
		defer close(rollupDone)
		s.rollupLoop(rollupCtx)
	}()
	defer func() {
		wg.Wait()      // Stop waits for the runs in progress
		s.done.close() // and for their completions
		stopRollup()
		<-rollupDone
		if err := s.finalFlush(ctx); err != nil {
			s.logger.Error("count quiet runs at stop", "error", err)
		}
		s.summary(true)
	}()
	summary := time.NewTicker(summaryEvery)
	defer summary.Stop()
	var lastExpired time.Time
	// Catching up after downtime (this replica starting, or the database
	// coming back): sources that missed runs are spread over their
	// interval until a claim finds none. A replica that is merely behind
	// (overloaded) runs its sources late rather than moving them again.
	catchUp := true
	// An iteration whose statements failed (the database is away) is
	// followed by the loop backoff, not by the next poll.
	backoff := service.LoopBackoff()
	for {
		now := s.conf.Now()
		failed := false
		if now.Sub(lastExpired) >= s.conf.PollInterval {
			lastExpired = now
			if err := s.completeExpired(ctx, now); err != nil && ctx.Err() == nil {
				s.logger.Error("complete sources past stop.after", "error", err)
				failed = true
			}
		}
		free := cap(slots) - len(slots)
		full := false
		if free > 0 {
			ask := min(free, maxClaim)
			var claims []claim
			var spread int
			var batch *claimBatch
			var err error
			if s.openBatches.Load() < s.maxBatches {
				// Lock the sources in a claim batch: quiet runs are then
				// completed without a lease ever written.
				batch, claims, spread, err = s.claimBatch(ctx, ask, now, catchUp)
				if batch != nil {
					s.openBatches.Add(1)
				}
			} else {
				claims, spread, err = s.claim(ctx, ask, now, catchUp)
			}
			switch {
			case err != nil && ctx.Err() == nil:
				s.logger.Error("claim due sources", "error", err)
				catchUp, failed = true, true
			case err == nil && spread == 0:
				catchUp = false
			}
			if spread > 0 {
				s.logger.Info("spread sources that missed runs during an outage over their interval", "sources", spread)
			}
			full = len(claims)+spread == ask
			runs := make([]*run, len(claims))
			for i, c := range claims {
				runs[i] = &run{claim: c}
				if batch != nil {
					batch.add(runs[i])
				}
			}
			if batch != nil {
				wg.Add(1)
				go func() {
					defer wg.Done()
					batch.run(ctx)
				}()
			}
			for _, r := range runs {
				slots <- struct{}{}
				wg.Add(1)
				go func() {
					defer wg.Done()
					s.runClaim(ctx, r)
					<-slots
					select {
					case freed <- struct{}{}:
					default:
					}
				}()
			}
		}
		if failed {
			if !service.RetrySleep(ctx, backoff.Next()) {
				return nil
			}
			continue
		}
		backoff.Reset()
		if full && len(slots) < cap(slots) {
			continue // more may be due, and there is room for them
		}
		var wake <-chan time.Time
		var timer *time.Timer
		if !full {
			// Nothing more is due now: wait for the next source to fall due,
			// but let claims gather for claimGap.
			wait := s.conf.PollInterval
			if next, ok, err := s.nextDue(ctx, now); err != nil && ctx.Err() == nil {
				s.logger.Warn("read the next due time", "error", err)
			} else if ok {
				wait = min(wait, max(next.Sub(s.conf.Now()), 0))
			}
			timer = time.NewTimer(max(wait, claimGap))
			wake = timer.C
		}
		stop := s.wait(ctx, full, wake, freed, summary.C)
		if timer != nil {
			timer.Stop()
		}
		if stop {
			return nil
		}
	}
}

// wait waits for the next claim: a freed slot when the last claim was
// cut short by the slots (full), else wake. It reports whether ctx ended.
func (s *Syncer) wait(ctx context.Context, full bool, wake <-chan time.Time, freed <-chan struct{}, summary <-chan time.Time) bool {
	for {
		select {
		case <-ctx.Done():
			return true
		case <-wake:
			return false
		case <-s.wake:
			return false
		case <-freed:
			if full {
				return false
			}
		case <-summary:
			s.summary(false)
		}
	}
}

// nextDue is the earliest next_run_at after now of an active source, if any.
func (s *Syncer) nextDue(ctx context.Context, now time.Time) (time.Time, bool, error) {
	var next *time.Time
	err := s.pool.QueryRow(ctx, `SELECT min(next_run_at) FROM sources WHERE status = 'active' AND next_run_at > $1`, now).Scan(&next)
	if err != nil || next == nil {
		return time.Time{}, false, err
	}
	return *next, true, nil
}

// RunDue completes the sources whose stop.after has passed, then claims
// the sources that were due when it was called (up to the concurrency
// limit at a time) and runs them, until none of those is left. Sources that
// fall due while it works are left for the next call, so that RunDue ends
// even when a source's interval is shorter than its run. It returns how
// many runs it made, once their outcomes are recorded.
func (s *Syncer) RunDue(ctx context.Context) (total int, err error) {
	asOf := s.conf.Now()
	if err := s.completeExpired(ctx, asOf); err != nil {
		return 0, err
	}
	s.done.start(ctx)
	defer func() {
		s.done.close()
		if ferr := s.finalFlush(ctx); ferr != nil {
			err = errors.Join(err, ferr)
		}
	}()
	for {
		claims, _, err := s.claim(ctx, min(s.conf.Concurrency, maxClaim), asOf, false)
		if err != nil {
			return total, err
		}
		if len(claims) == 0 {
			return total, nil
		}
		p := pool.New().WithMaxGoroutines(s.conf.Concurrency)
		for _, c := range claims {
			p.Go(func() { s.runClaim(ctx, &run{claim: c}) })
		}
		p.Wait()
		s.done.wait() // the next claim sees what these runs recorded
		total += len(claims)
		if ctx.Err() != nil {
			return total, ctx.Err()
		}
	}
}

// errCompleterClosed is returned when a completion arrives after the
// completer stopped.
var errCompleterClosed = errors.New("completer stopped")

// quietBatchMax is the most completions one statement writes.
const quietBatchMax = 1000

// completer writes the completions of quiet runs in batches: one UPDATE of
// sources for many runs, each row checked against the run's lease
// (fencing); the runs are then counted in the rollup, which adds them to
// sync_run_hours every RollupEvery. A quiet run hands its completion over
// and frees its slot without waiting for the database.
type completer struct {
	s *Syncer

	mu      sync.Mutex
	cond    *sync.Cond // signalled when queue shrinks or grows, or a flush ends
	queue   []quietRun
	running int // active start()s
	busy    bool
	wake    chan struct{}
	stopped chan struct{}
	cancel  context.CancelFunc
}

func newCompleter(s *Syncer) *completer {
	c := &completer{s: s}
	c.cond = sync.NewCond(&c.mu)
	return c
}

// start runs the flusher (once, however many callers: the daemon loop and
// RunDue may share it).
func (c *completer) start(ctx context.Context) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.running++
	if c.running > 1 {
		return
	}
	ctx, c.cancel = context.WithCancel(context.WithoutCancel(ctx))
	c.wake = make(chan struct{}, 1)
	c.stopped = make(chan struct{})
	go c.loop(ctx, c.wake, c.stopped)
}

// close flushes what is queued and stops the flusher when its last
// starter closes it.
func (c *completer) close() {
	c.wait()
	c.mu.Lock()
	c.running--
	if c.running > 0 {
		c.mu.Unlock()
		return
	}
	cancel, stopped := c.cancel, c.stopped
	c.mu.Unlock()
	cancel()
	<-stopped
}

// add queues a completion; it blocks while the queue is full.
func (c *completer) add(q quietRun) {
	c.mu.Lock()
	for len(c.queue) >= 4*quietBatchMax && c.running > 0 {
		c.cond.Wait()
	}
	if c.running == 0 {
		c.mu.Unlock()
		c.s.quietFailed(q, errCompleterClosed)
		return
	}
	c.queue = append(c.queue, q)
	wake := c.wake
	c.mu.Unlock()
	select {
	case wake <- struct{}{}:
	default:
	}
}

// wait returns when nothing is queued or being written.
func (c *completer) wait() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for (len(c.queue) > 0 || c.busy) && c.running > 0 {
		c.cond.Wait()
	}
}

func (c *completer) loop(ctx context.Context, wake <-chan struct{}, stopped chan<- struct{}) {
	defer close(stopped)
	attempt := 0
	for {
		c.mu.Lock()
		n := min(len(c.queue), quietBatchMax)
		batch := c.queue[:n:n]
		c.busy = n > 0
		c.mu.Unlock()
		if n == 0 {
			select {
			case <-wake:
				continue
			case <-ctx.Done():
				return
			}
		}
		err := c.s.completeQuiet(ctx, batch)
		c.mu.Lock()
		if err == nil || ctx.Err() != nil || attempt >= 8 {
			if err != nil {
				for _, q := range batch {
					c.s.quietFailed(q, err)
				}
			}
			c.queue = c.queue[n:]
			attempt = 0
		}
		c.busy = false
		c.cond.Broadcast()
		c.mu.Unlock()
		if err != nil && ctx.Err() == nil {
			attempt++
			c.s.logger.Warn("record quiet runs; retrying", "runs", n, "attempt", attempt, "error", err)
			service.Sleep(ctx, service.Backoff{Min: 100 * time.Millisecond, Max: 5 * time.Second}.Cap(attempt))
		}
	}
}

// quietRun is the outcome of a run that changed nothing and failed
// nothing, for the completer.
type quietRun struct {
	c           claim
	status      sources.RunStatus // succeeded or not_modified
	finishedAt  time.Time
	next        time.Time
	interval    float64
	reason      string
	cursor      []byte // nil: unchanged
	requests    int
	waits       int
	seen        int
	pages       int
	unchangedN  int
	notModified bool
}

// completeQuiet releases the leases of quiet runs in one statement and
// counts them in the rollup. A run whose lease another replica holds by
// now is not counted but recorded as abandoned.
func (s *Syncer) completeQuiet(ctx context.Context, batch []quietRun) error {
	return s.completeQuietIn(ctx, s.pool, batch, false)
}

// queryer is a pool or a transaction.
type queryer interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// completeQuietIn records quiet runs in q: leased runs (their lease
// checked and released), or, with locked, runs of a claim batch whose
// rows q's transaction holds locked (no lease to check or release: only
// the columns a run changes are written).
func (s *Syncer) completeQuietIn(ctx context.Context, q queryer, batch []quietRun, locked bool) error {
	n := len(batch)
	names, runIDs := make([]string, n), make([]int64, n)
	finished, next := make([]time.Time, n), make([]time.Time, n)
	intervals, reasons, cursors := make([]float64, n), make([]string, n), make([]*string, n)
	for i, q := range batch {
		names[i], runIDs[i] = q.c.name, q.c.runID
		finished[i], next[i] = q.finishedAt, q.next
		intervals[i], reasons[i] = q.interval, q.reason
		if q.cursor != nil {
			cur := string(q.cursor)
			cursors[i] = &cur
		}
	}
	sql := sources.QueryCompleteQuiet
	if locked {
		sql = sources.QueryCompleteLocked
	}
	done := make(map[string]bool, n)
	rows, err := q.Query(ctx, sql, names, runIDs, finished, next, intervals, reasons, cursors, s.conf.Owner)
	if err != nil {
		return fmt.Errorf("record %d quiet runs: %w", n, err)
	}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			rows.Close()
			return fmt.Errorf("record %d quiet runs: %w", n, err)
		}
		done[name] = true
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("record %d quiet runs: %w", n, err)
	}
	if locked {
		if len(done) != n {
			return fmt.Errorf("record %d quiet runs of a claim batch: %d source rows updated", n, len(done))
		}
		return nil // counted when the batch commits
	}
	if len(done) > 0 {
		s.Wake() // a run requested while these held their leases can start now
	}
	var lost []quietRun
	for _, q := range batch {
		if !done[q.c.name] {
			lost = append(lost, q)
			continue
		}
		s.quietDone(q)
	}
	if len(lost) > 0 {
		if err := s.recordLost(ctx, lost); err != nil {
			s.logger.Error("record runs that lost their lease", "runs", len(lost), "error", err)
		}
	}
	return nil
}

// recordLost records quiet runs whose lease was taken over before their
// completion was written: abandoned, like any run that lost its lease.
func (s *Syncer) recordLost(ctx context.Context, lost []quietRun) error {
	b := &pgx.Batch{}
	for _, q := range lost {
		sql, args := s.runRowSQL(&run{claim: q.c}, runEnd{status: sources.RunAbandoned, finishedAt: q.finishedAt, err: ErrLeaseLost.Error(),
			requests: q.requests, waits: q.waits, pages: q.pages, seen: q.seen, unchanged: q.unchangedN})
		b.Queue(sql, args...)
	}
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return err
	}
	for _, q := range lost {
		s.conf.Metrics.PollFinished(q.c.name, s.connectorOf(q.c.name), string(sources.RunAbandoned), q.finishedAt.Sub(q.c.startedAt))
		s.stats.finished(sources.RunAbandoned, false, 0)
		s.logger.Error("record run outcome", "source", q.c.name, "run_id", q.c.runID, "status", string(sources.RunAbandoned), "error", ErrLeaseLost)
	}
	return nil
}

// quietDone counts a quiet run whose completion committed: in the rollup
// (sync_run_hours), the metrics and the summary line.
func (s *Syncer) quietDone(q quietRun) {
	s.hours.add(q)
	d := q.finishedAt.Sub(q.c.startedAt)
	s.conf.Metrics.PollFinished(q.c.name, s.connectorOf(q.c.name), string(q.status), d)
	s.stats.finished(q.status, true, 0)
	if s.logger.Enabled(context.Background(), slog.LevelDebug) {
		s.logger.Debug("run finished", "source", q.c.name, "run_id", q.c.runID, "status", string(q.status), "requests", q.requests,
			"seen", q.seen, "lateness_ms", q.c.lateness.Milliseconds(), "duration_ms", d.Milliseconds(), "next_run_at", q.next)
	}
}

// quietFailed reports a quiet run whose completion could not be written;
// its lease expires and another claim runs the source again.
func (s *Syncer) quietFailed(q quietRun, err error) {
	s.conf.Metrics.PollFinished(q.c.name, s.connectorOf(q.c.name), string(sources.RunFailed), q.finishedAt.Sub(q.c.startedAt))
	s.stats.finished(sources.RunFailed, false, 0)
	s.logger.Error("record run outcome", "source", q.c.name, "run_id", q.c.runID, "status", string(q.status), "error", err)
}
