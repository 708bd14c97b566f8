package notify

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/sourcegraph/conc/pool"

	"github.com/lookout-dev/lookout/internal/changes"
	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/db"
	"github.com/lookout-dev/lookout/internal/service"
)

// DelivererConfig are the deliverer's typed settings.
type DelivererConfig struct {
	// Owner identifies this replica in leases. Defaults to hostname:pid.
	Owner string
	// Lease bounds how long a claimed notification stays with this
	// replica. Defaults to 2m (it must exceed every sink timeout).
	Lease time.Duration
	// BatchSize is how many notifications are claimed at once. Defaults to 100.
	BatchSize int
	// Concurrency bounds simultaneous deliveries. Defaults to 8.
	Concurrency int
	// PollInterval is the slow timer for retries that come due. Defaults to 1s.
	PollInterval time.Duration
}

// Deliverer sends due notifications to their sinks.
type Deliverer struct {
	pool     *pgxpool.Pool
	sinks    map[string]Sink
	cfgs     map[string]*config.Sink
	conf     DelivererConfig
	logger   *slog.Logger
	wake     chan struct{}
	listener *changes.Listener
	loop     service.Loop
}

// NewDeliverer returns a deliverer for the given sinks.
func NewDeliverer(p *pgxpool.Pool, g *config.Global, sinks map[string]Sink, conf DelivererConfig, logger *slog.Logger) *Deliverer {
	if conf.Owner == "" {
		host, _ := os.Hostname()
		conf.Owner = fmt.Sprintf("%s:%d", cmp.Or(host, "deliverer"), os.Getpid())
	}
	conf.Lease = cmp.Or(conf.Lease, 2*time.Minute)
	conf.BatchSize = cmp.Or(conf.BatchSize, 100)
	conf.Concurrency = cmp.Or(conf.Concurrency, 8)
	conf.PollInterval = cmp.Or(conf.PollInterval, time.Second)
	return &Deliverer{pool: p, sinks: sinks, cfgs: g.Sinks, conf: conf, logger: logger.With("component", "deliverer"), wake: make(chan struct{}, 1)}
}

// Wake asks the deliverer to look for due notifications now.
func (d *Deliverer) Wake() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// Start delivers in the background until Stop.
func (d *Deliverer) Start(ctx context.Context) error {
	schema, err := db.CurrentSchema(ctx, d.pool)
	if err != nil {
		return err
	}
	d.listener = changes.NewListener(d.pool, db.NotificationsChannel(schema), d.logger)
	if err := d.listener.Start(ctx); err != nil {
		return err
	}
	return d.loop.Start(ctx, d.run)
}

// Stop stops delivering and waits for deliveries in progress.
func (d *Deliverer) Stop() error {
	err := d.loop.Stop()
	if d.listener != nil {
		d.listener.Stop()
	}
	return err
}

func (d *Deliverer) run(ctx context.Context) error {
	t := time.NewTicker(d.conf.PollInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-d.wake:
		case <-d.listener.Wake():
		case <-t.C:
		}
		if _, err := d.DeliverDue(ctx); err != nil && ctx.Err() == nil {
			d.logger.Error("deliver notifications", "error", err)
		}
	}
}

// DeliverDue delivers due notifications batch by batch until none is due,
// and returns how many deliveries it attempted.
func (d *Deliverer) DeliverDue(ctx context.Context) (int, error) {
	total := 0
	for {
		batch, err := d.claim(ctx)
		if err != nil {
			return total, err
		}
		if len(batch) == 0 {
			return total, nil
		}
		p := pool.New().WithMaxGoroutines(d.conf.Concurrency)
		for _, n := range batch {
			p.Go(func() { d.deliver(ctx, n) })
		}
		p.Wait()
		total += len(batch)
		if ctx.Err() != nil {
			return total, ctx.Err()
		}
	}
}

