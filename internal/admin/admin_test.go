package admin_test

import (
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/lookout-dev/lookout/internal/admin"
	"github.com/lookout-dev/lookout/internal/reports"
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

// activityFromHistory is report_activity_hourly computed from the history
// itself (the view of migration 14): what the totals the triggers keep
// must equal.
const activityFromHistory = `
WITH hours AS (
    SELECT generate_series(date_trunc('hour', now(), 'UTC') - interval '23 hours', date_trunc('hour', now(), 'UTC'),
                           interval '1 hour') AS hour
),
runs AS (
    SELECT date_trunc('hour', r.started_at, 'UTC') AS hour,
           count(*) AS runs,
           count(*) FILTER (WHERE r.status IN ('failed', 'deferred', 'abandoned')) AS failed,
           count(r.due_at) AS timed,
           sum(greatest(extract(epoch FROM r.started_at - r.due_at), 0)) AS late_sum,
           max(greatest(extract(epoch FROM r.started_at - r.due_at), 0)) AS late_max
    FROM sync_runs r
    WHERE r.started_at >= date_trunc('hour', now(), 'UTC') - interval '23 hours'
    GROUP BY 1
),
quiet AS (
    SELECT h.hour, sum(h.runs) AS runs, sum(h.lateness_seconds_sum) AS late_sum, max(h.lateness_seconds_max) AS late_max
    FROM sync_run_hours h
    WHERE h.hour >= date_trunc('hour', now(), 'UTC') - interval '23 hours'
    GROUP BY 1
),
ch AS (
    SELECT date_trunc('hour', c.created_at, 'UTC') AS hour, count(*) AS n
    FROM changes c WHERE c.created_at >= date_trunc('hour', now(), 'UTC') - interval '23 hours' GROUP BY 1
),
ev AS (
    SELECT date_trunc('hour', e.created_at, 'UTC') AS hour, count(*) AS n,
           count(*) FILTER (WHERE e.decision = 'notify') AS notify
    FROM evaluations e WHERE e.created_at >= date_trunc('hour', now(), 'UTC') - interval '23 hours' GROUP BY 1
),
nt AS (
    SELECT date_trunc('hour', n.created_at, 'UTC') AS hour, count(*) AS n
    FROM notifications n WHERE n.created_at >= date_trunc('hour', now(), 'UTC') - interval '23 hours' GROUP BY 1
),
mc AS (
    SELECT date_trunc('hour', m.created_at, 'UTC') AS hour, count(*) AS n,
           count(*) FILTER (WHERE m.outcome <> 'ok') AS failed
    FROM model_calls m WHERE m.created_at >= date_trunc('hour', now(), 'UTC') - interval '23 hours' GROUP BY 1
)
SELECT h.hour,
       coalesce(runs.runs, 0) + coalesce(quiet.runs, 0)          AS runs,
       coalesce(runs.failed, 0)                                   AS failed_runs,
       coalesce(ch.n, 0)                                          AS changes,
       coalesce(ev.n, 0)                                          AS evaluations,
       coalesce(ev.notify, 0)                                     AS notify_decisions,
       coalesce(nt.n, 0)                                          AS notifications,
       coalesce(mc.n, 0)                                          AS model_calls,
       coalesce(mc.failed, 0)                                     AS failed_model_calls,
       round(((coalesce(runs.late_sum, 0) + coalesce(quiet.late_sum, 0))
              / nullif(coalesce(runs.timed, 0) + coalesce(quiet.runs, 0), 0))::numeric, 3) AS avg_lateness_seconds,
       round(greatest(runs.late_max, quiet.late_max)::numeric, 3) AS max_lateness_seconds
FROM hours h
LEFT JOIN runs ON runs.hour = h.hour
LEFT JOIN quiet ON quiet.hour = h.hour
LEFT JOIN ch ON ch.hour = h.hour
LEFT JOIN ev ON ev.hour = h.hour
LEFT JOIN nt ON nt.hour = h.hour
LEFT JOIN mc ON mc.hour = h.hour
ORDER BY h.hour`

// TestActivityTotalsEqualTheHistory: the per-hour totals the overview reads
// (activity_hour_totals, kept by statement triggers) equal what the history
// says, after runs (recorded and quiet, inserted and updated), changes,
// evaluations, notifications and model calls of the real pipeline.
func TestActivityTotalsEqualTheHistory(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.populate()
	for range 3 {
		w.sync(true) // unchanged upstream: quiet runs, their hour row updated
	}
	if n := w.count(`SELECT coalesce(sum(runs), 0) FROM sync_run_hours`); n < 4 {
		t.Fatalf("only %d quiet runs: the story made too few to check", n)
	}
	// The view and the history read the last 24 hours of the database's
	// now(): one transaction gives both the same now() (a run across HH:00
	// between them compared two different windows).
	tx, err := w.pool.Begin(w.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(w.ctx) }()
	got := w.queryMapOn(tx, `SELECT * FROM report_activity_hourly`)
	want := w.queryMapOn(tx, activityFromHistory)
	if len(got) != 24 || len(want) != 24 {
		t.Fatalf("%d and %d hours", len(got), len(want))
	}
	for i := range want {
		for col, v := range want[i] {
			if g := got[i][col]; reports.Cell(g) != reports.Cell(v) {
				t.Errorf("hour %v %s: totals %s, history %s", want[i]["hour"], col, reports.Cell(g), reports.Cell(v))
			}
		}
	}
	// The story ran seconds ago: in this hour, or in the one before when
	// the run crossed HH:00.
	for _, col := range []string{"runs", "failed_runs", "changes", "evaluations", "notify_decisions", "notifications", "model_calls"} {
		if reports.Cell(want[23][col]) == "0" && reports.Cell(want[22][col]) == "0" {
			t.Errorf("the story made no %s this hour or the one before: nothing to compare", col)
		}
	}
}

// hiddenFields returns the hidden fields of the first form of page whose
// opening tag contains marker: what the browser posts when it is sent.
func hiddenFields(t *testing.T, page, marker string) url.Values {
	t.Helper()
	for _, m := range regexp.MustCompile(`(?s)<form [^>]*>.*?</form>`).FindAllString(page, -1) {
		if !strings.Contains(m, marker) {
			continue
		}
		v := url.Values{}
		for _, f := range regexp.MustCompile(`<input type="hidden" name="([^"]+)" value="([^"]*)">`).FindAllStringSubmatch(m, -1) {
			v.Add(f[1], html.UnescapeString(f[2]))
		}
		return v
	}
	t.Fatalf("no form with %q in the page:\n%.3000s", marker, page)
	return nil
}

// TestDeadLettersOfAnOwner: with ?owner= the dead letters page counts that
// owner's dead letters only (the "all" chip and each sink's), its chips
// keep the owner, and its bulk retry ("Retry 1 listed") posts the owner
// and the id it lists and sends back to pending that owner's dead letter
// only — another owner's stays dead.
func TestDeadLettersOfAnOwner(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.populate()
	w.secondDeadLetter()
	// The watches' owners as the evaluator writes them on the rows
	// (file watches are the operator's: the test gives them two users).
	w.exec(`UPDATE notifications SET owner = CASE record_id WHEN '2' THEN 'alice' ELSE 'bob' END`)
	if n := w.count(`SELECT count(*) FROM notifications WHERE status = 'dead' AND sink = 'hook' AND owner = 'alice'`); n != 1 {
		t.Fatalf("alice has %d dead letters of the hook, want 1", n)
	}
	if n := w.count(`SELECT count(*) FROM notifications WHERE status = 'dead' AND sink = 'hook' AND owner = 'bob'`); n != 1 {
		t.Fatalf("bob has %d dead letters of the hook, want 1", n)
	}
	w.serve()
	c := newClient(w)
	c.login(w.adminTok)

	resp, page := c.do("GET", "/admin/dead?owner=alice", nil, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("dead letters of alice: %d %.500s", resp.StatusCode, page)
	}
	if !strings.Contains(page, `href="/admin/dead?owner=alice">all <b>1</b>`) {
		t.Errorf("the all chip does not count alice's one dead letter with her filter kept:\n%.3000s", page)
	}
	if !strings.Contains(page, `href="/admin/dead?owner=alice&amp;sink=hook">hook <b>1</b>`) {
		t.Errorf("the hook chip does not count alice's one dead letter with her filter kept:\n%.3000s", page)
	}
	// Nobody's page counts nothing.
	if _, page := c.do("GET", "/admin/dead?owner=nobody", nil, nil); !strings.Contains(page, "No dead notifications.") || strings.Contains(page, "hook <b>") {
		t.Errorf("the page of an owner without dead letters shows counts:\n%.3000s", page)
	}

	form := hiddenFields(t, page, `class="actions"`)
	alices := fmt.Sprint(w.queryMap(`SELECT id FROM notifications WHERE status = 'dead' AND owner = 'alice'`)[0]["id"])
	if form.Get("owner") != "alice" || !slices.Equal(form["id"], []string{alices}) {
		t.Errorf("Retry 1 listed posts %v: not alice's one dead letter %s", form, alices)
	}
	if !strings.Contains(page, `id="retry-all">Retry 1 listed</button>`) {
		t.Errorf("the bulk retry does not say it retries the 1 listed row")
	}
	resp, _ = c.do("POST", "/admin/dead/retry", form, nil)
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/admin/dead?owner=alice&done=sent+1+dead") {
		t.Errorf("retry all of alice: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	for owner, want := range map[string]string{"alice": "pending", "bob": "dead"} {
		if st := w.queryMap(`SELECT status FROM notifications WHERE sink = 'hook' AND owner = $1`, owner)[0]["status"]; st != want {
			t.Errorf("after alice's retry all, %s's dead letter is %v, want %s", owner, st, want)
		}
	}
}

// TestEveryActionNeedsTheCSRFToken: every POST of a signed-in session —
// pause, resume, run now, retry one dead letter, retry the listed, sign out — is
// refused with 403 without the page's CSRF token or with a forged one,
// and changes nothing in the database (sources, notifications, the audit
// log) nor ends the session; with the token it is done.
func TestEveryActionNeedsTheCSRFToken(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.populate()
	w.secondDeadLetter() // so that retry all has one left after retry one
	dead := w.queryMap(`SELECT id FROM notifications WHERE status = 'dead' ORDER BY id`)
	if len(dead) != 2 {
		t.Fatalf("%d dead letters, want 2", len(dead))
	}
	w.serve()
	c := newClient(w)
	if resp, _ := c.login(w.adminTok); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign-in: %d", resp.StatusCode)
	}
	_, page := c.do("GET", "/admin/sources/tickets", nil, nil)
	csrf := csrfOf(t, page)

	// state is what an action may change: the sources' operational state,
	// the notifications' delivery state, the audit log.
	state := func() string {
		return fmt.Sprint(
			w.queryMap(`SELECT name, status, status_reason, next_run_at, run_requested_at, failure_count FROM sources ORDER BY name`),
			w.queryMap(`SELECT id, status, attempts, manual_retries, next_attempt_at FROM notifications ORDER BY id`),
			w.count(`SELECT count(*) FROM audit_log`))
	}
	signedIn := func() bool {
		resp, _ := c.do("GET", "/admin/", nil, nil)
		return resp.StatusCode == http.StatusOK
	}
	for _, a := range []struct {
		name, path string
		form       url.Values
		// done says whether the action took effect.
		done func() bool
	}{
		{"pause", "/admin/sources/tickets/pause", url.Values{"reason": {"maintenance"}}, func() bool {
			return w.queryMap(`SELECT status FROM sources WHERE name = 'tickets'`)[0]["status"] == "paused"
		}},
		{"resume", "/admin/sources/tickets/resume", url.Values{}, func() bool {
			return w.queryMap(`SELECT status FROM sources WHERE name = 'tickets'`)[0]["status"] == "active"
		}},
		{"run now", "/admin/sources/tickets/run", url.Values{}, func() bool {
			return w.count(`SELECT count(*) FROM sources WHERE name = 'tickets' AND run_requested_at IS NOT NULL`) == 1
		}},
		{"retry one dead letter", "/admin/dead/retry", url.Values{"id": {fmt.Sprint(dead[0]["id"])}}, func() bool {
			return w.count(`SELECT count(*) FROM notifications WHERE id = $1 AND status = 'pending'`, dead[0]["id"]) == 1
		}},
		{"retry the listed", "/admin/dead/retry", url.Values{"id": {fmt.Sprint(dead[0]["id"]), fmt.Sprint(dead[1]["id"])}}, func() bool {
			return w.count(`SELECT count(*) FROM notifications WHERE status = 'dead'`) == 0
		}},
		{"sign out", "/admin/logout", url.Values{}, func() bool { return !signedIn() }},
	} {
		for _, bad := range []string{"", "forged"} {
			before := state()
			form := url.Values{"back": {"/admin/"}}
			for k, v := range a.form {
				form[k] = v
			}
			if bad != "" {
				form.Set("csrf", bad)
			}
			resp, body := c.do("POST", a.path, form, nil)
			if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "CSRF token") {
				t.Errorf("%s with csrf %q: %d %.300s", a.name, bad, resp.StatusCode, body)
			}
			if after := state(); after != before {
				t.Errorf("%s with csrf %q changed the database:\nbefore %s\nafter  %s", a.name, bad, before, after)
			}
			if a.done() {
				t.Errorf("%s with csrf %q took effect", a.name, bad)
			}
			if !signedIn() {
				t.Fatalf("%s with csrf %q ended the session", a.name, bad)
			}
		}
		form := url.Values{"csrf": {csrf}, "back": {"/admin/"}}
		for k, v := range a.form {
			form[k] = v
		}
		resp, _ := c.do("POST", a.path, form, nil)
		if resp.StatusCode != http.StatusSeeOther {
			t.Errorf("%s with the token: %d", a.name, resp.StatusCode)
		}
		if !a.done() {
			t.Errorf("%s with the token was not done (answer %d %s)", a.name, resp.StatusCode, resp.Header.Get("Location"))
		}
	}
}

// secondDeadLetter closes ticket 3 and mirrors and evaluates it: the
// hook refuses its notification too, a second dead letter.
func (w *world) secondDeadLetter() {
	w.t.Helper()
	w.mu.Lock()
	w.tickets[2]["status"] = "closed"
	w.mu.Unlock()
	w.sync(true)
	w.evaluate()
}
