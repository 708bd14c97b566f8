package syncer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/lookout-dev/lookout/internal/connectors"
	"github.com/lookout-dev/lookout/internal/metrics"
	"github.com/lookout-dev/lookout/internal/service"
)

// DefaultBlock is how long a host is blocked after a 429 that names no
// time (no Retry-After, no X-RateLimit-Reset).
const DefaultBlock = time.Minute

// MaxBlock caps the time a host may ask us to stay away, so that a
// nonsensical Retry-After cannot silence a host for a year.
const MaxBlock = 24 * time.Hour

// politeTransport is the http.RoundTripper the syncer gives a source's
// connector. Before each request it waits for the source's own token
// bucket (a local rate.Limiter: a source runs on one replica at a time)
// and for its host's budget (hostBudget, shared by every source and
// replica through Postgres); a host that answered 429 or 5xx with a time, or
// X-RateLimit-Remaining: 0 with a reset time, is not called again before
// that time by anyone. A wait longer than maxWait is not waited out: the
// request fails with a *connectors.RetryLaterError and the run is deferred,
// to resume from its cursor. Every request is bounded by timeout, waits
// for budgets excluded.
//
// A syncer holds one per source, so it is small: what every source of
// the syncer shares is in *transportShared, and the token bucket is made
// by the source's first request (a source not run yet holds none).
type politeTransport struct {
	*transportShared
	// source names the source, in redirect errors.
	source string
	logger *slog.Logger
	// limiter is the source's token bucket of perSecond and burst;
	// nil until the first request (see sourceLimiter).
	limiter   atomic.Pointer[rate.Limiter]
	perSecond rate.Limit
	burst     int32
	// redirects is the source's follow_redirects (checkRedirect).
	redirects redirectMode
	timeout   time.Duration
}

// transportShared is the part of politeTransport every source of a syncer
// (of one egress policy) shares.
type transportShared struct {
	base    http.RoundTripper
	hosts   *hostBudget // nil when the syncer has no database (config check)
	maxWait time.Duration
	now     func() time.Time
	metrics *metrics.Metrics // nil: nothing recorded
	// sleep waits out a budget's wait: service.Sleep when nil (tests
	// replace it to hold a wait open for as long as they need).
	sleep func(ctx context.Context, d time.Duration) bool
	// dial connects through the egress policy, for connectors that
	// dial themselves (connectors.Env.Dial).
	dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// sourceLimiter returns the source's token bucket, made at the first
// call.
func (t *politeTransport) sourceLimiter() *rate.Limiter {
	if l := t.limiter.Load(); l != nil {
		return l
	}
	l := rate.NewLimiter(t.perSecond, int(t.burst))
	if t.limiter.CompareAndSwap(nil, l) {
		return l
	}
	return t.limiter.Load()
}

var _ http.RoundTripper = (*politeTransport)(nil)

// wait waits d for a budget, or until ctx is done; it reports whether d
// elapsed.
func (t *politeTransport) wait(ctx context.Context, d time.Duration) bool {
	if t.sleep != nil {
		return t.sleep(ctx, d)
	}
	return service.Sleep(ctx, d)
}

// runStats collects, for the run in progress, what the transport did; it
// travels in the request context (connectors pass the run's context to
// every request, as their contract says).
type runStats struct {
	requests atomic.Int64
	waits    atomic.Int64
	mu       sync.Mutex
	blocked  time.Time // latest host block seen
}

type runStatsKey struct{}

func withRunStats(ctx context.Context, rs *runStats) context.Context {
	return context.WithValue(ctx, runStatsKey{}, rs)
}

func runStatsFrom(ctx context.Context) *runStats {
	if rs, ok := ctx.Value(runStatsKey{}).(*runStats); ok {
		return rs
	}
	return &runStats{} // a request outside a run: count into nothing
}

func (rs *runStats) noteBlock(until time.Time) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if until.After(rs.blocked) {
		rs.blocked = until
	}
}

func (rs *runStats) blockedUntil() time.Time {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return rs.blocked
}

// EnforcesTimeout tells connectors.Get that this transport applies the
// source's timeout itself, after the rate-limit waits.
func (t *politeTransport) EnforcesTimeout() bool { return t.timeout > 0 }

var _ connectors.TimeoutEnforcer = (*politeTransport)(nil)

