package control

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lookout-dev/lookout/internal/idempotency"
	"github.com/lookout-dev/lookout/internal/service"
)

// KeyPruner deletes idempotency keys older than idempotency.TTLDefault,
// once an hour (every api replica does; the DELETE is idempotent).
type KeyPruner struct {
	pool   *pgxpool.Pool
	logger *slog.Logger
	loop   service.Loop
	// Interval between prunes. Defaults to 1h.
	Interval time.Duration
}

// NewKeyPruner returns a pruner over pool.
func NewKeyPruner(pool *pgxpool.Pool, logger *slog.Logger) *KeyPruner {
	return &KeyPruner{pool: pool, logger: logger.With("component", "idempotency_pruner"), Interval: time.Hour}
}

// Start prunes in the background until Stop.
func (k *KeyPruner) Start(ctx context.Context) error {
	return k.loop.Start(ctx, func(ctx context.Context) error {
		for {
			n, err := idempotency.Prune(ctx, k.pool, idempotency.TTLDefault)
			switch {
			case err != nil && ctx.Err() == nil:
				k.logger.Warn("prune idempotency keys", "error", err)
			case n > 0:
				k.logger.Debug("pruned idempotency keys", "deleted", n)
			}
			if !service.Sleep(ctx, k.Interval) {
				return nil
			}
		}
	})
}

// Stop ends the pruner; idempotent.
func (k *KeyPruner) Stop() error { return k.loop.Stop() }

// Done is closed when the pruner's loop ends.
func (k *KeyPruner) Done() <-chan struct{} { return k.loop.Done() }
