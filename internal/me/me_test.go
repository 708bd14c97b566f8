package me_test

import (
	"errors"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lookout-dev/lookout/internal/control"
	"github.com/lookout-dev/lookout/internal/tokens"
	"github.com/lookout-dev/lookout/internal/webui"
)

// Sign-in: with a token (a user's, or an admin's, which acts as its owner
// only), or with a sign-in link, once, before it expires; the page's
// session opens no admin page; every answer carries the strict CSP.
func TestSignIn(t *testing.T) {
	t.Parallel()
	w := newWorld(t)

	anon := w.client()
	resp, _ := anon.do("GET", "/me/notifications", nil)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/me/login?next=%2Fme%2Fnotifications" {
		t.Fatalf("anonymous: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	resp, body := anon.do("GET", "/me/login", nil)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Security-Policy") != webui.CSP {
		t.Fatalf("login form: %d, CSP %q", resp.StatusCode, resp.Header.Get("Content-Security-Policy"))
	}
	// A wrong token, and a form without its double-submit token.
	resp, body = anon.do("POST", "/me/login", url.Values{"csrf": {csrfOf(t, body)}, "token": {"lk_nope"}})
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, "is not known") {
		t.Errorf("wrong token: %d %s", resp.StatusCode, body)
	}
	resp, _ = w.client().do("POST", "/me/login", url.Values{"token": {w.secret["alice"]}})
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("sign-in without the form's token: %d", resp.StatusCode)
	}

	alice := w.client()
	alice.login("alice")
	_, body = alice.do("GET", "/me/", nil)
	if !strings.Contains(body, `data-watch="tickets/open"`) || !strings.Contains(body, "Checkout is down") {
		t.Errorf("alice's watches page lacks her watch and its last notification:\n%s", body)
	}

	// An admin token signs in as its owner: no one else's watches.
	ops := w.client()
	ops.login("ops")
	_, body = ops.do("GET", "/me/", nil)
	if strings.Contains(body, "tickets/open") || !strings.Contains(body, "You have no watches yet") {
		t.Errorf("an admin token's page shows another owner's watch:\n%s", body)
	}

	// A bearer header works too (no CSRF needed: a browser never sends one by itself).
	resp, body = w.client().do("GET", "/me/", nil, "Authorization", "Bearer "+w.secret["alice"])
	if resp.StatusCode != 200 || !strings.Contains(body, "tickets/open") {
		t.Errorf("bearer: %d", resp.StatusCode)
	}

	// A sign-in link: opening it spends nothing; the button signs in once.
	now := time.Now()
	link := w.link("alice", 0, now)
	if !strings.HasPrefix(link, "/me/link?code=lkl_") {
		t.Fatalf("link path %q", link)
	}
	code, _ := url.QueryUnescape(strings.TrimPrefix(link, "/me/link?code="))
	if n := w.count(`SELECT count(*) FROM sign_in_links WHERE hash = sha256(convert_to($1, 'UTF8')) AND used_at IS NULL`, code); n != 1 {
		t.Fatalf("the link's hash is stored %d times", n)
	}
	if n := w.count(`SELECT count(*) FROM sign_in_links WHERE position(convert_to($1, 'UTF8') in hash) > 0`, code); n != 0 {
		t.Errorf("the link's secret is stored in clear")
	}
	bobOpens := w.client()
	for range 2 { // a chat app's preview, then the person
		resp, body = bobOpens.do("GET", link, nil)
		if resp.StatusCode != 200 || !strings.Contains(body, `id="use-link"`) {
			t.Fatalf("open link: %d %s", resp.StatusCode, body)
		}
	}
	// Without the form's token the link is not used.
	resp, _ = w.client().do("POST", "/me/link", url.Values{"code": {code}})
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("link without the form's token: %d", resp.StatusCode)
	}
	resp, _ = bobOpens.do("POST", "/me/link", url.Values{"code": {code}, "csrf": {csrfOf(t, body)}})
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/me/" {
		t.Fatalf("use link: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	_, body = bobOpens.do("GET", "/me/", nil)
	if !strings.Contains(body, "tickets/open") || !strings.Contains(body, `class="who">alice<`) {
		t.Errorf("the link's session is not alice's:\n%s", body)
	}
	if n := w.count(`SELECT count(*) FROM audit_log WHERE kind = 'sign_in_link' AND action = 'use' AND via = 'me' AND owner = 'alice'`); n != 1 {
		t.Errorf("uses of the link audited: %d", n)
	}
	// Used: a second use is refused, and says why.
	again := w.client()
	_, body = again.do("GET", link, nil)
	resp, body = again.do("POST", "/me/link", url.Values{"code": {code}, "csrf": {csrfOf(t, body)}})
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(html.UnescapeString(body), "was used already") {
		t.Errorf("second use: %d %s", resp.StatusCode, body)
	}
	// Expired: the page's clock past the link's ten minutes.
	late := w.link("alice", 0, now)
	lateCode, _ := url.QueryUnescape(strings.TrimPrefix(late, "/me/link?code="))
	w.page.SetClock(func() time.Time { return now.Add(10*time.Minute + time.Second) })
	c := w.client()
	_, body = c.do("GET", late, nil)
	resp, body = c.do("POST", "/me/link", url.Values{"code": {lateCode}, "csrf": {csrfOf(t, body)}})
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, "expired") {
		t.Errorf("expired link: %d %s", resp.StatusCode, body)
	}
	w.page.SetClock(time.Now)
	if n := w.count(`SELECT count(*) FROM sign_in_links WHERE used_at IS NOT NULL`); n != 1 {
		t.Errorf("links used: %d, want 1 (a refused one is not spent)", n)
	}
	// A link of a revoked token opens nothing.
	revoked := w.link("alice", time.Hour, time.Now())
	if _, err := control.RevokeToken(w.ctx, w.pool, w.principal("alice"), w.tokID["alice"]); err != nil {
		t.Fatal(err)
	}
	c = w.client()
	_, body = c.do("GET", revoked, nil)
	rc, _ := url.QueryUnescape(strings.TrimPrefix(revoked, "/me/link?code="))
	resp, body = c.do("POST", "/me/link", url.Values{"code": {rc}, "csrf": {csrfOf(t, body)}})
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, "revoked") {
		t.Errorf("link of a revoked token: %d %s", resp.StatusCode, body)
	}
	// ... and the session the revoked token made ends.
	resp, _ = alice.do("GET", "/me/", nil)
	if resp.StatusCode != http.StatusSeeOther {
		t.Errorf("a revoked token's session: %d", resp.StatusCode)
	}

	// The page's session is no admin page session.
	var sess string
	for _, ck := range ops.http.Jar.Cookies(mustURL(t, w.srv.URL+"/me/")) {
		if ck.Name == "lookout_me" {
			sess = ck.Value
		}
	}
	if sess == "" {
		t.Fatal("no lookout_me cookie")
	}
	if _, err := w.svc.Authorize(w.ctx, control.Credentials{Session: sess, Admin: true}); err == nil || !strings.Contains(err.Error(), "session is not valid") {
		t.Errorf("a /me session of an admin token on the admin page: %v", err)
	}
}

