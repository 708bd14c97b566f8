package ingest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	dto "github.com/prometheus/client_model/go"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/connectors/github/githubtest"
	"github.com/lookout-dev/lookout/internal/definitions"
	"github.com/lookout-dev/lookout/internal/inbound"
	"github.com/lookout-dev/lookout/internal/ingest"
	"github.com/lookout-dev/lookout/internal/metrics"
	"github.com/lookout-dev/lookout/internal/pgtest"
	"github.com/lookout-dev/lookout/internal/signature"
)

const (
	ghSecret  = "It's a Secret to Everybody"
	stdSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	hmSecret  = "hmac-key"
)

var sources = map[string]string{
	"gh": `name: gh
connector: github
github: {repo: octo-org/hello-world}
webhook: {provider: github, secret: "` + ghSecret + `", events: [issues, issue_comment]}
`,
	"small": `name: small
connector: github
github: {repo: octo-org/hello-world}
webhook: {provider: github, secret: "` + ghSecret + `", max_body: 2048}
`,
	"std": `name: std
connector: http
http: {url: "https://example.com/items"}
webhook: {provider: standard, secret: "` + stdSecret + `", events: [item.updated]}
`,
	"hm": `name: hm
connector: http
http: {url: "https://example.com/items"}
webhook: {provider: hmac, secret: "` + hmSecret + `", header: X-Acme-Signature, id_header: X-Acme-Delivery}
`,
	"plain": `name: plain
connector: http
http: {url: "https://example.com/items"}
`,
}

type setup struct {
	t    *testing.T
	pool *pgxpool.Pool
	srv  *httptest.Server
	m    *metrics.Metrics
	gh   *githubtest.Server
}

