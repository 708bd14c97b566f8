package syncer

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lookout-dev/lookout/internal/config"
)

// budgetKey is what a request's budget is kept for: its host, and the
// fingerprint of the credential it carries ("" without one). Providers
// that limit per token (GitHub, Notion) give each token its own bucket.
type budgetKey struct {
	host, credential string
}

// String is how logs and errors name the key: the host, and the
// credential's fingerprint when there is one (never the secret).
func (k budgetKey) String() string {
	if k.credential == "" {
		return k.host
	}
	return k.host + " (credential " + k.credential + ")"
}

// credentialParams are the query parameters that carry a credential.
var credentialParams = []string{"access_token", "api_key", "apikey", "key", "token"}

// credentialOf returns the fingerprint of the credential a request
// carries: its Authorization header, a header whose name says API key or
// token (X-Api-Key, PRIVATE-TOKEN, X-Auth-Token, ...), or a query
// parameter named like one; "" when it carries none. The fingerprint is
// the first 12 hex digits of a salted SHA-256 of the host and the values:
// the same token gives the same key on every replica, and the key does not
// reveal the token.
func credentialOf(host string, h http.Header, u *url.URL) string {
	var parts []string
	for name, values := range h {
		n := strings.ToLower(name)
		if n == "authorization" || strings.Contains(n, "api-key") || strings.Contains(n, "apikey") ||
			strings.Contains(n, "api_key") || strings.Contains(n, "token") {
			parts = append(parts, n+"="+strings.Join(values, ","))
		}
	}
	if u != nil && u.RawQuery != "" {
		q := u.Query()
		for _, p := range credentialParams {
			if v := q.Get(p); v != "" {
				parts = append(parts, "?"+p+"="+v)
			}
		}
	}
	if len(parts) == 0 {
		return ""
	}
	slices.Sort(parts)
	sum := sha256.Sum256([]byte("lookout/host-budget\x00" + host + "\x00" + strings.Join(parts, "\x00")))
	return hex.EncodeToString(sum[:6])
}

// hostBudget is the per-host (per host and credential) token bucket
// shared by every source and every replica: its state is a row of
// host_limits, and taking a token is one atomic INSERT ... ON CONFLICT DO
// UPDATE ... RETURNING, so concurrent takers serialise on the row and N
// replicas spend one budget.
//
// The bucket works by reservation, like rate.Limiter.Reserve: a take
// always removes a token, tokens may go negative, and the taker waits
// -tokens/per_second before sending. Refill is computed from the clock of
// the replica that takes (updated_at never moves backwards, so a replica
// whose clock lags cannot refill the bucket twice).
//
// A host without a budget (a loopback host under the built-in default)
// costs no statement per request: only its blocks (Retry-After) are
// honoured, read from host_limits at most once a second per key.
type hostBudget struct {
	pool   *pgxpool.Pool
	limits func(host string) config.RateLimit

	mu      sync.Mutex
	blocked map[budgetKey]blockState // hosts without a budget
}

// blockState is what a replica knows of an unbudgeted key's block.
type blockState struct {
	checked time.Time // when host_limits was read
	until   time.Time
	reason  string
}

// blockRecheck is how long a replica trusts what it read of an
// unbudgeted key's block.
const blockRecheck = time.Second

// take is the outcome of one take.
type take struct {
	// wait is how long to wait before sending; 0 when a token was free.
	wait time.Duration
	// blocked is set when the host is blocked; no token was taken.
	blocked      bool
	blockedUntil time.Time
	reason       string
}