// Pause, resume and delete change the watch (audited via me); another
// owner's watch is a 404 and stays as it was; a POST without the CSRF
// token is refused.
func TestWatchActions(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	alice, bob := w.client(), w.client()
	alice.login("alice")
	bob.login("bob")
	paused := func() bool {
		return w.count(`SELECT count(*) FROM watches WHERE source = 'tickets' AND name = 'open' AND paused`) == 1
	}
	target := url.Values{"source": {"tickets"}, "name": {"open"}}
	with := func(v url.Values, csrf string) url.Values {
		out := url.Values{"csrf": {csrf}}
		for k, vs := range v {
			out[k] = vs
		}
		return out
	}

	resp, _ := alice.do("POST", "/me/watches/pause", target)
	if resp.StatusCode != http.StatusForbidden || paused() {
		t.Fatalf("pause without CSRF: %d, paused %v", resp.StatusCode, paused())
	}
	resp, _ = alice.do("POST", "/me/watches/pause", with(target, "forged"))
	if resp.StatusCode != http.StatusForbidden || paused() {
		t.Fatalf("pause with a wrong CSRF token: %d", resp.StatusCode)
	}
	for _, action := range []string{"pause", "delete"} {
		resp, body := bob.do("POST", "/me/watches/"+action, with(target, bob.csrf()))
		if resp.StatusCode != http.StatusNotFound || paused() {
			t.Errorf("bob %s alice's watch: %d %s", action, resp.StatusCode, body)
		}
	}
	resp, _ = alice.do("POST", "/me/watches/pause", with(target, alice.csrf()))
	if resp.StatusCode != http.StatusSeeOther || !paused() {
		t.Fatalf("pause: %d, paused %v", resp.StatusCode, paused())
	}
	_, body := alice.do("GET", resp.Header.Get("Location"), nil)
	if !strings.Contains(body, "Paused tickets/open.") || !strings.Contains(body, `s-paused`) || !strings.Contains(body, ">Resume<") {
		t.Errorf("the page after pause:\n%s", body)
	}
	resp, _ = alice.do("POST", "/me/watches/resume", with(target, alice.csrf()))
	if resp.StatusCode != http.StatusSeeOther || paused() {
		t.Fatalf("resume: %d, paused %v", resp.StatusCode, paused())
	}
	if n := w.count(`SELECT count(*) FROM audit_log WHERE via = 'me' AND kind = 'watch' AND target = 'tickets/open' AND action IN ('pause', 'resume') AND actor = 'alice'`); n != 2 {
		t.Errorf("audited pause and resume via me: %d", n)
	}
	resp, _ = alice.do("POST", "/me/watches/delete", with(target, alice.csrf()))
	if resp.StatusCode != http.StatusSeeOther || w.count(`SELECT count(*) FROM watches WHERE name = 'open'`) != 0 {
		t.Fatalf("delete: %d", resp.StatusCode)
	}
	resp, _ = alice.do("POST", "/me/watches/explode", with(target, alice.csrf()))
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("unknown action: %d", resp.StatusCode)
	}
}

