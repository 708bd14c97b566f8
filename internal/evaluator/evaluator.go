// Package evaluator consumes the change log: it wakes on LISTEN (a wake-up
// only) and on a slow timer, claims pending changes with FOR UPDATE SKIP
// LOCKED and a lease, runs each watch of the change's source, and writes
// one evaluations row per (change, watch) and the notifications those
// decisions call for, in one transaction with marking the changes done.
//
// A watch with an ask sends the changes that passed its filter to the model
// (package semantic), outside any transaction: claim, judge, commit. The
// decisions that need no model are committed with the claim, before the
// model is asked; the changes that wait for the model are leased in that
// same transaction and their model decisions follow under the lease. A
// change whose model step failed under on_model_error: hold keeps its
// decided watches' evaluations, stays pending and is retried with backoff;
// the batch goes on with every other change.
//
// Changes of one record are evaluated in order: a change is claimable only
// when no earlier change of the same record is still pending. Several
// evaluators may run against one database; the lease fences out one whose
// claim expired, and the UNIQUE dedupe key makes a repeated decision write
// no second notification. A claim transaction is bounded by the lease
// (idle_in_transaction_session_timeout and statement_timeout), so the row
// locks of a frozen evaluator are released by the server; a rescuer takes
// over expired leases every catch-up interval whether or not a worker is
// free. Decisions are logged once their transaction committed.
package evaluator

import (
	"cmp"
	"context"
	"math/rand/v2"
	"sync/atomic"

	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/sourcegraph/conc/pool"

	"github.com/lookout-dev/lookout/internal/changes"
	"github.com/lookout-dev/lookout/internal/db"
	"github.com/lookout-dev/lookout/internal/definitions"
	"github.com/lookout-dev/lookout/internal/normalize"
	"github.com/lookout-dev/lookout/internal/notify"
	"github.com/lookout-dev/lookout/internal/outbox"
	"github.com/lookout-dev/lookout/internal/semantic"
	"github.com/lookout-dev/lookout/internal/service"
	"github.com/lookout-dev/lookout/internal/watchspec"
)

// Evaluator evaluates changes against watches.
type Evaluator struct {
	pool     *pgxpool.Pool
	conf     Config
	logger   *slog.Logger
	index    *index
	follower *definitions.Follower // nil: the watches of conf.Sources only
	judge    *semantic.Judge       // nil in a check without a watch with an ask
	composer *notify.Composer
	listener *db.Listener
	loop     service.Loop
	stats    claimStats
	heads    claimHeads
	// wakes carries the deliverers' wake-ups of committed claims to
	// wakeLoop while waking (run) is set; without it they are sent at once.
	wakes  chan struct{}
	waking atomic.Bool
}

// New compiles the watches of conf.Sources. Expression errors name file
// and line. conf's settings are used as given: FromConfig carries the
// loaded, defaulted lookout.yaml values.
func New(pool *pgxpool.Pool, conf Config, logger *slog.Logger) (*Evaluator, error) {
	if conf.Owner == "" {
		host, _ := os.Hostname()
		conf.Owner = fmt.Sprintf("%s:%d", cmp.Or(host, "evaluator"), os.Getpid())
	}
	if conf.Now == nil {
		conf.Now = time.Now
	}
	e := &Evaluator{pool: pool, conf: conf, logger: logger.With("component", "evaluator"), index: newIndex(),
		wakes: make(chan struct{}, 1)}
	var errs []error
	asks := false
	for _, src := range conf.Sources {
		e.index.sources[src.Name] = src
		for i, wc := range src.Watches {
			w, err := e.compile(src, i, wc, "")
			if err != nil {
				errs = append(errs, err)
				continue
			}
			asks = asks || wc.Ask != ""
			e.index.bySource[src.Name] = append(e.index.bySource[src.Name], w)
		}
	}
	var err error
	if e.composer, err = notify.NewComposer(conf.Sinks, conf.Sources); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	// With a database, the definitions may bring a watch with an ask at
	// any time: the judge is always there.
	if asks || pool != nil {
		client, err := semantic.NewClient(conf.Model, logger)
		if err != nil {
			return nil, err
		}
		e.judge = semantic.NewJudge(pool, client, conf.Model.Concurrency, conf.Owner, logger)
		e.judge.SetMetrics(conf.Metrics)
	}
	return e, nil
}

// Composer renders the notifications of the evaluator's watches; the
// digester of the same process shares it, so that it follows the
// definitions too.
func (e *Evaluator) Composer() *notify.Composer { return e.composer }

// Listening reports whether the LISTEN connection is up.
func (e *Evaluator) Listening() bool { return e.listener != nil && e.listener.Connected() }

// Start listens for changes and evaluates them in the background until Stop.
func (e *Evaluator) Start(ctx context.Context) error {
	schema, err := db.CurrentSchema(ctx, e.pool)
	if err != nil {
		return err
	}
	e.warmUp(ctx)
	e.listener = changes.Listen(e.pool, schema, e.logger)
	if err := e.listener.Start(ctx); err != nil {
		return err
	}
	return e.loop.Start(ctx, e.run)
}