// RoundTrip waits for the budgets, sends req with the timeout, and records
// what the response says about the host's limits.
func (t *politeTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	rs := runStatsFrom(ctx)
	host := strings.ToLower(req.URL.Host)

	if err := t.waitSource(ctx, host, rs); err != nil {
		return nil, err
	}
	key := budgetKey{host: host, credential: credentialOf(host, req.Header, req.URL)}
	if err := t.waitHost(ctx, key, rs); err != nil {
		return nil, err
	}

	var rctx context.Context
	var cancel context.CancelFunc
	if t.timeout > 0 {
		rctx, cancel = context.WithTimeout(ctx, t.timeout)
	} else {
		rctx, cancel = context.WithCancel(ctx)
	}
	resp, err := t.base.RoundTrip(req.WithContext(rctx))
	rs.requests.Add(1)
	if err != nil {
		t.metrics.UpstreamResponse(host, 0)
		cancel()
		if errors.Is(rctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil {
			if !errors.Is(err, context.DeadlineExceeded) {
				err = fmt.Errorf("%w: %w", context.DeadlineExceeded, err)
			}
			return nil, &connectors.TimeoutError{Msg: fmt.Sprintf("no response from %s within the source's timeout %s", host, t.timeout), Err: err}
		}
		return nil, err
	}
	t.metrics.UpstreamResponse(host, resp.StatusCode)
	t.observe(ctx, key, resp, rs)
	resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: cancel}
	return resp, nil
}

// waitSource waits for the source's own rate limit.
func (t *politeTransport) waitSource(ctx context.Context, host string, rs *runStats) error {
	r := t.sourceLimiter().Reserve()
	if !r.OK() {
		return fmt.Errorf("source rate limit cannot grant a request")
	}
	d := r.Delay()
	if d <= 0 {
		return nil
	}
	if limit, why := t.waitLimit(ctx); d > limit {
		r.Cancel()
		return &connectors.RetryLaterError{RetryAt: t.now().Add(d), Reason: fmt.Sprintf("source rate_limit needs a %s wait, more than %s", d.Round(time.Millisecond), why)}
	}
	rs.waits.Add(1)
	t.metrics.RateLimitWait(host, metrics.LimitSource)
	if !t.wait(ctx, d) {
		r.Cancel()
		return ctx.Err()
	}
	return nil
}

// waitHost waits for a token of the key's shared budget (its host's, or
// its host and credential's), and for a standing block of it to end.
func (t *politeTransport) waitHost(ctx context.Context, key budgetKey, rs *runStats) error {
	host := key.host
	if t.hosts == nil {
		return nil
	}
	for {
		now := t.now()
		tk, err := t.hosts.take(ctx, key, now)
		if err != nil {
			return err
		}
		if tk.blocked {
			rs.noteBlock(tk.blockedUntil)
			d := tk.blockedUntil.Sub(now)
			if limit, _ := t.waitLimit(ctx); d > limit {
				return &connectors.RetryLaterError{RetryAt: tk.blockedUntil,
					Reason: fmt.Sprintf("host %s is blocked: %s", key, tk.reason)}
			}
			rs.waits.Add(1)
			t.metrics.RateLimitWait(host, metrics.LimitBlocked)
			if !t.wait(ctx, d) {
				return ctx.Err()
			}
			continue
		}
		if limit, why := t.waitLimit(ctx); tk.wait > limit {
			if err := t.hosts.refund(context.WithoutCancel(ctx), key); err != nil {
				t.logger.Warn("refund host token", "host", host, "error", err)
			}
			return &connectors.RetryLaterError{RetryAt: now.Add(tk.wait),
				Reason: fmt.Sprintf("host %s budget needs a %s wait, more than %s", key, tk.wait.Round(time.Millisecond), why)}
		}
		if tk.wait > 0 {
			rs.waits.Add(1)
			t.metrics.RateLimitWait(host, metrics.LimitHost)
			if !t.wait(ctx, tk.wait) {
				return ctx.Err()
			}
			// A block recorded while this request waited for its turn
			// (another request's 429) holds for it too: give the token
			// back and wait for the block, then for a token again.
			until, err := t.hosts.blockedUntil(ctx, key, t.now())
			if err != nil {
				return err
			}
			if !until.IsZero() {
				if err := t.hosts.refund(context.WithoutCancel(ctx), key); err != nil {
					t.logger.Warn("refund host token", "host", host, "error", err)
				}
				continue
			}
		}
		return nil
	}
}