func newSetup(t *testing.T) *setup {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "sources"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range sources {
		if err := os.WriteFile(filepath.Join(dir, "sources", name+".yaml"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := config.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	pool := pgtest.Pool(t)
	if _, err := definitions.Apply(context.Background(), pool, cfg, definitions.ApplyOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	m := metrics.New()
	mux := http.NewServeMux()
	mux.Handle(ingest.Pattern, ingest.New(pool, ingest.Config{Metrics: m}, slog.New(slog.DiscardHandler)).Handler())
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	gh := githubtest.New(t)
	gh.Seed(3)
	return &setup{t: t, pool: pool, srv: srv, m: m, gh: gh}
}

// post sends body with h to /ingest/source and returns the status and
// the decoded answer.
func (s *setup) post(source string, h http.Header, body []byte) (int, map[string]any) {
	s.t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.srv.URL+"/ingest/"+source, bytes.NewReader(body))
	if err != nil {
		s.t.Fatal(err)
	}
	for k, v := range h {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if err := json.Unmarshal(data, &out); err != nil {
		s.t.Fatalf("answer %d is not JSON: %s", resp.StatusCode, data)
	}
	if resp.StatusCode >= 400 && resp.Header.Get("Content-Type") != "application/problem+json" {
		s.t.Errorf("a %d is served as %q, want application/problem+json", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	return resp.StatusCode, out
}

func (s *setup) event(source, delivery string) *inbound.Event {
	s.t.Helper()
	e, err := inbound.Get(context.Background(), s.pool, source, delivery)
	if err != nil {
		s.t.Fatal(err)
	}
	return e
}

func (s *setup) rows(source string) int {
	s.t.Helper()
	var n int
	if err := s.pool.QueryRow(context.Background(), `SELECT count(*) FROM inbound_events WHERE source = $1`, source).Scan(&n); err != nil {
		s.t.Fatal(err)
	}
	return n
}

// deliveries reads lookout_webhook_deliveries_total{outcome}.
func (s *setup) deliveries(outcome string) float64 {
	s.t.Helper()
	families, err := s.m.Registry().Gather()
	if err != nil {
		s.t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "lookout_webhook_deliveries_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			if label(m, "outcome") == outcome {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// A signed GitHub delivery is stored with its payload before the 2xx; the
// same delivery id again answers 2xx and stores nothing.
func TestGitHubDeliveryStoredOnce(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	body := s.gh.Payload(githubtest.EventIssues, "edited", 2)
	h := githubtest.Sign(ghSecret, githubtest.EventIssues, "72d3162e-cc78-11e3-81ab-4c9367dc0958", body)
	status, ans := s.post("gh", h, body)
	if status != http.StatusAccepted || ans["status"] != "stored" {
		t.Fatalf("delivery answered %d %v, want 202 stored", status, ans)
	}
	e := s.event("gh", "72d3162e-cc78-11e3-81ab-4c9367dc0958")
	if e == nil || !e.SignatureValid || e.Type != "issues" || e.Action != "edited" || e.ObjectID != "2" || e.ProcessedAt != nil ||
		!json.Valid(e.Payload) || e.PayloadHash == "" || e.Outcome != "" {
		t.Fatalf("stored event: %+v", e)
	}
	if int64(ans["id"].(float64)) != e.ID {
		t.Errorf("answer id %v, stored id %d", ans["id"], e.ID)
	}
	for range 2 {
		status, ans = s.post("gh", h, body)
		if status != http.StatusOK || ans["status"] != "duplicate" {
			t.Errorf("repeated delivery answered %d %v, want 200 duplicate", status, ans)
		}
	}
	if n := s.rows("gh"); n != 1 {
		t.Errorf("%d rows after the delivery was repeated, want 1", n)
	}
	if s.deliveries(metrics.DeliveryStored) != 1 || s.deliveries(metrics.DeliveryDuplicate) != 2 {
		t.Errorf("metrics: stored %v, duplicate %v", s.deliveries(metrics.DeliveryStored), s.deliveries(metrics.DeliveryDuplicate))
	}
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	issues := s.gh.Payload(githubtest.EventIssues, "opened", 1)
	signed := func(event, id string, body []byte) http.Header { return githubtest.Sign(ghSecret, event, id, body) }
	tests := []struct {
		name     string
		source   string
		h        http.Header
		body     []byte
		status   int
		outcome  string // the metric's outcome
		detail   string // in the answer's detail
		rejected bool   // stored as rejected without payload
		ignored  string // stored as ignored with this detail
	}{
		{name: "bad signature", source: "gh", h: githubtest.Sign("wrong secret", "issues", "d-bad", issues), body: issues,
			status: 401, outcome: metrics.DeliveryRejected, detail: "X-Hub-Signature-256: signature does not match the body", rejected: true},
		{name: "missing signature", source: "gh", h: func() http.Header {
			h := signed("issues", "d-nosig", issues)
			h.Del("X-Hub-Signature-256")
			return h
		}(), body: issues, status: 401, outcome: metrics.DeliveryRejected, detail: "signature, id or timestamp header missing", rejected: true},
		{name: "unknown source", source: "nope", h: signed("issues", "d-404", issues), body: issues,
			status: 404, outcome: metrics.DeliveryUnknownSource, detail: `no source "nope" receives webhooks here`},
		{name: "source without webhook", source: "plain", h: signed("issues", "d-plain", issues), body: issues,
			status: 404, outcome: metrics.DeliveryUnknownSource, detail: `no source "plain" receives webhooks here`},
		{name: "body over the limit", source: "small", h: signed("issues", "d-big", bytes.Repeat([]byte(" "), 4096)), body: bytes.Repeat([]byte(" "), 4096),
			status: 413, outcome: metrics.DeliveryTooLarge, detail: "larger than this source's webhook.max_body (2048 bytes)"},
		{name: "malformed JSON", source: "gh", h: signed("issues", "d-json", []byte(`{"action": "opened",`)), body: []byte(`{"action": "opened",`),
			status: 400, outcome: metrics.DeliveryMalformed, detail: "the body is not a JSON object: unexpected EOF"},
		{name: "JSON array", source: "gh", h: signed("issues", "d-array", []byte(`[1]`)), body: []byte(`[1]`),
			status: 400, outcome: metrics.DeliveryMalformed, detail: "the body is not a JSON object: it is a JSON array"},
		{name: "no delivery id", source: "gh", h: signed("issues", "", issues), body: issues,
			status: 400, outcome: metrics.DeliveryMalformed, detail: "the X-GitHub-Delivery header is required"},
		{name: "event not mapped", source: "gh", h: signed("pull_request", "d-pr", issues), body: issues,
			status: 200, outcome: metrics.DeliveryIgnored, ignored: "event pull_request is not mapped by this source (webhook.events)"},
		{name: "push", source: "gh", h: signed("push", "d-push", []byte(`{"ref": "refs/heads/main"}`)), body: []byte(`{"ref": "refs/heads/main"}`),
			status: 200, outcome: metrics.DeliveryIgnored, ignored: "event push is not mapped by this source (webhook.events)"},
		{name: "ping", source: "gh", h: signed("ping", "d-ping", s.gh.Payload(githubtest.EventPing, "", 0)), body: s.gh.Payload(githubtest.EventPing, "", 0),
			status: 200, outcome: metrics.DeliveryIgnored, ignored: "ping: the webhook is set up"},
	}
	for _, tt := range tests {
		status, ans := s.post(tt.source, tt.h, tt.body)
		if status != tt.status {
			t.Errorf("%s: answered %d %v, want %d", tt.name, status, ans, tt.status)
			continue
		}
		if tt.detail != "" && !strings.Contains(fmt.Sprint(ans["detail"]), tt.detail) {
			t.Errorf("%s: detail %q, want it to say %q", tt.name, ans["detail"], tt.detail)
		}
		if got := s.deliveries(tt.outcome); got < 1 {
			t.Errorf("%s: lookout_webhook_deliveries_total{outcome=%q} = %v", tt.name, tt.outcome, got)
		}
		id := tt.h.Get("X-GitHub-Delivery")
		e := s.event(tt.source, id)
		switch {
		case tt.rejected:
			if e == nil || e.SignatureValid || e.Payload != nil || e.Outcome != inbound.OutcomeRejected || e.ProcessedAt == nil {
				t.Errorf("%s: stored %+v, want a rejected row without payload", tt.name, e)
			}
		case tt.ignored != "":
			if e == nil || !e.SignatureValid || e.Outcome != inbound.OutcomeIgnored || e.Detail != tt.ignored || e.ProcessedAt == nil {
				t.Errorf("%s: stored %+v, want ignored (%s)", tt.name, e, tt.ignored)
			}
			// A replay of an ignored delivery stores nothing new either.
			if st, ans := s.post(tt.source, tt.h, tt.body); st != 200 || ans["status"] != "duplicate" {
				t.Errorf("%s: replay answered %d %v", tt.name, st, ans)
			}
		case id != "" && e != nil:
			t.Errorf("%s: stored %+v, want nothing", tt.name, e)
		}
	}
	if n := s.rows("small") + s.rows("nope") + s.rows("plain"); n != 0 {
		t.Errorf("%d rows for refused deliveries, want 0", n)
	}
	// The provider redelivers after the secret was fixed: the rejected
	// row did not take the delivery id.
	if st, ans := s.post("gh", signed("issues", "d-bad", issues), issues); st != http.StatusAccepted {
		t.Errorf("redelivery of a rejected delivery answered %d %v, want 202", st, ans)
	}
}

// The generic providers: Standard Webhooks (with its timestamp
// tolerance) and a configured HMAC header.
func TestGenericProviders(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	key, err := signature.Key(stdSecret)
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"type": "item.updated", "timestamp": "2026-02-01T12:00:00Z", "data": {"id": 42, "title": "Hello"}}`)
	std := func(id string, at time.Time, b []byte) http.Header {
		h := http.Header{}
		h.Set("webhook-id", id)
		h.Set("webhook-timestamp", strconv.FormatInt(at.Unix(), 10))
		h.Set("webhook-signature", signature.SignStandard(key, id, at, b))
		return h
	}
	if st, ans := s.post("std", std("msg_1", time.Now(), body), body); st != http.StatusAccepted {
		t.Fatalf("standard delivery answered %d %v", st, ans)
	}
	if e := s.event("std", "msg_1"); e == nil || e.Type != "item.updated" || e.ObjectID != "42" {
		t.Errorf("stored %+v", e)
	}
	if st, ans := s.post("std", std("msg_2", time.Now().Add(-10*time.Minute), body), body); st != 401 ||
		!strings.Contains(fmt.Sprint(ans["detail"]), "timestamp outside the tolerance") {
		t.Errorf("a 10-minute-old timestamp answered %d %v, want 401", st, ans)
	}
	other := []byte(`{"type": "item.deleted", "data": {"id": 42}}`)
	if st, ans := s.post("std", std("msg_3", time.Now(), other), other); st != 200 || ans["status"] != "ignored" {
		t.Errorf("an unmapped type answered %d %v, want 200 ignored", st, ans)
	}

	h := http.Header{}
	h.Set("X-Acme-Signature", signature.SignHex([]byte(hmSecret), body))
	h.Set("X-Acme-Delivery", "acme-1")
	if st, ans := s.post("hm", h, body); st != http.StatusAccepted {
		t.Fatalf("hmac delivery answered %d %v", st, ans)
	}
	h.Set("X-Acme-Signature", "sha256="+strings.Repeat("0", 64))
	h.Set("X-Acme-Delivery", "acme-2")
	if st, _ := s.post("hm", h, body); st != 401 {
		t.Errorf("a wrong hmac answered %d, want 401", st)
	}
	// Without a delivery id header the body's hash is the id: the same
	// body twice is one event.
	h = http.Header{}
	h.Set("X-Acme-Signature", signature.SignHex([]byte(hmSecret), other))
	for i, want := range []int{http.StatusAccepted, http.StatusOK} {
		if st, _ := s.post("hm", h, other); st != want {
			t.Errorf("hmac delivery %d without an id answered %d, want %d", i+1, st, want)
		}
	}
}
