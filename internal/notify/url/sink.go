package url

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	neturl "net/url"
	"strings"
	"time"

	"github.com/lookout-dev/lookout/internal/egress"
	"github.com/lookout-dev/lookout/internal/notify"
	"github.com/lookout-dev/lookout/internal/notify/channel"
	"github.com/lookout-dev/lookout/internal/redact"
)

// Options configure a url sink.
type Options struct {
	// URL is the notification URL. Required.
	URL string
	// Concurrency sizes the connection pool. Defaults to 2 idle
	// connections.
	Concurrency int
	// Egress limits the addresses the sink connects to, checked on every
	// connection (lookout follows no redirect). Defaults to the zero
	// Policy (link-local and metadata addresses refused).
	Egress egress.Policy
	// APIBase replaces the API of a service whose host is not in its URL
	// (channel.DiscordAPI, channel.TelegramAPI, channel.PushoverAPI) and
	// the https host of Teams, Rocket.Chat, Google Chat and Zulip, e.g. a
	// test's fake.
	// Defaults to the service's.
	APIBase string
	// Now replaces the clock that Retry-After delays count from (tests).
	Now func() time.Time
}

// Sink sends each notification to its channel: one request (one per chat
// for Telegram), no retry of its own. The services cannot deduplicate: a
// repeat after a crash (or after a Telegram chat failed when an earlier
// one had the message) shows twice.
type Sink struct {
	ch     *channel.Channel
	base   string
	client *http.Client
	red    *redact.Redactor
	now    func() time.Time
}

var _ notify.Sink = (*Sink)(nil)

// New parses o.URL and returns its sink.
func New(o Options) (*Sink, error) {
	ch, err := channel.Parse(o.URL)
	if err != nil {
		return nil, err
	}
	t := o.Egress.Transport()
	t.MaxIdleConnsPerHost = max(o.Concurrency, 2)
	t.MaxIdleConns = max(t.MaxIdleConns, 2*o.Concurrency)
	client := &http.Client{Transport: t,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	now := o.Now
	if now == nil {
		now = time.Now
	}
	return &Sink{ch: ch, base: strings.TrimSuffix(o.APIBase, "/"), client: client, red: redact.New(ch.Secrets()...), now: now}, nil
}

// Channel is the sink's parsed URL.
func (s *Sink) Channel() *channel.Channel { return s.ch }

// Deliver sends n. Its errors never hold the URL's secrets.
func (s *Sink) Deliver(ctx context.Context, n *notify.Notification) error {
	calls, err := s.ch.Requests(n, s.base)
	if err != nil {
		return &notify.PermanentError{Err: fmt.Errorf("%s message: %w", s.ch.Service, err)}
	}
	for _, c := range calls {
		if err := s.send(ctx, n, c); err != nil {
			return s.red.Error(err)
		}
	}
	return nil
}

// send makes one call and classifies the answer: 2xx is success (and for
// Telegram "ok": true); 408, 429 and 5xx are retried, no sooner than the
// Retry-After header or the service's retry_after (Discord's seconds,
// Telegram's parameters.retry_after, Matrix's retry_after_ms); 3xx and
// the other 4xx are permanent; transport errors and timeouts are retried
// (a connection the egress policy refused is permanent). The answer's
// status and body, the URL's secrets hidden, are recorded on n
// (Answered).
func (s *Sink) send(ctx context.Context, n *notify.Notification, c channel.Request) error {
	what := s.ch.Service
	req, err := http.NewRequestWithContext(ctx, cmp.Or(c.Method, http.MethodPost), c.URL, bytes.NewReader(c.Body))
	if err != nil {
		return &notify.PermanentError{Err: fmt.Errorf("%s request: %w", what, stripURL(err))}
	}
	req.Header = c.Header
	resp, err := s.client.Do(req)
	if err != nil {
		// A *url.Error quotes the request's URL, which carries the token
		// of Discord and Telegram: keep only the cause.
		err = stripURL(err)
		var de *egress.DeniedError
		var ne net.Error
		switch {
		case errors.As(err, &de):
			return &notify.PermanentError{Err: fmt.Errorf("%s: %w", what, err)}
		case errors.As(err, &ne) && ne.Timeout() || errors.Is(err, context.DeadlineExceeded):
			return fmt.Errorf("%s did not answer in time: %w", what, err)
		}
		return fmt.Errorf("%s: %w", what, err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // keep the connection reusable
	code := resp.StatusCode
	n.Answered(code, []byte(s.red.String(string(msg))))
	var answer struct {
		OK           *bool    `json:"ok"`
		RetryAfter   *float64 `json:"retry_after"`
		RetryAfterMS *float64 `json:"retry_after_ms"` // Matrix's M_LIMIT_EXCEEDED
		Parameters   struct {
			RetryAfter *float64 `json:"retry_after"`
		} `json:"parameters"`
	}
	_ = json.Unmarshal(msg, &answer)
	if code >= 200 && code < 300 && (answer.OK == nil || *answer.OK) {
		return nil
	}
	err = fmt.Errorf("%s answered %s: %s", what, resp.Status, notify.Snippet(strings.TrimSpace(string(msg)), 300))
	switch {
	case code >= 200 && code < 300:
		return &notify.PermanentError{Err: err} // Telegram's "ok": false
	case code == http.StatusRequestTimeout || code == http.StatusTooManyRequests || code >= 500:
		now := s.now()
		if at, ok := notify.ParseRetryAfter(resp.Header.Get("Retry-After"), now); ok {
			return &notify.RetryAfterError{At: at, Err: err}
		}
		if ms := answer.RetryAfterMS; ms != nil {
			sec := *ms / 1000
			answer.RetryAfter = &sec
		}
		for _, sec := range []*float64{answer.RetryAfter, answer.Parameters.RetryAfter} {
			if sec != nil && *sec >= 0 && !math.IsInf(*sec, 0) {
				d := time.Duration(math.Min(*sec, 24*3600) * float64(time.Second))
				return &notify.RetryAfterError{At: now.Add(d), Err: err}
			}
		}
		return err
	case code >= 300 && code < 400:
		return &notify.PermanentError{Err: fmt.Errorf("%s answered %s (a redirect): check the URL's host", what, resp.Status)}
	default:
		return &notify.PermanentError{Err: err}
	}
}

// stripURL returns the cause of a *url.Error, which quotes the URL.
func stripURL(err error) error {
	var ue *neturl.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}
