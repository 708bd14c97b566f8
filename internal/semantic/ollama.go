package semantic

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ollama/ollama/api"
	"golang.org/x/time/rate"

	"github.com/lookout-dev/lookout/internal/modelspec"
	"github.com/lookout-dev/lookout/internal/service"
)

// ErrUnavailable is returned without calling the server while it is known
// to be down: after a failed call the client fails fast for a backoff
// period (a circuit breaker), so that a batch of changes does not wait for
// one timeout per change.
var ErrUnavailable = errors.New("model server unavailable")

// ErrModelNotFound means the server does not have the model.
var ErrModelNotFound = errors.New("model not found on the server")

// Client talks to one Ollama server: chat with structured output, model
// digests from /api/tags (cached for a TTL), a rate limit, and a circuit
// breaker. It is safe for concurrent use.
type Client struct {
	api     *api.Client
	host    string
	limiter *rate.Limiter
	ttl     time.Duration
	logger  *slog.Logger
	now     func() time.Time
	// calendar is modelspec.Config.Now: the day of the budgets.
	calendar func() time.Time

	mu      sync.Mutex
	digests map[string]digestEntry
	backoff service.Backoff
	openTil time.Time
	lastErr error
}

type digestEntry struct {
	digest string
	at     time.Time
}

// NewClient returns a client for the server of c.
func NewClient(c modelspec.Config, logger *slog.Logger) (*Client, error) {
	base, err := url.Parse(c.Host)
	if err != nil {
		return nil, fmt.Errorf("ollama.host %q: %w", c.Host, err)
	}
	hc := &http.Client{Transport: statusTransport{http.DefaultTransport}}
	if c.Now == nil {
		c.Now = time.Now
	}
	return &Client{
		api:      api.NewClient(base, hc),
		host:     base.Redacted(),
		limiter:  rate.NewLimiter(rate.Limit(c.PerSecond), max(c.Burst, 1)),
		ttl:      c.DigestTTL,
		logger:   logger.With("component", "ollama"),
		now:      time.Now,
		calendar: c.Now,
		digests:  map[string]digestEntry{},
		backoff:  service.Backoff{Min: time.Second, Max: min(c.HoldMax, time.Minute)},
	}, nil
}

// Host is the server URL (without credentials).
func (c *Client) Host() string { return c.host }

// statusTransport records the HTTP status of a response in the request's
// context (see withStatus): the api package turns an error body into a
// plain error, and the breaker must tell a server failure (5xx) from a
// request the server refused (4xx).
type statusTransport struct{ next http.RoundTripper }

type statusKey struct{}

func (t statusTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	if p, ok := req.Context().Value(statusKey{}).(*int); ok && resp != nil {
		*p = resp.StatusCode
	}
	return resp, err
}

func withStatus(ctx context.Context) (context.Context, *int) {
	p := new(int)
	return context.WithValue(ctx, statusKey{}, p), p
}

// serverDown reports whether a failed request means the server (not the
// request) is the problem: no answer, a timeout, or a 5xx.
func serverDown(ctx context.Context, status int, err error) bool {
	if err == nil || ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return false
	}
	return status == 0 || status >= 500
}

func (c *Client) open() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.now().Before(c.openTil) {
		return fmt.Errorf("%w at %s until %s: %v", ErrUnavailable, c.host, c.openTil.UTC().Format(time.RFC3339), c.lastErr)
	}
	return nil
}

// report feeds the breaker with the outcome of one request.
func (c *Client) report(down bool, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !down {
		c.backoff.Reset()
		c.openTil = time.Time{}
		return
	}
	if c.now().Before(c.openTil) {
		c.lastErr = err // a request that was in flight when the breaker opened
		return
	}
	wait := c.backoff.Next()
	c.openTil = c.now().Add(wait)
	c.lastErr = err
	c.logger.Warn("model server failed; failing fast", "host", c.host, "error", err, "retry_in", wait)
}

// ResetBreaker forgets earlier failures, so that the next request goes to
// the server at once (tests; an operator's explicit retry).
func (c *Client) ResetBreaker() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.backoff.Reset()
	c.openTil = time.Time{}
	c.lastErr = nil
}

