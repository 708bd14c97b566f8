package db

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lookout-dev/lookout/internal/service"
	"github.com/lookout-dev/lookout/internal/testsignal"
)

// Listener holds a dedicated connection that LISTENs on one channel and
// turns notifications into wake-ups. A notification is never the data: on
// every (re)connect the listener first LISTENs, then signals a wake-up so
// that the consumer drains its table and catches up on whatever it
// missed. While idle it pings the connection; when the connection fails
// it reconnects with service.Backoff.
type Listener struct {
	pool    *pgxpool.Pool
	channel string
	logger  *slog.Logger
	wake    chan struct{}

	// PingInterval is how long the connection may sit idle before it is
	// checked. Defaults to 30s.
	PingInterval time.Duration

	connected atomic.Bool
	loop      service.Loop

	// testSignals fire in tests that Init them.
	testSignals struct {
		listening testsignal.Signal[struct{}] // after every LISTEN
	}
}

// NewListener returns a listener for channel (unquoted; see ChangesChannel
// and outbox.Channel).
func NewListener(pool *pgxpool.Pool, channel string, logger *slog.Logger) *Listener {
	return &Listener{pool: pool, channel: channel, logger: logger, wake: make(chan struct{}, 1), PingInterval: 30 * time.Second}
}

// Wake delivers a value after every notification and every (re)connect.
// Wake-ups coalesce: one pending value stands for any number of events.
func (l *Listener) Wake() <-chan struct{} { return l.wake }

// Connected reports whether the LISTEN connection is up (for readiness).
func (l *Listener) Connected() bool { return l.connected.Load() }

// Start connects in the background. It returns at once; connection errors
// are logged and retried with backoff until Stop.
func (l *Listener) Start(ctx context.Context) error { return l.loop.Start(ctx, l.run) }

// Stop ends the listener and waits for it. It is safe to call more than
// once and on a listener that never started.
func (l *Listener) Stop() error { return l.loop.Stop() }

func (l *Listener) signal() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

func (l *Listener) run(ctx context.Context) error {
	backoff := service.Backoff{Min: 100 * time.Millisecond, Max: 30 * time.Second}
	for ctx.Err() == nil {
		err := l.listen(ctx)
		if l.connected.Swap(false) {
			backoff.Reset() // it had been up: start over from the shortest wait
		}
		if ctx.Err() != nil {
			return nil
		}
		wait := backoff.Next()
		l.logger.Warn("listener disconnected; reconnecting", "channel", l.channel, "error", err, "retry_in", wait)
		if !service.RetrySleep(ctx, wait) {
			return nil
		}
	}
	return nil
}

// listen runs one connection until it fails.
func (l *Listener) listen(ctx context.Context) error {
	pc, err := l.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("acquire listen connection: %w", err)
	}
	conn := pc.Hijack()
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{l.channel}.Sanitize()); err != nil {
		return fmt.Errorf("listen %s: %w", l.channel, err)
	}
	l.connected.Store(true)
	l.testSignals.listening.Signal(struct{}{})
	l.logger.Debug("listening", "channel", l.channel)
	// Catch up: anything committed while we were not listening.
	l.signal()
	for {
		wctx, cancel := context.WithTimeout(ctx, l.PingInterval)
		_, err := conn.WaitForNotification(wctx)
		cancel()
		switch {
		case err == nil:
			l.signal()
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, context.DeadlineExceeded):
			if err := conn.Ping(ctx); err != nil {
				return fmt.Errorf("ping listen connection: %w", err)
			}
		default:
			return fmt.Errorf("wait for notification: %w", err)
		}
	}
}
