package web_test

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lookout-dev/lookout/internal/connectors/conntest"
	"github.com/lookout-dev/lookout/internal/connectors/web"
)

// portalPassword is the supplier portal's password, given to the source
// as ${PORTAL_PASSWORD}: it must never show in a log line or an error.
const portalPassword = "pw-Zq81-never-logged"

// portal is a supplier portal shaped like real ones: a login form whose
// script posts the credentials (fetch, JSON), gets a session cookie
// (Set-Cookie, HttpOnly) and a token it stores in a cookie of its own
// (document.cookie); the document list is served only to a request that
// carries both, and says "Please sign in" otherwise.
type portal struct {
	srv *httptest.Server

	mu     sync.Mutex
	logins []string // user of each POST /session
	log    []string // method and path of each request
}

const portalLogin = `<!DOCTYPE html><html><head><title>Supplier portal: sign in</title></head><body>
<form id="login"><input name="user"><input name="password" type="password"><button id="go" type="submit">Sign in</button></form>
<p id="status"></p>
<script>
document.getElementById('login').addEventListener('submit', e => {
  e.preventDefault();
  const f = e.target;
  fetch('/session', {method: 'POST', headers: {'Content-Type': 'application/json'},
      body: JSON.stringify({user: f.user.value, password: f.password.value})})
    .then(r => r.ok ? r.json() : Promise.reject(r.status))
    .then(j => {
      document.cookie = 'portal_token=' + j.token + '; path=/';
      document.getElementById('status').innerHTML = '<span id="welcome">Welcome</span>';
    }, () => { document.getElementById('status').textContent = 'Wrong user or password'; });
});
</script></body></html>`

const portalDocuments = `<!DOCTYPE html><html><head><title>Documents</title></head><body>
<ul class="documents">
<li class="doc"><a href="/files/price-list-2026.pdf">Price list 2026</a></li>
<li class="doc"><a href="/files/terms.pdf">Terms of delivery</a></li>
</ul></body></html>`

func newPortal(t *testing.T) *portal {
	t.Helper()
	p := &portal{}
	p.srv = httptest.NewServer(http.HandlerFunc(p.serve))
	t.Cleanup(p.srv.Close)
	return p
}

