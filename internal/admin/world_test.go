package admin_test

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lookout-dev/lookout/internal/admin"
	"github.com/lookout-dev/lookout/internal/clitest"
	"github.com/lookout-dev/lookout/internal/config"
	_ "github.com/lookout-dev/lookout/internal/connectors/httpjson"
	"github.com/lookout-dev/lookout/internal/control"
	"github.com/lookout-dev/lookout/internal/definitions"
	"github.com/lookout-dev/lookout/internal/evaluator"
	"github.com/lookout-dev/lookout/internal/notify"
	"github.com/lookout-dev/lookout/internal/pgtest"
	"github.com/lookout-dev/lookout/internal/semantic/ollamatest"
	"github.com/lookout-dev/lookout/internal/syncer"
	"github.com/lookout-dev/lookout/internal/tokens"
	"github.com/lookout-dev/lookout/internal/watchspec"
)

// world is a lookout filled by the real pipeline — the syncer over an
// httptest upstream that answers like a JSON API, the evaluator with a
// fake Ollama, the deliverer with a sink that accepts and one that refuses
// for good (dead letters) — and the admin page over it, served by an
// httptest server with the api's routing.
type world struct {
	t    *testing.T
	ctx  context.Context
	dir  string
	url  string // the schema's database URL, for the binaries
	pool *pgxpool.Pool
	cfg  *config.Config
	log  *slog.Logger

	mu       sync.Mutex
	tickets  []map[string]any
	failNext bool
	// failCode is the status of the answer failNext asks for (503, which
	// defers the run, when 0; a 500 fails it).
	failCode int
	upstream *httptest.Server

	srv *httptest.Server
	// listPage is the admin's page of rows (admin.Config.ListPage; 0 for
	// its default).
	listPage  int
	adminTok  string
	userTok   string
	revokedID int64
}

const worldGlobal = `
ollama:
  host: {{OLLAMA}}
  model: llama3.2
  timeout: 2s
  rate_limit: {per_second: 1000, burst: 10}
evaluator: {lease: 10s}
sinks:
  log: {type: log}
  hook: {type: log}
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
watches:
  - name: urgent
    when: record.status == "open"
    ask: Is this ticket urgent for the on-call engineer?
    notify: [log]
  - name: closed
    when: change.kind == "updated" && changed("status") && record.status == "closed"
    notify: [log, hook]
`

const inventorySource = `name: inventory
connector: http
http:
  url: {{URL}}/api/inventory
  items: body.data
fields:
  id: item.sku
  title: item.name
`

func newWorld(t *testing.T) *world {
	t.Helper()
	w := &world{t: t, ctx: context.Background(), dir: t.TempDir(), log: slog.New(slog.DiscardHandler)}
	w.upstream = httptest.NewServer(http.HandlerFunc(w.serveUpstream))
	t.Cleanup(w.upstream.Close)
	fake := ollamatest.New(t, map[string]string{"llama3.2:latest": "sha256:" + strings.Repeat("b", 64)})
	w.write("lookout.yaml", strings.ReplaceAll(worldGlobal, "{{OLLAMA}}", fake.URL))
	w.write("sources/tickets.yaml", strings.ReplaceAll(ticketsSource, "{{URL}}", w.upstream.URL))
	w.write("sources/inventory.yaml", strings.ReplaceAll(inventorySource, "{{URL}}", w.upstream.URL))
	cfg, err := config.Load(w.dir)
	if err != nil {
		t.Fatalf("load config: %v", err)
	}
	w.cfg = cfg
	_, w.url = pgtest.Schema(t)
	w.pool = pgtest.PoolFor(t, w.url)
	w.tickets = []map[string]any{
		{"id": 1, "subject": "URGENT: checkout is down", "status": "open"},
		{"id": 2, "subject": "Typo on the pricing page", "status": "open"},
		{"id": 3, "subject": "Export to CSV", "status": "open"},
	}
	return w
}

// serveUpstream answers like a JSON API: the tickets, the inventory, and a
// 503 when told to fail.
func (w *world) serveUpstream(rw http.ResponseWriter, r *http.Request) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.failNext && r.URL.Path == "/api/tickets" {
		w.failNext = false
		http.Error(rw, `{"error": "upstream maintenance"}`, cmp.Or(w.failCode, http.StatusServiceUnavailable))
		return
	}
	rw.Header().Set("Content-Type", "application/json")
	switch r.URL.Path {
	case "/api/tickets":
		_ = json.NewEncoder(rw).Encode(map[string]any{"data": w.tickets})
	case "/api/inventory":
		fmt.Fprint(rw, `{"data": [{"sku": "A-1", "name": "Anvil"}, {"sku": "B-2", "name": "Bellows"}]}`)
	default:
		http.NotFound(rw, r)
	}
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

func (w *world) exec(sql string, args ...any) {
	w.t.Helper()
	if _, err := w.pool.Exec(w.ctx, sql, args...); err != nil {
		w.t.Fatalf("%s: %v", sql, err)
	}
}

func (w *world) syncer() *syncer.Syncer {
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
	return s
}

