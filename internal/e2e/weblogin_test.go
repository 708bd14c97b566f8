package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/lookout-dev/lookout/internal/clitest"
	"github.com/lookout-dev/lookout/internal/testsignal"
)

// logsTB fails with the daemon's logs.
type logsTB struct {
	t *testing.T
	d *clitest.DaemonTest
}

func (l logsTB) Helper() { l.t.Helper() }

func (l logsTB) Fatalf(format string, args ...any) {
	l.t.Helper()
	l.t.Fatalf(format+"; logs:\n%s", append(args, l.d.Logs())...)
}

// The portal's passwords, given to the syncer binary in its environment:
// the right one and an old one that no longer works.
const (
	portalPassword    = "pw-Zq81-right-never-logged"
	portalOldPassword = "pw-Kx07-old-never-logged"
)

// supplierPortal signs in with a form its script posts (JSON), answers a
// session cookie and a token the script stores in a cookie, and lists
// its documents only to a request that carries both.
func supplierPortal(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	switch r.URL.Path {
	case "/login":
		_, _ = io.WriteString(w, `<!DOCTYPE html><html><body>
<form id="login"><input name="user"><input name="password" type="password"><button id="go" type="submit">Sign in</button></form>
<p id="status"></p>
<script>
document.getElementById('login').addEventListener('submit', e => {
  e.preventDefault();
  fetch('/session', {method: 'POST', headers: {'Content-Type': 'application/json'},
      body: JSON.stringify({user: e.target.user.value, password: e.target.password.value})})
    .then(r => r.ok ? r.json() : Promise.reject(r.status))
    .then(j => { document.cookie = 'portal_token=' + j.token + '; path=/';
                 document.getElementById('status').innerHTML = '<span id="welcome">Welcome</span>'; },
          () => { document.getElementById('status').textContent = 'Wrong user or password'; });
});
</script></body></html>`)
	case "/session":
		var in struct{ User, Password string }
		if json.NewDecoder(r.Body).Decode(&in) != nil || in.User != "acme-buyer" || in.Password != portalPassword {
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
		_, _ = io.WriteString(w, `<!DOCTYPE html><html><body><ul class="documents">
<li class="doc"><a href="/files/price-list-2026.pdf">Price list 2026</a></li>
<li class="doc"><a href="/files/terms.pdf">Terms of delivery</a></li></ul></body></html>`)
	default:
		http.NotFound(w, r) // robots.txt included: everything allowed
	}
}

func portalSource(name, url, env, timeout string) string {
	return `name: ` + name + `
connector: web
every: 1h
jitter: 0s
web:
  url: ` + url + `/documents
  render: browser
  wait: {idle: 100ms, timeout: ` + timeout + `}
  items: ul.documents li.doc
  id: a@href
  fields:
    title: a
  login:
    url: ` + url + `/login
    steps:
      - fill: "input[name=user]"
        value: acme-buyer
      - fill: "input[name=password]"
        value: ${` + env + `}
      - click: button#go
      - wait: span#welcome
`
}

// A supplier portal behind a login, through the real syncer binary with
// the passwords in its environment (the secret store of files): the
// source with the right password mirrors the documents; the one with an
// old password fails its run at the login, saying which step. Neither
// password is in the syncer's log (at debug), in a sync_runs row, in a
// source's cursor or in the stored definitions.
func TestWebLoginSecretsNeverShown(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("chromium"); err != nil && os.Getenv("LOOKOUT_CHROMIUM") == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("no chromium on PATH in CI")
		}
		t.Skip("no chromium on PATH: the portal login test skips")
	}
	srv := httptest.NewServer(http.HandlerFunc(supplierPortal))
	t.Cleanup(srv.Close)
	e := newEnv(t)
	e.write("lookout.yaml", "sinks:\n  log: {type: log}\nlog: {level: debug}\nsyncer:\n  poll_interval: 100ms\n")
	e.write("sources/portal.yaml", portalSource("portal", srv.URL, "PORTAL_PASSWORD", "2m"))
	e.write("sources/portal-old.yaml", portalSource("portal-old", srv.URL, "PORTAL_OLD_PASSWORD", "30s"))
	sb := clitest.BuildBinary(t, "github.com/lookout-dev/lookout/cmd/syncer")
	s := clitest.StartBinaryEnv(t, sb, e.dir, e.url, "PORTAL_PASSWORD="+portalPassword, "PORTAL_OLD_PASSWORD="+portalOldPassword)
	e.daemons = []*clitest.DaemonTest{s}
	// A render starts Chromium and a failed login spends web.wait.timeout:
	// the waits are longer than a run's bound, not a guess at its speed.
	tb := logsTB{t, s}
	testsignal.EventuallyWithin(tb, 4*time.Minute, "the documents behind the login", func() bool {
		return e.count(`SELECT count(*) FROM records WHERE source = 'portal'`) == 2
	})
	testsignal.EventuallyWithin(tb, 4*time.Minute, "the failed run of the old password", func() bool {
		return e.count(`SELECT count(*) FROM sync_runs WHERE source = 'portal-old' AND status = 'failed'`) >= 1
	})
	var errText string
	if err := e.pool.QueryRow(t.Context(), `SELECT error FROM sync_runs WHERE source = 'portal-old' AND status = 'failed' ORDER BY id LIMIT 1`).Scan(&errText); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(errText, "web.login") {
		t.Errorf("the failed run's error %q does not say the login failed", errText)
	}
	for _, secret := range []string{portalPassword, portalOldPassword} {
		if strings.Contains(s.Logs(), secret) {
			t.Errorf("the syncer's log holds a password:\n%s", s.Logs())
		}
		for _, table := range []string{"sync_runs", "sources", "source_definitions"} {
			if n := e.count(`SELECT count(*) FROM `+table+` t WHERE position($1 in t::text) > 0`, secret); n != 0 {
				t.Errorf("%d rows of %s hold a password", n, table)
			}
		}
	}
}