// The notifications: listed, each with its full body, delivery and why it
// fired; another owner's is a 404.
func TestNotificationPages(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	var id int64
	var body, status string
	var attempts int
	if err := w.pool.QueryRow(w.ctx, `SELECT id, body, status, attempts FROM notifications WHERE owner = 'alice' AND record_id = '1'`).Scan(&id, &body, &status, &attempts); err != nil {
		t.Fatal(err)
	}
	if status != "delivered" || body == "" {
		t.Fatalf("the pipeline left notification %d %s with body %q", id, status, body)
	}
	alice, bob := w.client(), w.client()
	alice.login("alice")
	bob.login("bob")

	_, list := alice.do("GET", "/me/notifications", nil)
	if !strings.Contains(list, `href="/me/notifications/`+strconv.FormatInt(id, 10)+`"`) || !strings.Contains(list, "Checkout is down") || strings.Contains(list, "Typo on the pricing page") {
		t.Errorf("alice's notifications:\n%s", list)
	}
	resp, page := alice.do("GET", "/me/notifications/"+strconv.FormatInt(id, 10), nil)
	page = html.UnescapeString(page)
	if resp.StatusCode != 200 || !strings.Contains(page, `<pre class="body" id="body">`+body+`</pre>`) {
		t.Errorf("notification page: %d, body %q missing:\n%s", resp.StatusCode, body, page)
	}
	for _, want := range []string{"<dt>Attempts</dt><dd>" + strconv.Itoa(attempts) + "</dd>", "<dt>Sink</dt><dd>log</dd>", `id="trail"`, "<strong>open</strong>", "s-notify", "decided by filter", "when matched"} {
		if !strings.Contains(page, want) {
			t.Errorf("notification page lacks %q", want)
		}
	}
	// Each attempt, from delivery_attempts: its outcome, status, time, duration and answer.
	attempt := regexp.MustCompile(`<li class="item">\s*<div class="head"><strong>Attempt 1</strong> <span class="status s-delivered">delivered</span> ` +
		`<span class="meta">HTTP 202</span></div>\s*<p class="meta">[^<]+ ago\) · took [0-9.]+ m?s</p>\s*` +
		`<details><summary>What the receiver answered</summary><pre class="response">{"queued": true}</pre></details>`)
	if list := page[strings.Index(page, `id="attempts"`):]; attempts != 1 || !attempt.MatchString(list) {
		t.Errorf("notification page's attempts (%d on the row):\n%.1500s", attempts, list)
	}
	resp, _ = bob.do("GET", "/me/notifications/"+strconv.FormatInt(id, 10), nil)
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("bob reads alice's notification: %d", resp.StatusCode)
	}
	_, list = bob.do("GET", "/me/notifications", nil)
	if strings.Contains(list, "Checkout is down") {
		t.Errorf("bob's list shows alice's notification")
	}
	for _, p := range []string{"/me/notifications/0", "/me/notifications/x", "/me/nothing"} {
		if resp, _ := alice.do("GET", p, nil); resp.StatusCode != http.StatusNotFound {
			t.Errorf("%s: %d", p, resp.StatusCode)
		}
	}
}