// Stop stops evaluating and waits for the batch in progress.
func (e *Evaluator) Stop() error {
	err := e.loop.Stop()
	if e.listener != nil {
		err = errors.Join(err, e.listener.Stop())
	}
	return err
}

// Done is closed when the evaluation loop ended (for service.Supervisor).
func (e *Evaluator) Done() <-chan struct{} { return e.loop.Done() }

func (e *Evaluator) run(ctx context.Context) error {
	e.logger.Info("evaluator started", "owner", e.conf.Owner, "catch_up_interval", e.conf.CatchUpInterval)
	backoff := service.LoopBackoff()
	stopRescue := service.Every(ctx, e.conf.CatchUpInterval, func(ctx context.Context) bool {
		if e.rescue(ctx) {
			backoff.Reset()
			return true
		}
		return service.RetrySleep(ctx, backoff.Next())
	})
	defer stopRescue()
	// Every worker waits for a wake-up on its own: a NOTIFY that arrives
	// while one worker is busy with a batch (a slow model call, a large
	// batch) is taken by an idle one at once, not when the busy batch ends.
	workers := max(e.conf.Workers, 1)
	kick := make(chan time.Time, workers) // when the wake-up was received
	var wg sync.WaitGroup
	defer wg.Wait()
	e.waking.Store(true)
	defer e.waking.Store(false)
	wg.Go(func() { e.wakeLoop(ctx) })
	for range workers {
		wg.Go(func() { e.work(ctx, kick) })
	}
	timer := time.NewTimer(e.conf.CatchUpInterval)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-e.listener.Wake():
		case <-timer.C:
		}
		woken := time.Now()
		for range workers {
			select {
			case kick <- woken:
			default: // every worker has a wake-up pending already
			}
		}
		resetTimer(timer, e.conf.CatchUpInterval)
	}
}

// work is one worker of run: on every wake-up it claims and evaluates
// batches until none is left. A failed batch is retried with backoff
// until one succeeds (the wake-up that failed may be the only one).
func (e *Evaluator) work(ctx context.Context, kick <-chan time.Time) {
	backoff := service.Backoff{Min: 100 * time.Millisecond, Max: 30 * time.Second}
	for {
		var woken time.Time
		select {
		case <-ctx.Done():
			return
		case woken = <-kick:
		}
		for {
			claimed, _, err := e.tracedBatch(ctx, false, woken)
			woken = time.Time{} // the next batches of this wake-up were not woken
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				wait := backoff.Next()
				e.logger.Error("evaluate changes", "error", err, "retry_in", wait)
				if !service.RetrySleep(ctx, wait) {
					return
				}
				continue
			}
			backoff.Reset()
			if claimed == 0 {
				break
			}
		}
	}
}

// wakeLoop sends the deliverers' wake-ups of the workers' committed
// claims (wakeDeliverers), off the workers' path, until ctx ends.
// Wake-ups that come while one is sent coalesce into one more.
func (e *Evaluator) wakeLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-e.wakes:
		}
		if err := outbox.WakeAfterCommit(ctx, e.pool); err != nil && ctx.Err() == nil {
			e.logger.Warn("wake the deliverers; their catch-up takes the notifications", "error", err)
		}
	}
}

// wakeDeliverers wakes the deliverers after a claim transaction that
// created notifications committed: through wakeLoop while run runs (a
// worker does not wait for the NOTIFY's commit lock, which a writer's
// commit holds through its WAL flush), else at once (Drain, Batch).
func (e *Evaluator) wakeDeliverers(ctx context.Context) {
	if e.waking.Load() {
		select {
		case e.wakes <- struct{}{}:
		default: // one is pending already
		}
		return
	}
	if err := outbox.WakeAfterCommit(ctx, e.pool); err != nil {
		e.logger.Warn("wake the deliverers; their catch-up takes the notifications", "error", err)
	}
}

// resetTimer re-arms t to fire after d, whether or not it fired already.
func resetTimer(t *time.Timer, d time.Duration) {
	t.Stop()
	t.Reset(d)
}

// Drain evaluates claimable changes batch by batch until none is left, and
// returns how many it completed (held changes are not counted). Workers
// (evaluator.workers) claim batches concurrently; SKIP LOCKED keeps them
// apart and the per-record order check keeps each record's changes in order.
func (e *Evaluator) Drain(ctx context.Context) (int, error) {
	var total atomic.Int64
	p := pool.New().WithErrors().WithContext(ctx)
	for range max(e.conf.Workers, 1) {
		p.Go(func(ctx context.Context) error {
			for {
				claimed, n, err := e.batch(ctx, false)
				total.Add(int64(n))
				if err != nil || claimed == 0 {
					return err
				}
			}
		})
	}
	err := p.Wait()
	return int(total.Load()), err
}

