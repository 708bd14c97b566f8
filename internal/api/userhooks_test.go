package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lookout-dev/lookout/internal/apitest"
	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/control"
	"github.com/lookout-dev/lookout/internal/definitions"
	"github.com/lookout-dev/lookout/internal/egress"
	"github.com/lookout-dev/lookout/internal/evaluator"
	"github.com/lookout-dev/lookout/internal/notify"
	"github.com/lookout-dev/lookout/internal/pgtest"
	"github.com/lookout-dev/lookout/internal/redact"
	"github.com/lookout-dev/lookout/internal/secrets"
	"github.com/lookout-dev/lookout/internal/syncer"
	"github.com/lookout-dev/lookout/internal/syncer/syncertest"
	"github.com/lookout-dev/lookout/internal/testsignal"
	"github.com/lookout-dev/lookout/internal/tokens"
)

// tickets is an upstream HTTP JSON API that wants a bearer token: it
// answers 401 (echoing the header, as careless APIs do) to anything else,
// and records the Authorization header of every request.
type tickets struct {
	mu     sync.Mutex
	token  string
	status map[string]string
	seen   []string
}

func (u *tickets) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.mu.Lock()
	defer u.mu.Unlock()
	auth := r.Header.Get("Authorization")
	u.seen = append(u.seen, auth)
	if auth != "Bearer "+u.token {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprintf(w, `{"message": "Bad credentials: %s"}`, auth)
		return
	}
	var items []map[string]string
	for id, st := range u.status {
		items = append(items, map[string]string{"id": id, "title": "ticket " + id, "status": st})
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(items)
}

func (u *tickets) set(id, status string) {
	u.mu.Lock()
	u.status[id] = status
	u.mu.Unlock()
}

func (u *tickets) lastAuth() string {
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.seen) == 0 {
		return ""
	}
	return u.seen[len(u.seen)-1]
}

// hook is a receiver of webhook requests.
type hook struct {
	srv *httptest.Server
	got chan hookRequest
}

type hookRequest struct {
	header http.Header
	body   []byte
}

func newHook(t *testing.T) *hook {
	h := &hook{got: make(chan hookRequest, 16)}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		h.got <- hookRequest{header: r.Header.Clone(), body: b}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(h.srv.Close)
	return h
}

// sealed is a fixture of the API with LOOKOUT_SECRET_KEY, over a loaded
// configuration directory (so that the configuration's redactor is the
// daemons'), with the real syncer, evaluator and deliverer at hand.
type sealed struct {
	*fixture
	dir  string
	cfg  *config.Config
	keys *secrets.Ring
	up   *tickets
	upS  *httptest.Server
	logs *bytes.Buffer
	logM *sync.Mutex
}

