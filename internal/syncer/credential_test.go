package syncer

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// TestHostBudgetPerCredential: requests that carry a credential spend the
// budget of their host and credential, not the host's: two sources with
// one token share a bucket (one of them waits), a source with another
// token and one without any have buckets of their own (they do not wait).
// host_limits keys the rows by a fingerprint of the token, never the
// token itself.
func TestHostBudgetPerCredential(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"items": [{"id": %q}]}`, r.URL.Path)
	}))
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")
	tokenA, tokenB := setSecret(t, "TOKEN_A", "tok-aaaaaaaa"), setSecret(t, "TOKEN_B", "tok-bbbbbbbb")
	src := func(name, header string) string {
		return fmt.Sprintf("name: %s\nconnector: http\nevery: 1h\njitter: 0s\nrate_limit: {per_second: 100, burst: 10}\nhttp: {url: %q, items: body.items%s}\n",
			name, srv.URL+"/"+name, header)
	}
	cfg := writeSources(t, fmt.Sprintf("hosts: {%q: {per_second: 1, burst: 1}}\n", host), map[string]string{
		"a1":   src("a1", ", headers: {Authorization: 'Bearer ${"+tokenA+"}'}"),
		"a2":   src("a2", ", headers: {Authorization: 'Bearer ${"+tokenA+"}'}"),
		"b":    src("b", ", headers: {X-Api-Key: '${"+tokenB+"}'}"),
		"anon": src("anon", ""),
	})
	s := h.syncer(cfg, Config{})
	if n := h.runDue(s); n != 4 {
		t.Fatalf("ran %d", n)
	}
	rows, err := h.pool.Query(context.Background(), `SELECT credential, requests FROM host_limits WHERE host = $1 ORDER BY requests DESC, credential`, host)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var cred string
		var n int
		if err := rows.Scan(&cred, &n); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(cred, "tok-") {
			t.Errorf("host_limits.credential %q holds the token", cred)
		}
		kind := "token"
		if cred == "" {
			kind = "none"
		}
		got = append(got, fmt.Sprintf("%s:%d", kind, n))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	// Token A: two requests in one bucket; token B and no token: one each.
	if strings.Join(got, " ") != "token:2 none:1 token:1" {
		t.Errorf("host_limits rows of %s: %v, want token:2 none:1 token:1", host, got)
	}
	waits := map[string]int{}
	for _, name := range []string{"a1", "a2", "b", "anon"} {
		for _, r := range h.runs(name) {
			waits[name] += r.Waits
		}
	}
	if waits["a1"]+waits["a2"] != 1 || waits["b"] != 0 || waits["anon"] != 0 {
		t.Errorf("rate_limit_waits %v: want one wait between a1 and a2 (one token), none for b and anon", waits)
	}
}

// TestUnbudgetedHostStillBlocks: a loopback host has no shared budget
// under the built-in default (no host_limits statement per request), but
// a 429 with Retry-After still blocks it for every source.
func TestUnbudgetedHostStillBlocks(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if requests.Add(1) == 1 {
			w.Header().Set("Retry-After", "120")
			http.Error(w, "slow down", http.StatusTooManyRequests)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"items": [{"id": "1"}]}`)
	}))
	t.Cleanup(srv.Close)
	src := func(name string) string {
		return fmt.Sprintf("name: %s\nconnector: http\nevery: 1h\njitter: 0s\nhttp: {url: %q, items: body.items}\n", name, srv.URL+"/"+name)
	}
	cfg := writeDir(t, "sinks: {log: {type: log}}\n", map[string]string{"first": src("first")})
	if got := cfg.Global.HostLimit(strings.TrimPrefix(srv.URL, "http://")); got.PerSecond != 0 {
		t.Fatalf("loopback host budget %+v, want none", got)
	}
	s := h.syncer(cfg, Config{})
	h.runDue(s)
	if r := h.runs("first"); len(r) != 1 || r[0].Status != "deferred" {
		t.Fatalf("first: %+v", r)
	}
	// Another source of the host, due now: deferred without a request.
	cfg2 := writeDir(t, "sinks: {log: {type: log}}\n", map[string]string{"first": src("first"), "second": src("second")})
	s2 := h.syncer(cfg2, Config{Owner: "replica-b"})
	h.runDue(s2)
	if r := h.runs("second"); len(r) != 1 || r[0].Status != "deferred" || !strings.Contains(r[0].Error, "is blocked") {
		t.Fatalf("second: %+v", r)
	}
	if n := requests.Load(); n != 1 {
		t.Errorf("the blocked host got %d requests, want 1", n)
	}
	var perSecond float64
	if err := h.pool.QueryRow(context.Background(), `SELECT per_second FROM host_limits WHERE host = $1`,
		strings.TrimPrefix(srv.URL, "http://")).Scan(&perSecond); err != nil || perSecond != 0 {
		t.Errorf("host_limits.per_second %g (%v), want 0 (no budget)", perSecond, err)
	}
}
