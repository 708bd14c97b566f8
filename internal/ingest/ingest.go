// Package ingest is the webhook endpoint of the api deployment:
// POST /ingest/{source}. It verifies the provider's signature over the
// raw body (github: X-Hub-Signature-256; standard: Standard Webhooks;
// hmac: a configured header), stores the delivery in inbound_events
// (internal/inbound) and answers 2xx only once that row is committed, so
// nothing is acknowledged before it is durable. A delivery id the source
// already stored answers 2xx and stores nothing. The syncer mirrors the
// stored events (docs/webhooks.md).
//
// Webhooks authenticate by signature, not by the API's bearer tokens: the
// route is mounted outside /v1. The source's webhook block is read from
// its definition (config.ParseWebhook: only that block, so the api needs
// the webhook secrets' ${ENV} and no other; the secret of a source made
// through the API is stored sealed and opened with Config.Keys) and
// cached for CacheTTL.
package ingest

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/definitions"
	"github.com/lookout-dev/lookout/internal/inbound"
	"github.com/lookout-dev/lookout/internal/metrics"
	"github.com/lookout-dev/lookout/internal/secrets"
	"github.com/lookout-dev/lookout/internal/signature"
)

// GitHub's webhook headers.
const (
	HeaderGitHubSignature = "X-Hub-Signature-256"
	HeaderGitHubDelivery  = "X-GitHub-Delivery"
	HeaderGitHubEvent     = "X-GitHub-Event"
)

// CacheTTLDefault is how long a source's webhook block is used before it
// is read again.
const CacheTTLDefault = 5 * time.Second

// Config are the ingest's settings.
type Config struct {
	// CacheTTL is how long a source's webhook block (and its absence) is
	// cached: a changed secret applies within it. Defaults to 5s.
	CacheTTL time.Duration
	// Metrics counts deliveries by outcome. Defaults to nil: nothing
	// recorded.
	Metrics *metrics.Metrics
	// Now is the clock of Standard Webhooks timestamps. Defaults to
	// time.Now.
	Now func() time.Time
	// Keys open the sealed webhook secrets of sources made through the
	// API (LOOKOUT_SECRET_KEY). Defaults to nil: such a source's
	// deliveries are answered 503 (the secret cannot be read).
	Keys *secrets.Ring
}

// Ingest serves POST /ingest/{source}.
type Ingest struct {
	pool   *pgxpool.Pool
	conf   Config
	logger *slog.Logger

	mu    sync.Mutex
	cache map[string]cached
}

// cached is a source's webhook block as last read.
type cached struct {
	hook *config.Webhook // nil: no such source, or no webhook block
	err  error           // the block does not parse in this process (an unset ${ENV})
	at   time.Time
}

// New returns the ingest over pool.
func New(pool *pgxpool.Pool, conf Config, logger *slog.Logger) *Ingest {
	conf.CacheTTL = cmp.Or(conf.CacheTTL, CacheTTLDefault)
	if conf.Now == nil {
		conf.Now = time.Now
	}
	return &Ingest{pool: pool, conf: conf, logger: logger.With("component", "ingest"), cache: map[string]cached{}}
}

// Pattern is the route the ingest serves, for an http.ServeMux.
const Pattern = "POST /ingest/{source}"

// Handler serves Pattern; mount it with mux.Handle(ingest.Pattern, h).
func (in *Ingest) Handler() http.Handler { return http.HandlerFunc(in.serve) }

// webhook returns the webhook block of source, from the cache when fresh.
func (in *Ingest) webhook(ctx context.Context, source string) (*config.Webhook, error) {
	now := time.Now()
	in.mu.Lock()
	c, ok := in.cache[source]
	in.mu.Unlock()
	if ok && now.Sub(c.at) < in.conf.CacheTTL {
		return c.hook, c.err
	}
	def, err := definitions.Lookup(ctx, in.pool, source)
	switch {
	case errors.Is(err, definitions.ErrNotFound):
		c = cached{at: now}
	case err != nil:
		return nil, err // not cached: the database may be back at the next delivery
	default:
		doc, _, perr := definitions.OpenCredentials(in.conf.Keys, def.Name, def.Definition)
		var hook *config.Webhook
		if perr == nil {
			hook, perr = config.ParseWebhook(def.Label(), doc)
		}
		c = cached{hook: hook, err: perr, at: now}
	}
	in.mu.Lock()
	if len(in.cache) > 10000 {
		clear(in.cache) // names come from the request path: bound the map
	}
	in.cache[source] = c
	in.mu.Unlock()
	return c.hook, c.err
}