// waitLimit is the longest a request may wait for a budget: syncer.max_wait,
// or less when the request's context says so (connectors.WithWaitLimit: a
// task action's write right after its read) or ends sooner (a connector's
// own per-request timeout, the run's timeout): a wait that would outlast
// the request defers the run instead of failing it.
func (t *politeTransport) waitLimit(ctx context.Context) (time.Duration, string) {
	limit, why := t.maxWait, fmt.Sprintf("syncer.max_wait %s", t.maxWait)
	if d, ok := connectors.WaitLimit(ctx); ok && d < limit {
		limit, why = max(d, 0), fmt.Sprintf("the %s the request may wait", d)
	}
	if dl, ok := ctx.Deadline(); ok {
		if left := time.Until(dl); left < limit {
			limit, why = max(left, 0), fmt.Sprintf("the %s left before the request's deadline", left.Round(time.Millisecond))
		}
	}
	return limit, why
}

// observe blocks the host when the response asks us to stay away, and
// records error statuses.
func (t *politeTransport) observe(ctx context.Context, key budgetKey, resp *http.Response, rs *runStats) {
	host := key.host
	if t.hosts == nil {
		return
	}
	now := t.now()
	code := resp.StatusCode
	until, why, ok := blockUntil(resp, now)
	ctx = context.WithoutCancel(ctx)
	switch {
	case ok:
		if until.Sub(now) > MaxBlock {
			until, why = now.Add(MaxBlock), why+fmt.Sprintf(", capped to %s", MaxBlock)
		}
		rs.noteBlock(until)
		t.metrics.HostBlocked(host)
		reason := fmt.Sprintf("%s (%s)", resp.Status, why)
		if err := t.hosts.block(ctx, key, until, code, reason, now); err != nil {
			t.logger.Warn("record host block", "host", host, "error", err)
			return
		}
		t.logger.Warn("host asked us to wait", "host", host, "credential", key.credential, "status", code, "blocked_until", until.UTC().Format(time.RFC3339), "why", why)
	case code >= 400:
		if err := t.hosts.status(ctx, key, code, now); err != nil {
			t.logger.Warn("record host status", "host", host, "error", err)
		}
	}
}

// blockUntil reads when the host wants the next request: Retry-After
// (seconds or an HTTP date) on 429 and 5xx (503, Notion's 529), else X-RateLimit-Reset when
// X-RateLimit-Remaining is 0 (on any status: the budget is spent), else a
// default block for a bare 429. A 503 without Retry-After blocks nothing:
// it is an outage, handled by the run's backoff.
func blockUntil(resp *http.Response, now time.Time) (time.Time, string, bool) {
	h := resp.Header
	code := resp.StatusCode
	if code == http.StatusTooManyRequests || code >= 500 {
		if ra := strings.TrimSpace(h.Get("Retry-After")); ra != "" {
			if secs, err := strconv.ParseInt(ra, 10, 64); err == nil && secs >= 0 {
				return now.Add(time.Duration(secs) * time.Second), "Retry-After: " + ra, true
			}
			if at, err := http.ParseTime(ra); err == nil {
				return at, "Retry-After: " + ra, true
			}
		}
	}
	if strings.TrimSpace(h.Get("X-RateLimit-Remaining")) == "0" {
		if reset, ok := parseReset(h.Get("X-RateLimit-Reset"), now); ok && reset.After(now) {
			return reset, "X-RateLimit-Remaining: 0, X-RateLimit-Reset: " + h.Get("X-RateLimit-Reset"), true
		}
	}
	if code == http.StatusTooManyRequests {
		return now.Add(DefaultBlock), fmt.Sprintf("no retry time given, waiting %s", DefaultBlock), true
	}
	return time.Time{}, "", false
}

// parseReset reads X-RateLimit-Reset: Unix seconds (GitHub and most APIs),
// or, for values too small to be a date (below 10^9, i.e. before 2001),
// seconds from now.
func parseReset(v string, now time.Time) (time.Time, bool) {
	n, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	if err != nil || n < 0 {
		return time.Time{}, false
	}
	if n < 1e9 {
		return now.Add(time.Duration(n * float64(time.Second))), true
	}
	return time.Unix(0, int64(n*1e9)), true
}

// cancelOnClose releases the request's timeout context with the body.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *cancelOnClose) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}
