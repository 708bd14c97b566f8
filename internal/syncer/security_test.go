package syncer

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/redact"
)

// setSecret sets an environment variable named after the test (unique, so
// parallel tests do not collide) and returns its name.
func setSecret(t *testing.T, name, value string) string {
	t.Helper()
	env := "LOOKOUT_TEST_" + strings.ToUpper(strings.NewReplacer("/", "_", "-", "_").Replace(t.Name())) + "_" + name
	if err := os.Setenv(env, value); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Unsetenv(env) })
	return env
}

// writeSources writes lookout.yaml (fastLimits, then global) and
// sources/<name>.yaml and loads the directory.
func writeSources(t *testing.T, global string, sources map[string]string) *config.Config {
	t.Helper()
	return writeDir(t, fastLimits+global, sources)
}

// writeDir writes lookout.yaml and sources/<name>.yaml as given and loads
// the directory.
func writeDir(t *testing.T, global string, sources map[string]string) *config.Config {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "sources"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "lookout.yaml"), []byte(global), 0o644); err != nil {
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
	return cfg
}

// headerLog records the value of one header on every request a server saw.
type headerLog struct {
	mu   sync.Mutex
	seen []string // "path header-value"
}

func (l *headerLog) add(r *http.Request, header string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seen = append(l.seen, r.URL.Path+" "+r.Header.Get(header)+" "+r.Header.Get("Authorization"))
}

func (l *headerLog) list() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.seen...)
}

// TestRedirectKeepsHeadersAtHome: a snapshot http source whose upstream
// starts redirecting to another host (another port of 127.0.0.1: another
// origin). By default (same_origin) the run fails naming the source and
// both URLs, the other host is never called, and no record is tombstoned.
// With follow_redirects: any the redirect is followed but neither the
// configured X-Api-Key nor Authorization reaches the other host; with none
// even a same-origin redirect is refused; a redirect to file: is refused.
func TestRedirectKeepsHeadersAtHome(t *testing.T) {
	t.Parallel()
	const key = "shop-key-5ecret-0123"
	keyEnv := setSecret(t, "SHOP_KEY", key)

	var other headerLog
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		other.add(r, "X-Api-Key")
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `[]`) // what a snapshot would mirror: every record deleted
	}))
	t.Cleanup(evil.Close)
	var home headerLog
	redirect := map[string]string{} // path -> Location, set before the runs that use it
	var mu sync.Mutex
	shop := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		home.add(r, "X-Api-Key")
		mu.Lock()
		loc := redirect[r.URL.Path]
		mu.Unlock()
		if loc != "" {
			http.Redirect(w, r, loc, http.StatusFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `[{"id": "1", "title": "one"}, {"id": "2", "title": "two"}]`)
	}))
	t.Cleanup(shop.Close)
	setRedirect := func(path, loc string) {
		mu.Lock()
		defer mu.Unlock()
		redirect[path] = loc
	}

	src := func(name, path, extra string) string {
		return fmt.Sprintf("name: %s\nconnector: http\nevery: 1h\njitter: 0s\n%s"+
			"http: {url: %q, snapshot: true, headers: {X-Api-Key: '${%s}', Authorization: 'Bearer ${%s}'}}\n",
			name, extra, shop.URL+path, keyEnv, keyEnv)
	}
	cfg := writeSources(t, "", map[string]string{
		"shop":   src("shop", "/shop", ""),                            // default: same_origin
		"anyway": src("anyway", "/anyway", "follow_redirects: any\n"), // follows, headers dropped
		"never":  src("never", "/never", "follow_redirects: none\n"),
		"local":  src("local", "/local", "follow_redirects: any\n"),
	})
	if got := cfg.Source("shop").FollowRedirects; got != "same_origin" {
		t.Fatalf("follow_redirects defaults to %q, want same_origin", got)
	}
	h := newHarness(t)
	s := h.syncer(cfg, Config{})
	if n := h.runDue(s); n != 4 {
		t.Fatalf("ran %d sources, want 4", n)
	}
	for _, name := range []string{"shop", "anyway", "never", "local"} {
		if r := h.source(name); r.LastError != "" {
			t.Fatalf("%s: first run failed: %s", name, r.LastError)
		}
	}

	setRedirect("/shop", evil.URL+"/loot")
	setRedirect("/anyway", evil.URL+"/anyway")
	setRedirect("/never", shop.URL+"/never-moved") // same origin, still refused
	setRedirect("/local", "file:///etc/passwd")
	h.clock.Advance(2 * 60 * 60 * 1e9)
	h.runDue(s)

	r := h.source("shop")
	for _, want := range []string{"source shop", "redirect from " + shop.URL + "/shop to " + evil.URL + "/loot refused", "follow_redirects is same_origin"} {
		if !strings.Contains(r.LastError, want) {
			t.Errorf("shop: last_error %q does not say %q", r.LastError, want)
		}
	}
	var deleted int
	if err := h.pool.QueryRow(context.Background(),
		`SELECT count(*) FROM records WHERE source = 'shop' AND deleted_at IS NOT NULL`).Scan(&deleted); err != nil {
		t.Fatal(err)
	}
	if deleted != 0 {
		t.Errorf("shop: %d records tombstoned through a redirect to another host", deleted)
	}
	if runs := h.runs("shop"); runs[len(runs)-1].Status != "failed" {
		t.Errorf("shop: last run %+v, want failed", runs[len(runs)-1])
	}
	if r := h.source("never"); !strings.Contains(r.LastError, "follow_redirects is none") {
		t.Errorf("never: last_error %q", r.LastError)
	}
	if r := h.source("local"); !strings.Contains(r.LastError, "only http and https redirects are followed") {
		t.Errorf("local: last_error %q", r.LastError)
	}
	if r := h.source("anyway"); r.LastError != "" {
		t.Errorf("anyway: %s", r.LastError)
	}

	seen := other.list()
	if len(seen) != 1 || !strings.HasPrefix(seen[0], "/anyway ") {
		t.Errorf("the other host saw %q, want one request (of the source that allows any)", seen)
	}
	for _, s := range seen {
		if strings.Contains(s, key) {
			t.Errorf("the other host received the configured secret: %q", s)
		}
	}
	// The home host saw the headers on every request, the redirects too.
	for _, s := range home.list() {
		if !strings.Contains(s, key) {
			t.Errorf("home host request without the configured headers: %q", s)
		}
	}
}