func (p *portal) serve(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	p.log = append(p.log, r.Method+" "+r.URL.Path)
	p.mu.Unlock()
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	switch r.URL.Path {
	case "/login":
		_, _ = io.WriteString(w, portalLogin)
	case "/session":
		var in struct{ User, Password string }
		if r.Method != http.MethodPost || json.NewDecoder(r.Body).Decode(&in) != nil {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		p.mu.Lock()
		p.logins = append(p.logins, in.User)
		p.mu.Unlock()
		if in.User != "acme-buyer" || in.Password != portalPassword {
			http.Error(w, `{"error": "wrong user or password"}`, http.StatusForbidden)
			return
		}
		http.SetCookie(w, &http.Cookie{Name: "sid", Value: "s-4711", Path: "/", HttpOnly: true})
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"token": "t-0815"}`)
	case "/documents":
		sid, _ := r.Cookie("sid")
		tok, _ := r.Cookie("portal_token")
		if sid == nil || sid.Value != "s-4711" || tok == nil || tok.Value != "t-0815" {
			_, _ = io.WriteString(w, `<!DOCTYPE html><html><body><p>Please sign in.</p></body></html>`)
			return
		}
		_, _ = io.WriteString(w, portalDocuments)
	default:
		http.NotFound(w, r) // robots.txt too: everything allowed
	}
}

func (p *portal) requests() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.log)
}

// lockedBuffer collects a connector's log lines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// loginOptions is a document list behind the portal's login form, the
// password from the environment.
func loginOptions(t *testing.T, p *portal, logs *lockedBuffer, timeout string) web.Options {
	t.Helper()
	o := options(t, p.srv.URL+"/documents", "items: ul.documents li.doc", "id: a@href", "fields:", "  title: a",
		"render: browser", "wait:", "  timeout: "+timeout, "  idle: 100ms",
		"login:", "  url: "+p.srv.URL+"/login", "  steps:",
		`    - fill: "input[name=user]"`, "      value: acme-buyer",
		`    - fill: "input[name=password]"`, "      value: ${PORTAL_PASSWORD}",
		"    - click: button#go",
		"    - wait: span#welcome")
	o.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	return o
}

// A supplier portal behind a login form: the steps fill the form (the
// password from the environment), click, wait for the welcome; the
// session (a server cookie and a cookie the script set) carries on to
// the document list, every request through the connector's client. A
// wrong password fails the run at the wait step, and neither the error
// nor any log line holds the password. The session stays in its render:
// the same page rendered without login asks to sign in.
func TestBrowserLogsInToAPortal(t *testing.T) {
	needChromium(t)
	t.Cleanup(web.CloseBrowser)
	t.Setenv("PORTAL_PASSWORD", portalPassword)
	p := newPortal(t)
	logs := &lockedBuffer{}
	tr := &policy{}
	conn, err := web.New(&http.Client{Transport: tr}, loginOptions(t, p, logs, "2m"))
	if err != nil {
		t.Fatal(err)
	}
	r := fetchWithin(conn, 3*time.Minute)
	if r.Err != nil {
		t.Fatalf("run: %v; the portal saw %q", r.Err, p.requests())
	}
	if got := r.IDs(); !slices.Equal(got, []string{p.srv.URL + "/files/price-list-2026.pdf", p.srv.URL + "/files/terms.pdf"}) {
		t.Errorf("ids %v, want the documents behind the login", got)
	}
	if seen := tr.paths(); !slices.Contains(seen, "/session") || !slices.Contains(seen, "/documents") {
		t.Errorf("the connector's client saw %q, want the login's POST and the document list among them", seen)
	}

	// The session does not outlive its render: the same browser renders
	// the page for a source without login as a stranger.
	anon, err := web.New(&http.Client{Transport: tr}, options(t, p.srv.URL+"/documents", "render: browser", "wait:", "  idle: 100ms"))
	if err != nil {
		t.Fatal(err)
	}
	r = fetchWithin(anon, 3*time.Minute)
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	if body, _ := r.Items()[0]["body"].(string); !strings.Contains(body, "Please sign in") {
		t.Errorf("a render without login read %q: the session leaked from another render", body)
	}

	// A wrong password: the run fails at a login step, saying which
	// (the wait for the welcome, once web.wait.timeout is spent; an
	// earlier one when a loaded machine spends it before).
	t.Setenv("PORTAL_PASSWORD", "wrong-"+portalPassword)
	conn, err = web.New(&http.Client{Transport: tr}, loginOptions(t, p, logs, "20s"))
	if err != nil {
		t.Fatal(err)
	}
	r = fetchWithin(conn, 3*time.Minute)
	if r.Err == nil || !regexp.MustCompile(`web\.login\.steps\[[0-3]\]: (fill|click|wait) "[^"]+": not done within web\.wait\.timeout 20s`).MatchString(r.Err.Error()) {
		t.Errorf("run with a wrong password: %v, want a login step's failure", r.Err)
	}
	for what, text := range map[string]string{"error": errText(r.Err), "logs": logs.String()} {
		if strings.Contains(text, portalPassword) {
			t.Errorf("the password is in the %s: %s", what, text)
		}
	}
	p.mu.Lock()
	logins := slices.Clone(p.logins)
	p.mu.Unlock()
	if len(logins) == 0 || len(logins) > 2 || logins[0] != "acme-buyer" {
		t.Errorf("logins %q, want the first by acme-buyer (and the wrong password's, if it got that far)", logins)
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// The login block is checked with the source: it needs render: browser,
// a URL, steps of one kind each, selectors that compile, a value to fill.
func TestLoginBlockErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		lines []string
		want  string
	}{
		{"static render", []string{"login:", "  url: https://portal.example/login", "  steps:", "    - click: button"}, "web.login needs web.render: browser"},
		{"no steps", []string{"render: browser", "login:", "  url: https://portal.example/login"}, "web.login.steps at least one step is required"},
		{"no url", []string{"render: browser", "login:", "  steps:", "    - click: button"}, "web.login.url is required"},
		{"two kinds", []string{"render: browser", "login:", "  url: https://portal.example/login", "  steps:", "    - click: button", "      wait: p"}, "web.login.steps[0] give one of fill, click or wait, not click and wait"},
		{"no kind", []string{"render: browser", "login:", "  url: https://portal.example/login", "  steps:", "    - value: x"}, "web.login.steps[0] give one of fill, click or wait"},
		{"fill without value", []string{"render: browser", "login:", "  url: https://portal.example/login", "  steps:", "    - fill: input"}, "web.login.steps[0].value is required with fill"},
		{"value without fill", []string{"render: browser", "login:", "  url: https://portal.example/login", "  steps:", "    - click: button", "      value: x"}, "web.login.steps[0].value only a fill step takes a value"},
		{"bad selector", []string{"render: browser", "login:", "  url: https://portal.example/login", "  steps:", "    - click: \"button[\""}, `web.login.steps[0].click "button[" is not a valid CSS selector`},
		{"file url", []string{"render: browser", "login:", "  url: file:///etc/passwd", "  steps:", "    - click: button"}, "web.login.url"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := conntest.LoadSource(t, "name: s\nconnector: web\nweb:\n  url: https://portal.example/documents\n"+block(tc.lines...))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %v, want %q", err, tc.want)
			}
		})
	}
}
