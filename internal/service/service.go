// Package service is the plumbing of lookout's long-lived services. Loop
// gives a loop the Start/Stop lifecycle: Start backgrounds the loop and
// returns, Stop cancels it and blocks until it returned; Stop is
// idempotent and safe on a service that never started. Supervisor starts
// a daemon's services and stops them all when one fails; Every runs a
// heartbeat; Backoff is the one retry formula and Sleep the one
// cancellable sleep.
package service

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Loop runs fn in the background between Start and Stop.
type Loop struct {
	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
	err    error
}

// Start runs fn(ctx) in a goroutine. It fails if the loop already runs.
func (l *Loop) Start(ctx context.Context, fn func(ctx context.Context) error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done != nil {
		return errors.New("service already started")
	}
	ctx, l.cancel = context.WithCancel(ctx)
	l.done = make(chan struct{})
	go func() {
		defer close(l.done)
		err := fn(ctx)
		if errors.Is(err, context.Canceled) {
			err = nil
		}
		l.mu.Lock()
		l.err = err
		l.mu.Unlock()
	}()
	return nil
}

// Stop cancels the loop and waits for it; it returns the loop's error.
func (l *Loop) Stop() error {
	l.mu.Lock()
	cancel, done := l.cancel, l.done
	l.mu.Unlock()
	if cancel == nil {
		return nil
	}
	cancel()
	<-done
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// Done is closed when the loop returned (nil before Start).
func (l *Loop) Done() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.done
}

// Every calls fn every interval in a goroutine until the returned stop is
// called or fn returns false; stop cancels fn's context and waits for it
// to return. It is the shape of every lease heartbeat.
func Every(ctx context.Context, interval time.Duration, fn func(ctx context.Context) bool) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if !fn(ctx) {
				return
			}
		}
	}()
	return func() { cancel(); <-done }
}