// TestRedirectSameOriginKeepsHeaders: a redirect within the origin is
// followed with the configured headers under the default.
func TestRedirectSameOriginKeepsHeaders(t *testing.T) {
	t.Parallel()
	const key = "moved-key-0123456"
	keyEnv := setSecret(t, "KEY", key)
	var home headerLog
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		home.add(r, "X-Api-Key")
		if r.URL.Path == "/old" {
			http.Redirect(w, r, "/new", http.StatusMovedPermanently)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `[{"id": "1", "title": "one"}]`)
	}))
	t.Cleanup(srv.Close)
	cfg := writeSources(t, "", map[string]string{"moved": fmt.Sprintf(
		"name: moved\nconnector: http\nevery: 1h\njitter: 0s\nhttp: {url: %q, headers: {X-Api-Key: '${%s}'}}\n", srv.URL+"/old", keyEnv)})
	h := newHarness(t)
	h.runDue(h.syncer(cfg, Config{}))
	if r := h.source("moved"); r.LastError != "" {
		t.Fatalf("moved: %s", r.LastError)
	}
	got := home.list()
	if len(got) != 2 || got[1] != "/new "+key+" " {
		t.Fatalf("requests %q, want /old then /new with the key", got)
	}
}

// TestEgressPolicyOfSources: the syncer's default transport dials through
// lookout.yaml's egress policy: with deny_private the loopback upstream is
// refused (the run fails saying why), without it the same source runs.
func TestEgressPolicyOfSources(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `[{"id": "1", "title": "one"}]`)
	}))
	t.Cleanup(srv.Close)
	body := fmt.Sprintf("name: api\nconnector: http\nevery: 1h\njitter: 0s\nhttp: {url: %q}\n", srv.URL+"/items")
	for _, tc := range []struct {
		global  string
		wantErr string
	}{
		{global: "", wantErr: ""},
		{global: "egress: {deny_private: true}\n", wantErr: "egress policy refuses connections to 127.0.0.1:"},
		{global: "egress: {deny_private: true, allow: [127.0.0.0/8]}\n", wantErr: ""},
	} {
		cfg := writeSources(t, tc.global, map[string]string{"api": body})
		h := newHarness(t)
		// No Transport: New builds the egress transport from the policy
		// FromConfig read from lookout.yaml.
		conf := FromConfig(cfg)
		conf.Owner, conf.Now = "test", h.clock.Now
		s, err := New(h.pool, conf, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Register(context.Background()); err != nil {
			t.Fatal(err)
		}
		h.runDue(s)
		r := h.source("api")
		if tc.wantErr == "" && r.LastError != "" || !strings.Contains(r.LastError, tc.wantErr) {
			t.Errorf("%q: last_error %q, want %q", tc.global, r.LastError, tc.wantErr)
		}
		s.conf.Transport.(*http.Transport).CloseIdleConnections()
	}
}

