package admin_test

import (
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/lookout-dev/lookout/internal/admin"
	"github.com/lookout-dev/lookout/internal/tokens"
)

// client is a browser-like HTTP client: a cookie jar, no redirects followed.
type client struct {
	t   *testing.T
	w   *world
	hc  *http.Client
	jar *cookiejar.Jar
}

func newClient(w *world) *client {
	jar, _ := cookiejar.New(nil)
	return &client{t: w.t, w: w, jar: jar, hc: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}}
}

func (c *client) do(method, path string, form url.Values, header http.Header) (*http.Response, string) {
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
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]*)"`)

func csrfOf(t *testing.T, body string) string {
	t.Helper()
	m := csrfField.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no csrf field in the page:\n%.2000s", body)
	}
	return m[1]
}

// login signs in with token through the form and returns the answer.
func (c *client) login(token string) (*http.Response, string) {
	c.t.Helper()
	_, form := c.do("GET", "/admin/login", nil, nil)
	return c.do("POST", "/admin/login", url.Values{"csrf": {csrfOf(c.t, form)}, "token": {token}, "next": {"/admin/sources"}}, nil)
}

// TestSignInSessionAndCSRF: the page needs an admin token (bearer or the
// session cookie the sign-in form makes); user tokens are refused; the
// sign-in form and every action need their CSRF token; revoking the token
// ends its sessions; every answer carries the strict CSP.
func TestSignInSessionAndCSRF(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.sync(true)
	w.serve()
	c := newClient(w)

	// Not signed in: pages redirect to the form, actions are refused.
	resp, _ := c.do("GET", "/admin/sources", nil, nil)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/admin/login?next=%2Fadmin%2Fsources" {
		t.Fatalf("anonymous GET: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	if resp, _ := c.do("POST", "/admin/sources/tickets/pause", url.Values{}, nil); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("anonymous POST: %d", resp.StatusCode)
	}
	resp, form := c.do("GET", "/admin/login", nil, nil)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Security-Policy") != admin.CSP {
		t.Fatalf("login form: %d, CSP %q", resp.StatusCode, resp.Header.Get("Content-Security-Policy"))
	}

	// The sign-in form without its double-submit token is refused.
	resp, body := c.do("POST", "/admin/login", url.Values{"token": {w.adminTok}}, nil)
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "CSRF check failed") {
		t.Fatalf("sign-in without csrf: %d %.300s", resp.StatusCode, body)
	}
	_ = form

	// A user token is refused, by the form and as a bearer header.
	resp, body = c.login(w.userTok)
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "user scope") {
		t.Fatalf("sign-in with a user token: %d %.300s", resp.StatusCode, body)
	}
	if resp, body := c.do("GET", "/admin/", nil, http.Header{"Authorization": {"Bearer " + w.userTok}}); resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "user scope") {
		t.Fatalf("bearer user token: %d", resp.StatusCode)
	}
	if resp, _ := c.do("GET", "/admin/", nil, http.Header{"Authorization": {"Bearer lk_nope"}}); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("bearer unknown token: %d", resp.StatusCode)
	}
	if resp, _ := c.do("GET", "/admin/", nil, http.Header{"Authorization": {"Bearer " + w.adminTok}}); resp.StatusCode != http.StatusOK {
		t.Fatalf("bearer admin token: %d", resp.StatusCode)
	}

	// The admin token signs in: a session cookie, HttpOnly, SameSite=Strict.
	resp, _ = c.login(w.adminTok)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/admin/sources" {
		t.Fatalf("sign-in: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	var session *http.Cookie
	for _, ck := range resp.Cookies() {
		if ck.Name == "lookout_admin" {
			session = ck
		}
	}
	if session == nil || !session.HttpOnly || session.SameSite != http.SameSiteStrictMode || session.Path != "/admin" || session.Secure {
		t.Fatalf("session cookie: %+v", session)
	}
	if strings.Contains(session.Value, w.adminTok) || len(session.Value) < 40 {
		t.Fatalf("the cookie holds the token or too little: %q", session.Value)
	}
	resp, page := c.do("GET", "/admin/sources/tickets", nil, nil)
	if resp.StatusCode != 200 {
		t.Fatalf("source page: %d %.500s", resp.StatusCode, page)
	}
	if got := resp.Header.Get("Content-Security-Policy"); got != admin.CSP || !strings.Contains(got, "default-src 'self'") {
		t.Fatalf("CSP: %q", got)
	}
	if strings.Contains(page, "style=") || strings.Contains(page, "<script>") || strings.Contains(page, "onclick") {
		t.Fatalf("inline style or script in the page")
	}
	csrf := csrfOf(t, page)

	// An action without the CSRF token, or with another's, changes nothing.
	for _, bad := range []url.Values{{}, {"csrf": {"forged"}}} {
		resp, body := c.do("POST", "/admin/sources/tickets/pause", bad, nil)
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "CSRF token") {
			t.Fatalf("pause without csrf: %d %.300s", resp.StatusCode, body)
		}
	}
	if st := w.queryMap(`SELECT status FROM sources WHERE name = 'tickets'`)[0]["status"]; st != "active" {
		t.Fatalf("a refused POST paused the source: %v", st)
	}
	// A GET cannot change anything.
	if resp, _ := c.do("GET", "/admin/sources/tickets/pause", nil, nil); resp.StatusCode == http.StatusSeeOther {
		t.Fatalf("GET of an action redirected like a POST")
	}
	// With the token it works, and is audited.
	resp, _ = c.do("POST", "/admin/sources/tickets/pause", url.Values{"csrf": {csrf}, "back": {"/admin/sources/tickets"}, "reason": {"maintenance"}}, nil)
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/admin/sources/tickets?done=paused") {
		t.Fatalf("pause: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	row := w.queryMap(`SELECT status, status_reason FROM sources WHERE name = 'tickets'`)[0]
	if row["status"] != "paused" || row["status_reason"] != "maintenance" {
		t.Fatalf("after pause: %v", row)
	}
	if n := w.count(`SELECT count(*) FROM audit_log WHERE via = 'admin' AND action = 'pause' AND target = 'tickets' AND actor = 'ops'`); n != 1 {
		t.Fatalf("audit rows of the pause: %d", n)
	}
	// A cross-origin POST is refused whatever it carries.
	resp, _ = c.do("POST", "/admin/sources/tickets/resume", url.Values{"csrf": {csrf}}, http.Header{"Sec-Fetch-Site": {"cross-site"}})
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("cross-site POST: %d", resp.StatusCode)
	}

	// A bearer request needs no CSRF token (no browser sends the header by itself).
	resp, _ = c.do("POST", "/admin/sources/tickets/resume", url.Values{}, http.Header{"Authorization": {"Bearer " + w.adminTok}})
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("bearer resume: %d", resp.StatusCode)
	}

	// Revoking the token ends the session at once.
	var id int64
	if err := w.pool.QueryRow(w.ctx, `SELECT id FROM api_tokens WHERE owner = 'ops'`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	if _, err := tokens.Revoke(w.ctx, w.pool, id, ""); err != nil {
		t.Fatal(err)
	}
	if resp, _ := c.do("GET", "/admin/", nil, nil); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("after revocation: %d", resp.StatusCode)
	}
	if resp, _ := c.do("POST", "/admin/sources/tickets/pause", url.Values{"csrf": {csrf}}, nil); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("POST after revocation: %d", resp.StatusCode)
	}
	// A tampered cookie is refused.
	u, _ := url.Parse(w.srv.URL + "/admin/")
	c.jar.SetCookies(u, []*http.Cookie{{Name: "lookout_admin", Value: session.Value[:len(session.Value)-2] + "AA", Path: "/admin"}})
	if resp, _ := c.do("GET", "/admin/", nil, nil); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("tampered cookie: %d", resp.StatusCode)
	}
}
