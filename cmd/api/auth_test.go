package main

import (
	"context"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/lookout-dev/lookout/internal/clitest"
	"github.com/lookout-dev/lookout/internal/control"
	"github.com/lookout-dev/lookout/internal/pgtest"
	"github.com/lookout-dev/lookout/internal/tokens"
)

// A token is refused alike on every surface of `api run` that takes one:
// the HTTP API, its notification stream (SSE), MCP over HTTP, and the
// admin page (a bearer request and its sign-in form). Each refusal has
// the same status and the same reason, from one place
// (control.Service.Authorize); a session signed in before its token was
// revoked ends with the token.
func TestTokensRefusedAlikeOnEverySurface(t *testing.T) {
	_, dbURL := pgtest.Schema(t)
	t.Setenv("DATABASE_URL", dbURL)
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "sources"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "lookout.yaml"), []byte("sinks: {log: {type: log}}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d := clitest.StartDaemon(t, dir, runDaemon)
	ctx := context.Background()
	pool := pgtest.PoolFor(t, dbURL)
	mk := func(n tokens.NewToken) (*tokens.Token, string) {
		t.Helper()
		tok, secret, err := tokens.Create(ctx, pool, n)
		if err != nil {
			t.Fatal(err)
		}
		return tok, secret
	}
	_, user := mk(tokens.NewToken{Owner: "alice"})
	_, admin := mk(tokens.NewToken{Owner: "root", Scope: tokens.ScopeAdmin})
	rt, revoked := mk(tokens.NewToken{Owner: "root", Scope: tokens.ScopeAdmin})
	if _, err := tokens.Revoke(ctx, pool, rt.ID, ""); err != nil {
		t.Fatal(err)
	}
	// Expired as soon as it is made.
	_, expired := mk(tokens.NewToken{Owner: "root", Scope: tokens.ScopeAdmin, TTL: time.Nanosecond})

	base := "http://" + d.Addr
	noRedirect := func(jar http.CookieJar) *http.Client {
		return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	send := func(hc *http.Client, req *http.Request) (int, string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(req.Context(), 30*time.Second)
		defer cancel()
		resp, err := hc.Do(req.WithContext(ctx))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode == http.StatusOK && strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
			return resp.StatusCode, "" // an open stream: accepted
		}
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, html.UnescapeString(string(b))
	}
	bearer := func(method, path, body string, header string) func() (int, string) {
		return func() (int, string) {
			req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
			req.Header.Set("Authorization", header)
			if body != "" {
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Accept", "application/json, text/event-stream")
			}
			return send(noRedirect(nil), req)
		}
	}
	csrf := regexp.MustCompile(`name="csrf" value="([^"]*)"`)
	signIn := func(secret string) (*http.Client, int, string) {
		t.Helper()
		jar, _ := cookiejar.New(nil)
		hc := noRedirect(jar)
		req, _ := http.NewRequest(http.MethodGet, base+"/admin/login", nil)
		_, form := send(hc, req)
		m := csrf.FindStringSubmatch(form)
		if m == nil {
			t.Fatalf("no csrf field in the sign-in form:\n%.1000s", form)
		}
		v := url.Values{"csrf": {m[1]}, "token": {secret}, "next": {"/admin/"}}
		req, _ = http.NewRequest(http.MethodPost, base+"/admin/login", strings.NewReader(v.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		code, body := send(hc, req)
		return hc, code, body
	}
	const initialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	surfaces := []struct {
		name string
		// admin surfaces need the admin scope.
		admin bool
		call  func(header, secret string) (int, string)
	}{
		{"HTTP /v1/me", false, func(h, _ string) (int, string) { return bearer(http.MethodGet, "/v1/me", "", h)() }},
		{"SSE /v1/notifications/stream", false, func(h, _ string) (int, string) {
			return bearer(http.MethodGet, "/v1/notifications/stream", "", h)()
		}},
		{"MCP /mcp", false, func(h, _ string) (int, string) { return bearer(http.MethodPost, "/mcp", initialize, h)() }},
		{"admin page (bearer)", true, func(h, _ string) (int, string) { return bearer(http.MethodGet, "/admin/", "", h)() }},
		{"admin sign-in form", true, func(h, secret string) (int, string) {
			if !strings.HasPrefix(h, "Bearer ") {
				return http.StatusUnauthorized, control.ErrNotBearer.Error() // a form has no scheme
			}
			_, code, body := signIn(secret)
			if code == http.StatusSeeOther {
				return http.StatusOK, ""
			}
			return code, body
		}},
	}
	cases := []struct {
		name, header, secret string
		// status and reason of the refusal ("" reason: accepted, 200).
		status int
		reason error
		// onAdmin is the refusal on the admin surfaces, when it differs.
		onAdmin error
	}{
		{"not a bearer header", "Basic " + admin, "", http.StatusUnauthorized, control.ErrNotBearer, nil},
		{"an empty bearer", "Bearer ", "", http.StatusUnauthorized, tokens.ErrMissing, nil},
		{"an unknown token", "Bearer lk_not-a-token", "lk_not-a-token", http.StatusUnauthorized, tokens.ErrUnknown, nil},
		{"a revoked token", "Bearer " + revoked, revoked, http.StatusUnauthorized, tokens.ErrRevoked, nil},
		{"an expired token", "Bearer " + expired, expired, http.StatusUnauthorized, tokens.ErrExpired, nil},
		{"a user token", "Bearer " + user, user, http.StatusOK, nil, control.ErrNeedsAdmin},
		{"an admin token", "Bearer " + admin, admin, http.StatusOK, nil, nil},
	}
	for _, c := range cases {
		for _, s := range surfaces {
			t.Run(c.name+" on "+s.name, func(t *testing.T) {
				status, reason := c.status, c.reason
				if s.admin && c.onAdmin != nil {
					status, reason = http.StatusForbidden, c.onAdmin
				}
				code, body := s.call(c.header, c.secret)
				if reason == nil {
					if code != http.StatusOK {
						t.Errorf("%d %.300s, want it accepted", code, body)
					}
					return
				}
				if code != status || !strings.Contains(body, reason.Error()) {
					t.Errorf("%d %.600s\nwant %d saying %q", code, body, status, reason)
				}
			})
		}
	}

	// A session signed in before its token was revoked ends with it.
	st, secret := mk(tokens.NewToken{Owner: "root", Scope: tokens.ScopeAdmin})
	hc, code, body := signIn(secret)
	if code != http.StatusSeeOther {
		t.Fatalf("sign in: %d %.300s", code, body)
	}
	req, _ := http.NewRequest(http.MethodGet, base+"/admin/", nil)
	if code, body := send(hc, req); code != http.StatusOK {
		t.Fatalf("/admin/ signed in: %d %.300s", code, body)
	}
	if _, err := tokens.Revoke(ctx, pool, st.ID, ""); err != nil {
		t.Fatal(err)
	}
	// A page's GET goes to the sign-in form, which says why; an action's
	// POST is refused as a bearer request is.
	req, _ = http.NewRequest(http.MethodGet, base+"/admin/sources", nil)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	loc := resp.Header.Get("Location")
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc, "/admin/login?") {
		t.Fatalf("a page of a session of a revoked token: %d to %q, want 303 to the sign-in form", resp.StatusCode, loc)
	}
	req, _ = http.NewRequest(http.MethodGet, base+loc, nil)
	if code, body := send(hc, req); code != http.StatusOK || !strings.Contains(body, tokens.ErrRevoked.Error()) {
		t.Errorf("the sign-in form after a session of a revoked token: %d %.600s\nwant it saying %q", code, body, tokens.ErrRevoked)
	}
	req, _ = http.NewRequest(http.MethodPost, base+"/admin/sources/x/run", strings.NewReader("csrf=x"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if code, body := send(hc, req); code != http.StatusUnauthorized || !strings.Contains(body, tokens.ErrRevoked.Error()) {
		t.Errorf("an action of a session of a revoked token: %d %.600s\nwant 401 saying %q", code, body, tokens.ErrRevoked)
	}
}
