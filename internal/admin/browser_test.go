package admin_test

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/color/palette"
	"image/draw"
	"image/png"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/lookout-dev/lookout/internal/testsignal"
)

// chromium returns the browser to drive, or skips the test when there is
// none (outside CI; in CI its absence is a failure: scripts/test.sh
// installs Debian's chromium package).
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{os.Getenv("LOOKOUT_TEST_CHROMIUM"), "chromium", "chromium-browser", "google-chrome"} {
		if name == "" {
			continue
		}
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("no chromium on PATH in CI: scripts/test.sh installs Debian's chromium package when it is missing")
	}
	t.Skip("no chromium on PATH (apt-get install chromium, or run scripts/test.sh, which installs it): the admin page's browser test skips")
	return ""
}

// browser is a headless Chromium tab that records every console error,
// uncaught exception and browser log entry of level error (CSP
// violations, failed loads).
type browser struct {
	t   *testing.T
	ctx context.Context
	mu  sync.Mutex
	bad []string
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	path := chromium(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox, // CI runs as root
		chromedp.WindowSize(1200, 800),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	b := &browser{t: t, ctx: ctx}
	// The first run starts the browser; it must have no timeout.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium (%s): %v", path, err)
	}
	messages := chromedp.Console(ctx)
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.IsException() {
				b.mu.Lock()
				b.bad = append(b.bad, fmt.Sprintf("%s (%s %s)", m.String(), m.Source, m.URL))
				b.mu.Unlock()
			}
		}
	}()
	return b
}

// step bounds one browser step.
const step = time.Minute

func (b *browser) run(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, step)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
}

// errors returns and forgets the errors seen so far.
func (b *browser) errors() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := b.bad
	b.bad = nil
	return out
}

// open loads a page and checks it rendered (its title) with no console
// error, exception or failed load.
func (b *browser) open(url, wantH1 string) {
	b.t.Helper()
	b.run("open "+url, chromedp.Navigate(url), chromedp.WaitVisible(chromedp.CSS("main h1")))
	if h1 := b.text("main h1"); !strings.Contains(h1, wantH1) {
		b.t.Errorf("%s: heading %q, want %q", url, h1, wantH1)
	}
	b.noErrors(url)
}

func (b *browser) noErrors(where string) {
	b.t.Helper()
	// Messages arrive asynchronously: a round trip to the page first.
	evalJS[int](b, "1")
	if errs := b.errors(); len(errs) > 0 {
		b.t.Errorf("%s: browser errors:\n  %s", where, strings.Join(errs, "\n  "))
	}
}

func (b *browser) text(sel string) string {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, step)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		b.t.Fatalf("read %s: %v", sel, err)
	}
	return strings.TrimSpace(s)
}

func evalJS[T any](b *browser, js string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, step)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js))
	if err != nil {
		b.t.Fatalf("evaluate %s: %v", js, err)
	}
	return v
}

// card reads an overview number by its label.
func (b *browser) card(label string) string {
	b.t.Helper()
	return evalJS[string](b, fmt.Sprintf(`[...document.querySelectorAll('a.card')].find(c => c.querySelector('.l').textContent === %q).querySelector('.v').textContent`, label))
}

// rowCount counts the rows of the page's first table.
func (b *browser) rowCount() int {
	b.t.Helper()
	return evalJS[int](b, `document.querySelectorAll('main table tbody tr').length`)
}