// sync runs the sources that are due (every active one when all is set).
func (w *world) sync(all bool) int {
	w.t.Helper()
	s := w.syncer()
	if all {
		w.exec(`UPDATE sources SET next_run_at = now() WHERE status = 'active'`)
	}
	n, err := s.RunDue(w.ctx)
	if err != nil {
		w.t.Fatal(err)
	}
	return n
}

type accepting struct{}

func (accepting) Deliver(context.Context, *notify.Notification) error { return nil }

type refusing struct{}

func (refusing) Deliver(_ context.Context, n *notify.Notification) error {
	n.Answered(http.StatusGone, []byte(`{"error": "this hook was deleted"}`))
	return &notify.PermanentError{Err: errors.New("webhook answered 410 Gone")}
}

// evaluate drains the changes, then delivers what is due: log accepts,
// hook refuses for good.
func (w *world) evaluate() {
	w.t.Helper()
	econf := evaluator.FromConfig(w.cfg)
	econf.Owner = "evaluator-1"
	ev, err := evaluator.New(w.pool, econf, w.log)
	if err != nil {
		w.t.Fatal(err)
	}
	if _, err := ev.Drain(w.ctx); err != nil {
		w.t.Fatal(err)
	}
	dconf := notify.DelivererConfigFrom(&w.cfg.Global)
	dconf.Owner = "deliverer-1"
	d := notify.NewDeliverer(w.pool, map[string]notify.Sink{"log": accepting{}, "hook": refusing{}}, dconf, w.log)
	if _, err := d.DeliverDue(w.ctx); err != nil {
		w.t.Fatal(err)
	}
}

// populate runs the story: three tickets created; ticket 2 closed (the
// hook refuses its notification: a dead letter); a run failing on a 503;
// a run after it; the inventory mirrored.
func (w *world) populate() {
	w.t.Helper()
	w.sync(true)
	w.evaluate()
	w.mu.Lock()
	w.tickets[1]["status"] = "closed"
	w.tickets[2]["subject"] = "Export to CSV and JSON"
	w.mu.Unlock()
	w.sync(true)
	w.evaluate()
	w.mu.Lock()
	w.failNext = true
	w.mu.Unlock()
	w.sync(true)
	w.sync(true)
	w.evaluate()
}

// serve starts the admin page (and the API beside it, as cmd/api does)
// and makes an admin token, a user token and a revoked admin token.
func (w *world) serve() {
	w.t.Helper()
	// The definitions of the configuration in the database, as the
	// binaries load them at start.
	if _, err := definitions.Apply(w.ctx, w.pool, w.cfg, definitions.ApplyOptions{Force: true}); err != nil {
		w.t.Fatal(err)
	}
	store := definitions.NewStore(w.pool, &definitions.Validator{Global: &w.cfg.Global, Checks: []definitions.Check{watchspec.Check}})
	svc := control.New(w.pool, store, nil, control.Config{}, w.log)
	adm, err := admin.New(svc, admin.Config{Config: w.cfg, ListPage: w.listPage}, w.log)
	if err != nil {
		w.t.Fatal(err)
	}
	w.srv = httptest.NewServer(adm.Handler())
	w.t.Cleanup(w.srv.Close)
	_, w.adminTok, err = tokens.Create(w.ctx, w.pool, tokens.NewToken{Owner: "ops", Scope: tokens.ScopeAdmin})
	if err != nil {
		w.t.Fatal(err)
	}
	_, w.userTok, err = tokens.Create(w.ctx, w.pool, tokens.NewToken{Owner: "alice", Scope: tokens.ScopeUser})
	if err != nil {
		w.t.Fatal(err)
	}
}

// queryMap runs sql and returns its rows as maps of column to value.
func (w *world) queryMap(sql string, args ...any) []map[string]any {
	w.t.Helper()
	return w.queryMapOn(w.pool, sql, args...)
}

// queryMapOn is queryMap on q: a transaction, whose now() is one instant
// for every statement it runs.
func (w *world) queryMapOn(q interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}, sql string, args ...any) []map[string]any {
	w.t.Helper()
	rows, err := q.Query(w.ctx, sql, args...)
	if err != nil {
		w.t.Fatalf("%s: %v", sql, err)
	}
	defer rows.Close()
	var out []map[string]any
	fds := rows.FieldDescriptions()
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			w.t.Fatal(err)
		}
		m := make(map[string]any, len(vals))
		for i, v := range vals {
			m[fds[i].Name] = v
		}
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		w.t.Fatal(err)
	}
	return out
}

func (w *world) count(sql string, args ...any) int64 {
	w.t.Helper()
	var n int64
	if err := w.pool.QueryRow(w.ctx, sql, args...).Scan(&n); err != nil {
		w.t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// serveBinary starts the real `api run` binary (built once per test
// process) on the world's schema and configuration directory, after serve
// made the definitions and tokens, and returns its base URL. It is stopped
// with SIGTERM when the test ends and must exit cleanly.
func (w *world) serveBinary() string {
	w.t.Helper()
	d := clitest.StartBinary(w.t, clitest.BuildBinary(w.t, "github.com/lookout-dev/lookout/cmd/api"), w.dir, w.url)
	return "http://" + d.Addr
}
