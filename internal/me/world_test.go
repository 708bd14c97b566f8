package me_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lookout-dev/lookout/internal/audit"
	"github.com/lookout-dev/lookout/internal/config"
	_ "github.com/lookout-dev/lookout/internal/connectors/httpjson"
	"github.com/lookout-dev/lookout/internal/control"
	"github.com/lookout-dev/lookout/internal/definitions"
	"github.com/lookout-dev/lookout/internal/evaluator"
	"github.com/lookout-dev/lookout/internal/me"
	"github.com/lookout-dev/lookout/internal/notify"
	"github.com/lookout-dev/lookout/internal/pgtest"
	"github.com/lookout-dev/lookout/internal/secrets"
	"github.com/lookout-dev/lookout/internal/syncer"
	"github.com/lookout-dev/lookout/internal/tokens"
	"github.com/lookout-dev/lookout/internal/watchspec"
)

// world is a lookout filled by the real pipeline — the syncer over an
// httptest upstream that answers like a JSON API, the evaluator following
// the users' watches, the deliverer with a sink that accepts — and the
// page /me over it: alice's watch "open" on the shared source tickets
// notified about the open tickets; bob has nothing.
type world struct {
	t    *testing.T
	ctx  context.Context
	dir  string
	pool *pgxpool.Pool
	cfg  *config.Config
	log  *slog.Logger
	svc  *control.Service
	page *me.Page
	srv  *httptest.Server

	mu      sync.Mutex
	tickets []map[string]any

	// tokens by owner (alice, bob: user; ops: admin), and their ids.
	secret map[string]string
	tokID  map[string]int64
}

const worldGlobal = `
sinks:
  log: {type: log}
defaults:
  jitter: 0s
  rate_limit: {per_second: 1000, burst: 100}
`

const ticketsSource = `name: tickets
connector: http
http:
  url: {{URL}}/api/tickets
  items: body.data
fields:
  id: item.id
  title: item.subject
  status: item.status
  body: item.text
`

func newWorld(t *testing.T) *world {
	t.Helper()
	w := &world{t: t, ctx: context.Background(), dir: t.TempDir(), log: slog.New(slog.DiscardHandler),
		secret: map[string]string{}, tokID: map[string]int64{}}
	upstream := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		w.mu.Lock()
		defer w.mu.Unlock()
		if r.URL.Path != "/api/tickets" {
			http.NotFound(rw, r)
			return
		}
		rw.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(rw).Encode(map[string]any{"data": w.tickets})
	}))
	t.Cleanup(upstream.Close)
	w.write("lookout.yaml", worldGlobal)
	w.write("sources/tickets.yaml", strings.ReplaceAll(ticketsSource, "{{URL}}", upstream.URL))
	cfg, err := config.Load(w.dir)
	if err != nil {
		t.Fatalf("load config: %v", err)
	}
	w.cfg = cfg
	w.pool = pgtest.Pool(t)
	w.tickets = []map[string]any{
		{"id": 1, "subject": "Checkout is down", "status": "open", "text": "Customers see a 502 on /checkout since 09:12."},
		{"id": 2, "subject": "Typo on the pricing page", "status": "closed", "text": "Pricing says 'anual'."},
	}
	if _, err := definitions.Apply(w.ctx, w.pool, w.cfg, definitions.ApplyOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	key, err := secrets.NewKey("k1")
	if err != nil {
		t.Fatal(err)
	}
	ring, err := secrets.Parse(key)
	if err != nil {
		t.Fatal(err)
	}
	v := &definitions.Validator{Global: &w.cfg.Global, Checks: []definitions.Check{watchspec.Check}, Keys: ring}
	store := definitions.NewStore(w.pool, v)
	w.svc = control.New(w.pool, store, nil, control.Config{Keys: ring, AllowPrivate: true}, w.log)
	w.page, err = me.New(w.svc, me.Config{}, w.log)
	if err != nil {
		t.Fatal(err)
	}
	w.srv = httptest.NewServer(w.page.Handler())
	t.Cleanup(w.srv.Close)
	for owner, scope := range map[string]string{"alice": tokens.ScopeUser, "bob": tokens.ScopeUser, "ops": tokens.ScopeAdmin} {
		tok, secret, err := tokens.Create(w.ctx, w.pool, tokens.NewToken{Owner: owner, Scope: scope})
		if err != nil {
			t.Fatal(err)
		}
		w.secret[owner], w.tokID[owner] = secret, tok.ID
	}
	w.createWatch("alice", `{"name": "open", "when": "record.status == \"open\"", "notify": ["log"]}`)
	w.sync()
	w.evaluate()
	return w
}

func (w *world) write(name, content string) {
	w.t.Helper()
	p := filepath.Join(w.dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		w.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		w.t.Fatal(err)
	}
}

