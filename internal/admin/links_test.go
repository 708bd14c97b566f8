package admin_test

import (
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/net/html"
)

// numberExempt lists the columns whose numbers are attributes of their
// row, not counts of rows: they link nowhere, on purpose. Every other
// number an admin page shows must link to the rows behind it
// (TestEveryNumberLinks), so a number added later without a link fails
// until it gets one or a line here that says why it needs none.
var numberExempt = map[string]string{
	// Durations and lateness, in seconds or milliseconds.
	"lateness_seconds":    "how late a source is now",
	"ms":                  "how long a run or a model call took",
	"latency_ms":          "how long a model call took",
	"avg_late_s":          "the average lateness of an hour's quiet runs",
	"max_late_s":          "the worst lateness of an hour's quiet runs",
	"stuck_after_seconds": "a source's setting",
	// Measures of one model call or of a day of them.
	"prompt_tokens":  "tokens of a model call",
	"output_tokens":  "tokens of a model call",
	"total_tokens":   "tokens of a model call",
	"confidence":     "the model's confidence in one verdict",
	"avg_confidence": "an average of verdicts' confidence",
	"notify_rate":    "a ratio of two linked counts",
	// Attributes of one row.
	"version":      "a record's version number",
	"attempt":      "which try a model call or a task run is (its row is the row shown)",
	"exit_code":    "what an executor returned",
	"review_score": "the lowest criterion score (0-10) of a task run's last review",
	"status":       "the HTTP status code a receiver answered a delivery attempt with (a notification's attempt history)",
	// A run's items: lookout keeps a row per change (items_created,
	// items_updated and items_deleted link to them), none per item seen.
	"items_seen": "items the upstream returned to a run",
}

// number is a value shown as a number (a numeric cell, or text that is a
// number).
var number = regexp.MustCompile(`^-?[0-9][0-9,]*(\.[0-9]+)?$`)

// countedBy are the columns whose number counts the rows of the page it
// links to: the rows listed there (or the sum of a column of them) must
// equal it.
var countedBy = map[string]string{
	"failure_count": "", "items_created": "", "items_updated": "", "items_deleted": "", "changed": "",
	"runs": "runs", "not_modified": "not_modified",
}

// cell is a number of a page, with its column and link.
type cell struct {
	col, text, href string
}