// Digest returns the digest the server reports for model in /api/tags,
// cached for the TTL. When the server cannot be asked, a digest read
// earlier is returned with no error (a cached verdict for it is still
// valid); with none, the error.
func (c *Client) Digest(ctx context.Context, model string, timeout time.Duration) (string, error) {
	c.mu.Lock()
	e, ok := c.digests[model]
	c.mu.Unlock()
	if ok && c.now().Sub(e.at) < c.ttl {
		return e.digest, nil
	}
	if err := c.open(); err != nil {
		if ok {
			return e.digest, nil
		}
		return "", err
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cctx, status := withStatus(cctx)
	list, err := c.api.List(cctx)
	if err != nil {
		err = fmt.Errorf("list models at %s: %w", c.host, err)
		c.report(serverDown(cctx, *status, err), err)
		if ok {
			c.logger.Warn("cannot refresh model digest; using the last one", "model", model, "digest", e.digest, "error", err)
			return e.digest, nil
		}
		return "", err
	}
	c.report(false, nil)
	want := qualified(model)
	var names []string
	for _, m := range list.Models {
		if m.Name == model || m.Model == model || qualified(m.Name) == want {
			if ok && e.digest != m.Digest {
				c.logger.Warn("model digest changed", "model", model, "old_digest", e.digest, "new_digest", m.Digest,
					"family", m.Details.Family, "parameter_size", m.Details.ParameterSize, "quantization", m.Details.QuantizationLevel)
			}
			c.mu.Lock()
			c.digests[model] = digestEntry{digest: m.Digest, at: c.now()}
			c.mu.Unlock()
			return m.Digest, nil
		}
		names = append(names, m.Name)
	}
	slices.Sort(names)
	return "", fmt.Errorf("%w: %q is not on %s (it has: %s); pull or create it there", ErrModelNotFound, model, c.host, strings.Join(names, ", "))
}

// qualified adds the default tag to a model name without one.
func qualified(name string) string {
	i := strings.LastIndex(name, "/")
	if !strings.Contains(name[i+1:], ":") {
		return name + ":latest"
	}
	return name
}

// Details describes a model as /api/show reports it (for explain and logs).
func (c *Client) Details(ctx context.Context, model string, timeout time.Duration) (api.ModelDetails, error) {
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := c.api.Show(cctx, &api.ShowRequest{Model: model})
	if err != nil {
		return api.ModelDetails{}, fmt.Errorf("show model %q at %s: %w", model, c.host, err)
	}
	return resp.Details, nil
}

// Reply is the server's answer to one chat request.
type Reply struct {
	Content                    string
	PromptTokens, OutputTokens int
	DoneReason                 string
	Latency                    time.Duration
}

// Chat sends one non-streaming chat request with format (the verdict
// schema), after waiting for the rate limiter. timeout bounds the request
// (not the wait). It returns ErrUnavailable without a request while the
// breaker is open, and an error wrapping context.DeadlineExceeded on a
// timeout.
func (c *Client) Chat(ctx context.Context, model string, msgs []api.Message, format json.RawMessage, opts map[string]any, timeout time.Duration) (Reply, error) {
	if err := c.open(); err != nil {
		return Reply{}, err
	}
	if err := c.limiter.Wait(ctx); err != nil {
		return Reply{}, fmt.Errorf("wait for the model rate limit: %w", err)
	}
	stream := false
	req := &api.ChatRequest{Model: model, Messages: msgs, Stream: &stream, Format: format, Options: opts}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cctx, status := withStatus(cctx)
	start := time.Now()
	var reply Reply
	got := false
	err := c.api.Chat(cctx, req, func(r api.ChatResponse) error {
		got = true
		reply.Content += r.Message.Content
		if r.Done {
			reply.PromptTokens, reply.OutputTokens, reply.DoneReason = r.PromptEvalCount, r.EvalCount, r.DoneReason
		}
		return nil
	})
	reply.Latency = time.Since(start)
	if err == nil && !got {
		err = fmt.Errorf("empty response (HTTP %d)", *status)
	}
	if err != nil {
		if cctx.Err() != nil && errors.Is(cctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil {
			err = fmt.Errorf("no answer within %s: %w", timeout, context.DeadlineExceeded)
		}
		err = fmt.Errorf("chat with %q at %s: %w", model, c.host, err)
		c.report(serverDown(cctx, *status, err), err)
		return reply, err
	}
	c.report(false, nil)
	return reply, nil
}

// Embed returns the embeddings of inputs (one vector each, in order) from
// model through /api/embed, after waiting for the rate limiter. timeout
// bounds the request. Like Chat, it returns ErrUnavailable without a
// request while the breaker is open, and a server that fails opens it.
func (c *Client) Embed(ctx context.Context, model string, inputs []string, timeout time.Duration) ([][]float32, error) {
	if err := c.open(); err != nil {
		return nil, err
	}
	if err := c.limiter.Wait(ctx); err != nil {
		return nil, fmt.Errorf("wait for the model rate limit: %w", err)
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cctx, status := withStatus(cctx)
	resp, err := c.api.Embed(cctx, &api.EmbedRequest{Model: model, Input: inputs})
	if err == nil && len(resp.Embeddings) != len(inputs) {
		err = fmt.Errorf("%d embeddings for %d inputs (HTTP %d)", len(resp.Embeddings), len(inputs), *status)
	}
	if err != nil {
		if cctx.Err() != nil && errors.Is(cctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil {
			err = fmt.Errorf("no answer within %s: %w", timeout, context.DeadlineExceeded)
		}
		err = fmt.Errorf("embed %d input(s) with %q at %s: %w", len(inputs), model, c.host, err)
		c.report(serverDown(cctx, *status, err), err)
		return nil, err
	}
	c.report(false, nil)
	return resp.Embeddings, nil
}