// TestEchoedSecretIsRedacted: upstreams that echo the configured token in
// their error bodies (a 400, and a 401 that disables the source) leave no
// trace of it in sync_runs.error, sources.last_error, status_reason or the
// logs.
func TestEchoedSecretIsRedacted(t *testing.T) {
	t.Parallel()
	const token = "tok-echo-9f8e7d6c5b4a"
	tokenEnv := setSecret(t, "TOKEN", token)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		code := http.StatusBadRequest
		if r.URL.Path == "/denied" {
			code = http.StatusUnauthorized
		}
		http.Error(w, fmt.Sprintf(`{"error": "key %s is not valid for this shop (got %q)"}`,
			r.Header.Get("X-Api-Key"), r.Header.Get("Authorization")), code)
	}))
	t.Cleanup(srv.Close)
	src := func(name string) string {
		return fmt.Sprintf("name: %s\nconnector: http\nevery: 1h\njitter: 0s\n"+
			"http: {url: %q, headers: {X-Api-Key: '${%s}', Authorization: 'Bearer ${%s}'}}\n", name, srv.URL+"/"+name, tokenEnv, tokenEnv)
	}
	cfg := writeSources(t, "", map[string]string{"echo": src("echo"), "denied": src("denied")})
	h := newHarness(t)
	logs := &logBuffer{}
	logger := slog.New(redact.NewHandler(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}), cfg.Global.Redactor()))
	conf := FromConfig(cfg)
	conf.Owner, conf.Now, conf.Transport = "test", h.clock.Now, h.tr
	s, err := New(h.pool, conf, logger)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Register(context.Background()); err != nil {
		t.Fatal(err)
	}
	h.runDue(s)

	var stored []string
	rows, err := h.pool.Query(context.Background(), `
		SELECT coalesce(error, '') FROM sync_runs
		UNION ALL SELECT coalesce(last_error, '') || ' ' || coalesce(status_reason, '') || ' ' || coalesce(interval_reason, '') FROM sources`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		stored = append(stored, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	all := strings.Join(stored, "\n")
	if strings.Contains(all, token) {
		t.Errorf("the secret is stored:\n%s", all)
	}
	if c := strings.Count(all, redact.Mask); c < 3 {
		t.Errorf("want the echoes redacted in the runs' and sources' errors, got %d masks:\n%s", c, all)
	}
	if r := h.source("denied"); r.Status != "disabled" || !strings.Contains(r.StatusReason, redact.Mask) {
		t.Errorf("denied: %s %q", r.Status, r.StatusReason)
	}
	if l := logs.String(); strings.Contains(l, token) || !strings.Contains(l, redact.Mask) {
		t.Errorf("logs hold the secret or no redaction:\n%s", l)
	}
}
