package definitions

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// wakeTimeout bounds one NOTIFY of the waker.
const wakeTimeout = 10 * time.Second

// waker sends the followers' wake-up (a NOTIFY on <schema>.config) after
// changes committed, one NOTIFY for every change that committed while
// the previous one was being sent.
//
// A NOTIFY in a change's own transaction takes PostgreSQL's NOTIFY queue
// lock at commit and holds it through the commit's WAL flush: every
// committing change that notified waited for the one before it, so the
// creates of all owners committed one at a time (measurement (7) of
// docs/benchmarks.md). Sent after the commit, from its own transaction
// (asynchronous commit: a wake-up lost in a crash is caught up by the
// followers on their reconnect and their slow timer), the wake-up is
// shared by the changes that committed before it started, and the
// changes' commits are grouped by the WAL's flushes instead.
type waker struct {
	send func(ctx context.Context) error

	mu   sync.Mutex
	next *wakeRound // the round the callers arriving now wait for; nil when none waits
	busy bool       // a goroutine is sending rounds
}

// wakeRound is one NOTIFY and the callers waiting for it.
type wakeRound struct {
	done    chan struct{}
	err     error
	waiters int // callers waiting for it
}

func newWaker(send func(ctx context.Context) error) *waker { return &waker{send: send} }

// Wake returns once a NOTIFY that started after Wake was called has been
// sent (or failed: its error), so that a follower woken by it sees every
// change committed before the call. Concurrent calls share one NOTIFY.
func (w *waker) Wake(ctx context.Context) error {
	w.mu.Lock()
	if w.next == nil {
		w.next = &wakeRound{done: make(chan struct{})}
	}
	r := w.next
	r.waiters++
	if !w.busy {
		w.busy = true
		go w.run()
	}
	w.mu.Unlock()
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		return fmt.Errorf("wake the followers of the definitions: %w", ctx.Err())
	}
}

// run sends the rounds one after the other until none waits: a round's
// callers all arrived before its NOTIFY started.
func (w *waker) run() {
	for {
		w.mu.Lock()
		r := w.next
		if r == nil {
			w.busy = false
			w.mu.Unlock()
			return
		}
		w.next = nil
		w.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), wakeTimeout)
		r.err = w.send(ctx)
		cancel()
		close(r.done)
	}
}
