package syncer

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/lookout-dev/lookout/internal/changes"
)

// pageWriter commits a run's batches in order on a goroutine of its own
// while the connector maps the next page (docs/acquisition.md#writing-a-runs-pages).
// The batches queued when it begins a transaction share it (group); while
// the source stores no record (fresh), batches prepared as new records
// are written with up to maxInFlight transactions in flight at once
// (writeConcurrent), any other batch after those in flight (writeInOrder).
// After the first failure it drains the queue and writes nothing more.
type pageWriter struct {
	s *Syncer
	r *run
	// fresh is whether the run's batches are prepared as new records: set
	// by the mapper's probe, cleared by a write that finds a record stored.
	fresh atomic.Bool

	jobs   chan job
	ctx    context.Context // canceled after a failure, or when the fetch returns
	cancel context.CancelFunc
	done   chan struct{} // closed when the writer has settled everything

	// Owned by the writer's goroutine; read by close after done.
	err     error         // the first write error
	written changes.Stats // the counters of the batches committed
	// flight are the transactions of new records in flight, oldest
	// first: each is written beside the ones before it and commits after
	// them.
	flight []*inflight
}

// startPageWriter starts the writer of run r's batches. The caller queues
// batches with send, calls close once the connector returned, and calls
// stop when the fetch returns.
func (s *Syncer) startPageWriter(ctx context.Context, r *run) *pageWriter {
	w := &pageWriter{s: s, r: r, jobs: make(chan job, 2), done: make(chan struct{})}
	w.ctx, w.cancel = context.WithCancel(ctx)
	go w.loop()
	return w
}

// loop writes the queued batches until the queue is closed, then waits
// for the transactions in flight.
func (w *pageWriter) loop() {
	defer close(w.done)
	defer func() {
		for len(w.flight) > 0 {
			w.settle()
		}
	}()
	for j := range w.jobs {
		if w.err != nil {
			continue // drain after a failure
		}
		group := w.group(j)
		if w.fresh.Load() && prepared(group) {
			w.writeConcurrent(group)
		} else {
			w.writeInOrder(group)
		}
	}
}

// group returns first and the batches that waited for the writer behind
// it, up to maxGroup: they share one transaction, one commit and one
// lease extension.
func (w *pageWriter) group(first job) []job {
	group := append(make([]job, 0, maxGroup), first)
	for len(group) < maxGroup {
		select {
		case next, ok := <-w.jobs:
			if !ok {
				return group
			}
			group = append(group, next)
		default:
			return group
		}
	}
	return group
}

// writeConcurrent writes a group of new records in a transaction of its
// own beside those in flight. Several cores work on the database. The
// transaction's writing slot and connection are taken here, in order: the
// ones in flight hold their own, so none waits for a later one's (no
// deadlock when many runs write at once).
func (w *pageWriter) writeConcurrent(group []job) {
	for len(w.flight) >= maxInFlight {
		w.settle()
	}
	if w.err != nil {
		return
	}
	release, conn, err := w.s.writingConn(w.ctx)
	if err != nil {
		w.settleAll()
		w.fail(fmt.Errorf("write batch: %w", err))
		return
	}
	var after *inflight
	if len(w.flight) > 0 {
		after = w.flight[len(w.flight)-1]
	}
	cur := &inflight{done: make(chan struct{})}
	go func() {
		defer close(cur.done)
		defer release()
		cur.st, cur.err = w.s.writeFresh(w.ctx, w.r, conn, group, &w.fresh, after)
	}()
	w.flight = append(w.flight, cur)
}

// writeInOrder writes a group after the transactions in flight have
// committed.
func (w *pageWriter) writeInOrder(group []job) {
	w.settleAll()
	if w.err != nil {
		return
	}
	st, err := w.s.writeBatch(w.ctx, w.r, group, &w.fresh)
	if err != nil {
		w.fail(err)
		return
	}
	w.written.Add(st)
}

// settle waits for the oldest transaction in flight and counts it, or
// records its failure.
func (w *pageWriter) settle() {
	p := w.flight[0]
	w.flight = w.flight[1:]
	<-p.done
	if p.err != nil {
		w.fail(p.err)
		return
	}
	w.written.Add(p.st)
}

// settleAll waits for every transaction in flight.
func (w *pageWriter) settleAll() {
	for len(w.flight) > 0 {
		w.settle()
	}
}

// fail records the writer's first error and cancels the writes in flight.
func (w *pageWriter) fail(err error) {
	if w.err == nil {
		w.err = err
	}
	w.cancel()
}

// send queues a batch. It returns ctx's error if ctx ends first, or
// errWriterFailed if the writer stopped after a failure.
func (w *pageWriter) send(ctx context.Context, j job) error {
	select {
	case w.jobs <- j:
		return nil
	case <-w.ctx.Done():
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return errWriterFailed
	}
}

// close ends the queue, waits for the writer to settle, and returns the
// counters of what it committed and its first error.
func (w *pageWriter) close() (changes.Stats, error) {
	close(w.jobs)
	<-w.done
	return w.written, w.err
}

// stop cancels the writer's context; call it when the fetch returns.
func (w *pageWriter) stop() {
	w.cancel()
}
