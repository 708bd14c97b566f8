package admin_test

import (
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// gapsWorld is a world the pipeline filled (a dead letter, a failed run),
// served, with a signed-in client.
func gapsWorld(t *testing.T) (*world, *client) {
	t.Helper()
	w := newWorld(t)
	w.populate()
	w.serve()
	c := newClient(w)
	if resp, _ := c.login(w.adminTok); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign in: %d", resp.StatusCode)
	}
	return w, c
}

// TestResponsesAreGzipped: a client that accepts gzip gets pages and
// static files compressed, every answer says it varies with
// Accept-Encoding, and a client that does not accept it gets them plain.
func TestResponsesAreGzipped(t *testing.T) {
	t.Parallel()
	w, c := gapsWorld(t)
	// A transport that does not ask for gzip by itself, nor unpack it.
	raw := &http.Client{Jar: c.jar, Transport: &http.Transport{DisableCompression: true},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(path, accept string) (*http.Response, []byte) {
		t.Helper()
		req, _ := http.NewRequest("GET", w.srv.URL+path, nil)
		if accept != "" {
			req.Header.Set("Accept-Encoding", accept)
		}
		resp, err := raw.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, b
	}
	for _, path := range []string{"/admin/", "/admin/sources", "/admin/static/admin.css", "/admin/dead"} {
		resp, body := get(path, "br, gzip;q=0.8, deflate")
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Encoding") != "gzip" {
			t.Errorf("%s with gzip accepted: %d, Content-Encoding %q", path, resp.StatusCode, resp.Header.Get("Content-Encoding"))
			continue
		}
		if !strings.Contains(resp.Header.Get("Vary"), "Accept-Encoding") {
			t.Errorf("%s: Vary %q", path, resp.Header.Get("Vary"))
		}
		zr, err := gzip.NewReader(strings.NewReader(string(body)))
		if err != nil {
			t.Errorf("%s: not gzip: %v", path, err)
			continue
		}
		plain, err := io.ReadAll(zr)
		if err != nil || len(plain) <= len(body) {
			t.Errorf("%s: %d bytes unpacked from %d (%v)", path, len(plain), len(body), err)
		}
		if strings.HasSuffix(path, "/") && !strings.Contains(string(plain), "<h1>Overview</h1>") {
			t.Errorf("%s: the unpacked page is not the overview:\n%.300s", path, plain)
		}
		resp, body = get(path, "")
		if resp.Header.Get("Content-Encoding") != "" || !strings.Contains(resp.Header.Get("Vary"), "Accept-Encoding") || len(body) == 0 {
			t.Errorf("%s without gzip: Content-Encoding %q, Vary %q, %d bytes", path, resp.Header.Get("Content-Encoding"), resp.Header.Get("Vary"), len(body))
		}
		if resp, _ := get(path, "gzip;q=0"); resp.Header.Get("Content-Encoding") != "" {
			t.Errorf("%s with gzip;q=0: compressed anyway", path)
		}
	}
	// A redirect of a signed-out client is compressed or not, never broken.
	req, _ := http.NewRequest("GET", w.srv.URL+"/admin/sources", nil)
	req.Header.Set("Accept-Encoding", "gzip")
	resp, err := (&http.Client{Transport: &http.Transport{DisableCompression: true},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/admin/login") {
		t.Errorf("signed out: %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
}

var navOn = regexp.MustCompile(`<nav><a[^>]*>.*?</nav>`)
var onItem = regexp.MustCompile(`<a href="([^"]*)" class="on">`)

// TestRowsNavItem: a list of rows highlights the navigation entry of what
// its rows are about, not always the overview.
func TestRowsNavItem(t *testing.T) {
	t.Parallel()
	_, c := gapsWorld(t)
	for path, want := range map[string]string{
		"/admin/rows/changes":                               "/admin/",
		"/admin/rows/pending_changes":                       "/admin/",
		"/admin/rows/runs?source=tickets&since=all":         "/admin/sources",
		"/admin/rows/quiet?source=tickets":                  "/admin/sources",
		"/admin/rows/runs?status=failed,deferred,abandoned": "/admin/failures",
		"/admin/rows/runs?source=tickets&since_success=1":   "/admin/failures",
		"/admin/rows/model_calls":                           "/admin/models",
		"/admin/rows/notifications?id=1":                    "/admin/dead",
		"/admin/sources/tickets":                            "/admin/sources",
		"/admin/search?q=tick":                              "",
	} {
		resp, page := c.do("GET", path, nil, nil)
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s: %d", path, resp.StatusCode)
			continue
		}
		got := ""
		if m := onItem.FindStringSubmatch(navOn.FindString(page)); m != nil {
			got = m[1]
		}
		if got != want {
			t.Errorf("%s highlights %q, want %q", path, got, want)
		}
	}
}

// TestSearchByNameOrID: the search box finds sources and watches by a
// part of their name, an owner, and any row by its id; LIKE's wildcards
// are taken literally; an exact source name alone opens its page.
func TestSearchByNameOrID(t *testing.T) {
	t.Parallel()
	w, c := gapsWorld(t)
	_, page := c.do("GET", "/admin/search?q=TICK", nil, nil)
	if !strings.Contains(page, `<a href="/admin/sources/tickets">tickets</a>`) || strings.Contains(page, `<a href="/admin/sources/inventory">`) {
		t.Errorf("q=TICK does not list tickets alone:\n%.3000s", page)
	}
	_, page = c.do("GET", "/admin/search?q=urg", nil, nil)
	if !strings.Contains(page, ">urgent<") {
		t.Errorf("q=urg does not find the watch urgent")
	}
	_, page = c.do("GET", "/admin/search?q=%25", nil, nil)
	if strings.Contains(page, `<a href="/admin/sources/tickets">`) {
		t.Errorf("q=%% matched every source: the wildcard was not escaped")
	}
	resp, _ := c.do("GET", "/admin/search?q=inventory", nil, nil)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/admin/sources/inventory" {
		t.Errorf("q=inventory: %d to %q, want the source's page", resp.StatusCode, resp.Header.Get("Location"))
	}
	var dead int64
	if err := w.pool.QueryRow(w.ctx, `SELECT id FROM notifications WHERE status = 'dead' ORDER BY id LIMIT 1`).Scan(&dead); err != nil {
		t.Fatal(err)
	}
	_, page = c.do("GET", fmt.Sprintf("/admin/search?q=%d", dead), nil, nil)
	if !strings.Contains(page, fmt.Sprintf(`href="/admin/rows/notifications?id=%d"`, dead)) {
		t.Errorf("q=%d does not link notification %d:\n%.3000s", dead, dead, page)
	}
	if !strings.Contains(page, "FROM notifications WHERE id = $1") {
		t.Errorf("the search's SQL is not shown")
	}
}

// TestTimeRange: the overview's charts and the timed lists take a time
// range (range=1h, 24h, 7d, 30d) from the URL; the control links keep the
// page's other filters; an unknown range is refused.
func TestTimeRange(t *testing.T) {
	t.Parallel()
	w, c := gapsWorld(t)
	bars := regexp.MustCompile(`<rect class="bar`)
	firstChart := func(page string) string {
		i := strings.Index(page, "<svg")
		j := strings.Index(page[i:], "</svg>")
		return page[i : i+j]
	}
	for rng, want := range map[string]int{"": 24, "1h": 1, "24h": 24, "7d": 168, "30d": 720} {
		path := "/admin/"
		if rng != "" {
			path += "?range=" + rng
		}
		resp, page := c.do("GET", path, nil, nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d", path, resp.StatusCode)
		}
		if got := len(bars.FindAllString(firstChart(page), -1)); got < want-1 || got > want {
			t.Errorf("%s: %d bars in the first chart, want %d (one per hour)", path, got, want)
		}
		if !strings.Contains(page, `class="range"`) {
			t.Errorf("%s: no time range control", path)
		}
	}
	resp, page := c.do("GET", "/admin/?range=2y", nil, nil)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(page, `range=&#34;2y&#34; is not a time range (1h, 24h, 7d, 30d)`) {
		t.Errorf("range=2y: %d\n%.2000s", resp.StatusCode, page)
	}
	// A list of the last 7 days lists every change of the last 7 days.
	want := w.count(`SELECT count(*) FROM changes WHERE created_at >= now() - interval '7 days' AND source = 'tickets'`)
	_, page = c.do("GET", "/admin/rows/changes?source=tickets&range=7d", nil, nil)
	if got := strings.Count(page[strings.Index(page, "<tbody>"):], "<tr>"); int64(got) != want || want == 0 {
		t.Errorf("changes of the last 7 days: %d rows, SQL %d", got, want)
	}
	if !strings.Contains(page, `href="/admin/rows/changes?range=30d&amp;source=tickets"`) {
		t.Errorf("the range control does not keep source=:\n%.3000s", page)
	}
}

// TestNotificationPage: a notification's page (its row, picked by id) shows
// its body, its payload and its delivery history — every attempt from
// delivery_attempts (its outcome, duration, HTTP status, error and the
// receiver's answer) — a manual retry and the attempt after it included.
func TestNotificationPage(t *testing.T) {
	t.Parallel()
	w, c := gapsWorld(t)
	var id int64
	var body string
	if err := w.pool.QueryRow(w.ctx, `SELECT id, body FROM notifications WHERE status = 'dead' ORDER BY id LIMIT 1`).Scan(&id, &body); err != nil {
		t.Fatal(err)
	}
	path := fmt.Sprintf("/admin/rows/notifications?id=%d", id)
	_, page := c.do("GET", path, nil, nil)
	for _, want := range []string{`<h3 id="body">Body</h3>`, `<pre class="payload">{`, `&#34;dedupe_key&#34;:`, ">dead<", "410 Gone", "enqueued",
		strings.Fields(body)[0]} {
		if !strings.Contains(page, want) {
			t.Errorf("%s lacks %q:\n%.6000s", path, want, page)
		}
	}
	// Retried from the dead letters page, it shows the retry.
	_, dead := c.do("GET", "/admin/dead", nil, nil)
	resp, _ := c.do("POST", "/admin/dead/retry", url.Values{"csrf": {csrfOf(t, dead)}, "id": {fmt.Sprint(id)}, "back": {"/admin/dead"}}, nil)
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("retry: %d", resp.StatusCode)
	}
	_, page = c.do("GET", path, nil, nil)
	if !strings.Contains(page, "retried by hand") || !strings.Contains(page, "next attempt due") {
		t.Errorf("%s after a retry lacks the retry:\n%.6000s", path, page[strings.Index(page, `id="attempts"`):])
	}
	// The attempt after the retry is attempt 1 again (attempts count from
	// zero after a retry), and both are listed, each from its row.
	w.evaluate()
	_, page = c.do("GET", path, nil, nil)
	history := page[strings.Index(page, `id="attempt-history"`):]
	history = history[:strings.Index(history, "</table>")]
	attempt := regexp.MustCompile(`<tr><td title="[^"]+">[^<]+</td><td>attempt 1</td><td><span class="outcome o-dead">dead</span></td>` +
		`<td class="num">[^<]+</td><td class="num">410</td><td>permanent: webhook answered 410 Gone<details><summary>answer</summary>` +
		`<pre class="response">{&#34;error&#34;: &#34;this hook was deleted&#34;}</pre></details></td></tr>`)
	if got := len(attempt.FindAllString(history, -1)); got != 2 {
		t.Errorf("%s lists %d dead attempts with their status and answer, want 2:\n%s", path, got, history)
	}
	if strings.Contains(history, "(the last)") {
		t.Errorf("%s shows the row's last attempt beside the attempts' rows:\n%s", path, history)
	}
	if !strings.Contains(page, "LEFT JOIN delivery_attempts a ON a.notification_id = n.id") {
		t.Errorf("%s does not show the attempts' statement", path)
	}
}