// principal is owner's caller through the API.
func (w *world) principal(owner string) control.Principal {
	return control.Principal{Owner: owner, TokenID: w.tokID[owner], Via: audit.ViaAPI}
}

// createWatch creates owner's watch def on tickets through control.
func (w *world) createWatch(owner, def string) {
	w.t.Helper()
	err := pgx.BeginFunc(w.ctx, w.pool, func(tx pgx.Tx) error {
		_, err := w.svc.CreateWatch(w.ctx, tx, w.principal(owner), control.CreateWatchRequest{Source: "tickets", Watch: json.RawMessage(def)})
		return err
	})
	if err != nil {
		w.t.Fatalf("create watch %s: %v", def, err)
	}
}

// sync runs every source now.
func (w *world) sync() {
	w.t.Helper()
	sconf := syncer.FromConfig(w.cfg)
	sconf.Owner = "syncer-1"
	s, err := syncer.New(w.pool, sconf, w.log)
	if err != nil {
		w.t.Fatal(err)
	}
	if err := s.Register(w.ctx); err != nil {
		w.t.Fatal(err)
	}
	w.exec(`UPDATE sources SET next_run_at = now() WHERE status = 'active'`)
	if _, err := s.RunDue(w.ctx); err != nil {
		w.t.Fatal(err)
	}
}

type accepting struct{}

func (accepting) Deliver(_ context.Context, n *notify.Notification) error {
	n.Answered(http.StatusAccepted, []byte(`{"queued": true}`))
	return nil
}

// evaluate judges the changes with the users' watches (the evaluator
// follows the definitions, as its binary does), then delivers to log.
func (w *world) evaluate() {
	w.t.Helper()
	econf := evaluator.FromConfig(w.cfg)
	econf.Owner = "evaluator-1"
	ev, err := evaluator.New(w.pool, econf, w.log)
	if err != nil {
		w.t.Fatal(err)
	}
	f := definitions.NewFollower(w.pool, &w.cfg.Global, ev.Apply)
	if _, err := f.CatchUp(w.ctx); err != nil {
		w.t.Fatal(err)
	}
	ev.Follow(f)
	if _, err := ev.Drain(w.ctx); err != nil {
		w.t.Fatal(err)
	}
	dconf := notify.DelivererConfigFrom(&w.cfg.Global)
	dconf.Owner = "deliverer-1"
	d := notify.NewDeliverer(w.pool, map[string]notify.Sink{"log": accepting{}}, dconf, w.log)
	if _, err := d.DeliverDue(w.ctx); err != nil {
		w.t.Fatal(err)
	}
}

func (w *world) exec(sql string, args ...any) {
	w.t.Helper()
	if _, err := w.pool.Exec(w.ctx, sql, args...); err != nil {
		w.t.Fatalf("%s: %v", sql, err)
	}
}

func (w *world) count(sql string, args ...any) int64 {
	w.t.Helper()
	var n int64
	if err := w.pool.QueryRow(w.ctx, sql, args...).Scan(&n); err != nil {
		w.t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// link mints a sign-in link of owner's token at now and returns its path.
func (w *world) link(owner string, ttl time.Duration, now time.Time) string {
	w.t.Helper()
	l, err := w.svc.MintSignInLink(w.ctx, w.principal(owner), ttl, now)
	if err != nil {
		w.t.Fatal(err)
	}
	return l.Path
}

// client is a browser without JavaScript: a cookie jar, no redirects
// followed.
type client struct {
	t    *testing.T
	w    *world
	http *http.Client
}

func (w *world) client() *client {
	jar, _ := cookiejar.New(nil)
	return &client{t: w.t, w: w, http: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// do sends a request (a form when form is not nil) and returns the answer
// and its body.
func (c *client) do(method, path string, form url.Values, header ...string) (*http.Response, string) {
	c.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, c.w.srv.URL+path, body)
	if err != nil {
		c.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := c.http.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func csrfOf(t *testing.T, body string) string {
	t.Helper()
	m := csrfField.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no CSRF field in %s", body)
	}
	return m[1]
}

// login signs in with owner's token through the form.
func (c *client) login(owner string) {
	c.t.Helper()
	_, form := c.do("GET", "/me/login", nil)
	resp, body := c.do("POST", "/me/login", url.Values{"csrf": {csrfOf(c.t, form)}, "token": {c.w.secret[owner]}, "next": {"/me/"}})
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/me/" {
		c.t.Fatalf("sign in as %s: %d %s %s", owner, resp.StatusCode, resp.Header.Get("Location"), body)
	}
}

// csrf returns the session's CSRF token, read from the watches page.
func (c *client) csrf() string {
	c.t.Helper()
	resp, body := c.do("GET", "/me/", nil)
	if resp.StatusCode != 200 {
		c.t.Fatalf("GET /me/: %d %s", resp.StatusCode, body)
	}
	return csrfOf(c.t, body)
}
