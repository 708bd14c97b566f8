package service

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

func TestEveryStopsWhenFnSaysSo(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	done := make(chan struct{})
	stop := Every(context.Background(), time.Millisecond, func(context.Context) bool {
		if calls.Add(1) == 3 {
			close(done)
			return false
		}
		return true
	})
	<-done
	stop() // returns: the goroutine ended by itself
	stop() // and again
	if n := calls.Load(); n != 3 {
		t.Errorf("fn called %d times after returning false at 3", n)
	}
}

func TestEveryStopCancelsAndWaits(t *testing.T) {
	t.Parallel()
	running := make(chan struct{})
	var finished atomic.Bool
	stop := Every(context.Background(), time.Millisecond, func(ctx context.Context) bool {
		select {
		case running <- struct{}{}:
		default:
		}
		<-ctx.Done()
		finished.Store(true)
		return true
	})
	<-running
	stop()
	if !finished.Load() {
		t.Error("stop returned before fn did")
	}
}

func TestLoopLifecycle(t *testing.T) {
	t.Parallel()
	var l Loop
	if err := l.Stop(); err != nil {
		t.Fatalf("Stop before Start: %v", err)
	}
	boom := errors.New("boom")
	if err := l.Start(context.Background(), func(ctx context.Context) error { <-ctx.Done(); return boom }); err != nil {
		t.Fatal(err)
	}
	if err := l.Start(context.Background(), func(context.Context) error { return nil }); err == nil {
		t.Error("a second Start succeeded")
	}
	if err := l.Stop(); !errors.Is(err, boom) {
		t.Errorf("Stop = %v, want the loop's error", err)
	}
	if err := l.Stop(); !errors.Is(err, boom) {
		t.Errorf("second Stop = %v", err)
	}
}