// answer is what serve replies.
type answer struct {
	ID     int64  `json:"id,omitempty"`
	Status string `json:"status"`
	Detail string `json:"detail,omitempty"`
}

func (in *Ingest) serve(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	source := r.PathValue("source")
	outcome := metrics.DeliveryError
	defer func() { in.conf.Metrics.WebhookDelivery(outcome, time.Since(start)) }()

	hook, err := in.webhook(r.Context(), source)
	switch {
	case err != nil && hook == nil && !isParseError(err):
		in.logger.Error("read the source's webhook", "source", source, "error", err)
		problem(w, http.StatusServiceUnavailable, "internal", "Service Unavailable", "the event could not be stored (database unavailable); deliver it again later")
		return
	case err != nil:
		// The operator's problem (an unset ${ENV} in the api's
		// environment): logged, never shown to the caller.
		in.logger.Error("source's webhook block does not load in the api; its deliveries are refused", "source", source, "error", err)
		problem(w, http.StatusServiceUnavailable, "internal", "Service Unavailable", "the source's webhook is not configured in this deployment; the operator is told in the api's log")
		return
	case hook == nil:
		outcome = metrics.DeliveryUnknownSource
		problem(w, http.StatusNotFound, "not-found", "Not Found", fmt.Sprintf("no source %q receives webhooks here", source))
		return
	}

	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, hook.MaxBody))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		outcome = metrics.DeliveryTooLarge
		problem(w, http.StatusRequestEntityTooLarge, "body-too-large", "Content Too Large",
			fmt.Sprintf("the body is larger than this source's webhook.max_body (%d bytes)", hook.MaxBody))
		return
	case err != nil:
		outcome = metrics.DeliveryMalformed
		problem(w, http.StatusBadRequest, "malformed-request", "Bad Request", "the body could not be read: "+err.Error())
		return
	}
	sum := sha256.Sum256(body)
	ev := &inbound.Event{Source: source, PayloadHash: hex.EncodeToString(sum[:])}
	d := in.read(hook, r.Header, body, ev)
	if d.sigErr != nil {
		in.reject(w, r, ev, d.sigErr, &outcome)
		return
	}
	if d.bad != "" {
		outcome = metrics.DeliveryMalformed
		problem(w, http.StatusBadRequest, "malformed-request", "Bad Request", d.bad)
		return
	}
	ev.SignatureValid, ev.Payload = true, body
	if d.ignore != "" {
		ev.Outcome, ev.Detail = inbound.OutcomeIgnored, d.ignore
	}
	stored, err := inbound.Insert(r.Context(), in.pool, ev)
	if err != nil {
		in.logger.Error("store webhook event", "source", source, "delivery_id", ev.DeliveryID, "error", err)
		problem(w, http.StatusServiceUnavailable, "internal", "Service Unavailable", "the event could not be stored; deliver it again later")
		return
	}
	switch {
	case !stored:
		outcome = metrics.DeliveryDuplicate
		reply(w, http.StatusOK, answer{Status: "duplicate", Detail: "delivery " + ev.DeliveryID + " was already stored"})
	case d.ignore != "":
		outcome = metrics.DeliveryIgnored
		reply(w, http.StatusOK, answer{ID: ev.ID, Status: "ignored", Detail: d.ignore})
	default:
		outcome = metrics.DeliveryStored
		reply(w, http.StatusAccepted, answer{ID: ev.ID, Status: "stored"})
	}
}

// reject stores a delivery whose signature did not verify (no payload
// kept) and answers 401.
func (in *Ingest) reject(w http.ResponseWriter, r *http.Request, ev *inbound.Event, sigErr error, outcome *string) {
	*outcome = metrics.DeliveryRejected
	if ev.DeliveryID == "" {
		ev.DeliveryID = "sha256:" + ev.PayloadHash
	}
	ev.SignatureValid, ev.Payload, ev.Outcome, ev.Detail = false, nil, inbound.OutcomeRejected, sigErr.Error()
	if _, err := inbound.Insert(r.Context(), in.pool, ev); err != nil {
		in.logger.Error("store rejected webhook delivery", "source", ev.Source, "error", err)
	}
	in.logger.Warn("webhook delivery rejected", "source", ev.Source, "delivery_id", ev.DeliveryID, "reason", sigErr.Error(),
		"remote_addr", r.RemoteAddr)
	problem(w, http.StatusUnauthorized, "unauthorized", "Unauthorized", "the webhook signature does not verify: "+sigErr.Error())
}