// TestAdminPagesInBrowser drives the admin page in headless Chromium over
// a database the real pipeline filled: a user token is refused, every page
// renders with no console error (the CSP would report inline code), the
// numbers match SQL, and pause, resume, run now and retry of dead letters
// work from the buttons and need the CSRF token. With
// LOOKOUT_UPDATE_SCREENSHOTS=1 it writes the screenshots of docs/admin.md.
func TestAdminPagesInBrowser(t *testing.T) {
	t.Parallel()
	b := newBrowser(t)
	w := newWorld(t)
	w.populate()
	w.serve()
	// The page as the api binary serves it, on the database the real
	// pipeline filled.
	base := w.serveBinary()

	// Sign in: a user token is refused, the admin token gets in.
	b.open(base+"/admin/", "Sign in")
	b.run("sign in as a user", chromedp.SendKeys(chromedp.ID("token"), w.userTok), chromedp.Submit(chromedp.ID("token")),
		chromedp.WaitVisible(chromedp.CSS("p.error")))
	if msg := b.text("p.error"); !strings.Contains(msg, "user scope") {
		t.Fatalf("user token: %q", msg)
	}
	b.errors() // the 403 of the form's answer is logged as a failed load
	b.run("sign in as an admin", chromedp.SendKeys(chromedp.ID("token"), w.adminTok), chromedp.Submit(chromedp.ID("token")),
		chromedp.WaitVisible(chromedp.CSS("section.cards")))
	b.noErrors("overview after sign-in")

	// The overview's numbers are report_overview's, its charts
	// report_activity_hourly's.
	ov := w.queryMap(`SELECT * FROM report_overview`)[0]
	for label, col := range map[string]string{"active sources": "active_sources", "not active": "inactive_sources",
		"dead letters": "dead_notifications", "failed runs (24h)": "failed_runs_24h", "pending changes": "pending_changes", "stuck": "stuck"} {
		if got, want := b.card(label), fmt.Sprint(ov[col]); got != want {
			t.Errorf("overview %q: page %s, SQL %s", label, got, want)
		}
	}
	if ov["dead_notifications"].(int64) == 0 || ov["failed_runs_24h"].(int64) == 0 {
		t.Fatalf("the story made no dead letter or no failed run: %v", ov)
	}
	if charts := evalJS[int](b, `document.querySelectorAll('svg.chart').length`); charts != 9 {
		t.Errorf("%d charts on the overview, want 9", charts)
	}
	act := w.queryMap(`SELECT changes, runs, notifications FROM report_activity_hourly ORDER BY hour DESC LIMIT 1`)[0]
	for i, col := range map[int]string{0: "runs", 2: "changes", 5: "notifications"} {
		tip := evalJS[string](b, fmt.Sprintf(`[...document.querySelectorAll('svg.chart')[%d].querySelectorAll('rect.bar title')].pop().textContent`, i))
		want := fmt.Sprint(act[col])
		if !regexp.MustCompile(`UTC: ` + want + ` `).MatchString(tip) {
			t.Errorf("chart %s, current hour: %q, SQL %s", col, tip, want)
		}
	}
	// Every number of the overview links to the rows behind it: each
	// card's link renders with no error, and where the number counts rows
	// of one list, that list shows as many.
	cards := evalJS[[][2]string](b, `[...document.querySelectorAll('a.card')].map(c => [c.querySelector('.l').textContent, c.getAttribute('href')])`)
	if len(cards) != 11 {
		t.Errorf("%d cards on the overview, want 11", len(cards))
	}
	exact := map[string]string{"active sources": "active_sources", "not active": "inactive_sources",
		"failed runs (24h)": "failed_runs_24h", "pending changes": "pending_changes", "dead letters": "dead_notifications", "stuck": "stuck"}
	for _, c := range cards {
		if c[1] == "" {
			t.Errorf("card %q links nowhere", c[0])
			continue
		}
		b.open(base+c[1], "")
		if col, ok := exact[c[0]]; ok {
			if got, want := b.rowCount(), ov[col].(int64); int64(got) != want {
				t.Errorf("card %q: %s lists %d rows, the card says %d", c[0], c[1], got, want)
			}
		}
	}
	b.open(base+"/admin/", "Overview")

	// A bar leads to its rows: this hour's changes.
	href := evalJS[string](b, `[...document.querySelectorAll('svg.chart')[2].querySelectorAll('a')].pop().getAttribute('href')`)
	b.open(base+href, "Changes")
	rowsShown := b.rowCount()
	if want := act["changes"].(int64); int64(rowsShown) != want {
		t.Errorf("rows behind the changes bar: %d, SQL %d", rowsShown, want)
	}
	b.noErrors("rows behind a bar")
	b.shot("overview", base+"/admin/")

	// Every page renders with no console error.
	for _, p := range []struct{ path, h1 string }{
		{"/admin/sources", "Sources"},
		{"/admin/sources?state=scheduled", "Sources"},
		{"/admin/sources/tickets", "Source tickets"},
		{"/admin/record?source=tickets&id=2", "Record tickets/2"},
		{"/admin/stuck", "Stuck work"},
		{"/admin/failures", "Recent failures"},
		{"/admin/retry", "High retry"},
		{"/admin/dead", "Dead letters"},
		{"/admin/models", "Models"},
		{"/admin/disabled", "Disabled sources"},
		{"/admin/tasks", "Task runs"},
		{"/admin/rows/pending_notifications", "Pending and held notifications"},
		{"/admin/rows/pending_changes", "Pending changes"},
		{"/admin/rows/runs", "Runs"},
		{"/admin/rows/quiet", "Quiet runs"},
		{"/admin/rows/evaluations", "Evaluations"},
		{"/admin/rows/notifications", "Notifications"},
		{"/admin/rows/model_calls", "Model calls"},
		{"/admin/stuck?kind=change_pending_too_long", "Stuck work"},
		{"/admin/dead?sink=hook", "Dead letters"},
		{"/admin/disabled?status=paused", "Disabled sources"},
	} {
		b.open(base+p.path, p.h1)
		// The SQL is one click away.
		if n := evalJS[int](b, `document.querySelectorAll('details.sql pre').length`); n == 0 {
			t.Errorf("%s: no SQL shown", p.path)
		}
	}

	// The record page shows each change's decision trail.
	b.open(base+"/admin/record?source=tickets&id=2", "Record tickets/2")
	trail := b.text("main")
	for _, want := range []string{"closed", "urgent", "hook", "dead", "410 Gone"} {
		if !strings.Contains(trail, want) {
			t.Errorf("record trail lacks %q", want)
		}
	}
	// The trail is evaluator explain's, with the configured watch's condition.
	explain := b.text("pre.explain")
	for _, want := range []string{"change ", "watch closed", `filter   true: change.kind == "updated" && changed("status")`, "notify   #", "410 Gone"} {
		if !strings.Contains(explain, want) {
			t.Errorf("explain output lacks %q:\n%s", want, explain)
		}
	}
	b.shot("record", "")

	// The owner filter: alice's source only.
	w.exec(`UPDATE source_definitions SET owner = 'alice' WHERE name = 'inventory'`)
	b.open(base+"/admin/sources?owner=alice", "Sources")
	if n := b.rowCount(); n != 1 || !strings.Contains(b.text("main table"), "inventory") {
		t.Errorf("sources of alice: %d rows", n)
	}
	if sel := evalJS[string](b, `document.querySelector('#owner').value`); sel != "alice" {
		t.Errorf("owner filter shows %q", sel)
	}

	// The failures page lists the failed run, as the view does.
	b.open(base+"/admin/failures?kind=sync_run", "Recent failures")
	failures := b.rowCount()
	if want := w.count(`SELECT count(*) FROM report_recent_failures WHERE kind = 'sync_run'`); int64(failures) != want || want == 0 {
		t.Errorf("failures shown %d, SQL %d", failures, want)
	}

	// The source list leads to a source's page: a click on its name.
	b.open(base+"/admin/sources", "Sources")
	b.run("click a source's name in the list", chromedp.Click(chromedp.CSS(`main table tbody td a[href="/admin/sources/inventory"]`)),
		chromedp.WaitVisible(chromedp.ID("pause")))
	if h1 := b.text("main h1"); h1 != "Source inventory" {
		t.Fatalf("the name in the list led to %q", h1)
	}
	b.noErrors("source page from the list")
	// Its runs table leads to a run's row: a click on its id.
	runID := evalJS[string](b, `document.querySelector('#runs + p + div table tbody td a').textContent`)
	b.run("click a run id", chromedp.Click(chromedp.CSS(`#runs + p + div table tbody td a`)),
		chromedp.WaitVisible(chromedp.ID("rows")))
	if h1 := b.text("main h1"); h1 != "Runs" {
		t.Errorf("a run id led to %q", h1)
	}
	if n, id := b.rowCount(), evalJS[string](b, `document.querySelector('main table tbody td').textContent`); n != 1 || id != runID {
		t.Errorf("run %s's link lists %d rows, the first %s", runID, n, id)
	}
	b.noErrors("a run's row")

	// Pause, resume and run now from the source's page.
	b.open(base+"/admin/sources/inventory", "Source inventory")
	b.shot("source", "")
	b.run("pause", chromedp.SendKeys(chromedp.CSS(`input[name=reason]`), "vendor outage"), chromedp.Click(chromedp.ID("pause")),
		chromedp.WaitVisible(chromedp.CSS("p.flash")))
	if st := w.queryMap(`SELECT status, status_reason FROM sources WHERE name = 'inventory'`)[0]; st["status"] != "paused" || st["status_reason"] != "vendor outage" {
		t.Fatalf("after pause: %v", st)
	}
	b.noErrors("pause")
	// Run now on a paused source says why not.
	b.run("run now while paused", chromedp.Click(chromedp.ID("run")), chromedp.WaitVisible(chromedp.CSS("p.error")))
	if msg := b.text("p.error"); !strings.Contains(msg, "is not active in the syncer") {
		t.Errorf("run now while paused: %q", msg)
	}
	b.run("resume", chromedp.Click(chromedp.ID("resume")), chromedp.WaitVisible(chromedp.CSS("p.flash")))
	if st := w.queryMap(`SELECT status FROM sources WHERE name = 'inventory'`)[0]; st["status"] != "active" {
		t.Fatalf("after resume: %v", st)
	}
	w.sync(false) // the resumed source was due now: it runs
	w.exec(`UPDATE sources SET next_run_at = now() + interval '1 hour' WHERE name = 'inventory'`)
	b.open(base+"/admin/sources/inventory", "Source inventory")
	b.run("run now", chromedp.Click(chromedp.ID("run")), chromedp.WaitVisible(chromedp.CSS("p.flash")))
	if msg := b.text("p.flash"); !strings.Contains(msg, "asked for a run of inventory") {
		t.Errorf("run now: %q", msg)
	}
	before := w.count(`SELECT count(*) FROM sync_runs WHERE source = 'inventory' AND reason = 'manual'`)
	testsignal.Eventually(t, "the requested run", func() bool {
		w.sync(false)
		return w.count(`SELECT count(*) FROM sync_runs WHERE source = 'inventory' AND reason = 'manual'`) > before
	})
	b.noErrors("actions")

	// Without the CSRF token every action the browser posts (pause,
	// resume, run now, retry one, retry all, sign out) is refused and
	// changes nothing: not the sources, the notifications, the audit log,
	// nor the session.
	state := func() string {
		return fmt.Sprint(
			w.queryMap(`SELECT name, status, status_reason, next_run_at, run_requested_at, failure_count FROM sources ORDER BY name`),
			w.queryMap(`SELECT id, status, attempts, manual_retries, next_attempt_at FROM notifications ORDER BY id`),
			w.count(`SELECT count(*) FROM audit_log`))
	}
	for _, a := range []struct{ page, h1, button string }{
		{"/admin/sources/inventory", "Source inventory", "#pause"},
		{"/admin/sources/inventory", "Source inventory", "#resume"},
		{"/admin/sources/inventory", "Source inventory", "#run"},
		{"/admin/dead", "Dead letters", "button.retry-one"},
		{"/admin/dead", "Dead letters", "#retry-all"},
		{"/admin/dead", "Dead letters", "form.logout button"},
	} {
		before := state()
		b.open(base+a.page, a.h1)
		b.run(a.button+" without csrf", chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
			_, err := chromedp.Evaluate[chromedp.Void](`document.querySelectorAll('input[name=csrf]').forEach(i => i.value = '')`)(ctx, t)
			return err
		}), chromedp.Click(chromedp.CSS(a.button)), chromedp.WaitVisible(chromedp.CSS("p.error")))
		if msg := b.text("p.error"); !strings.Contains(msg, "CSRF token") {
			t.Errorf("%s %s without csrf: %q", a.page, a.button, msg)
		}
		b.errors() // the 403 is logged as a failed load
		if after := state(); after != before {
			t.Fatalf("%s %s without the CSRF token changed the database:\nbefore %s\nafter  %s", a.page, a.button, before, after)
		}
	}
	b.open(base+"/admin/", "Overview") // still signed in

	// Dead letters: the page lists what the view holds; retry one, then all.
	dead := w.count(`SELECT count(*) FROM report_dead_letters`)
	b.open(base+"/admin/dead", "Dead letters")
	b.shot("dead", "")
	shown := b.rowCount()
	if int64(shown) != dead || dead == 0 {
		t.Fatalf("dead letters shown %d, SQL %d", shown, dead)
	}
	first := evalJS[string](b, `document.querySelector('main table tbody tr td').textContent`)
	id, _ := strconv.ParseInt(first, 10, 64)
	// A dead letter's own page: its body, payload and every attempt.
	b.open(base+fmt.Sprintf("/admin/rows/notifications?id=%d", id), "")
	if n := evalJS[int](b, `document.querySelectorAll('#attempt-history tbody tr').length`); n == 0 {
		t.Errorf("dead letter %d's page lists no attempt", id)
	}
	b.noErrors("a dead letter's page")
	b.run("scroll to the attempts", chromedp.ScrollIntoView(chromedp.ID("attempt-history")))
	b.shot("notification", "")
	b.open(base+"/admin/dead", "Dead letters")
	b.run("retry one", chromedp.Click(chromedp.CSS("button.retry-one")), chromedp.WaitVisible(chromedp.CSS("p.flash")))
	if st := w.queryMap(`SELECT status, attempts FROM notifications WHERE id = $1`, id)[0]; st["status"] != "pending" || st["attempts"] != int32(0) {
		t.Fatalf("after retry of %d: %v", id, st)
	}
	if n := w.count(`SELECT count(*) FROM report_dead_letters`); n != dead-1 {
		t.Fatalf("dead after one retry: %d, want %d", n, dead-1)
	}
	w.evaluate() // the hook refuses again: dead again
	if n := w.count(`SELECT count(*) FROM report_dead_letters`); n != dead {
		t.Fatalf("dead after the refused redelivery: %d, want %d", n, dead)
	}
	b.open(base+"/admin/dead", "Dead letters")
	b.run("retry all", chromedp.Click(chromedp.ID("retry-all")), chromedp.WaitVisible(chromedp.CSS("p.flash")))
	if msg := b.text("p.flash"); !strings.Contains(msg, fmt.Sprintf("sent %d dead notification(s) back", dead)) {
		t.Errorf("retry all: %q", msg)
	}
	if n := w.count(`SELECT count(*) FROM report_dead_letters`); n != 0 {
		t.Fatalf("dead after retry all: %d", n)
	}
	b.noErrors("dead letters")

	// The models page is report_model_drift_daily and the expensive calls
	// of report_expensive_evaluations; the owner filter reads
	// report_model_drift_recent.
	b.open(base+"/admin/models", "Models")
	drift := w.count(`SELECT count(*) FROM report_model_drift_daily`)
	expensive := w.count(`SELECT count(*) FROM report_expensive_evaluations WHERE created_at > now() - interval '24 hours'`)
	if drift == 0 || expensive == 0 {
		t.Fatalf("the story made no model-judged decision: drift %d, expensive %d", drift, expensive)
	}
	tables := evalJS[[]int](b, `[...document.querySelectorAll('main table')].map(t => t.querySelectorAll('tbody tr').length)`)
	if len(tables) != 2 || int64(tables[0]) != drift || int64(tables[1]) != min(expensive, 50) {
		t.Errorf("models page tables %v, SQL drift %d, expensive %d", tables, drift, expensive)
	}
	if charts := evalJS[int](b, `document.querySelectorAll('svg.chart').length`); charts != 2 {
		t.Errorf("%d drift charts, want 2", charts)
	}
	b.shot("models", "")

	// Every count of the drift table links to the evaluations it counts:
	// a click on the first row's number lists as many rows, the ones SQL
	// counts in that cell, with the SQL one click away.
	cell := func(col string) string {
		return fmt.Sprintf(`(() => { const t = document.querySelector('main table');
			const i = [...t.querySelectorAll('thead th')].findIndex(th => th.textContent === %q);
			return t.querySelector('tbody tr').children[i].querySelector('a'); })()`, col)
	}
	clickDrift := func(col string) (int64, url.Values) {
		t.Helper()
		n, err := strconv.ParseInt(strings.ReplaceAll(evalJS[string](b, cell(col)+".textContent"), ",", ""), 10, 64)
		if err != nil {
			t.Fatalf("the drift table's %s: %v", col, err)
		}
		href := evalJS[string](b, cell(col)+".getAttribute('href')")
		b.run("click the drift table's "+col, chromedp.Click(chromedp.JSPath(cell(col))),
			chromedp.WaitVisible(chromedp.JSPath(`[...document.querySelectorAll('main h1')].filter(h => h.textContent.startsWith('Evaluations behind'))`)))
		b.noErrors(href)
		if n := evalJS[int](b, `[...document.querySelectorAll('details.sql pre')].filter(p => p.textContent.includes('FROM evaluations e')).length`); n != 1 {
			t.Errorf("%s: the SQL of the page is not shown", href)
		}
		u, err := url.Parse(href)
		if err != nil {
			t.Fatal(err)
		}
		return n, u.Query()
	}
	// judged lists what report_model_drift_daily counts in a cell, as the
	// view joins and filters, newest first.
	judged := func(q url.Values, decisions []string) []string {
		var ids []string
		for _, r := range w.queryMap(`
			SELECT e.id::text AS id FROM evaluations e JOIN model_calls mc ON mc.id = e.model_call_id
			WHERE e.step IN ('model', 'cache') AND date_trunc('day', e.created_at, 'UTC') = $1::date::timestamp AT TIME ZONE 'UTC'
			  AND mc.model = $2 AND mc.model_digest = $3 AND mc.prompt_version = $4 AND ($5 = '' OR e.owner = $5)
			  AND e.decision = ANY ($6)
			ORDER BY e.created_at DESC, e.id DESC`, q.Get("day"), q.Get("model"), q.Get("digest"), q.Get("prompt"), q.Get("owner"), decisions) {
			ids = append(ids, r["id"].(string))
		}
		return ids
	}
	listed := func() []string {
		return evalJS[[]string](b, `[...document.querySelectorAll('main table tbody tr')].map(r => r.children[0].textContent)`)
	}
	all := []string{"notify", "duplicate", "skip", "hold", "error"}
	n, q := clickDrift("evaluations")
	if got, want := listed(), judged(q, all); int64(len(got)) != n || !slices.Equal(got, want) || n == 0 {
		t.Errorf("the drift table's evaluations (%d, %v) list %v, SQL %v", n, q, got, want)
	}
	b.open(base+"/admin/models", "Models")
	n, q = clickDrift("skip")
	if got, want := listed(), judged(q, []string{"skip"}); int64(len(got)) != n || !slices.Equal(got, want) || n == 0 {
		t.Errorf("the drift table's skip decisions (%d, %v) list %v, SQL %v", n, q, got, want)
	}
	// The owner filter carries over: alice's evaluations only (the
	// tickets' first record's decisions made hers).
	w.exec(`UPDATE evaluations SET owner = 'alice' WHERE step IN ('model', 'cache') AND source = 'tickets' AND record_id = '1'`)
	b.open(base+"/admin/models?owner=alice", "Models")
	n, q = clickDrift("evaluations")
	alices := w.count(`SELECT count(*) FROM evaluations WHERE owner = 'alice' AND step IN ('model', 'cache')`)
	if got, want := listed(), judged(q, all); q.Get("owner") != "alice" || n != alices || int64(len(got)) != n || !slices.Equal(got, want) {
		t.Errorf("alice's drift evaluations (%d of %d, %v) list %v, SQL %v", n, alices, q, got, want)
	}
	b.open(base+"/admin/rows/evaluations?owner=alice", "Evaluations")
	b.open(base+"/admin/sources", "Sources")
	b.shot("sources", "")

	// Sign out, with the token: the session ends.
	// (The sign-in form's token field, not a heading, which the page
	// signed out of has too: navigating before the sign-out lands would
	// abort it.)
	b.run("sign out", chromedp.Click(chromedp.CSS("form.logout button")), chromedp.WaitVisible(chromedp.ID("token")))
	b.open(base+"/admin/", "Sign in")
}