// rescue takes over the changes whose lease expired (their evaluator died,
// froze or lost its connection), batch by batch, on its own goroutine: a
// rescue does not wait for a free worker, so an expired lease is taken
// over within the lease and one catch-up interval. It reports false when
// a batch failed (the loop backs off).
func (e *Evaluator) rescue(ctx context.Context) bool {
	for {
		claimed, _, err := e.batch(ctx, true)
		if err != nil {
			if ctx.Err() == nil {
				e.logger.Error("take over expired leases", "error", err)
				return false
			}
			return true
		}
		if claimed == 0 {
			return true
		}
	}
}

// change is a claimed change row.
type change struct {
	ID            int64
	Source        string
	RecordID      string
	Kind          string
	Version       int
	NewHash       string
	ChangedFields []string
	Record        map[string]any
	Previous      map[string]any
	Attempts      int
	// CreatedAt is the change's created_at: its evaluations carry it as
	// change_created_at (their partition key).
	CreatedAt time.Time
	// lag is the time from the change's commit to its decision, set when
	// the change was settled done (for metrics).
	lag time.Duration
}

// Batch claims and evaluates one batch; it returns the number of changes
// it completed.
func (e *Evaluator) Batch(ctx context.Context) (int, error) {
	_, n, err := e.batch(ctx, false)
	return n, err
}

// batch returns the number of changes claimed and completed. rescue claims
// only changes whose lease expired.
//
// The claim is first scoped to a transaction: the changes are locked with
// FOR UPDATE SKIP LOCKED, and every decision that needs no model is
// written and its change settled in that same transaction, so a crash
// simply rolls the claim back and each change is written once. The
// changes with a decision that needs the model are leased (eval_owner,
// eval_lease_expires_at) in that transaction too, and their deterministic
// decisions committed with it: a slow model delays no watch that does not
// use it. The model is then called outside any transaction, and the model
// decisions are committed only while this batch still holds the lease.
func (e *Evaluator) batch(ctx context.Context, rescue bool) (int, int, error) {
	return e.tracedBatch(ctx, rescue, time.Time{})
}

// BatchTrace is the timeline of one batch's claim transaction, from the
// wake-up that started it to its commit (Config.Trace).
type BatchTrace struct {
	// RecordIDs are the records of the changes the transaction settled.
	RecordIDs []string
	// Woken is when the evaluator received the wake-up (a NOTIFY, a
	// reconnect or the catch-up timer) that started the batch; zero for a
	// batch that followed another one of the same wake-up, or Drain's.
	Woken time.Time
	// Claiming is when the claim transaction began, Claimed when the claim
	// returned its changes, Evaluated when the decisions were made (before
	// their write), Committed when the transaction committed.
	Claiming, Claimed, Evaluated, Committed time.Time
}

