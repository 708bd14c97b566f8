package control

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lookout-dev/lookout/internal/db"
	"github.com/lookout-dev/lookout/internal/outbox"
	"github.com/lookout-dev/lookout/internal/service"
)

// Hub holds one LISTEN connection on the outbox channel per process and
// wakes every notification stream when rows are enqueued: a thousand open
// streams cost one connection, not a thousand. A wake-up is only a hint;
// streams read the table.
type Hub struct {
	pool   *pgxpool.Pool
	logger *slog.Logger

	mu       sync.Mutex
	subs     map[chan struct{}]struct{}
	listener *db.Listener
	loop     service.Loop
}

// NewHub returns a hub over pool.
func NewHub(pool *pgxpool.Pool, logger *slog.Logger) *Hub {
	return &Hub{pool: pool, logger: logger.With("component", "stream_hub"), subs: map[chan struct{}]struct{}{}}
}

// Subscribe returns a channel that receives a value after every wake-up
// (coalesced), and the function that ends the subscription.
func (h *Hub) Subscribe() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	h.mu.Lock()
	h.subs[ch] = struct{}{}
	h.mu.Unlock()
	return ch, func() {
		h.mu.Lock()
		delete(h.subs, ch)
		h.mu.Unlock()
	}
}

// Listening reports whether the LISTEN connection is up (for /readyz).
func (h *Hub) Listening() bool {
	h.mu.Lock()
	l := h.listener
	h.mu.Unlock()
	return l != nil && l.Connected()
}

// Start connects the listener and fans its wake-ups out in the background.
func (h *Hub) Start(ctx context.Context) error {
	schema, err := db.CurrentSchema(ctx, h.pool)
	if err != nil {
		return fmt.Errorf("start notification hub: %w", err)
	}
	l := db.NewListener(h.pool, outbox.Channel(schema), h.logger)
	if err := l.Start(ctx); err != nil {
		return fmt.Errorf("start notification hub: %w", err)
	}
	h.mu.Lock()
	h.listener = l
	h.mu.Unlock()
	return h.loop.Start(ctx, func(ctx context.Context) error {
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-l.Wake():
				h.broadcast()
			}
		}
	})
}

func (h *Hub) broadcast() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch := range h.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// Stop ends the hub; it is idempotent and safe on a hub never started.
func (h *Hub) Stop() error {
	err := h.loop.Stop()
	h.mu.Lock()
	l := h.listener
	h.mu.Unlock()
	if l != nil {
		if lerr := l.Stop(); lerr != nil && err == nil {
			err = lerr
		}
	}
	return err
}

// Done is closed when the hub's loop ends.
func (h *Hub) Done() <-chan struct{} { return h.loop.Done() }