// shot writes a screenshot of the current page (or of url) into
// docs/admin/NAME.png when LOOKOUT_UPDATE_SCREENSHOTS=1, reduced to a
// 256-colour palette so that it stays small.
func (b *browser) shot(name, url string) {
	b.t.Helper()
	if os.Getenv("LOOKOUT_UPDATE_SCREENSHOTS") != "1" {
		return
	}
	if url != "" {
		b.run("open "+url, chromedp.Navigate(url), chromedp.WaitVisible(chromedp.CSS("main h1")))
	}
	ctx, cancel := context.WithTimeout(b.ctx, step)
	defer cancel()
	raw, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	img, err := png.Decode(bytes.NewReader(raw))
	if err != nil {
		b.t.Fatal(err)
	}
	pal := image.NewPaletted(img.Bounds(), palette.WebSafe)
	draw.Draw(pal, img.Bounds(), img, image.Point{}, draw.Src)
	var out bytes.Buffer
	if err := (&png.Encoder{CompressionLevel: png.BestCompression}).Encode(&out, pal); err != nil {
		b.t.Fatal(err)
	}
	p := filepath.Join("..", "..", "docs", "admin", name+".png")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		b.t.Fatal(err)
	}
	if err := os.WriteFile(p, out.Bytes(), 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("wrote %s (%d bytes)", p, out.Len())
}
