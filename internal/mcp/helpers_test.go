package mcp_test

import (
	"context"
	"encoding/json"
	"fmt"
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

	"github.com/jackc/pgx/v5/pgxpool"
	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/lookout-dev/lookout/internal/config"
	_ "github.com/lookout-dev/lookout/internal/connectors/all"
	"github.com/lookout-dev/lookout/internal/control"
	"github.com/lookout-dev/lookout/internal/definitions"
	"github.com/lookout-dev/lookout/internal/evaluator"
	"github.com/lookout-dev/lookout/internal/mcp"
	"github.com/lookout-dev/lookout/internal/pgtest"
	"github.com/lookout-dev/lookout/internal/secrets"
	"github.com/lookout-dev/lookout/internal/syncer/syncertest"
	"github.com/lookout-dev/lookout/internal/tokens"
)

// resolver answers DNS lookups of the URL check from a table.
type resolver map[string][]netip.Addr

func (r resolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	return r[host], nil
}

// upstream is an HTTP JSON API of releases that answers like a real one.
type upstream struct {
	mu    sync.Mutex
	items []string
}

func (u *upstream) set(items ...string) {
	u.mu.Lock()
	u.items = items
	u.mu.Unlock()
}

func (u *upstream) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	u.mu.Lock()
	defer u.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"data": [%s]}`, strings.Join(u.items, ","))
}

func release(id int, name, state string) string {
	return fmt.Sprintf(`{"id": %d, "name": %q, "state": %q, "stars": %d}`, id, name, state, 10*id)
}

type fixture struct {
	t       *testing.T
	pool    *pgxpool.Pool
	dir     string
	store   *definitions.Store
	svc     *control.Service
	server  *mcp.Server
	srv     *httptest.Server
	up      *upstream
	upURL   string
	tokens  map[string]string // owner -> secret
	tokenID map[string]int64
	keys    *secrets.Ring
}

const sourceYAML = `name: releases
connector: http
rate_limit: {per_second: 1000, burst: 10}
http:
  url: %s/releases
  items: body.data
fields:
  title: item.name
  status: item.state
  extra:
    stars: item.stars