// TestEveryNumberLinks walks every admin page reachable from the overview
// and the navigation over a world the real pipeline filled, and fails on
// any number without a link unless its column is in numberExempt; every
// link must open a page (no 404 or 500); the counts of countedBy, the
// overview's cards and the bars of its count charts list as many rows as
// they say.
func TestEveryNumberLinks(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.populate()
	for range 2 {
		w.sync(true) // unchanged upstream: quiet runs
	}
	// Tickets fails (a 500), succeeds, fails again: its failure_count is
	// 1, the failed run before its last success is not counted. The 503
	// of the story blocked the host for a minute: unblocked first.
	w.exec(`UPDATE host_limits SET blocked_until = NULL`)
	fail := func() {
		w.mu.Lock()
		w.failNext, w.failCode = true, http.StatusInternalServerError
		w.mu.Unlock()
		w.sync(true)
	}
	fail()
	w.sync(true)
	fail()
	if n, all := w.count(`SELECT failure_count FROM sources WHERE name = 'tickets'`),
		w.count(`SELECT count(*) FROM sync_runs WHERE source = 'tickets' AND status = 'failed'`); n != 1 || all != 2 {
		t.Fatalf("tickets: failure_count %d and %d failed runs, want 1 and 2 (one before its last success): %v", n, all, w.queryMap(`SELECT id, status, error, started_at FROM sync_runs WHERE source = 'tickets' ORDER BY id`))
	}
	// A task run that ran twice and failed once.
	w.exec(`INSERT INTO task_runs (source, task, record_id, record_version, content_version, idempotency_key, run_id, sync_run_id,
	                               status, attempt, executions, failures, exit_code, claimed_by, claimed_at, claim_expires_at, executor)
	        VALUES ('tickets', 'execute', '1', 1, '00aa', 'tickets:1:v00aa:execute', 'run-7.2',
	                (SELECT max(id) FROM sync_runs WHERE source = 'tickets'), 'completed', 2, 2, 1, 0,
	                'lookout@syncer-1', now(), now() + interval '1 minute', 'command')`)
	// A notification held for a digest and one waiting for its next
	// attempt: the overview counts them apart.
	w.exec(`INSERT INTO notifications (dedupe_key, source, record_id, watch, sink, title, payload, status, digest_due_at)
	        VALUES ('held-1', 'tickets', '1', 'urgent', 'log', 'x', '{}', 'held', now() + interval '1 hour')`)
	w.exec(`INSERT INTO notifications (dedupe_key, source, record_id, watch, sink, title, payload, next_attempt_at)
	        VALUES ('pending-1', 'tickets', '3', 'urgent', 'log', 'x', '{}', now() + interval '1 hour')`)
	// A source asked to run: due now (the overview's count) but not in
	// state due.
	w.exec(`UPDATE sources SET run_requested_at = now(), next_run_at = now() + interval '1 hour' WHERE name = 'inventory'`)
	w.exec(`UPDATE sources SET next_run_at = now() - interval '1 minute' WHERE name = 'tickets'`)
	w.serve()
	c := newClient(w)
	auth := http.Header{"Authorization": {"Bearer " + w.adminTok}}
	get := func(path string) (*html.Node, bool) {
		t.Helper()
		resp, body := c.do("GET", path, nil, auth)
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s: %d", path, resp.StatusCode)
			return nil, false
		}
		doc, err := html.Parse(strings.NewReader(body))
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		return doc, true
	}

	queue := []string{"/admin/", "/admin/sources", "/admin/stuck", "/admin/failures", "/admin/retry", "/admin/dead",
		"/admin/models", "/admin/disabled", "/admin/tasks"}
	seen := map[string]bool{}
	checked := map[string]int{} // numbers per column that link
	pages := 0
	for len(queue) > 0 {
		path := queue[0]
		queue = queue[1:]
		if seen[path] {
			continue
		}
		seen[path] = true
		if pages++; pages > 2000 {
			t.Fatalf("more than 2000 pages: the walk does not end")
		}
		doc, ok := get(path)
		if !ok {
			continue
		}
		for _, n := range numbers(doc) {
			if n.href == "" {
				if _, ok := numberExempt[n.col]; !ok {
					t.Errorf("%s: %s = %s links nowhere (link it to the rows it counts, or exempt its column in numberExempt with the reason)", path, n.col, n.text)
				}
				continue
			}
			checked[n.col]++
			if sumCol, ok := countedBy[n.col]; ok {
				target, ok := get(n.href)
				if !ok {
					continue
				}
				want, _ := strconv.ParseFloat(strings.ReplaceAll(n.text, ",", ""), 64)
				if got := countRows(target, sumCol); got != want {
					t.Errorf("%s: %s = %s, but %s lists %v", path, n.col, n.text, n.href, got)
				}
			}
		}
		for _, href := range hrefs(doc) {
			if href == "" || seen[href] {
				continue
			}
			queue = append(queue, href)
		}
	}
	t.Logf("walked %d pages; linked numbers per column: %v", pages, checked)
	// The walk saw the numbers this test is about.
	for _, col := range []string{"failure_count", "run_id", "last_run_id", "items_created", "items_updated", "runs", "not_modified",
		"attempts", "eval_attempts", "duplicates_suppressed", "manual_retries", "change_id", "sync_run_id", "executions", "retry_count"} {
		if checked[col] == 0 {
			t.Errorf("no linked %s seen: the world shows none, the walk checks nothing of it", col)
		}
	}

	// The overview's cards and the bars of its count charts list as many
	// rows as they say.
	doc, _ := get("/admin/")
	for _, card := range findAll(doc, func(n *html.Node) bool { return n.Data == "a" && hasClass(n, "card") }) {
		label := textOf(findAll(card, func(n *html.Node) bool { return hasClass(n, "l") })[0])
		value := textOf(findAll(card, func(n *html.Node) bool { return hasClass(n, "v") })[0])
		href := attr(card, "href")
		if label == "oldest pending change" {
			continue // a time, not a count
		}
		target, ok := get(href)
		if !ok {
			continue
		}
		want, _ := strconv.ParseFloat(strings.ReplaceAll(value, ",", ""), 64)
		if got := countRows(target, ""); got != want {
			t.Errorf("overview card %q = %s, but %s lists %v", label, value, href, got)
		}
	}
	tip := regexp.MustCompile(`UTC: ([0-9.]+) `)
	bars := 0
	for _, fig := range findAll(doc, func(n *html.Node) bool { return n.Data == "figure" }) {
		caption := textOf(findAll(fig, func(n *html.Node) bool { return n.Data == "figcaption" })[0])
		if strings.HasPrefix(caption, "Schedule lateness") {
			continue // a measure of the runs, not a count
		}
		for _, a := range findAll(fig, func(n *html.Node) bool { return n.Data == "a" }) {
			titles := findAll(a, func(n *html.Node) bool { return n.Data == "title" })
			if len(titles) == 0 {
				continue
			}
			m := tip.FindStringSubmatch(textOf(titles[0]))
			if m == nil {
				t.Fatalf("%s: bar title %q", caption, textOf(titles[0]))
			}
			want, _ := strconv.ParseFloat(m[1], 64)
			if want == 0 && bars > 40 {
				continue // enough empty hours checked
			}
			bars++
			target, ok := get(attr(a, "href"))
			if !ok {
				continue
			}
			if got := countRows(target, ""); got != want {
				t.Errorf("%s: a bar says %s, but %s lists %v", caption, m[1], attr(a, "href"), got)
			}
		}
	}
	if bars < 7 {
		t.Errorf("only %d bars checked", bars)
	}
}

