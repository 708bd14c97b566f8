package notify

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	neturl "net/url"
	"strconv"
	"strings"
	"time"

	"github.com/lookout-dev/lookout/internal/egress"
	"github.com/lookout-dev/lookout/internal/signature"
)

// Standard Webhooks headers (https://www.standardwebhooks.com): a contract
// with receivers (docs/delivery.md), sent unless the sink's signature is
// legacy. The scheme is internal/signature's, shared with the webhook
// ingest.
const (
	// HeaderWebhookID is the notification's dedupe key, the same on every
	// attempt: the receiver's idempotency key.
	HeaderWebhookID = signature.HeaderID
	// HeaderWebhookTimestamp is the signing time in Unix seconds.
	HeaderWebhookTimestamp = signature.HeaderTimestamp
	// HeaderWebhookSignature is "v1,<base64 HMAC-SHA256 of "<id>.<timestamp>.<body>">";
	// absent when the sink has no secret. Receivers accept a
	// space-separated list (any v1 match passes).
	HeaderWebhookSignature = signature.HeaderSignature
)

// Legacy webhook headers, sent when the sink's signature is legacy or
// both. They go away in a later release.
const (
	// HeaderSignature is "sha256=<hex HMAC-SHA256 of "<timestamp>.<body>">",
	// keyed with the sink's secret as written; absent when the sink has none.
	HeaderSignature = "X-Lookout-Signature"
	// HeaderTimestamp is the signing time in Unix seconds.
	HeaderTimestamp = "X-Lookout-Timestamp"
	// HeaderDedupeKey and HeaderIdempotencyKey carry the notification's
	// dedupe key, the same on every attempt: a receiver that sees a key
	// twice has seen a repeat.
	HeaderDedupeKey      = "X-Lookout-Dedupe-Key"
	HeaderIdempotencyKey = "Idempotency-Key"
)

// Webhook headers sent whatever the signature scheme.
const (
	// HeaderDelivery is unique per attempt.
	HeaderDelivery = "X-Lookout-Delivery"
	// HeaderAttempt is the attempt number, 1 for the first.
	HeaderAttempt = "X-Lookout-Attempt"
	// HeaderNotification is the notification id (notifications.id).
	HeaderNotification = "X-Lookout-Notification-Id"
)

// Signature schemes of a webhook sink (sinks.<name>.signature).
const (
	// SignatureStandard sends the Standard Webhooks headers only.
	SignatureStandard = "standard"
	// SignatureLegacy sends the X-Lookout-* and Idempotency-Key headers only.
	SignatureLegacy = "legacy"
	// SignatureBoth sends both sets, for receivers moving to the standard.
	SignatureBoth = "both"
)

// SecretPrefix marks a Standard Webhooks secret: "whsec_" followed by the
// base64 of the HMAC key.
const SecretPrefix = signature.SecretPrefix

// SignatureTolerance is the default age beyond which a verifier rejects a
// timestamp.
const SignatureTolerance = signature.Tolerance

// WebhookKey returns the HMAC key of a Standard Webhooks signature (see
// signature.Key).
func WebhookKey(secret string) ([]byte, error) { return signature.Key(secret) }

// SignStandard returns the webhook-signature value for a message id, a
// timestamp and a body, keyed with key (see WebhookKey).
func SignStandard(key []byte, id string, ts time.Time, body []byte) string {
	return signature.SignStandard(key, id, ts, body)
}

// SignLegacy returns the legacy X-Lookout-Signature value for body signed
// at ts with the secret as written.
func SignLegacy(secret string, ts time.Time, body []byte) string {
	return signature.SignHex([]byte(secret), []byte(strconv.FormatInt(ts.Unix(), 10)), []byte{'.'}, body)
}

// Signature verification errors.
var (
	ErrSignatureMissing  = signature.ErrMissing
	ErrSignatureMismatch = signature.ErrMismatch
	ErrSignatureExpired  = signature.ErrExpired
)