// TestHumanUnits: durations, rates and times are shown in units a person
// reads, the exact value in the cell's title.
func TestHumanUnits(t *testing.T) {
	t.Parallel()
	_, c := gapsWorld(t)
	_, page := c.do("GET", "/admin/sources/tickets", nil, nil)
	// A run's duration (ms) in ms or s, its start relative with the exact
	// time in the title.
	if !regexp.MustCompile(`<td class="n" title="[0-9.]+ \(ms\)">[0-9.]+ (ms|s)</td>`).MatchString(page) {
		t.Errorf("the runs' ms are not in human units:\n%.6000s", page)
	}
	if !regexp.MustCompile(`<td title="20[0-9-]+ [0-9:.]+ UTC">[0-9hm]+ ago</td>`).MatchString(page) {
		t.Errorf("the runs' times are not relative with the exact time in a title")
	}
}

// TestAdminAt390px: at a phone's width (390 px) no page is wider than
// the screen: the navigation is one line that scrolls sideways, tables
// scroll inside their box.
func TestAdminAt390px(t *testing.T) {
	t.Parallel()
	b := newBrowser(t)
	w, _ := gapsWorld(t)
	base := w.srv.URL
	b.run("a phone's screen", chromedp.EmulateViewport(390, 844))
	b.open(base+"/admin/", "Sign in")
	b.run("sign in", chromedp.SendKeys(chromedp.ID("token"), w.adminTok), chromedp.Submit(chromedp.ID("token")),
		chromedp.WaitVisible(chromedp.CSS("section.cards")))
	for _, p := range []struct{ path, h1 string }{
		{"/admin/", "Overview"},
		{"/admin/?range=7d", "Overview"},
		{"/admin/sources", "Sources"},
		{"/admin/sources/tickets", "Source tickets"},
		{"/admin/record?source=tickets&id=2", "Record tickets/2"},
		{"/admin/stuck", "Stuck work"},
		{"/admin/failures", "Recent failures"},
		{"/admin/retry", "High retry"},
		{"/admin/dead", "Dead letters"},
		{"/admin/models", "Models"},
		{"/admin/disabled", "Disabled sources"},
		{"/admin/tasks", "Task runs"},
		{"/admin/rows/changes?since=all", "Changes"},
		{"/admin/rows/notifications?id=1", "Notifications"},
		{"/admin/search?q=tick", "Search"},
	} {
		b.open(base+p.path, p.h1)
		// Open the SQL too: its statements must wrap or scroll in their box.
		evalJS[bool](b, `document.querySelectorAll('details').forEach(d => d.open = true), true`)
		if over := evalJS[int](b, `document.documentElement.scrollWidth - document.documentElement.clientWidth`); over > 0 {
			wide := evalJS[[]string](b, `[...document.querySelectorAll('body *')].filter(e => e.getBoundingClientRect().right > document.documentElement.clientWidth + 1 && !e.closest('.scroll, nav, pre, svg')).slice(0, 5).map(e => e.tagName + '.' + e.className + ': ' + e.textContent.slice(0, 40))`)
			t.Errorf("%s at 390 px: the page is %d px wider than the screen; too wide: %q", p.path, over, wide)
		}
		if lines := evalJS[int](b, `new Set([...document.querySelectorAll('header nav a')].map(a => a.offsetTop)).size`); lines != 1 {
			t.Errorf("%s at 390 px: the navigation takes %d lines, want one that scrolls", p.path, lines)
		}
		if s := evalJS[string](b, `getComputedStyle(document.querySelector('header nav')).overflowX`); s != "auto" && s != "scroll" {
			t.Errorf("%s at 390 px: the navigation does not scroll (overflow-x %s)", p.path, s)
		}
	}
}
