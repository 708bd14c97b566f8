package notify

import (
	"bytes"
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	neturl "net/url"
	"strconv"
	"strings"
	"time"
)

// Webhook headers: a contract with receivers (docs/delivery.md).
const (
	// HeaderSignature is "sha256=<hex HMAC-SHA256 of "<timestamp>.<body>">",
	// keyed with the sink's secret; absent when the sink has none.
	HeaderSignature = "X-Lookout-Signature"
	// HeaderTimestamp is the signing time in Unix seconds.
	HeaderTimestamp = "X-Lookout-Timestamp"
	// HeaderDelivery is unique per attempt.
	HeaderDelivery = "X-Lookout-Delivery"
	// HeaderDedupeKey and HeaderIdempotencyKey carry the notification's
	// dedupe key, the same on every attempt: a receiver that sees a key
	// twice has seen a repeat.
	HeaderDedupeKey      = "X-Lookout-Dedupe-Key"
	HeaderIdempotencyKey = "Idempotency-Key"
	// HeaderAttempt is the attempt number, 1 for the first.
	HeaderAttempt = "X-Lookout-Attempt"
	// HeaderNotification is the notification id (notifications.id).
	HeaderNotification = "X-Lookout-Notification-Id"
)

// SignatureTolerance is the default age beyond which VerifySignature
// rejects a timestamp.
const SignatureTolerance = 5 * time.Minute

// Sign returns the X-Lookout-Signature value for body signed at ts.
func Sign(secret string, ts time.Time, body []byte) string {
	return "sha256=" + hex.EncodeToString(signature(secret, strconv.FormatInt(ts.Unix(), 10), body))
}

func signature(secret, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}

// Signature verification errors.
var (
	ErrSignatureMissing  = errors.New("signature or timestamp header missing")
	ErrSignatureMismatch = errors.New("signature does not match the body")
	ErrSignatureExpired  = errors.New("timestamp outside the tolerance (a replay, or clocks apart)")
)

// VerifySignature checks a webhook request: header is X-Lookout-Signature,
// timestamp is X-Lookout-Timestamp and body the raw request body. It
// rejects a timestamp further than tolerance from now (replay protection;
// tolerance <= 0 means SignatureTolerance) and compares in constant time.
// The header may list several signatures separated by commas (any match
// passes), which lets a receiver accept the old and new secret during a
// rotation by calling it once per secret.
func VerifySignature(secret, header, timestamp string, body []byte, tolerance time.Duration) error {
	return verifySignatureAt(secret, header, timestamp, body, tolerance, time.Now())
}

func verifySignatureAt(secret, header, timestamp string, body []byte, tolerance time.Duration, now time.Time) error {
	if header == "" || timestamp == "" {
		return ErrSignatureMissing
	}
	sec, err := strconv.ParseInt(timestamp, 10, 64)
	if err != nil {
		return fmt.Errorf("timestamp %q is not Unix seconds: %w", timestamp, ErrSignatureMismatch)
	}
	tolerance = cmp.Or(tolerance, SignatureTolerance)
	if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return ErrSignatureExpired
	}
	want := signature(secret, timestamp, body)
	for _, part := range strings.Split(header, ",") {
		hexSig, ok := strings.CutPrefix(strings.TrimSpace(part), "sha256=")
		if !ok {
			continue
		}
		got, err := hex.DecodeString(hexSig)
		if err == nil && hmac.Equal(got, want) {
			return nil
		}
	}
	return ErrSignatureMismatch
}

// VerifyRequest reads r's body (at most 10 MiB) and verifies its signature
// with VerifySignature; it returns the body.
func VerifyRequest(r *http.Request, secret string, tolerance time.Duration) ([]byte, error) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 10<<20))
	if err != nil {
		return nil, fmt.Errorf("read webhook body: %w", err)
	}
	return body, VerifySignature(secret, r.Header.Get(HeaderSignature), r.Header.Get(HeaderTimestamp), body, tolerance)
}

// WebhookOptions configure a webhook sink.
type WebhookOptions struct {
	// URL receives a POST of the payload JSON. Required.
	URL string
	// Secret signs the body; empty sends no signature.
	Secret string
	// Headers are sent with every request.
	Headers map[string]string
	// Concurrency sizes the connection pool (idle connections per host).
	Concurrency int
	// Client replaces the HTTP client (tests); it must not follow redirects.
	Client *http.Client
	// Now replaces the clock used for timestamps (tests).
	Now func() time.Time
}