// VerifyWebhook checks a Standard Webhooks request: h holds its webhook-id,
// webhook-timestamp and webhook-signature headers and body is the raw
// request body. It rejects a timestamp further than tolerance from now
// (replay protection; tolerance <= 0 means SignatureTolerance) and
// compares in constant time. The signature header may list several
// space-separated signatures (any v1 match passes), which lets a sender
// sign with the old and the new secret during a rotation.
func VerifyWebhook(secret string, h http.Header, body []byte, tolerance time.Duration) error {
	return verifyWebhookAt(secret, h, body, tolerance, time.Now())
}

func verifyWebhookAt(secret string, h http.Header, body []byte, tolerance time.Duration, now time.Time) error {
	return signature.VerifyStandard(secret, h, body, tolerance, now)
}

// VerifyRequest reads r's body (at most 10 MiB) and verifies its Standard
// Webhooks signature with VerifyWebhook; it returns the body.
func VerifyRequest(r *http.Request, secret string, tolerance time.Duration) ([]byte, error) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 10<<20))
	if err != nil {
		return nil, fmt.Errorf("read webhook body: %w", err)
	}
	return body, VerifyWebhook(secret, r.Header, body, tolerance)
}

// VerifyLegacySignature checks a legacy webhook request: header is
// X-Lookout-Signature, timestamp is X-Lookout-Timestamp and body the raw
// request body. Like VerifyWebhook it rejects a stale timestamp and
// compares in constant time; the header may list several comma-separated
// signatures. It does not cover the dedupe key: prefer VerifyWebhook.
func VerifyLegacySignature(secret, header, timestamp string, body []byte, tolerance time.Duration) error {
	return verifyLegacyAt(secret, header, timestamp, body, tolerance, time.Now())
}

func verifyLegacyAt(secret, header, timestamp string, body []byte, tolerance time.Duration, now time.Time) error {
	if header == "" || timestamp == "" {
		return ErrSignatureMissing
	}
	if err := signature.CheckTimestamp(timestamp, tolerance, now); err != nil {
		return err
	}
	return signature.VerifyHex([]byte(secret), header, ",", []byte(timestamp), []byte{'.'}, body)
}

// WebhookOptions configure a webhook sink.
type WebhookOptions struct {
	// URL receives a POST of the payload JSON. Required.
	URL string
	// Secret signs the request: "whsec_<base64>" (Standard Webhooks), or
	// any other string, used as the HMAC key as written. Empty sends no
	// signature.
	Secret string
	// Signature is standard, legacy or both: which headers sign and
	// identify the request. Defaults to standard.
	Signature string
	// Headers are sent with every request.
	Headers map[string]string
	// Concurrency sizes the connection pool (idle connections per host).
	Concurrency int
	// Egress limits the addresses the sink connects to. Defaults to the
	// zero Policy (link-local and metadata addresses refused).
	Egress egress.Policy
	// Client replaces the HTTP client (tests); it must not follow redirects.
	Client *http.Client
	// Now replaces the clock used for timestamps (tests).
	Now func() time.Time
}

// WebhookSink POSTs the payload JSON, signed the Standard Webhooks way
// (webhook-id is the dedupe key), with delivery headers; the legacy
// X-Lookout-* signature headers on request.
type WebhookSink struct {
	opts   WebhookOptions
	signer *signature.Signer // Standard Webhooks HMAC key; nil without a secret
	client *http.Client
	// base is the headers every request starts from, built once: the
	// configured ones, Content-Type and User-Agent, keys canonical.
	base http.Header
}

// Canonical forms of the headers a delivery sets, computed once rather
// than at every request (http.Header.Set canonicalizes its key, and
// allocates for one not canonical already, as webhook-id is).
var (
	canonWebhookID        = http.CanonicalHeaderKey(HeaderWebhookID)
	canonWebhookTimestamp = http.CanonicalHeaderKey(HeaderWebhookTimestamp)
	canonWebhookSignature = http.CanonicalHeaderKey(HeaderWebhookSignature)
	canonTimestamp        = http.CanonicalHeaderKey(HeaderTimestamp)
	canonSignature        = http.CanonicalHeaderKey(HeaderSignature)
	canonDedupeKey        = http.CanonicalHeaderKey(HeaderDedupeKey)
	canonIdempotencyKey   = http.CanonicalHeaderKey(HeaderIdempotencyKey)
	canonDelivery         = http.CanonicalHeaderKey(HeaderDelivery)
	canonAttempt          = http.CanonicalHeaderKey(HeaderAttempt)
	canonNotification     = http.CanonicalHeaderKey(HeaderNotification)
)