// A new watch: previewed over the stored history (nothing saved), refused
// with the field named, then saved.
func TestNewWatch(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	alice := w.client()
	alice.login("alice")
	resp, form := alice.do("GET", "/me/new", nil)
	if resp.StatusCode != 200 || !strings.Contains(form, `<option value="tickets"`) {
		t.Fatalf("new form: %d %s", resp.StatusCode, form)
	}
	csrf := csrfOf(t, form)
	watch := url.Values{"csrf": {csrf}, "source": {"tickets"}, "name": {"closed"}, "when": {`record.status == "closed"`}, "notify": {"log"}, "since": {"24h"}}
	watch.Set("do", "preview")
	resp, page := alice.do("POST", "/me/new", watch)
	page = html.UnescapeString(page)
	if resp.StatusCode != 200 || !strings.Contains(page, `id="preview-result"`) || !strings.Contains(page, "would have notified 1 time(s)") || !strings.Contains(page, "<strong>2</strong>") {
		t.Fatalf("preview: %d\n%s", resp.StatusCode, page)
	}
	if n := w.count(`SELECT count(*) FROM watches WHERE name = 'closed'`); n != 0 {
		t.Fatalf("the preview saved the watch")
	}
	bad := url.Values{"csrf": {csrf}, "source": {"tickets"}, "name": {"broken"}, "when": {`record.nope ==`}, "do": {"save"}}
	resp, page = alice.do("POST", "/me/new", bad)
	if resp.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(page, `id="problems"`) || !strings.Contains(page, "when") {
		t.Errorf("a broken when: %d\n%s", resp.StatusCode, page)
	}
	resp, page = alice.do("POST", "/me/new", url.Values{"csrf": {csrf}, "source": {"elsewhere"}, "name": {"x"}, "when": {"true"}, "do": {"preview"}})
	if resp.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(page, "elsewhere") {
		t.Errorf("preview of an unknown source: %d\n%s", resp.StatusCode, page)
	}
	watch.Set("do", "save")
	resp, _ = alice.do("POST", "/me/new", watch)
	if resp.StatusCode != http.StatusSeeOther || w.count(`SELECT count(*) FROM watches WHERE name = 'closed' AND owner = 'alice'`) != 1 {
		t.Fatalf("save: %d", resp.StatusCode)
	}
	if n := w.count(`SELECT count(*) FROM audit_log WHERE via = 'me' AND action = 'create' AND target = 'tickets/closed'`); n != 1 {
		t.Errorf("the create is audited via me %d times", n)
	}
	delete(watch, "csrf")
	resp, _ = alice.do("POST", "/me/new", watch)
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("save without CSRF: %d", resp.StatusCode)
	}
}

// The channels page shows a watch's own channel with its secret redacted,
// and the sinks it names; never another owner's.
func TestChannels(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.createWatch("alice", `{"name": "pinged", "when": "true", "channel": {"url": "ntfy://:tk_supersecret@127.0.0.1:8080/alerts"}}`)
	alice, bob := w.client(), w.client()
	alice.login("alice")
	bob.login("bob")
	_, page := alice.do("GET", "/me/channels", nil)
	page = html.UnescapeString(page)
	if !strings.Contains(page, "k-channel") || !strings.Contains(page, "ntfy://[REDACTED]@127.0.0.1:8080/") || strings.Contains(page, "tk_supersecret") {
		t.Errorf("alice's channels:\n%s", page)
	}
	if !strings.Contains(page, "k-sink") || !strings.Contains(page, "tickets/open") {
		t.Errorf("alice's channels lack the sink of tickets/open")
	}
	_, page = bob.do("GET", "/me/channels", nil)
	if strings.Contains(page, "127.0.0.1") || !strings.Contains(page, "deliver nowhere yet") {
		t.Errorf("bob's channels:\n%s", page)
	}
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// Two uses of one link at once: the row lock lets exactly one through.
func TestLinkOnceUnderRace(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	now := time.Now()
	link := w.link("alice", 0, now)
	code, _ := url.QueryUnescape(strings.TrimPrefix(link, "/me/link?code="))
	const n = 4
	errs := make(chan error, n)
	start := make(chan struct{})
	for range n {
		go func() {
			<-start
			_, err := w.svc.RedeemSignInLink(w.ctx, code, now, "race")
			errs <- err
		}()
	}
	close(start)
	ok := 0
	for range n {
		err := <-errs
		var refused *control.AuthError
		switch {
		case err == nil:
			ok++
		case errors.As(err, &refused) && errors.Is(err, tokens.ErrLinkUsed):
		default:
			t.Errorf("a use: %v", err)
		}
	}
	if ok != 1 {
		t.Errorf("%d uses of one link succeeded, want 1", ok)
	}
}