`

// shippedWatch is the watch alice's assistant creates on the shared
// source releases.
var shippedWatch = map[string]any{"name": "shipped", "when": `change.kind == "updated" && changed("status") && record.status == "released"`, "notify": []string{"log"}}

func setup(t *testing.T) *fixture {
	t.Helper()
	pool := pgtest.Pool(t)
	logger := slog.New(slog.DiscardHandler)
	if testing.Verbose() {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	f := &fixture{t: t, pool: pool, dir: t.TempDir(), up: &upstream{}, tokens: map[string]string{}, tokenID: map[string]int64{}}
	up := httptest.NewServer(f.up)
	t.Cleanup(up.Close)
	f.write("lookout.yaml", "sinks:\n  log: {type: log}\ndefaults:\n  jitter: 0s\napi:\n  allow_private: true # the upstream is on loopback\n")
	f.write("sources/releases.yaml", fmt.Sprintf(sourceYAML, up.URL))
	cfg, err := config.Load(f.dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := definitions.Apply(ctx, pool, cfg, definitions.ApplyOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	key, err := secrets.NewKey("k1")
	if err != nil {
		t.Fatal(err)
	}
	if f.keys, err = secrets.Parse(key); err != nil {
		t.Fatal(err)
	}
	v := control.NewValidator(&cfg.Global)
	v.Keys = f.keys
	f.store = definitions.NewStore(pool, v)
	hub := control.NewHub(pool, logger)
	if err := hub.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hub.Stop() })
	// The upstream is an httptest server on loopback: let sources created
	// through the tools reach it (api.allow_private).
	f.svc = control.New(pool, f.store, hub, control.Config{StreamPoll: time.Minute, AllowPrivate: true, Limits: control.Limits{Watches: 4}, Keys: f.keys, DryRunWait: 300 * time.Millisecond,
		Drift: &config.Drift{EmbedModel: "tiny-embed", Threshold: 0.2, MinSamples: 5}}, logger)
	f.svc.SetResolver(resolver{"feeds.example": {netip.MustParseAddr("93.184.216.34")}, "hooks.example.com": {netip.MustParseAddr("93.184.216.34")}})
	f.server = mcp.New(f.svc, mcp.Config{}, logger)
	mux := http.NewServeMux()
	mux.Handle("/mcp", f.server.Handler())
	f.srv = httptest.NewServer(mux)
	f.upURL = up.URL
	t.Cleanup(f.srv.Close)
	t.Cleanup(f.server.Close)
	for owner, scope := range map[string]string{"alice": "user", "bob": "user", "root": "admin"} {
		tok, secret, err := tokens.Create(context.Background(), pool, tokens.NewToken{Owner: owner, Scope: scope})
		if err != nil {
			t.Fatal(err)
		}
		f.tokens[owner], f.tokenID[owner] = secret, tok.ID
	}
	return f
}

func (f *fixture) write(name, content string) {
	f.t.Helper()
	p := filepath.Join(f.dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

// pipeline runs the real syncer over the upstream, then the real
// evaluator over the changes it wrote; it returns how many changes the
// evaluator judged.
func (f *fixture) pipeline() int {
	f.t.Helper()
	cfg, err := config.Load(f.dir)
	if err != nil {
		f.t.Fatal(err)
	}
	// The sources of the database (the files' and those created through
	// the tools) as the daemon follows them.
	s := syncertest.New(f.t, f.pool, f.dir)
	if _, err := definitions.NewFollower(f.pool, &cfg.Global, s.Apply).CatchUp(context.Background()); err != nil {
		f.t.Fatal(err)
	}
	syncertest.SyncNow(f.t, f.pool, s)
	econf := evaluator.FromConfig(cfg)
	econf.Owner = "mcp-test"
	ev, err := evaluator.New(f.pool, econf, slog.New(slog.DiscardHandler))
	if err != nil {
		f.t.Fatal(err)
	}
	// The watches of the database (alice's) as the daemon follows them.
	ev.Follow(definitions.NewFollower(f.pool, &cfg.Global, ev.Apply))
	n, err := ev.Drain(context.Background())
	if err != nil {
		f.t.Fatal(err)
	}
	return n
}

// bearer adds a token to every request.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// connect opens an MCP session as owner over streamable HTTP, through the
// SDK's own client.
func (f *fixture) connect(owner string, opts *mcpsdk.ClientOptions) *mcpsdk.ClientSession {
	f.t.Helper()
	cs, err := f.dial(f.tokens[owner], opts)
	if err != nil {
		f.t.Fatalf("connect as %s: %v", owner, err)
	}
	f.t.Cleanup(func() { _ = cs.Close() })
	return cs
}

func (f *fixture) dial(token string, opts *mcpsdk.ClientOptions) (*mcpsdk.ClientSession, error) {
	client := mcpsdk.NewClient(&mcpsdk.Implementation{Name: "test-assistant", Version: "1"}, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return client.Connect(ctx, &mcpsdk.StreamableClientTransport{
		Endpoint:   f.srv.URL + "/mcp",
		HTTPClient: &http.Client{Transport: bearer{token: token, next: http.DefaultTransport}},
		MaxRetries: -1,
	}, nil)
}

// call calls a tool that must succeed and decodes its structured answer.
func call[T any](t *testing.T, cs *mcpsdk.ClientSession, tool string, args any) T {
	t.Helper()
	res := callRaw(t, cs, tool, args)
	if res.IsError {
		t.Fatalf("%s %v: tool error: %s", tool, args, text(res))
	}
	var out T
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("%s: decode %s: %v", tool, b, err)
	}
	return out
}

// toolError calls a tool that must fail with a tool error and returns its text.
func toolError(t *testing.T, cs *mcpsdk.ClientSession, tool string, args any) string {
	t.Helper()
	res := callRaw(t, cs, tool, args)
	if !res.IsError {
		t.Fatalf("%s %v: want a tool error, got %s", tool, args, text(res))
	}
	return text(res)
}

func callRaw(t *testing.T, cs *mcpsdk.ClientSession, tool string, args any) *mcpsdk.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcpsdk.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s %v: %v", tool, args, err)
	}
	return res
}

func text(res *mcpsdk.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcpsdk.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}