var _ bodyOnlySink = (*WebhookSink)(nil)

// sendsStoredBody marks the webhook sink as reading only n.JSON().
func (s *WebhookSink) sendsStoredBody() {}

// NewWebhookSink returns a webhook sink.
func NewWebhookSink(o WebhookOptions) (*WebhookSink, error) {
	if !strings.HasPrefix(o.URL, "http://") && !strings.HasPrefix(o.URL, "https://") {
		return nil, errors.New("webhook url must start with http:// or https://")
	}
	o.Signature = cmp.Or(o.Signature, SignatureStandard)
	switch o.Signature {
	case SignatureStandard, SignatureLegacy, SignatureBoth:
	default:
		return nil, fmt.Errorf("webhook signature must be standard, legacy or both, not %q", o.Signature)
	}
	var signer *signature.Signer
	if o.Secret != "" {
		key, err := WebhookKey(o.Secret)
		if err != nil {
			return nil, fmt.Errorf("webhook secret: %w", err)
		}
		signer = signature.NewSigner(key)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	c := o.Client
	if c == nil {
		c = newHTTPClient(o.Concurrency, o.Egress)
	}
	base := http.Header{}
	for k, v := range o.Headers {
		base.Set(k, v)
	}
	base.Set("Content-Type", "application/json")
	base.Set("User-Agent", "lookout-webhook/1")
	return &WebhookSink{opts: o, signer: signer, client: c, base: base}, nil
}

// newHTTPClient returns a client that keeps a connection per concurrent
// delivery, dials through policy and never follows redirects (a 3xx is an
// answer to report).
func newHTTPClient(concurrency int, policy egress.Policy) *http.Client {
	t := policy.Transport()
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
	// The headers as http.Header.Set would write them, by their canonical
	// keys: the base ones (a value slice shared by every request, which
	// nothing appends to), then the delivery's, which replace a configured
	// header of the same name.
	h := make(http.Header, len(s.base)+10)
	for k, v := range s.base {
		h[k] = v
	}
	ts := s.opts.Now()
	unix := strconv.FormatInt(ts.Unix(), 10)
	if s.opts.Signature != SignatureLegacy {
		h[canonWebhookID] = []string{n.DedupeKey}
		h[canonWebhookTimestamp] = []string{unix}
		if s.signer != nil {
			h[canonWebhookSignature] = []string{s.signer.SignStandard(n.DedupeKey, ts, body)}
		}
	}
	if s.opts.Signature != SignatureStandard {
		h[canonTimestamp] = []string{unix}
		if s.opts.Secret != "" {
			h[canonSignature] = []string{SignLegacy(s.opts.Secret, ts, body)}
		}
		h[canonDedupeKey] = []string{n.DedupeKey}
		h[canonIdempotencyKey] = []string{n.DedupeKey}
	}
	h[canonDelivery] = []string{n.DeliveryID}
	h[canonAttempt] = []string{strconv.Itoa(n.Attempt)}
	h[canonNotification] = []string{strconv.FormatInt(n.ID, 10)}
	return post(ctx, s.client, n, s.opts.URL, h, body, "webhook")
}

// post sends one POST and classifies the answer: 2xx is success; 408, 429
// and 5xx are retried (honouring Retry-After); 3xx and the other 4xx are
// permanent; transport errors and timeouts are retried.
//
// The answer's status and body are recorded on n (Answered), when given.
func post(ctx context.Context, client *http.Client, n *Notification, url string, h http.Header, body []byte, what string) error {
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
	if n != nil {
		n.Answered(code, msg)
	}
	if code >= 200 && code < 300 {
		return nil
	}
	err = fmt.Errorf("%s answered %s: %s", what, resp.Status, Snippet(strings.TrimSpace(string(msg)), 200))
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

// ParseRetryAfter reads a Retry-After header value, delay seconds (at
// most a year) or an HTTP date, as the time to retry at; false when v is
// empty or neither. Sink types use it for what their channel answered.
func ParseRetryAfter(v string, now time.Time) (time.Time, bool) { return parseRetryAfter(v, now) }

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
