package evaluator

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// headEvery is how often a claim during a backlog starts at the head of
// the pending changes all the same (claimHeads).
const headEvery = time.Second

// claimHeads keeps the workers of one evaluator from starting their
// claims at the same head of a backlog. A claim reads the pending changes
// in id order and skips those another transaction holds (SKIP LOCKED),
// but only after reading each of them and trying its lock: the second
// worker of a drain read the whole batch the first one held before it
// found its own (docs/benchmarks.md, (4) on branch eval-claim). So while
// other workers hold full batches (a backlog), a claim takes only the
// changes after the highest id they hold (claimAfterSQL).
//
// The bound only narrows a claim: the order check and the row locks are
// those of every claim, so it changes no guarantee, only which claimable
// changes a claim takes first. The changes it passes over (one committed
// late with a lower id, or one an earlier change of its record held back)
// are taken by a claim from the head: when no full batch is held, when
// the bounded claim finds nothing, and at least every headEvery.
type claimHeads struct {
	mu sync.Mutex
	// held counts the full batches held, by their highest id.
	held map[int64]int
	// head is when a claim last started at the head.
	head time.Time
}

// after returns the id a claim starts after: the highest id of the full
// batches other workers hold, or 0 (from the head).
func (h *claimHeads) after() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	var top int64
	for id := range h.held {
		top = max(top, id)
	}
	if top == 0 || time.Since(h.head) >= headEvery {
		h.head = time.Now()
		return 0
	}
	return top
}

// hold records that tx holds a full batch whose highest id is last, until
// tx ends: it returns tx, whose Commit and Rollback end the hold.
func (h *claimHeads) hold(tx pgx.Tx, last int64) pgx.Tx {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.held == nil {
		h.held = map[int64]int{}
	}
	h.held[last]++
	return &heldTx{Tx: tx, release: sync.OnceFunc(func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.held[last]--; h.held[last] <= 0 {
			delete(h.held, last)
		}
	})}
}

// heldTx is a claim transaction that holds a full batch (claimHeads.hold).
type heldTx struct {
	pgx.Tx
	release func()
}

// Commit commits the claim and ends its hold.
func (t *heldTx) Commit(ctx context.Context) error {
	defer t.release()
	return t.Tx.Commit(ctx)
}

// Rollback rolls the claim back (or does nothing after its commit) and
// ends its hold.
func (t *heldTx) Rollback(ctx context.Context) error {
	defer t.release()
	return t.Tx.Rollback(ctx)
}