func (b *hostBudget) take(ctx context.Context, key budgetKey, now time.Time) (take, error) {
	rl := b.limits(key.host)
	if rl.PerSecond <= 0 {
		return b.blockOnly(ctx, key, now)
	}
	var tokens float64
	var until *time.Time
	var reason *string
	err := b.pool.QueryRow(ctx, `
		INSERT INTO host_limits AS h (host, credential, per_second, burst, tokens, updated_at, requests)
		VALUES ($1, $5, $2::double precision, $3::double precision, $3::double precision - 1, $4::timestamptz, 1)
		ON CONFLICT (host, credential) DO UPDATE SET
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
		key.host, rl.PerSecond, float64(rl.Burst), now, key.credential).Scan(&tokens, &until, &reason)
	if err != nil {
		return take{}, fmt.Errorf("take a token for host %s: %w", key, err)
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

// blockOnly checks a key without a budget for a standing block: it
// trusts a read that found none for blockRecheck, and reads again while
// the key is blocked (a block lifted by an operator counts at once).
func (b *hostBudget) blockOnly(ctx context.Context, key budgetKey, now time.Time) (take, error) {
	b.mu.Lock()
	st, ok := b.blocked[key]
	b.mu.Unlock()
	if !ok || now.Sub(st.checked) >= blockRecheck || now.Before(st.checked) || st.until.After(now) {
		var until *time.Time
		var reason *string
		err := b.pool.QueryRow(ctx, `SELECT blocked_until, blocked_reason FROM host_limits WHERE host = $1 AND credential = $2`,
			key.host, key.credential).Scan(&until, &reason)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return take{}, fmt.Errorf("read the block of host %s: %w", key, err)
		}
		st = blockState{checked: now}
		if until != nil {
			st.until = *until
		}
		if reason != nil {
			st.reason = *reason
		}
		b.remember(key, st)
	}
	if st.until.After(now) {
		return take{blocked: true, blockedUntil: st.until, reason: st.reason}, nil
	}
	return take{}, nil
}

// blockedUntil reads the key's standing block at now: when it ends, or
// the zero time when there is none.
func (b *hostBudget) blockedUntil(ctx context.Context, key budgetKey, now time.Time) (time.Time, error) {
	var until *time.Time
	err := b.pool.QueryRow(ctx, `SELECT blocked_until FROM host_limits WHERE host = $1 AND credential = $2 AND blocked_until > $3`,
		key.host, key.credential, now).Scan(&until)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return time.Time{}, nil
	case err != nil:
		return time.Time{}, fmt.Errorf("read the block of host %s: %w", key, err)
	}
	return *until, nil
}

func (b *hostBudget) remember(key budgetKey, st blockState) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.blocked == nil {
		b.blocked = map[budgetKey]blockState{}
	}
	b.blocked[key] = st
}

// refund gives back a token whose request was not sent.
func (b *hostBudget) refund(ctx context.Context, key budgetKey) error {
	_, err := b.pool.Exec(ctx, `
		UPDATE host_limits SET tokens = least(burst, tokens + 1), requests = greatest(requests - 1, 0)
		WHERE host = $1 AND credential = $2`, key.host, key.credential)
	if err != nil {
		return fmt.Errorf("refund a token to host %s: %w", key, err)
	}
	return nil
}

// block records that the key's host asked not to be called before until;
// a later block wins, an earlier one never shortens a standing block.
func (b *hostBudget) block(ctx context.Context, key budgetKey, until time.Time, status int, reason string, now time.Time) error {
	rl := b.limits(key.host)
	var standing time.Time
	var standingReason string
	err := b.pool.QueryRow(ctx, `
		INSERT INTO host_limits AS h (host, credential, per_second, burst, tokens, updated_at,
		                              blocked_until, blocked_reason, last_status, last_status_at, blocks)
		VALUES ($1, $6, $7, greatest($8, 1), greatest($8, 1), $5, $2, $4, $3, $5, 1)
		ON CONFLICT (host, credential) DO UPDATE SET
		    blocked_reason = CASE WHEN h.blocked_until IS NULL OR h.blocked_until <= $2 THEN $4 ELSE h.blocked_reason END,
		    blocked_until = greatest(h.blocked_until, $2),
		    last_status = $3, last_status_at = $5, blocks = h.blocks + 1
		RETURNING blocked_until, blocked_reason`, key.host, until, status, reason, now, key.credential,
		rl.PerSecond, float64(rl.Burst)).Scan(&standing, &standingReason)
	if err != nil {
		return fmt.Errorf("block host %s until %s: %w", key, until.UTC().Format(time.RFC3339), err)
	}
	if rl.PerSecond <= 0 {
		b.remember(key, blockState{checked: now, until: standing, reason: standingReason}) // read again while blocked
	}
	return nil
}

// status records an error status seen from the key's host.
func (b *hostBudget) status(ctx context.Context, key budgetKey, status int, now time.Time) error {
	rl := b.limits(key.host)
	_, err := b.pool.Exec(ctx, `
		INSERT INTO host_limits AS h (host, credential, per_second, burst, tokens, updated_at, last_status, last_status_at)
		VALUES ($1, $4, $5, greatest($6, 1), greatest($6, 1), $3, $2, $3)
		ON CONFLICT (host, credential) DO UPDATE SET last_status = $2, last_status_at = $3`,
		key.host, status, now, key.credential, rl.PerSecond, float64(rl.Burst))
	if err != nil {
		return fmt.Errorf("record status of host %s: %w", key, err)
	}
	return nil
}