type lockedWriter struct {
	mu  *sync.Mutex
	buf *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

func newKey(t *testing.T, id string) string {
	t.Helper()
	k, err := secrets.NewKey(id)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func ring(t *testing.T, s string) *secrets.Ring {
	t.Helper()
	r, err := secrets.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func setupSealed(t *testing.T, keys *secrets.Ring, allowPrivate bool) *sealed {
	t.Helper()
	pool := pgtest.Pool(t)
	s := &sealed{dir: t.TempDir(), keys: keys, up: &tickets{token: "s3cret-upstream-token-42", status: map[string]string{"1": "open"}},
		logs: &bytes.Buffer{}, logM: &sync.Mutex{}}
	s.upS = httptest.NewServer(s.up)
	t.Cleanup(s.upS.Close)
	if err := os.MkdirAll(filepath.Join(s.dir, "sources"), 0o755); err != nil {
		t.Fatal(err)
	}
	yaml := "sinks:\n  log: {type: log}\ndefaults:\n  jitter: 0s\n"
	if allowPrivate {
		yaml += "api:\n  allow_private: true # the upstream is on loopback\n"
	}
	if err := os.WriteFile(filepath.Join(s.dir, "lookout.yaml"), []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(s.dir)
	if err != nil {
		t.Fatal(err)
	}
	s.cfg = cfg
	// Every component logs through the configuration's redactor, as the
	// binaries do (cli.Logger).
	logger := slog.New(redact.NewHandler(slog.NewTextHandler(lockedWriter{s.logM, s.logs}, &slog.HandlerOptions{Level: slog.LevelDebug}), cfg.Global.Redactor()))
	v := control.NewValidator(&cfg.Global)
	v.Keys = keys
	store := definitions.NewStore(pool, v)
	hub := control.NewHub(pool, logger)
	if err := hub.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hub.Stop() })
	svc := control.New(pool, store, hub, control.Config{StreamPoll: time.Minute, Keys: keys, AllowPrivate: allowPrivate}, logger)
	svc.SetResolver(staticResolver{"hooks.private.example": {netip.MustParseAddr("10.1.2.3")}, "hooks.example.com": {netip.MustParseAddr("93.184.216.34")}})
	a := New(svc, logger)
	srv := httptest.NewServer(a.Handler())
	t.Cleanup(srv.Close)
	t.Cleanup(a.Shutdown)
	s.fixture = &fixture{t: t, pool: pool, api: a, srv: srv, store: store, svc: svc, hub: hub, tokens: map[string]string{}, client: apitest.Client(t)}
	for owner, scope := range map[string]string{"alice": "user", "bob": "user"} {
		_, secret, err := tokens.Create(context.Background(), pool, tokens.NewToken{Owner: owner, Scope: scope})
		if err != nil {
			t.Fatal(err)
		}
		s.tokens[owner] = secret
	}
	return s
}

type staticResolver map[string][]netip.Addr

func (r staticResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := r[host]; ok {
		return a, nil
	}
	return nil, errors.New("no such host in this test")
}

func (s *sealed) logged() string {
	s.logM.Lock()
	defer s.logM.Unlock()
	return s.logs.String()
}

func (s *sealed) logger() *slog.Logger {
	return slog.New(redact.NewHandler(slog.NewTextHandler(lockedWriter{s.logM, s.logs}, &slog.HandlerOptions{Level: slog.LevelDebug}), s.cfg.Global.Redactor()))
}

// sync runs the real syncer over the sources of the database as the
// syncer daemon follows them with keys.
func (s *sealed) sync(keys *secrets.Ring) {
	s.t.Helper()
	sconf := syncer.FromConfig(s.cfg)
	sconf.Owner = "test"
	sy, err := syncer.New(s.pool, sconf, s.logger())
	if err != nil {
		s.t.Fatal(err)
	}
	if err := sy.Register(context.Background()); err != nil {
		s.t.Fatal(err)
	}
	d, err := definitions.NewFollower(s.pool, &s.cfg.Global, sy.Apply).WithKeys(keys).CatchUp(context.Background())
	if err != nil {
		s.t.Fatal(err)
	}
	if len(d.Invalid) > 0 {
		s.t.Fatalf("definitions the syncer cannot parse: %v", d.Invalid)
	}
	syncertest.SyncNow(s.t, s.pool, sy)
}

// evaluate runs the real evaluator over the changes, following the
// definitions with keys.
func (s *sealed) evaluate() int {
	s.t.Helper()
	econf := evaluator.FromConfig(s.cfg)
	econf.Owner = "test"
	ev, err := evaluator.New(s.pool, econf, s.logger())
	if err != nil {
		s.t.Fatal(err)
	}
	ev.Follow(definitions.NewFollower(s.pool, &s.cfg.Global, ev.Apply).WithKeys(s.keys))
	n, err := ev.Drain(context.Background())
	if err != nil {
		s.t.Fatal(err)
	}
	return n
}

// deliver runs the deliverer's lane of own webhooks (wired as
// cmd/evaluator wires it) until nothing is due.
func (s *sealed) deliver(policy egress.Policy) {
	s.t.Helper()
	target := func(ctx context.Context, source, watch string) (notify.OwnWebhookTarget, error) {
		url, secret, err := definitions.OwnWebhook(ctx, s.pool, s.keys, source, watch)
		if err != nil {
			return notify.OwnWebhookTarget{}, &notify.PermanentError{Err: err}
		}
		return notify.OwnWebhookTarget{URL: url, Secret: secret}, nil
	}
	sinks := map[string]notify.Sink{config.OwnWebhookSink: notify.NewOwnWebhookSink(notify.OwnWebhookOptions{Target: target, Egress: policy})}
	dconf := notify.DelivererConfigFrom(&s.cfg.Global)
	dconf.Sinks = map[string]*config.Sink{config.OwnWebhookSink: notify.OwnWebhookSinkConfig()}
	d := notify.NewDeliverer(s.pool, sinks, dconf, s.logger())
	if _, err := d.DeliverDue(context.Background()); err != nil {
		s.t.Fatal(err)
	}
}

// raw sends a request as owner and returns the status and the raw body.
func (s *sealed) raw(method, path, owner, body string, headers ...string) (int, string, http.Header) {
	s.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, s.srv.URL+path, rd)
	req.Header.Set("Authorization", "Bearer "+s.tokens[owner])
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := apitest.Client(s.t).Do(req) // checked against docs/openapi.json
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

// stored counts the rows of the tables where lookout keeps definitions,
// answers, audit and history that hold text in clear.
func (s *sealed) stored(text string) map[string]int {
	s.t.Helper()
	out := map[string]int{}
	for _, table := range []string{"source_definitions", "watches", "sources", "audit_log", "sync_runs", "notifications"} {
		var n int
		if err := s.pool.QueryRow(context.Background(), `SELECT count(*) FROM `+table+` t WHERE t::text LIKE '%' || $1 || '%'`, text).Scan(&n); err != nil {
			s.t.Fatal(err)
		}
		if n > 0 {
			out[table] = n
		}
	}
	var n int
	if err := s.pool.QueryRow(context.Background(), `SELECT count(*) FROM idempotency_keys WHERE position(convert_to($1, 'UTF8') in response) > 0`, text).Scan(&n); err != nil {
		s.t.Fatal(err)
	}
	if n > 0 {
		out["idempotency_keys"] = n
	}
	return out
}

func (s *sealed) newSourceJSON(name string) string {
	return fmt.Sprintf(`{"name": %q, "connector": "http", "every": "1h", "jitter": "0s",
		"http": {"url": %q, "headers": {"Authorization": "Bearer %s", "Accept": "application/json"}},
		"fields": {"id": "item.id", "title": "item.title", "status": "item.status"}}`, name, s.upS.URL+"/tickets", s.up.token)
}

// A watch's own webhook: the signing secret is in the create's answer
// (and its idempotent replay) and nowhere else — not in GET or list, not
// in the database in clear, not in the audit log; alice's notification
// reaches her URL signed with it, carrying her as owner; a rotation
// gives a new secret that signs from then on.
func TestOwnWebhookSecretOnceAndDeliveredSigned(t *testing.T) {
	t.Parallel()
	s := setupSealed(t, ring(t, newKey(t, "k1")), true) // the receiver is on loopback
	rec := newHook(t)
	body := fmt.Sprintf(`{"new_source": %s, "watch": {"name": "done", "when": "record.status == \"done\"", "webhook": {"url": %q}}}`,
		s.newSourceJSON("alice-tickets"), rec.srv.URL+"/lookout")
	code, first, hdr := s.raw(http.MethodPost, "/v1/watches", "alice", body, "Idempotency-Key", "create-1")
	var created control.CreatedWatch
	if err := json.Unmarshal([]byte(first), &created); err != nil || code != http.StatusCreated {
		t.Fatalf("create_watch: %d %s", code, first)
	}
	secret := created.Watch.WebhookSecret
	if !strings.HasPrefix(secret, "whsec_") || hdr.Get("Idempotent-Replayed") == "true" {
		t.Fatalf("create_watch answered secret %q, replayed %q", secret, hdr.Get("Idempotent-Replayed"))
	}
	if !strings.Contains(string(created.Watch.Definition), `"secret":"[redacted]"`) {
		t.Errorf("the created watch's definition shows its secret: %s", created.Watch.Definition)
	}
	// A retry with the same key gets the same answer, secret included.
	code, again, hdr := s.raw(http.MethodPost, "/v1/watches", "alice", body, "Idempotency-Key", "create-1")
	var replay control.CreatedWatch
	if err := json.Unmarshal([]byte(again), &replay); err != nil || code != http.StatusCreated || hdr.Get("Idempotent-Replayed") != "true" ||
		replay.Watch.WebhookSecret != secret {
		t.Errorf("replay: %d replayed %q secret %q, want %q", code, hdr.Get("Idempotent-Replayed"), replay.Watch.WebhookSecret, secret)
	}
	// Never again.
	for _, path := range []string{"/v1/watches/alice-tickets/done", "/v1/watches", "/v1/watches?source=alice-tickets"} {
		code, got, _ := s.raw(http.MethodGet, path, "alice", "")
		if code != http.StatusOK || strings.Contains(got, secret) || strings.Contains(got, "webhook_secret") || !strings.Contains(got, "[redacted]") {
			t.Errorf("GET %s: %d %s", path, code, got)
		}
	}
	if where := s.stored(secret); len(where) > 0 {
		t.Errorf("the webhook secret is stored in clear in %v", where)
	}
	if where := s.stored(strings.TrimPrefix(secret, "whsec_")); len(where) > 0 {
		t.Errorf("the webhook key is stored in clear in %v", where)
	}

	// The pipeline: a change, alice's watch notifies, her webhook gets it.
	s.sync(s.keys)
	s.up.set("1", "done")
	s.sync(s.keys)
	if n := s.evaluate(); n < 2 {
		t.Fatalf("the evaluator judged %d changes, want 2", n)
	}
	s.deliver(egress.Policy{}) // as api.allow_private: the receiver is on loopback
	req := testsignal.Receive(t, rec.got, "alice's webhook request")
	if err := notify.VerifyWebhook(secret, req.header, req.body, 0); err != nil {
		t.Fatalf("the signature does not verify with the secret the API returned: %v (headers %v)", err, req.header)
	}
	var p notify.Payload
	if err := json.Unmarshal(req.body, &p); err != nil || p.Owner != "alice" || p.Watch != "done" || p.Source != "alice-tickets" || p.Record.ID != "1" {
		t.Errorf("payload %s (%v)", req.body, err)
	}
	if id := req.header.Get("webhook-id"); id == "" || req.header.Get("Idempotency-Key") != id || id != p.DedupeKey {
		t.Errorf("webhook-id %q, Idempotency-Key %q, dedupe key %q", id, req.header.Get("Idempotency-Key"), p.DedupeKey)
	}
	var sink, status string
	if err := s.pool.QueryRow(context.Background(), `SELECT sink, status FROM notifications WHERE owner = 'alice'`).Scan(&sink, &status); err != nil ||
		sink != config.OwnWebhookSink || status != "delivered" {
		t.Errorf("alice's notification: sink %q status %q (%v)", sink, status, err)
	}

	// A dry run of a watch with a webhook needs no secret and sends nothing.
	if code, got, _ := s.raw(http.MethodPost, "/v1/dry_run", "alice", `{"source": "alice-tickets", "since": "1h",
		"watch": {"name": "try", "when": "record.status == \"done\"", "webhook": {"url": "https://hooks.example.com/x"}}}`); code != http.StatusOK || !strings.Contains(got, `"would_notify":1`) {
		t.Errorf("dry_run with a webhook: %d %s", code, got)
	}
	// Bob cannot rotate alice's secret (her watch does not exist for him).
	if code, got, _ := s.raw(http.MethodPost, "/v1/watches/alice-tickets/done/webhook/rotate", "bob", ""); code != http.StatusNotFound {
		t.Errorf("bob rotates alice's secret: %d %s", code, got)
	}
	code, got, _ := s.raw(http.MethodPost, "/v1/watches/alice-tickets/done/webhook/rotate", "alice", "")
	var rotated control.WatchView
	if err := json.Unmarshal([]byte(got), &rotated); err != nil || code != http.StatusOK || !strings.HasPrefix(rotated.WebhookSecret, "whsec_") || rotated.WebhookSecret == secret {
		t.Fatalf("rotate: %d %s", code, got)
	}
	if code, got, _ := s.raw(http.MethodGet, "/v1/watches/alice-tickets/done", "alice", ""); code != http.StatusOK || strings.Contains(got, rotated.WebhookSecret) {
		t.Errorf("GET after the rotation shows the new secret: %s", got)
	}
	if where := s.stored(rotated.WebhookSecret); len(where) > 0 {
		t.Errorf("the rotated secret is stored in clear in %v", where)
	}
	s.up.set("2", "done")
	s.sync(s.keys)
	s.evaluate()
	s.deliver(egress.Policy{})
	req = testsignal.Receive(t, rec.got, "the request after the rotation")
	if err := notify.VerifyWebhook(rotated.WebhookSecret, req.header, req.body, 0); err != nil {
		t.Errorf("the new secret does not verify: %v", err)
	}
	if err := notify.VerifyWebhook(secret, req.header, req.body, 0); !errors.Is(err, notify.ErrSignatureMismatch) {
		t.Errorf("the old secret still verifies after the rotation: %v", err)
	}
	// An update that sends the webhook back as shown keeps the secret.
	code, got, _ = s.raw(http.MethodPut, "/v1/watches/alice-tickets/done", "alice",
		fmt.Sprintf(`{"name": "done", "when": "record.status == \"done\"", "urgency": "high", "webhook": {"url": %q, "secret": "[redacted]"}}`, rec.srv.URL+"/lookout"))
	if code != http.StatusOK || strings.Contains(got, "webhook_secret") {
		t.Errorf("update keeping the webhook: %d %s", code, got)
	}
	if _, kept, err := definitions.OwnWebhook(context.Background(), s.pool, s.keys, "alice-tickets", "done"); err != nil || kept != rotated.WebhookSecret {
		t.Errorf("after the update the stored secret is not the rotated one: %v", err)
	}
	// The audit log has every change and never a secret.
	var audits int
	if err := s.pool.QueryRow(context.Background(), `SELECT count(*) FROM audit_log WHERE kind = 'watch' AND target = 'alice-tickets/done'`).Scan(&audits); err != nil || audits != 3 {
		t.Errorf("audit rows of the watch: %d (%v), want create, rotate, update", audits, err)
	}
	if where := s.stored(rotated.WebhookSecret); len(where) > 0 {
		t.Errorf("a secret is stored in clear in %v", where)
	}
}

// A webhook URL that reaches a private or loopback address is refused
// (api.allow_private off), as problem+json naming /watch/webhook/url;
// nothing is created.
func TestOwnWebhookPrivateURLRefused(t *testing.T) {
	t.Parallel()
	s := setupSealed(t, ring(t, newKey(t, "k1")), false)
	s.shared("feed")
	for _, url := range []string{"http://127.0.0.1:9/hook", "https://hooks.private.example/x", "http://169.254.169.254/latest"} {
		p := s.problem(http.MethodPost, "/v1/watches", "alice", strings.NewReader(fmt.Sprintf(`{"source": "feed", "watch": {"name": "w", "webhook": {"url": %q}}}`, url)), http.StatusUnprocessableEntity)
		if len(p.Errors) != 1 || p.Errors[0].Pointer != "/watch/webhook/url" || !strings.Contains(p.Errors[0].Detail, "lookout does not fetch such addresses") {
			t.Errorf("%s: %+v", url, p)
		}
	}
	p := s.problem(http.MethodPost, "/v1/watches", "alice", strings.NewReader(`{"source": "feed", "watch": {"name": "w", "webhook": {"url": "https://hooks.example.com/x", "secret": "whsec_mine"}}}`), http.StatusUnprocessableEntity)
	if len(p.Errors) != 1 || p.Errors[0].Pointer != "/watch/webhook/secret" {
		t.Errorf("a secret given by the user: %+v", p)
	}
	if n := s.count(`SELECT count(*) FROM watches`); n != 0 {
		t.Errorf("%d watches created", n)
	}
}

// Without LOOKOUT_SECRET_KEY a webhook (or a credential) is refused, not
// stored in clear.
func TestOwnWebhookWithoutKeyRefused(t *testing.T) {
	t.Parallel()
	s := setupSealed(t, nil, true)
	s.shared("feed")
	p := s.problem(http.MethodPost, "/v1/watches", "alice", strings.NewReader(`{"source": "feed", "watch": {"name": "w", "webhook": {"url": "https://hooks.example.com/x"}}}`), http.StatusUnprocessableEntity)
	if len(p.Errors) != 1 || p.Errors[0].Pointer != "/watch/webhook" || !strings.Contains(p.Errors[0].Detail, "LOOKOUT_SECRET_KEY") {
		t.Errorf("webhook without a key: %+v", p)
	}
	p = s.problem(http.MethodPost, "/v1/sources", "alice", strings.NewReader(s.newSourceJSON("alice-tickets")), http.StatusUnprocessableEntity)
	if len(p.Errors) != 1 || p.Errors[0].Pointer != "/http/headers/Authorization" || !strings.Contains(p.Errors[0].Detail, "LOOKOUT_SECRET_KEY") {
		t.Errorf("credential without a key: %+v", p)
	}
	if n := s.count(`SELECT count(*) FROM source_definitions`) + s.count(`SELECT count(*) FROM watches`); n != 1 {
		t.Errorf("definitions: %d, want the shared source only", n)
	}
}

// The egress policy is applied when the webhook is dialed, not only when
// its URL is checked: a URL that resolved to a public address when it was
// given and to a loopback one now (DNS rebinding; here the URL is stored
// with api.allow_private and delivered without it) fails the attempt.
func TestOwnWebhookDialChecked(t *testing.T) {
	t.Parallel()
	s := setupSealed(t, ring(t, newKey(t, "k1")), true)
	rec := newHook(t)
	body := fmt.Sprintf(`{"new_source": %s, "watch": {"name": "all", "webhook": {"url": %q}}}`, s.newSourceJSON("alice-tickets"), rec.srv.URL)
	if code, got, _ := s.raw(http.MethodPost, "/v1/watches", "alice", body); code != http.StatusCreated {
		t.Fatalf("create: %d %s", code, got)
	}
	s.sync(s.keys)
	s.evaluate()
	s.deliver(egress.Policy{DenyPrivate: true})
	var status, lastErr string
	if err := s.pool.QueryRow(context.Background(), `SELECT status, coalesce(last_error, '') FROM notifications WHERE owner = 'alice'`).Scan(&status, &lastErr); err != nil {
		t.Fatal(err)
	}
	if status != "pending" || !strings.Contains(lastErr, "egress policy refuses") {
		t.Errorf("status %q, last_error %q; want a retry refused by the egress policy", status, lastErr)
	}
	select {
	case r := <-rec.got:
		t.Errorf("the receiver on loopback got a request: %s", r.body)
	default:
	}
}

// Credentials of a source created through the API: stored sealed (no
// plaintext in the database), never in an answer (GET, list, create),
// the audit log, the logs or a stored run error, yet the syncer's request
// carries the real header; [redacted] sent back keeps it.
func TestSourceCredentialsSealed(t *testing.T) {
	t.Parallel()
	s := setupSealed(t, ring(t, newKey(t, "k1")), true)
	token := s.up.token
	code, got, _ := s.raw(http.MethodPost, "/v1/sources", "alice", s.newSourceJSON("alice-tickets"))
	if code != http.StatusCreated || strings.Contains(got, token) || !strings.Contains(got, `"Authorization":"[redacted]"`) || !strings.Contains(got, `"Accept":"application/json"`) {
		t.Fatalf("create_source: %d %s", code, got)
	}
	for _, path := range []string{"/v1/sources/alice-tickets", "/v1/sources"} {
		code, got, _ := s.raw(http.MethodGet, path, "alice", "")
		if code != http.StatusOK || strings.Contains(got, token) || !strings.Contains(got, `"Authorization":"[redacted]"`) {
			t.Errorf("GET %s: %d %s", path, code, got)
		}
	}
	var def string
	if err := s.pool.QueryRow(context.Background(), `SELECT definition::text FROM source_definitions WHERE name = 'alice-tickets'`).Scan(&def); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(def, token) || !strings.Contains(def, `"Authorization": "${sealed:v1:k1:`) {
		t.Errorf("stored definition: %s", def)
	}

	// The syncer opens it: the upstream sees the real header.
	s.sync(s.keys)
	if auth := s.up.lastAuth(); auth != "Bearer "+token {
		t.Fatalf("the upstream saw Authorization %q", auth)
	}
	if status, errText := syncertest.LastRun(t, s.pool, "alice-tickets"); status != "succeeded" {
		t.Fatalf("run: %s %s", status, errText)
	}

	// An update that sends the credential back as shown keeps it.
	var src map[string]any
	_, got, _ = s.raw(http.MethodGet, "/v1/sources/alice-tickets", "alice", "")
	if err := json.Unmarshal([]byte(got), &src); err != nil {
		t.Fatal(err)
	}
	d := src["definition"].(map[string]any)
	d["every"] = "2h"
	b, _ := json.Marshal(d)
	if code, got, _ := s.raw(http.MethodPut, "/v1/sources/alice-tickets", "alice", string(b)); code != http.StatusOK || strings.Contains(got, token) {
		t.Fatalf("update keeping the credential: %d %s", code, got)
	}
	s.up.set("1", "done")
	s.sync(s.keys)
	if status, errText := syncertest.LastRun(t, s.pool, "alice-tickets"); status != "succeeded" || s.up.lastAuth() != "Bearer "+token {
		t.Errorf("after an update with [redacted]: %s %s, upstream saw %q", status, errText, s.up.lastAuth())
	}

	// The upstream refuses a rotated token and echoes it: the run's error
	// and the logs show it redacted.
	s.up.mu.Lock()
	s.up.token = "the-upstream-wants-another-one"
	s.up.mu.Unlock()
	s.sync(s.keys)
	status, errText := syncertest.LastRun(t, s.pool, "alice-tickets")
	if status == "succeeded" || strings.Contains(errText, token) || !strings.Contains(errText, redact.Mask) {
		t.Errorf("the failed run: %s %q", status, errText)
	}
	// A credential in a bad update is not echoed in the problem.
	d["http"].(map[string]any)["headers"] = map[string]any{"Authorization": "Bearer new\ntoken-with-a-newline"}
	b, _ = json.Marshal(d)
	if code, got, _ := s.raw(http.MethodPut, "/v1/sources/alice-tickets", "alice", string(b)); code == http.StatusOK || strings.Contains(got, "token-with-a-newline") {
		t.Errorf("a bad credential: %d %s", code, got)
	}
	if where := s.stored(token); len(where) > 0 {
		t.Errorf("the credential is stored in clear in %v", where)
	}
	if strings.Contains(s.logged(), token) {
		t.Errorf("the logs show the credential:\n%s", s.logged())
	}
	if !strings.Contains(s.logged(), "alice-tickets") {
		t.Errorf("nothing was logged about the source: the logs check checks nothing")
	}
	// ${...} would read lookout's own environment: refused.
	p := s.problem(http.MethodPost, "/v1/sources", "alice", strings.NewReader(strings.Replace(s.newSourceJSON("alice-env"), "Bearer "+s.up.token, "Bearer ${DATABASE_URL}", 1)), http.StatusUnprocessableEntity)
	if len(p.Errors) != 1 || p.Errors[0].Pointer != "/http/headers/Authorization" || !strings.Contains(p.Errors[0].Detail, "${...}") {
		t.Errorf("a ${...} reference: %+v", p)
	}
}

// Rotation of LOOKOUT_SECRET_KEY: rows sealed with the old key still open
// under the new ring (new key first, old kept); Reseal seals them with
// the new key, after which the ring without the old key works.
func TestSecretKeyRotation(t *testing.T) {
	t.Parallel()
	k1, k2 := newKey(t, "k1"), newKey(t, "k2")
	s := setupSealed(t, ring(t, k1), true)
	rec := newHook(t)
	body := fmt.Sprintf(`{"new_source": %s, "watch": {"name": "done", "when": "record.status == \"done\"", "webhook": {"url": %q}}}`,
		s.newSourceJSON("alice-tickets"), rec.srv.URL)
	code, got, _ := s.raw(http.MethodPost, "/v1/watches", "alice", body)
	var created control.CreatedWatch
	if err := json.Unmarshal([]byte(got), &created); err != nil || code != http.StatusCreated {
		t.Fatalf("create: %d %s", code, got)
	}
	// The operator puts k2 first and keeps k1.
	rotated := ring(t, k2+","+k1)
	s.keys = rotated
	s.sync(rotated)
	if s.up.lastAuth() != "Bearer "+s.up.token {
		t.Fatalf("with k2,k1 the upstream saw %q", s.up.lastAuth())
	}
	if _, secret, err := definitions.OwnWebhook(context.Background(), s.pool, rotated, "alice-tickets", "done"); err != nil || secret != created.Watch.WebhookSecret {
		t.Fatalf("with k2,k1 the webhook secret: %v", err)
	}
	// The api restarted with k2,k1: a new source is sealed with k2.
	store := definitions.NewStore(s.pool, &definitions.Validator{Global: &s.cfg.Global, Keys: rotated})
	second, _, err := store.CreateSource(context.Background(), definitions.Actor{Owner: "alice"}, []byte(s.newSourceJSON("second")))
	if err != nil || !strings.Contains(string(second.Definition), "${sealed:v1:k2:") {
		t.Fatalf("second source: %v %s", err, second.Definition)
	}
	if n, err := store.Reseal(context.Background()); err != nil || n != 2 {
		t.Fatalf("Reseal: %d %v, want the source and the watch sealed with k1", n, err)
	}
	var k1Rows int
	if err := s.pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM source_definitions WHERE definition::text LIKE '%sealed:v1:k1:%')
		+ (SELECT count(*) FROM watches WHERE definition::text LIKE '%sealed:v1:k1:%')`).Scan(&k1Rows); err != nil || k1Rows != 0 {
		t.Errorf("rows still sealed with k1: %d (%v)", k1Rows, err)
	}
	if n, err := store.Reseal(context.Background()); err != nil || n != 0 {
		t.Errorf("a second Reseal: %d %v, want nothing to do", n, err)
	}
	// k1 retired.
	only2 := ring(t, k2)
	s.keys = only2
	s.up.set("1", "done")
	s.sync(only2)
	if status, errText := syncertest.LastRun(t, s.pool, "alice-tickets"); status != "succeeded" || s.up.lastAuth() != "Bearer "+s.up.token {
		t.Errorf("with k2 only: %s %s", status, errText)
	}
	s.evaluate()
	s.deliver(egress.Policy{})
	req := testsignal.Receive(t, rec.got, "the webhook request with k2 only")
	if err := notify.VerifyWebhook(created.Watch.WebhookSecret, req.header, req.body, 0); err != nil {
		t.Errorf("after the rotation the secret does not verify: %v", err)
	}
	// Without the key that sealed it, a definition does not open (and says why).
	d, err := definitions.NewFollower(s.pool, &s.cfg.Global, func(context.Context, *definitions.Delta) error { return nil }).WithKeys(ring(t, k1)).CatchUp(context.Background())
	if err != nil || len(d.Invalid) == 0 || !strings.Contains(d.Invalid[0].Error(), `key "k2" is not in LOOKOUT_SECRET_KEY`) {
		t.Errorf("with k1 only: %v %v", d, err)
	}
}

func (s *sealed) count(sql string) int {
	s.t.Helper()
	var n int
	if err := s.pool.QueryRow(context.Background(), sql).Scan(&n); err != nil {
		s.t.Fatal(err)
	}
	return n
}
