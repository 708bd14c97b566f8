package syncer

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lookout-dev/lookout/internal/config"
)

// hostBudget is the per-host token bucket shared by every source and every
// replica: its state is a row of host_limits, and taking a token is one
// atomic INSERT ... ON CONFLICT DO UPDATE ... RETURNING, so concurrent
// takers serialise on the row and N replicas spend one budget.
//
// The bucket works by reservation, like rate.Limiter.Reserve: a take
// always removes a token, tokens may go negative, and the taker waits
// -tokens/per_second before sending. Refill is computed from the clock of
// the replica that takes (updated_at never moves backwards, so a replica
// whose clock lags cannot refill the bucket twice).
type hostBudget struct {
	pool   *pgxpool.Pool
	limits func(host string) config.RateLimit
}

// take is the outcome of one take.
type take struct {
	// wait is how long to wait before sending; 0 when a token was free.
	wait time.Duration
	// blocked is set when the host is blocked; no token was taken.
	blocked      bool
	blockedUntil time.Time
	reason       string
}

func (b *hostBudget) take(ctx context.Context, host string, now time.Time) (take, error) {
	rl := b.limits(host)
	var tokens float64
	var until *time.Time
	var reason *string
	err := b.pool.QueryRow(ctx, `
		INSERT INTO host_limits AS h (host, per_second, burst, tokens, updated_at, requests)
		VALUES ($1, $2::double precision, $3::double precision, $3::double precision - 1, $4::timestamptz, 1)
		ON CONFLICT (host) DO UPDATE SET
		    per_second = excluded.per_second,
		    burst = excluded.burst,
		    tokens = CASE WHEN h.blocked_until > excluded.updated_at THEN h.tokens
		                  ELSE least(excluded.burst,
		                             h.tokens + greatest(0, extract(epoch FROM excluded.updated_at - h.updated_at)) * excluded.per_second) - 1
		             END,
		    updated_at = CASE WHEN h.blocked_until > excluded.updated_at THEN h.updated_at
		                      ELSE greatest(h.updated_at, excluded.updated_at) END,
		    requests = h.requests + CASE WHEN h.blocked_until > excluded.updated_at THEN 0 ELSE 1 END
		RETURNING tokens, CASE WHEN blocked_until > $4::timestamptz THEN blocked_until END, blocked_reason`,
		host, rl.PerSecond, float64(rl.Burst), now).Scan(&tokens, &until, &reason)
	if err != nil {
		return take{}, fmt.Errorf("take a token for host %s: %w", host, err)
	}
	if until != nil {
		t := take{blocked: true, blockedUntil: *until}
		if reason != nil {
			t.reason = *reason
		}
		return t, nil
	}
	if tokens >= 0 {
		return take{}, nil
	}
	return take{wait: time.Duration(-tokens / rl.PerSecond * float64(time.Second))}, nil
}

// refund gives back a token whose request was not sent.
func (b *hostBudget) refund(ctx context.Context, host string) error {
	_, err := b.pool.Exec(ctx, `
		UPDATE host_limits SET tokens = least(burst, tokens + 1), requests = greatest(requests - 1, 0)
		WHERE host = $1`, host)
	if err != nil {
		return fmt.Errorf("refund a token to host %s: %w", host, err)
	}
	return nil
}

// block records that host asked not to be called before until; a later
// block wins, an earlier one never shortens a standing block.
func (b *hostBudget) block(ctx context.Context, host string, until time.Time, status int, reason string, now time.Time) error {
	_, err := b.pool.Exec(ctx, `
		UPDATE host_limits SET
		    blocked_reason = CASE WHEN blocked_until IS NULL OR blocked_until <= $2 THEN $4 ELSE blocked_reason END,
		    blocked_until = greatest(blocked_until, $2),
		    last_status = $3, last_status_at = $5, blocks = blocks + 1
		WHERE host = $1`, host, until, status, reason, now)
	if err != nil {
		return fmt.Errorf("block host %s until %s: %w", host, until.UTC().Format(time.RFC3339), err)
	}
	return nil
}

// status records an error status seen from host.
func (b *hostBudget) status(ctx context.Context, host string, status int, now time.Time) error {
	_, err := b.pool.Exec(ctx, `UPDATE host_limits SET last_status = $2, last_status_at = $3 WHERE host = $1`, host, status, now)
	if err != nil {
		return fmt.Errorf("record status of host %s: %w", host, err)
	}
	return nil
}