func (d *Deliverer) claim(ctx context.Context) ([]*Notification, error) {
	rows, err := d.pool.Query(ctx, `
		WITH due AS (
		    SELECT id FROM notifications
		    WHERE status = 'pending' AND next_attempt_at <= now()
		      AND (lease_expires_at IS NULL OR lease_expires_at < now())
		    ORDER BY next_attempt_at, id
		    LIMIT $1
		    FOR UPDATE SKIP LOCKED
		)
		UPDATE notifications n SET lease_owner = $2, lease_expires_at = now() + $3::interval, attempts = attempts + 1
		FROM due WHERE n.id = due.id
		RETURNING n.id, n.dedupe_key, n.sink, n.source, n.record_id, n.watch, n.title, n.body, n.urgency,
		          n.reason, n.payload, n.attempts`,
		d.conf.BatchSize, d.conf.Owner, d.conf.Lease)
	if err != nil {
		return nil, fmt.Errorf("claim notifications: %w", err)
	}
	defer rows.Close()
	var out []*Notification
	for rows.Next() {
		n := &Notification{}
		var raw []byte
		if err := rows.Scan(&n.ID, &n.DedupeKey, &n.Sink, &n.Source, &n.RecordID, &n.Watch, &n.Title, &n.Body,
			&n.Urgency, &n.Reason, &raw, &n.Attempt); err != nil {
			return nil, fmt.Errorf("claim notifications: %w", err)
		}
		if n.Payload, err = decodePayload(n.ID, raw); err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, rows.Err()
}

// deliver sends one notification and records the outcome. The outcome is
// recorded only while this replica holds the lease.
func (d *Deliverer) deliver(ctx context.Context, n *Notification) {
	logger := d.logger.With("notification_id", n.ID, "dedupe_key", n.DedupeKey, "sink", n.Sink, "attempt", n.Attempt)
	sink, sc := d.sinks[n.Sink], d.cfgs[n.Sink]
	var err error
	if sink == nil || sc == nil {
		err = &PermanentError{Err: fmt.Errorf("sink %q is not configured", n.Sink)}
	} else {
		sctx, cancel := context.WithTimeout(ctx, sc.Timeout)
		err = sink.Deliver(sctx, n)
		cancel()
	}
	if ctx.Err() != nil && err != nil {
		// Shutting down mid-delivery: leave the row to its lease; it is
		// retried, and the receiver dedupes by key.
		return
	}
	wctx := context.WithoutCancel(ctx)
	if err == nil {
		if _, err := d.pool.Exec(wctx, `
			UPDATE notifications SET status = 'delivered', delivered_at = now(), last_error = NULL,
			       lease_owner = NULL, lease_expires_at = NULL
			WHERE id = $1 AND lease_owner = $2`, n.ID, d.conf.Owner); err != nil {
			logger.Error("record delivery", "error", err)
		}
		logger.Debug("delivered")
		return
	}
	maxAttempts := SinkMaxAttempts(sc)
	var perm *PermanentError
	var ra *RetryAfterError
	next := time.Now().Add(RetryBackoff(n.Attempt))
	status := "pending"
	switch {
	case errors.As(err, &perm), n.Attempt >= maxAttempts:
		status = "dead"
	case errors.As(err, &ra) && ra.At.After(next):
		next = ra.At
	}
	if _, dbErr := d.pool.Exec(wctx, `
		UPDATE notifications SET status = $3, last_error = $4, next_attempt_at = $5,
		       lease_owner = NULL, lease_expires_at = NULL
		WHERE id = $1 AND lease_owner = $2`, n.ID, d.conf.Owner, status, err.Error(), next); dbErr != nil {
		logger.Error("record delivery failure", "error", dbErr, "delivery_error", err)
		return
	}
	if status == "dead" {
		logger.Error("notification is dead", "error", err)
	} else {
		logger.Warn("delivery failed; will retry", "error", err, "next_attempt_at", next)
	}
}

// SinkMaxAttempts is the sink's max_attempts, defaulting when cfg is nil.
func SinkMaxAttempts(cfg *config.Sink) int {
	if cfg == nil || cfg.MaxAttempts <= 0 {
		return config.SinkMaxAttemptsDefault
	}
	return cfg.MaxAttempts
}

// RetryBackoff is the wait after failed attempt n: exponential from 1s,
// capped at 1h, with jitter in [d/2, d).
func RetryBackoff(attempt int) time.Duration {
	d := time.Second << min(max(attempt-1, 0), 20)
	if d > time.Hour {
		d = time.Hour
	}
	return d/2 + rand.N(d/2+1)
}
