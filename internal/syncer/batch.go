package syncer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lookout-dev/lookout/internal/sources"
)

// A claim batch takes due sources by locking their rows (SELECT … FOR
// UPDATE SKIP LOCKED) in a transaction that stays open while their runs
// fetch, instead of writing a lease for each. A run that ends quietly
// while the transaction is open is completed in it: its source row is
// written once per run (the completion), the row lock is the fencing, and
// a replica that dies takes its locks with its connection. The batch
// ends — completions written, the runs still going leased (their lease
// written as a claim would have), committed — when every run has ended,
// when a run needs a lease (it is about to write records, or to record an
// outcome worth a sync_runs row), or after batchHold, whichever comes
// first; from then on its runs are leased runs like any other.

// batchHold is the longest a claim batch keeps its transaction open.
const batchHold = time.Second

// maxOpenBatches is how many claim batches one replica keeps open at once
// (each holds a connection); beyond it, claims lease.
const maxOpenBatches = 4

// claimBatch is an open claim transaction and its runs.
type claimBatch struct {
	s  *Syncer
	tx pgx.Tx

	mu       sync.Mutex
	open     bool           // the transaction is not ended yet
	running  map[int64]*run // runs not ended, by run id
	done     []quietRun     // quiet runs ended in the batch, to complete in it
	wake     chan struct{}  // a run ended or needs a lease
	need     bool           // a run needs a lease
	ended    chan struct{}  // closed when the batch ended; err says how
	err      error          // why the batch failed (its runs hold no lease)
	deadline time.Time
}

// claimBatch locks up to limit due sources in a new transaction and
// returns the batch that owns it (nil when nothing was due; the
// transaction is then committed: it may have spread overdue sources).
func (s *Syncer) claimBatch(ctx context.Context, limit int, asOf time.Time, spread bool) (*claimBatch, []claim, int, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("claim due sources: %w", err)
	}
	// A replica that hangs with the transaction open gives its sources
	// back after this (its connection is then closed by the server).
	if _, err := tx.Exec(ctx, `SET LOCAL idle_in_transaction_session_timeout = '60s'`); err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		return nil, nil, 0, fmt.Errorf("claim due sources: %w", err)
	}
	claims, spreadN, err := s.claimIn(ctx, tx, limit, asOf, spread, true)
	if err == nil && len(claims) == 0 {
		err = tx.Commit(ctx)
		if err == nil {
			s.claimed(nil, spreadN)
			return nil, nil, spreadN, nil
		}
	}
	if err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		return nil, nil, 0, fmt.Errorf("claim due sources: %w", err)
	}
	s.claimed(claims, spreadN)
	b := &claimBatch{s: s, tx: tx, open: true, running: map[int64]*run{}, wake: make(chan struct{}, 1),
		ended: make(chan struct{}), deadline: time.Now().Add(batchHold)}
	return b, claims, spreadN, nil
}

// add registers a run of the batch (before it starts).
func (b *claimBatch) add(r *run) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.running[r.runID] = r
	r.batch = b
}

func (b *claimBatch) signal() {
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// finishQuiet completes a quiet run in the batch if it is still open; it
// reports false when the batch ended (the run holds a lease by now, or
// the batch failed: see lease).
func (b *claimBatch) finishQuiet(q quietRun) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.open {
		return false
	}
	delete(b.running, q.c.runID)
	b.done = append(b.done, q)
	b.signal()
	return true
}

// lease makes the batch end so that r holds a lease, and waits for it.
// An error means r holds nothing (the batch failed): it must stop without
// writing.
func (b *claimBatch) lease(ctx context.Context) error {
	b.mu.Lock()
	if b.open {
		b.need = true
		b.signal()
	}
	b.mu.Unlock()
	select {
	case <-b.ended:
		return b.err
	case <-ctx.Done():
		// The batch still ends (and leases the run, or fails); wait for it,
		// since the run's outcome is recorded whatever its context.
		<-b.ended
		return b.err
	}
}

// run ends the batch when its runs ended, one needs a lease, or the hold
// is over.
func (b *claimBatch) run(ctx context.Context) {
	t := time.NewTimer(time.Until(b.deadline))
	defer t.Stop()
	for {
		b.mu.Lock()
		finished := len(b.running) == 0 || b.need
		b.mu.Unlock()
		if finished {
			break
		}
		select {
		case <-b.wake:
			continue
		case <-t.C:
		case <-ctx.Done():
		}
		break
	}
	b.end(context.WithoutCancel(ctx))
}

// end writes the completions of the quiet runs, leases the runs still
// going, and commits.
func (b *claimBatch) end(ctx context.Context) {
	s := b.s
	b.mu.Lock()
	b.open = false
	done := b.done
	var leased []*run
	for _, r := range b.running {
		leased = append(leased, r)
	}
	b.mu.Unlock()
	err := func() error {
		if len(done) > 0 {
			if err := s.completeQuietIn(ctx, b.tx, done, true); err != nil {
				return err
			}
		}
		if len(leased) > 0 {
			names, ids := make([]string, len(leased)), make([]int64, len(leased))
			for i, r := range leased {
				names[i], ids[i] = r.name, r.runID
			}
			rows, err := b.tx.Query(ctx, sources.QueryLeaseBatchRuns, names, ids, s.conf.Owner, s.conf.Now(), s.conf.Lease)
			if err != nil {
				return fmt.Errorf("lease the runs of a claim batch: %w", err)
			}
			ends := map[string]time.Time{}
			for rows.Next() {
				var name string
				var end time.Time
				if err := rows.Scan(&name, &end); err != nil {
					rows.Close()
					return fmt.Errorf("lease the runs of a claim batch: %w", err)
				}
				ends[name] = end
			}
			if err := rows.Err(); err != nil {
				return fmt.Errorf("lease the runs of a claim batch: %w", err)
			}
			for _, r := range leased {
				end := ends[r.name]
				r.leasedUntil.Store(&end)
			}
		}
		if err := b.tx.Commit(ctx); err != nil {
			return fmt.Errorf("commit a claim batch: %w", err)
		}
		return nil
	}()
	if err != nil {
		_ = b.tx.Rollback(ctx)
		b.err = fmt.Errorf("%w: %w", errBatchFailed, err)
		s.logger.Error("claim batch failed; its sources are due again", "runs", len(done)+len(leased), "error", err)
		for _, q := range done {
			s.quietFailed(q, err)
		}
	} else {
		for _, q := range done {
			s.quietDone(q)
		}
	}
	s.batchEnded()
	close(b.ended)
}

// errBatchFailed ends a run whose claim batch could not be committed: it
// holds no lease and its source is due again.
var errBatchFailed = errors.New("claim batch failed")