// tracedBatch is batch; woken is when the wake-up that started it was
// received (for Config.Trace).
func (e *Evaluator) tracedBatch(ctx context.Context, rescue bool, woken time.Time) (int, int, error) {
	var trace *BatchTrace
	if e.conf.Trace != nil {
		trace = &BatchTrace{Woken: woken, Claiming: time.Now()}
	}
	tx, claimed, err := e.claim(ctx, rescue)
	if err != nil {
		return 0, 0, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if len(claimed) == 0 {
		return 0, 0, nil
	}
	if trace != nil {
		trace.Claimed = time.Now()
	}
	if rescue {
		e.logger.Info("taking over changes whose lease expired", "changes", len(claimed))
	}
	// Asked after the claim: every change claimed committed after the
	// definitions it must be judged with, so the claim transaction sees
	// them; the follower catches up only when it sees one it has not
	// applied (an indexed probe, no shared row read).
	if e.follower != nil {
		if err := e.follower.CatchUpWith(ctx, tx); err != nil {
			return 0, 0, fmt.Errorf("catch up with the definitions: %w", err)
		}
	}
	all := len(claimed)
	if claimed, err = e.holdUnbuilt(ctx, tx, claimed); err != nil {
		return 0, 0, err
	}
	if len(claimed) == 0 {
		if err := tx.Commit(ctx); err != nil {
			return 0, 0, fmt.Errorf("commit %d changes: %w", all, err)
		}
		return all, 0, nil
	}
	decided, err := e.decidedWatches(ctx, tx, claimed)
	if err != nil {
		return 0, 0, err
	}
	res := e.evaluate(claimed, decided)

	// Split the batch: the decisions that need the model, the changes they
	// belong to (leased), and everything else (committed now).
	// Without a decision for the model (a deterministic backlog) the
	// batch is all first: not copied decision by decision.
	first, model := res, []decision(nil)
	settled, leased := claimed, []*change(nil)
	if anyNeedsModel(res) {
		waiting := map[int64]bool{}
		first, settled = nil, nil
		for _, d := range res {
			if d.needsModel() {
				waiting[d.change.ID] = true
				model = append(model, d)
				continue
			}
			first = append(first, d)
		}
		for _, c := range claimed {
			if waiting[c.ID] {
				leased = append(leased, c)
			} else {
				settled = append(settled, c)
			}
		}
	}
	var owner string
	if len(leased) > 0 {
		// The lease holder is this batch, not only this process: workers of
		// one evaluator must not mistake each other's leases for their own.
		owner = fmt.Sprintf("%s#%08x", e.conf.Owner, rand.Uint32())
	}
	if trace != nil {
		trace.Evaluated = time.Now()
	}
	n, notes, err := e.commitClaim(ctx, tx, claimed, settled, leased, first, owner)
	if err != nil {
		return 0, 0, fmt.Errorf("commit %d changes: %w", len(claimed), err)
	}
	if trace != nil {
		trace.Committed = time.Now()
		for _, c := range settled {
			trace.RecordIDs = append(trace.RecordIDs, c.RecordID)
		}
		e.conf.Trace(*trace)
	}
	e.committed(settled, first, notes)
	if len(leased) == 0 {
		return all, n, nil
	}

	if err := e.judgeDecisions(ctx, leased, model, owner); err != nil {
		return all, n, err
	}
	m, notes, err := e.commit(ctx, leased, model, owner)
	if err != nil {
		return all, n, err
	}
	e.committed(leased, model, notes)
	return all, n + m, nil
}

// holdUnbuilt keeps the claimed changes of sources whose watches cannot
// all be built (index.unbuilt) pending, without an evaluation: their
// eval_error says why, and they are due again after a catch-up interval
// (a mended definition reaches this evaluator by then, and a restart with
// the missing setting takes them at once). It returns the other changes.
// Their attempts are not counted: nothing was attempted.
func (e *Evaluator) holdUnbuilt(ctx context.Context, tx pgx.Tx, claimed []*change) ([]*change, error) {
	var rest, held []*change
	var reasons []string
	why := map[string]error{}
	for _, c := range claimed {
		err, seen := why[c.Source]
		if !seen {
			err = e.index.unbuilt(c.Source)
			why[c.Source] = err
		}
		if err == nil {
			rest = append(rest, c)
			continue
		}
		held = append(held, c)
		reasons = append(reasons, err.Error()+"; the change waits until they can be built")
	}
	if len(held) == 0 {
		return claimed, nil
	}
	k := keysOf(held)
	if _, err := tx.Exec(ctx, `
		UPDATE changes SET eval_next_at = now() + $3::interval, eval_owner = NULL, eval_lease_expires_at = NULL,
		       eval_error = u.reason
		FROM unnest($1::bigint[], $2::text[]) AS u(id, reason)
		WHERE changes.id = u.id AND changes.source = ANY($4) AND changes.created_at >= $5
		  AND changes.eval_status = 'pending'`, k.ids, reasons, e.conf.CatchUpInterval, k.sources, k.since); err != nil {
		return nil, fmt.Errorf("hold the changes of sources whose watches cannot be built: %w", err)
	}
	for source, err := range why {
		if err != nil {
			e.logger.Warn("changes wait: the watches of their source cannot be built", "source", source, "error", err)
		}
	}
	e.conf.Metrics.ChangesWaiting(len(held))
	return rest, nil
}

// claim begins the claim transaction, bounds it by the lease and locks up
// to evaluator.batch_size claimable changes (rescue: only those whose lease
// expired). The caller rolls tx back or commits it.
func (e *Evaluator) claim(ctx context.Context, rescue bool) (pgx.Tx, []*change, error) {
	e.stats.ensure(ctx, e.pool, e.logger)
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("claim changes: %w", err)
	}
	sh, err := db.ShardingOf(ctx, tx)
	if err != nil {
		tx.Rollback(context.WithoutCancel(ctx))
		return nil, nil, fmt.Errorf("claim changes: %w", err)
	}
	q, cand := claimSQL, candidatesSQL
	switch {
	case rescue && sh.Distributed():
		q, cand = rescueShardSQL, rescueCandidates
	case rescue:
		q, cand = rescueSQL, rescueCandidates
	case sh.Distributed():
		q = claimShardSQL
	}
	b := &pgx.Batch{}
	e.queueBound(b)
	br := tx.SendBatch(ctx, b)
	_, err = br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	// On one PostgreSQL a claim during a backlog starts after the full
	// batches other workers hold (claimHeads); when nothing is left there,
	// it claims from the head.
	var after int64
	if !rescue && !sh.Distributed() {
		after = e.heads.after()
	}
	var claimed []*change
	if err == nil {
		claimed, err = e.claimGroups(ctx, tx, q, cand, after)
	}
	if err == nil && len(claimed) == 0 && after > 0 {
		claimed, err = e.claimGroups(ctx, tx, q, cand, 0)
	}
	if err == nil {
		err = fillSnapshots(ctx, tx, claimed)
	}
	if err != nil {
		tx.Rollback(context.WithoutCancel(ctx))
		return nil, nil, fmt.Errorf("claim changes: %w", err)
	}
	if len(claimed) >= e.conf.BatchSize {
		e.stats.backlog()
		if !rescue && !sh.Distributed() {
			return e.heads.hold(tx, claimed[len(claimed)-1].ID), claimed, nil
		}
	}
	return tx, claimed, nil
}

