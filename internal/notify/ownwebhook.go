package notify

import (
	"context"
	"net/http"
	"time"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/egress"
)

// OwnWebhookTarget is where the own webhook of a watch is now: its URL
// and its signing secret ("whsec_...").
type OwnWebhookTarget struct {
	URL    string
	Secret string
}

// OwnWebhookOptions configure the sink of watches' own webhooks.
type OwnWebhookOptions struct {
	// Target returns the webhook of watch of source, read at each
	// delivery (a changed URL or a rotated secret applies at once). An
	// error fails the attempt; a *PermanentError (the watch is gone) makes
	// the notification dead. Required.
	Target func(ctx context.Context, source, watch string) (OwnWebhookTarget, error)
	// Concurrency sizes the connection pool. Defaults to 4.
	Concurrency int
	// Egress is the policy for untrusted destinations: the URLs are given
	// by API users, so loopback and private addresses are refused unless
	// the operator allows them (api.allow_private). It is checked on every
	// connection (after DNS resolution; lookout follows no redirect).
	Egress egress.Policy
	// Client replaces the HTTP client (tests); it must not follow redirects.
	Client *http.Client
	// Now replaces the clock used for timestamps (tests).
	Now func() time.Time
}

// OwnWebhookSink delivers the notifications of watches that have a
// webhook of their own (config.OwnWebhookSink) to that webhook, exactly as
// a webhook sink does: the payload JSON (with its owner), signed the
// Standard Webhooks way with the watch's secret (webhook-id is the dedupe
// key, also sent as Idempotency-Key), with the delivery headers; retries,
// Retry-After and dead letters are the deliverer's.
type OwnWebhookSink struct {
	opts   OwnWebhookOptions
	client *http.Client
}

var (
	_ SharedSink   = (*OwnWebhookSink)(nil)
	_ bodyOnlySink = (*OwnWebhookSink)(nil)
)

// sendsStoredBody marks the sink as reading only n.JSON(), as a webhook
// sink does.
func (s *OwnWebhookSink) sendsStoredBody() {}

// OwnWebhookPerOwner is the most notifications of one owner (the API user
// whose watches they are) that the own-webhook lane has in flight at once,
// across every evaluator replica: claimed and not yet recorded, whether
// being sent or waiting for a worker. The lane's workers are shared by
// every user, taken turn by turn — each owner's oldest due notification
// before anyone's second — so a user whose receiver hangs until the
// timeout, or answers slowly, holds at most this many of them while the
// others deliver; that user's backlog waits for its own turns.
const OwnWebhookPerOwner = 2

// PerOwner makes the own-webhook lane fair across users (SharedSink).
func (s *OwnWebhookSink) PerOwner() int { return OwnWebhookPerOwner }

// NewOwnWebhookSink returns the sink of watches' own webhooks.
func NewOwnWebhookSink(o OwnWebhookOptions) *OwnWebhookSink {
	o.Concurrency = max(o.Concurrency, 1)
	c := o.Client
	if c == nil {
		c = newHTTPClient(o.Concurrency, o.Egress)
	}
	return &OwnWebhookSink{opts: o, client: c}
}

// OwnWebhookSinkConfig is the delivery settings of the own-webhook lane:
// the defaults of a webhook sink (timeout 10s, 8 attempts) and
// concurrency 8, shared by every user's webhook, at most
// OwnWebhookPerOwner of them on one user's notifications.
func OwnWebhookSinkConfig() *config.Sink {
	return &config.Sink{Type: "webhook", Timeout: 10 * time.Second, MaxAttempts: 8, Concurrency: 8}
}

// Deliver POSTs n's payload to the webhook of n's watch.
func (s *OwnWebhookSink) Deliver(ctx context.Context, n *Notification) error {
	t, err := s.opts.Target(ctx, n.Source, n.Watch)
	if err != nil {
		return err
	}
	ws, err := NewWebhookSink(WebhookOptions{URL: t.URL, Secret: t.Secret, Signature: SignatureStandard,
		Headers: map[string]string{HeaderIdempotencyKey: n.DedupeKey}, Client: s.client, Now: s.opts.Now})
	if err != nil {
		return &PermanentError{Err: err}
	}
	return ws.Deliver(ctx, n)
}