// delivery is what read found in a request.
type delivery struct {
	sigErr error  // the signature does not verify
	bad    string // malformed: why (400)
	ignore string // stored as ignored: why
}

// read verifies the signature of a delivery and fills ev's delivery id,
// type, action and object id from its headers and payload.
func (in *Ingest) read(hook *config.Webhook, h http.Header, body []byte, ev *inbound.Event) delivery {
	var d delivery
	switch hook.Provider {
	case config.WebhookGitHub:
		ev.DeliveryID, ev.Type = h.Get(HeaderGitHubDelivery), h.Get(HeaderGitHubEvent)
		if err := signature.VerifyHex([]byte(hook.Secret), h.Get(HeaderGitHubSignature), ",", body); err != nil {
			d.sigErr = fmt.Errorf("%s: %w", HeaderGitHubSignature, err)
			return d
		}
	case config.WebhookStandard:
		ev.DeliveryID = h.Get(signature.HeaderID)
		if err := signature.VerifyStandard(hook.Secret, h, body, hook.Tolerance, in.conf.Now()); err != nil {
			d.sigErr = err
			return d
		}
	case config.WebhookHMAC:
		if hook.IDHeader != "" {
			ev.DeliveryID = h.Get(hook.IDHeader)
		}
		if err := signature.VerifyHex([]byte(hook.Secret), h.Get(hook.Header), ",", body); err != nil {
			d.sigErr = fmt.Errorf("%s: %w", hook.Header, err)
			return d
		}
	}
	payload, err := decodeObject(body)
	if err != nil {
		d.bad = "the body is not a JSON object: " + err.Error()
		return d
	}
	if ev.DeliveryID == "" {
		if hook.Provider == config.WebhookGitHub {
			d.bad = "the " + HeaderGitHubDelivery + " header is required"
			return d
		}
		ev.DeliveryID = "sha256:" + ev.PayloadHash
	}
	if len(ev.DeliveryID) > 200 {
		d.bad = "the delivery id is longer than 200 characters"
		return d
	}
	if action, ok := payload["action"].(string); ok {
		ev.Action = action
	}
	if hook.Provider == config.WebhookGitHub {
		switch {
		case ev.Type == "":
			d.bad = "the " + HeaderGitHubEvent + " header is required"
		case ev.Type == "ping":
			d.ignore = "ping: the webhook is set up"
		case !hook.Maps(ev.Type):
			d.ignore = fmt.Sprintf("event %s is not mapped by this source (webhook.events)", ev.Type)
		}
		for _, key := range []string{"issue", "pull_request"} {
			if obj, ok := payload[key].(map[string]any); ok {
				if n, ok := obj["number"].(json.Number); ok {
					ev.ObjectID = n.String()
					break
				}
			}
		}
		return d
	}
	// Standard Webhooks payloads: {"type": ..., "timestamp": ..., "data": {...}}.
	ev.Type, _ = payload["type"].(string)
	if !hook.Maps(ev.Type) {
		d.ignore = fmt.Sprintf("event type %q is not mapped by this source (webhook.events)", ev.Type)
	}
	obj := payload
	if data, ok := payload["data"].(map[string]any); ok {
		obj = data
	}
	switch id := obj["id"].(type) {
	case string:
		ev.ObjectID = id
	case json.Number:
		ev.ObjectID = id.String()
	}
	return d
}

// decodeObject decodes a JSON object, numbers as json.Number, and
// refuses trailing data.
func decodeObject(body []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("data after the JSON value")
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("data after the JSON value")
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("it is a JSON %s", kind(v))
	}
	return obj, nil
}

func kind(v any) string {
	switch v.(type) {
	case []any:
		return "array"
	case string:
		return "string"
	case json.Number:
		return "number"
	case bool:
		return "boolean"
	}
	return "null"
}

func isParseError(err error) bool {
	var ce *config.Error
	return errors.As(err, &ce)
}

// problemTypeBase matches the api's problem types (docs/api.md#errors).
const problemTypeBase = "https://lookout.dev/problems/"

func problem(w http.ResponseWriter, status int, typ, title, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"type": problemTypeBase + typ, "title": title, "status": status, "detail": detail})
}

func reply(w http.ResponseWriter, status int, a answer) {
	b, _ := json.Marshal(a)
	b = append(b, '\n')
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