// WebhookSink POSTs the payload JSON with signature, delivery and
// idempotency headers.
type WebhookSink struct {
	opts   WebhookOptions
	client *http.Client
}

var _ Sink = (*WebhookSink)(nil)

// NewWebhookSink returns a webhook sink.
func NewWebhookSink(o WebhookOptions) (*WebhookSink, error) {
	if !strings.HasPrefix(o.URL, "http://") && !strings.HasPrefix(o.URL, "https://") {
		return nil, errors.New("webhook url must start with http:// or https://")
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	c := o.Client
	if c == nil {
		c = newHTTPClient(o.Concurrency)
	}
	return &WebhookSink{opts: o, client: c}, nil
}

// newHTTPClient returns a client that keeps a connection per concurrent
// delivery and never follows redirects (a 3xx is an answer to report).
func newHTTPClient(concurrency int) *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = max(concurrency, 2)
	t.MaxIdleConns = max(t.MaxIdleConns, 2*concurrency)
	return &http.Client{
		Transport:     t,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// Deliver POSTs n's payload.
func (s *WebhookSink) Deliver(ctx context.Context, n *Notification) error {
	body := n.JSON()
	h := http.Header{}
	for k, v := range s.opts.Headers {
		h.Set(k, v)
	}
	h.Set("Content-Type", "application/json")
	h.Set("User-Agent", "lookout-webhook/1")
	ts := s.opts.Now()
	h.Set(HeaderTimestamp, strconv.FormatInt(ts.Unix(), 10))
	if s.opts.Secret != "" {
		h.Set(HeaderSignature, Sign(s.opts.Secret, ts, body))
	}
	h.Set(HeaderDelivery, n.DeliveryID)
	h.Set(HeaderDedupeKey, n.DedupeKey)
	h.Set(HeaderIdempotencyKey, n.DedupeKey)
	h.Set(HeaderAttempt, strconv.Itoa(n.Attempt))
	h.Set(HeaderNotification, strconv.FormatInt(n.ID, 10))
	return post(ctx, s.client, s.opts.URL, h, body, "webhook")
}

// post sends one POST and classifies the answer: 2xx is success; 408, 429
// and 5xx are retried (honouring Retry-After); 3xx and the other 4xx are
// permanent; transport errors and timeouts are retried.
func post(ctx context.Context, client *http.Client, url string, h http.Header, body []byte, what string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return &PermanentError{Err: fmt.Errorf("%s request: %w", what, err)}
	}
	req.Header = h
	resp, err := client.Do(req)
	if err != nil {
		// A *url.Error quotes the whole URL, and a webhook or Slack URL is
		// itself a credential: keep only the cause, which never holds it.
		var ue *neturl.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("%s did not answer in time: %w", what, err)
		}
		return fmt.Errorf("%s: %w", what, err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // keep the connection reusable
	code := resp.StatusCode
	if code >= 200 && code < 300 {
		return nil
	}
	err = fmt.Errorf("%s answered %s: %s", what, resp.Status, snippet(strings.TrimSpace(string(msg)), 200))
	switch {
	case code == http.StatusRequestTimeout || code == http.StatusTooManyRequests || code >= 500:
		if at, ok := parseRetryAfter(resp.Header.Get("Retry-After"), time.Now()); ok {
			return &RetryAfterError{At: at, Err: err}
		}
		return err
	case code >= 300 && code < 400:
		return &PermanentError{Err: fmt.Errorf("%s answered %s (redirect to %q): configure the final URL", what, resp.Status, resp.Header.Get("Location"))}
	default:
		return &PermanentError{Err: err}
	}
}

// parseRetryAfter reads a Retry-After value: delay seconds or an HTTP date.
func parseRetryAfter(v string, now time.Time) (time.Time, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return time.Time{}, false
	}
	if sec, err := strconv.ParseInt(v, 10, 64); err == nil {
		if sec < 0 {
			return time.Time{}, false
		}
		return now.Add(time.Duration(min(sec, int64(365*24*3600))) * time.Second), true
	}
	if t, err := http.ParseTime(v); err == nil {
		return t, true
	}
	return time.Time{}, false
}