// countRows counts the rows a page lists: the rows of its first table,
// or the sum of their column sumCol; plus the quiet runs of a runs page.
func countRows(doc *html.Node, sumCol string) float64 {
	tables := findAll(doc, func(n *html.Node) bool { return n.Data == "table" })
	if len(tables) == 0 {
		return 0
	}
	sum := func(tbl *html.Node, col string) float64 {
		cols, rows := tableOf(tbl)
		if col == "" {
			return float64(len(rows))
		}
		total := 0.0
		for _, r := range rows {
			for i, c := range r {
				if i < len(cols) && cols[i] == col {
					f, _ := strconv.ParseFloat(strings.ReplaceAll(textOf(c), ",", ""), 64)
					total += f
				}
			}
		}
		return total
	}
	n := sum(tables[0], sumCol)
	if sumCol == "" && len(findAll(doc, func(n *html.Node) bool { return n.Data == "h2" && attr(n, "id") == "quiet" })) > 0 && len(tables) > 1 {
		n += sum(tables[1], "runs")
	}
	return n
}

// numbers returns the numbers of a page's tables and field lists.
func numbers(doc *html.Node) []cell {
	var out []cell
	for _, tbl := range findAll(doc, func(n *html.Node) bool { return n.Data == "table" }) {
		cols, rows := tableOf(tbl)
		for _, r := range rows {
			for i, td := range r {
				if i < len(cols) {
					if c, ok := numberOf(cols[i], td); ok {
						out = append(out, c)
					}
				}
			}
		}
	}
	for _, dl := range findAll(doc, func(n *html.Node) bool { return n.Data == "dl" }) {
		col := ""
		for n := dl.FirstChild; n != nil; n = n.NextSibling {
			switch n.Data {
			case "dt":
				col = textOf(n)
			case "dd":
				if c, ok := numberOf(col, n); ok {
					out = append(out, c)
				}
			}
		}
	}
	return out
}

func numberOf(col string, n *html.Node) (cell, bool) {
	text := textOf(n)
	if !hasClass(n, "n") && !number.MatchString(text) || text == "-" {
		return cell{}, false
	}
	c := cell{col: col, text: text}
	if as := findAll(n, func(n *html.Node) bool { return n.Data == "a" }); len(as) > 0 {
		c.href = attr(as[0], "href")
	}
	return c, true
}

// tableOf returns a table's column names and its body's rows of cells.
func tableOf(tbl *html.Node) (cols []string, rows [][]*html.Node) {
	for _, th := range findAll(tbl, func(n *html.Node) bool { return n.Data == "th" }) {
		cols = append(cols, textOf(th))
	}
	for _, tr := range findAll(tbl, func(n *html.Node) bool { return n.Data == "tr" && n.Parent.Data == "tbody" }) {
		var r []*html.Node
		for td := tr.FirstChild; td != nil; td = td.NextSibling {
			if td.Type == html.ElementNode && td.Data == "td" {
				r = append(r, td)
			}
		}
		rows = append(rows, r)
	}
	return cols, rows
}

// hrefs returns the admin pages a page links to (without fragments).
func hrefs(doc *html.Node) []string {
	var out []string
	for _, a := range findAll(doc, func(n *html.Node) bool { return n.Data == "a" }) {
		h, _, _ := strings.Cut(attr(a, "href"), "#")
		u, err := url.Parse(h)
		if err != nil || !strings.HasPrefix(u.Path, "/admin/") || strings.HasPrefix(u.Path, "/admin/static/") ||
			u.Path == "/admin/login" || u.Path == "/admin/logout" {
			continue
		}
		// The time range control (range=) shows the same lists over
		// other spans (a chart of 30 days has 720 bars, each a list):
		// TestTimeRange checks it; the walk keeps to the default spans.
		if u.Query().Get("range") != "" {
			continue
		}
		out = append(out, h)
	}
	return out
}

func findAll(root *html.Node, match func(*html.Node) bool) []*html.Node {
	var out []*html.Node
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode && match(n) {
			out = append(out, n)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(root)
	return out
}

func attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}

func hasClass(n *html.Node, class string) bool {
	for _, c := range strings.Fields(attr(n, "class")) {
		if c == class {
			return true
		}
	}
	return false
}

func textOf(n *html.Node) string {
	var b strings.Builder
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.TextNode {
			b.WriteString(n.Data)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(n)
	return strings.TrimSpace(b.String())
}