// claimGroups runs the claim statement q (cand: its candidates, for
// db.ClaimGroups) in tx and returns the changes it locked. after > 0
// takes only changes with a greater id (claimSQL only: claimAfterSQL).
func (e *Evaluator) claimGroups(ctx context.Context, tx pgx.Tx, q, cand string, after int64) ([]*change, error) {
	groups, err := db.ClaimGroups(ctx, tx, "changes", e.conf.BatchSize, cand, e.conf.BatchSize, nil)
	if err != nil || len(groups) == 0 {
		return nil, err
	}
	b := &pgx.Batch{}
	for _, g := range groups {
		if after > 0 && q == claimSQL {
			b.Queue(claimAfterSQL, g.Limit, g.Restriction(), after)
		} else {
			b.Queue(q, g.Limit, g.Restriction())
		}
	}
	br := tx.SendBatch(ctx, b)
	var claimed []*change
	for range groups {
		var got []*change
		if got, err = scanClaimed(br.Query()); err != nil {
			break
		}
		claimed = append(claimed, got...)
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return claimed, err
}

// queueBound queues the bounds of a transaction that holds change row
// locks: the server ends the session when the transaction sits idle, or a
// statement runs, longer than the lease. A frozen evaluator (SIGSTOP, a
// half-open connection) so releases its claim within the lease, like an
// expired lease, instead of holding the changes, and every later change of
// their records, until it resumes.
func (e *Evaluator) queueBound(b *pgx.Batch) {
	ms := strconv.FormatInt(max(e.conf.Lease.Milliseconds(), 1), 10)
	b.Queue(`SELECT set_config('idle_in_transaction_session_timeout', $1, true), set_config('statement_timeout', $1, true)`, ms)
}

// commitClaim commits the claim transaction: it settles the changes of
// settled (row-locked by tx), leases those of leased to owner, writes the
// decisions decs of both, and commits. It returns the number of changes
// completed and notifications created.
//
// The deliverers are woken after the commit (wakeDeliverers), not by a
// NOTIFY of tx: PostgreSQL holds a lock through the commit of a
// transaction that NOTIFYs, WAL flush included, so the claim's commit and
// the change log writer's (which NOTIFYs the evaluators) flushed one after
// the other instead of together, and each waited for the other's flush
// (commit-to-decision (3), docs/benchmarks.md).
func (e *Evaluator) commitClaim(ctx context.Context, tx pgx.Tx, claimed, settled, leased []*change, decs []decision, owner string) (int, int, error) {
	owned := map[int64]bool{}
	completed := 0
	if len(settled) > 0 {
		var err error
		if owned, completed, err = e.settle(ctx, tx, settled, decs, "", false); err != nil {
			return 0, 0, err
		}
	}
	if len(leased) > 0 {
		if err := e.lease(ctx, tx, leased, owner); err != nil {
			return 0, 0, err
		}
		for _, c := range leased {
			owned[c.ID] = true
		}
	}
	created, err := e.enqueue(ctx, tx, decs, owned)
	if err != nil {
		return 0, 0, err
	}
	if err := e.recordEvaluations(ctx, tx, claimed, decs, owned, false); err != nil {
		return 0, 0, err
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, 0, err
	}
	if created > 0 {
		e.wakeDeliverers(ctx)
	}
	return completed, created, nil
}

// committed reports a committed part of a batch: metrics, the decision
// log lines and the delivery wake-up. Only the decisions the transaction
// wrote are reported: a fenced evaluator's are not decisions.
func (e *Evaluator) committed(claimed []*change, decs []decision, notes int) {
	e.observe(claimed, decs)
	e.logDecisions(decs)
	if e.conf.OnBatch != nil {
		e.conf.OnBatch(notes)
	}
}

// claimSQL locks up to $1 claimable changes: pending, due, not leased to a
// live evaluator, and the earliest pending change of their record (changes
// of one record are evaluated in order: an earlier pending change, leased
// to another evaluator or waiting for its retry at eval_next_at, holds the
// later ones back). A created change that left its snapshot to its record
// (migration 11) gets it from the record in the same statement, as
// changes_with_record does: no second round trip, and consistent with the
// lock (a writer that moves the record on materializes the snapshot into
// the change row first, which the lock either waits out, re-reading the
// row, or skips). The record is read above the row locks, for the
// locked rows only: the snapshot built below them (in the locking query's
// target list) was built for every candidate, and the second worker of a
// drain, which starts at the same head of the backlog, built the
// snapshots of the whole batch the first one holds before skipping it
// (docs/benchmarks.md, (4); TestClaimBuildsNoSnapshotOfALockedChange).
//
// A change at version 1 is the first change of its record (the writer
// creates a record at version 1 only when it has no row of it, under the
// source's lock, and every later change of the record has a higher
// version and a higher id; records' rows are never deleted): no earlier
// change can hold it back, and the claim takes it without the order check
// (the check is a SubPlan under the OR, run for the other changes only).
// A backlog of an initial sync is all such changes: the check's probe of
// changes_record_idx in every partition was most of its claim
// (docs/benchmarks.md, (4) on branch eval-claim;
// TestClaimChecksNoOrderOfARecordsFirstChange).
//
// The order check reads the record's changes through changes_record_idx
// (source, record_id, id), from the oldest pending change of all on
// (p.id >= the InitPlan's min(id), found at the head of
// changes_pending_idx): every pending change is at least that old, so the
// bound changes no answer, and a record's evaluated history before it,
// however long, is not read. Migration 28 dropped the partial index
// changes_pending_record_idx that served the check before, to make the
// syncer's inserts cheaper (docs/performance.md#evaluator).
//
// $2 restricts the claim to changes of those sources (NULL: every
// source). On Citus a claim runs it once per shard with the sources of
// that shard's candidates (db.ClaimGroups): every table of the statement is
// named with them, so it goes to that shard only, where Citus takes row
// locks. The oldest pending change is then the group's, still a bound
// for the group's changes.
//
// On Citus the claim keeps the snapshot in the locking statement
// (claimShardSQL): a row-locking subquery is not a statement Citus routes
// to one shard as it is.
//
// The snapshot of a change that left it to its record is not built here:
// the statement returns the record's columns (changes.SnapshotColumnsOfR,
// NULL for a change that stores its snapshot) and scanClaimed builds the
// snapshot from them (changes.RecordColumns). record_snapshot_of's jsonb,
// sent as text and parsed again by the evaluator, was about a tenth of
// PostgreSQL's CPU in a drain of created changes (docs/benchmarks.md, (4)
// on branch eval-pg). The record is probed per locked change, above the
// locks (a LATERAL subquery kept apart by OFFSET 0: a hash join reading
// records whole cannot replace the probes).
const claimSQL = `
	SELECT c.id, c.source, c.record_id, c.kind, c.version, coalesce(c.new_hash, ''), c.changed_fields,
	       c.record, c.previous, c.attempts, c.created_at, ` + changes.SnapshotColumnsOfR + `
	FROM (SELECT ch.id, ch.source, ch.record_id, ch.kind, ch.version, ch.new_hash, ch.changed_fields, ch.record,
	             ch.previous, ch.eval_attempts + 1 AS attempts, ch.created_at
	      FROM changes ch` + claimWhere + `
	      LIMIT $1
	      FOR UPDATE OF ch SKIP LOCKED) c
	LEFT JOIN LATERAL (SELECT ` + changes.SnapshotColumnsOfR + ` FROM records r
	                   WHERE c.record IS NULL AND r.source = c.source AND ($2::text[] IS NULL OR r.source = ANY($2::text[]))
	                     AND r.record_id = c.record_id AND r.version = c.version
	                   OFFSET 0) r ON true
	ORDER BY c.id`

// noRecordColumns stands for claimSQL's record columns in claimShardSQL,
// which returns the snapshot itself.
const noRecordColumns = `NULL::text, NULL::text, NULL::text, NULL::text, NULL::text, NULL::text, NULL::text[],
	       NULL::timestamptz, NULL::timestamptz, NULL::jsonb`

// claimShardSQL is claimSQL as one statement that builds the snapshots
// below its row locks: the form a Citus shard's claim runs.
const claimShardSQL = `
	SELECT ch.id, ch.source, ch.record_id, ch.kind, ch.version, coalesce(ch.new_hash, ''), ch.changed_fields,
	       coalesce(ch.record, (SELECT ` + changes.SnapshotOfR + ` FROM records r
	                            WHERE r.source = ch.source AND ($2::text[] IS NULL OR r.source = ANY($2::text[]))
	                              AND r.record_id = ch.record_id AND r.version = ch.version)),
	       ch.previous, ch.eval_attempts + 1, ch.created_at, ` + noRecordColumns + `
	FROM changes ch` + claimWhere + `
	LIMIT $1
	FOR UPDATE OF ch SKIP LOCKED`

// claimWhere is which changes claimSQL takes, in its order.
const claimWhere = `
	WHERE ch.eval_status = 'pending' AND ch.eval_next_at <= now()
	  AND ($2::text[] IS NULL OR ch.source = ANY($2::text[]))
	  AND (ch.eval_lease_expires_at IS NULL OR ch.eval_lease_expires_at < now())
	  AND (ch.version = 1 OR NOT EXISTS (
	      SELECT 1 FROM changes p
	      WHERE p.source = ch.source AND ($2::text[] IS NULL OR p.source = ANY($2::text[])) AND p.record_id = ch.record_id
	        AND p.id >= (SELECT min(o.id) FROM changes o
	                     WHERE o.eval_status = 'pending' AND ($2::text[] IS NULL OR o.source = ANY($2::text[])))
	        AND p.id < ch.id AND p.eval_status = 'pending'))
	ORDER BY ch.id`

// candidatesSQL is claimSQL's pick without its locks: the sources of the
// changes it would take now, one row per change, in its order ($2 NULL).
// On Citus, which takes row locks only in a statement routed to one shard,
// a claim reads them first (db.ClaimGroups).
const candidatesSQL = `
	SELECT ch.source FROM changes ch` + claimWhere + `
	LIMIT $1`

// rescueSQL is claimSQL for the changes whose lease expired only (a
// pending change has an owner only while it is leased); rescueCandidates
// is candidatesSQL for them.
var (
	rescueSQL        = strings.Replace(claimSQL, rescueFrom, rescueTo, 1)
	rescueShardSQL   = strings.Replace(claimShardSQL, rescueFrom, rescueTo, 1)
	rescueCandidates = strings.Replace(candidatesSQL, rescueFrom, rescueTo, 1)
)

const (
	rescueFrom = "WHERE ch.eval_status = 'pending' AND"
	rescueTo   = "WHERE ch.eval_status = 'pending' AND ch.eval_owner IS NOT NULL AND"
)

// claimAfterSQL is claimSQL for the changes after id $3 only (claimHeads).
var claimAfterSQL = strings.Replace(claimSQL, rescueFrom, "WHERE ch.eval_status = 'pending' AND ch.id > $3 AND", 1)

// changeKeys is the key of a set of claimed changes that every statement
// reading or writing them by id carries (docs/scaling.md#which-hot-path-queries-carry-the-source-key):
// their ids, their sources and the earliest of their created_at.
//
// The sources are the distribution column of a Citus cluster: a statement
// that names them goes to the shards that hold them, not to every shard.
// On one PostgreSQL they are a filter on rows already found by id.
//
// created_at is the partition key of changes (change_created_at that of
// evaluations): "created_at >= since" lets PostgreSQL skip every weekly
// partition before the batch's oldest change, at plan time with the
// values and at executor startup under a generic plan (a cached prepared
// statement), where the ids alone probe every partition's index. It is a
// lower bound only, on purpose: with both bounds a generic plan estimates
// the range at 0.5% of a partition and may read it through the
// created_at index, every change of the range (a syncer transaction's
// changes share one created_at), instead of probing the ids; one
// inequality is estimated at a third, and the ids' index keeps the scan.
// The partitions after since are the current week's and the empty weeks
// ahead.
type changeKeys struct {
	ids     []int64
	sources []string
	since   time.Time
}

// keysOf returns the key of cs: ids in the order of cs, the distinct
// sources sorted, and the earliest created_at (the zero time, which
// prunes nothing, when a change has none).
func keysOf(cs []*change) changeKeys {
	k := changeKeys{ids: make([]int64, len(cs))}
	seen := make(map[string]bool, len(cs))
	for i, c := range cs {
		k.ids[i] = c.ID
		if !seen[c.Source] {
			seen[c.Source] = true
			k.sources = append(k.sources, c.Source)
		}
		if i == 0 || c.CreatedAt.Before(k.since) {
			k.since = c.CreatedAt
		}
	}
	slices.Sort(k.sources)
	return k
}

// lease turns the transaction's locks on claimed into a lease held by
// owner, from the transaction's commit on.
func (e *Evaluator) lease(ctx context.Context, tx pgx.Tx, claimed []*change, owner string) error {
	k := keysOf(claimed)
	if _, err := tx.Exec(ctx, `
		UPDATE changes SET eval_owner = $2, eval_lease_expires_at = now() + $3::interval,
		       eval_attempts = eval_attempts + 1
		WHERE id = ANY($1) AND source = ANY($4) AND created_at >= $5`, k.ids, owner, e.conf.Lease, k.sources, k.since); err != nil {
		return fmt.Errorf("lease changes: %w", err)
	}
	return nil
}

// scanChanges reads change rows (claimSQL's columns without the record's) and decodes
// their snapshots. A created change whose record is still at its version
// has no snapshot of its own (changes.record is NULL): its Record stays nil
// for fillSnapshots.
func scanChanges(rows pgx.Rows, err error) ([]*change, error) {
	return scanChangeRows(rows, err, false)
}

// scanClaimed reads the rows of a claim (claimSQL's columns: scanChanges'
// and the record's, changes.SnapshotColumnsOfR) and decodes or builds
// their snapshots. A change whose snapshot neither the change nor its
// record at the change's version holds keeps a nil Record, as in
// scanChanges.
func scanClaimed(rows pgx.Rows, err error) ([]*change, error) {
	return scanChangeRows(rows, err, true)
}

// scanChangeRows is scanChanges, and with withRecord scanClaimed: the
// change's columns, then the record's when withRecord, whose snapshot
// stands for a change that stores none.
func scanChangeRows(rows pgx.Rows, err error, withRecord bool) ([]*change, error) {
	if err != nil {
		return nil, fmt.Errorf("read changes: %w", err)
	}
	defer rows.Close()
	var out []*change
	var cols changes.RecordColumns
	var snaps changes.Snapshots
	targets := make([]any, 0, 21)
	for rows.Next() {
		c := &change{}
		var rec, prev []byte
		targets = append(targets[:0], &c.ID, &c.Source, &c.RecordID, &c.Kind, &c.Version, &c.NewHash, &c.ChangedFields,
			&rec, &prev, &c.Attempts, &c.CreatedAt)
		if withRecord {
			cols = changes.RecordColumns{}
			targets = append(targets, cols.Targets()...)
		}
		if err := rows.Scan(targets...); err != nil {
			return nil, fmt.Errorf("read changes: %w", err)
		}
		if c.Record, c.Previous, err = normalize.DecodeSnapshots(rec, prev); err != nil {
			return nil, fmt.Errorf("change %d: %w", c.ID, err)
		}
		if c.Record == nil && withRecord {
			c.Record = snaps.Add(&cols)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read changes: %w", err)
	}
	if err := snaps.Finish(); err != nil {
		return nil, fmt.Errorf("read changes: record snapshot: %w", err)
	}
	return out, nil
}

// fillSnapshots gives the changes scanChanges left without a snapshot the
// one their record holds (changes_with_record, migration 11). The claim
// reads them already; this covers a query that did not. Read in one
// statement, the change and its record are consistent: the writer
// materializes the snapshot into the change in the transaction that moves
// the record on, and cannot do so while q holds the change's row lock.
func fillSnapshots(ctx context.Context, q changes.Querier, claimed []*change) error {
	var missing []*change
	byID := map[int64]*change{}
	for _, c := range claimed {
		if c.Record == nil {
			missing = append(missing, c)
			byID[c.ID] = c
		}
	}
	if len(missing) == 0 {
		return nil
	}
	k := keysOf(missing)
	rows, err := q.Query(ctx, `
		SELECT id, record FROM changes_with_record
		WHERE id = ANY($1) AND source = ANY($2) AND created_at >= $3`, k.ids, k.sources, k.since)
	if err != nil {
		return fmt.Errorf("read record snapshots: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		var rec []byte
		if err := rows.Scan(&id, &rec); err != nil {
			return fmt.Errorf("read record snapshots: %w", err)
		}
		if rec == nil {
			continue
		}
		c := byID[id]
		if c.Record, err = normalize.DecodeObject(rec); err != nil {
			return fmt.Errorf("change %d: record snapshot: %w", id, err)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read record snapshots: %w", err)
	}
	for _, c := range claimed {
		if c.Record == nil {
			return fmt.Errorf("change %d: no record snapshot: the change stores none and record %s/%s is no longer at version %d", c.ID, c.Source, c.RecordID, c.Version)
		}
	}
	return nil
}

// decision is the outcome of one (change, watch).
type decision struct {
	change  *change
	watch   *watchspec.Watch
	step    string // filter, cache, model, budget, error, dedupe
	matched bool
	verdict string // notify, skip, duplicate, hold, error
	reason  string
	urgency string

	// model step (semantic): the verdict's confidence and model call, and
	// for a held decision when to retry.
	confidence  *float64
	modelCallID *int64
	retryAt     time.Time

	dedupeKey string
	// written: the decision was written in its commit transaction (its
	// change was still this batch's); reported once that committed.
	written    bool
	noteID     *int64
	inserted   int // notifications created
	suppressed int // notifications suppressed as duplicates
}

// anyNeedsModel reports whether a decision of decs waits for the model.
func anyNeedsModel(decs []decision) bool {
	for i := range decs {
		if decs[i].needsModel() {
			return true
		}
	}
	return false
}

// evaluate runs the deterministic filter of every watch of each change,
// except the watches in decided (those a previous attempt at a held change
// already decided). Matches of watches with an ask are decided by
// judgeDecisions next.
func (e *Evaluator) evaluate(claimed []*change, decided map[int64]map[string]bool) []decision {
	// The decisions are sized at once (grown by append, their copies were
	// a tenth of a drain's allocations).
	of := make([][]*watchspec.Watch, len(claimed))
	total := 0
	for i, c := range claimed {
		of[i] = e.index.of(c.Source)
		total += len(of[i])
	}
	out := make([]decision, 0, total)
	r := watchspec.NewRunner()
	for i, c := range claimed {
		ws := of[i]
		if len(ws) == 0 {
			continue
		}
		env := whenEnv(r, c)
		for _, w := range ws {
			if decided[c.ID][w.Config.Name] {
				continue
			}
			d := decision{change: c, watch: w, step: "filter", urgency: w.Config.Urgency}
			d.matched, d.verdict, d.reason = r.Filter(w, env)
			out = append(out, d)
		}
	}
	return out
}
