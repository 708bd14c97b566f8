package admin_test

import (
	"fmt"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"
)

// driftHistory adds model-judged decisions around the edges of
// report_model_drift_daily's cells to what the pipeline made: two model
// digests and two prompt versions; a cell of 230 evaluations whose first
// 150 share one created_at (the UTC midnight that opens today: the
// cursor's ties and the day's boundary); cache hits of today answered
// from a model call of 20 days ago; decisions a microsecond before
// midnight (yesterday's); the oldest day of the 14 and the one before it
// (not counted); steps the views do not count (filter, budget) and a
// model step whose model call was pruned (not counted: the views join the
// call); owners alice, bob and none.
const driftHistory = `
INSERT INTO model_calls (id, source, record_id, watch, model, model_digest, prompt_version, input_ref, input_hash, outcome, created_at)
VALUES (900001, 'tickets', 'h', 'urgent', 'llama3.2', 'sha256:d1', 'pv-1', 'change:1', 'h', 'ok', now()),
       (900002, 'tickets', 'h', 'urgent', 'llama3.2', 'sha256:d2', 'pv-1', 'change:1', 'h', 'ok', now() - interval '1 day'),
       (900003, 'tickets', 'h', 'urgent', 'llama3.2', 'sha256:d1', 'pv-2', 'change:1', 'h', 'ok', now() - interval '1 day'),
       (900004, 'tickets', 'h', 'urgent', 'llama3.2', 'sha256:d1', 'pv-1', 'change:1', 'h', 'ok', now() - interval '20 days');
WITH t AS (SELECT date_trunc('day', now(), 'UTC') AS today),
e (n, step, decision, call, at) AS (
    SELECT i, 'model', (ARRAY['notify', 'duplicate', 'skip', 'skip'])[1 + i % 4], 900001,
           CASE WHEN i <= 150 THEN t.today ELSE t.today + (i - 150) * interval '1 microsecond' END
    FROM t, generate_series(1, 230) i
    UNION ALL SELECT 300 + i, 'cache', (ARRAY['notify', 'skip'])[1 + i % 2], 900004, t.today + i * interval '1 millisecond'
    FROM t, generate_series(1, 7) i
    UNION ALL SELECT 400 + i, 'model', 'skip', 900002, t.today - i * interval '1 microsecond' FROM t, generate_series(1, 5) i
    UNION ALL SELECT 500 + i, 'model', 'notify', 900003, t.today - interval '12 hours' FROM t, generate_series(1, 3) i
    UNION ALL SELECT 600 + i, 'model', 'skip', 900001, t.today - interval '13 days' + i * interval '1 minute' FROM t, generate_series(1, 4) i
    UNION ALL SELECT 700 + i, 'model', 'notify', 900001, t.today - interval '13 days' - i * interval '1 minute' FROM t, generate_series(1, 6) i
    UNION ALL SELECT 800 + i, 'filter', 'skip', NULL, t.today FROM t, generate_series(1, 5) i
    UNION ALL SELECT 900 + i, 'budget', 'hold', 900001, t.today FROM t, generate_series(1, 2) i
    UNION ALL SELECT 950 + i, 'model', 'notify', 999999, t.today FROM t, generate_series(1, 2) i
)
-- Counted as the evaluator counts what it inserts (migration 57).
, ins AS (
INSERT INTO evaluations (change_id, source, record_id, watch, step, matched, decision, model_call_id, evaluator, created_at,
                         owner, change_created_at)
SELECT 100000 + n, 'tickets', 'h-' || n, 'urgent', step, true, decision, call, 'evaluator-1', at,
       (ARRAY['alice', 'bob', ''])[1 + n % 3], at
FROM e
RETURNING created_at, decision, step, owner, confidence, model_call_id)
SELECT count_evaluations(array_agg(created_at), array_agg(decision), array_agg(step), array_agg(owner), array_agg(confidence),
                         array_agg(model_call_id))
FROM ins`

var (
	evaluationRow = regexp.MustCompile(`<tr><td class="n">(?:<a href="[^"]*">)?([0-9]+)(?:</a>)?</td>`)
	nextPage      = regexp.MustCompile(`<a class="next" href="([^"]+)">`)
)

// driftCounts are the count columns of the models page's drift table.
var driftCounts = []string{"evaluations", "judged", "cache_hits", "notify", "skip"}

// listed fetches a rows page and the pages after it, and returns the
// evaluation ids they list, failing on a repeated id.
func (c *client) listed(path string, auth http.Header) []string {
	c.t.Helper()
	var ids []string
	seen := map[string]bool{}
	for pages := 0; path != ""; pages++ {
		if pages > 20 {
			c.t.Fatalf("%s: more than 20 pages", path)
		}
		resp, body := c.do("GET", path, nil, auth)
		if resp.StatusCode != http.StatusOK {
			c.t.Fatalf("%s: %d %.500s", path, resp.StatusCode, body)
		}
		if !strings.Contains(body, `<details class="sql" id="sql">`) || !strings.Contains(body, "FROM evaluations e") {
			c.t.Errorf("%s: the SQL of the page is not shown", path)
		}
		for _, m := range evaluationRow.FindAllStringSubmatch(body, -1) {
			if seen[m[1]] {
				c.t.Errorf("%s: evaluation %s listed twice", path, m[1])
			}
			seen[m[1]] = true
			ids = append(ids, m[1])
		}
		path = ""
		if m := nextPage.FindStringSubmatch(body); m != nil {
			path = html.UnescapeString(m[1])
		}
	}
	return ids
}

// TestDriftNumbersListTheirRows: every count of the models page's drift
// table links to the evaluations it counts — for the fleet
// (report_model_drift_daily) and for an owner (report_model_drift_recent)
// — and that list, page after page, has as many rows as the cell, at the
// edges of the views' conditions (the UTC day's boundaries, the 14 days,
// the steps and decisions counted, the join to the model call). Only an
// admin opens it; a bad address is refused naming the parameter.
func TestDriftNumbersListTheirRows(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.populate()
	w.serve()
	w.exec(driftHistory)
	c := newClient(w)
	adminAuth := http.Header{"Authorization": {"Bearer " + w.adminTok}}

	type cell struct {
		day                   time.Time
		model, digest, prompt string
		counts                map[string]int64
	}
	cells := func(sql string, args ...any) []cell {
		var out []cell
		for _, r := range w.queryMap(sql, args...) {
			cl := cell{day: r["day"].(time.Time), model: r["model"].(string), digest: r["model_digest"].(string),
				prompt: r["prompt_version"].(string), counts: map[string]int64{}}
			for _, col := range driftCounts {
				cl.counts[col] = r[col].(int64)
			}
			out = append(out, cl)
		}
		return out
	}
	fleet := cells(`SELECT * FROM report_model_drift_daily`)
	if len(fleet) < 5 {
		t.Fatalf("%d cells of drift: the story made too few to check", len(fleet))
	}
	var paged bool
	for _, owner := range []string{"", "alice", "bob"} {
		page, want := "/admin/models", fleet
		if owner != "" {
			page += "?owner=" + owner
			want = cells(`SELECT day, model, model_digest, prompt_version, sum(evaluations)::bigint AS evaluations,
			                     sum(judged)::bigint AS judged, sum(cache_hits)::bigint AS cache_hits,
			                     sum(notify)::bigint AS notify, sum(skip)::bigint AS skip
			              FROM report_model_drift_recent WHERE owner = $1 GROUP BY 1, 2, 3, 4`, owner)
			if len(want) < 4 {
				t.Fatalf("%s has %d cells of drift: too few to check", owner, len(want))
			}
		}
		resp, body := c.do("GET", page, nil, adminAuth)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d", page, resp.StatusCode)
		}
		for _, cl := range want {
			for _, col := range driftCounts {
				v := url.Values{"count": {col}, "day": {cl.day.UTC().Format(time.DateOnly)}, "model": {cl.model},
					"digest": {cl.digest}, "prompt": {cl.prompt}}
				if owner != "" {
					v.Set("owner", owner)
				}
				link := "/admin/rows/drift?" + v.Encode()
				if !strings.Contains(body, fmt.Sprintf(`<a href="%s">%d</a>`, html.EscapeString(link), cl.counts[col])) {
					t.Errorf("%s: the %s of %s %s %s (%d) does not link to %s", page, col, cl.day.UTC().Format(time.DateOnly),
						cl.digest, cl.prompt, cl.counts[col], link)
					continue
				}
				ids := c.listed(link, adminAuth)
				if int64(len(ids)) != cl.counts[col] {
					t.Errorf("%s lists %d evaluations, the cell says %d", link, len(ids), cl.counts[col])
				}
				paged = paged || len(ids) > 200
			}
		}
	}
	if !paged {
		t.Errorf("no cell had more than a page of rows: the pages were not checked")
	}
	// The day before the 14 has no cell, and its address lists nothing,
	// as the views count nothing of it (six decisions were made that day).
	var today time.Time
	if err := w.pool.QueryRow(w.ctx, `SELECT date_trunc('day', now(), 'UTC')`).Scan(&today); err != nil {
		t.Fatal(err)
	}
	old := "/admin/rows/drift?" + url.Values{"count": {"evaluations"}, "day": {today.UTC().AddDate(0, 0, -14).Format(time.DateOnly)},
		"model": {"llama3.2"}, "digest": {"sha256:d1"}, "prompt": {"pv-1"}}.Encode()
	if ids := c.listed(old, adminAuth); len(ids) != 0 {
		t.Errorf("%s lists %d evaluations of a day the views do not count", old, len(ids))
	}

	// Only an admin: a user token is refused, and without a session the
	// page asks to sign in.
	link := "/admin/rows/drift?" + url.Values{"count": {"notify"}, "day": {fleet[0].day.UTC().Format(time.DateOnly)},
		"model": {fleet[0].model}, "digest": {fleet[0].digest}, "prompt": {fleet[0].prompt}}.Encode()
	if resp, body := c.do("GET", link, nil, http.Header{"Authorization": {"Bearer " + w.userTok}}); resp.StatusCode != http.StatusForbidden ||
		!strings.Contains(body, "user scope") || evaluationRow.MatchString(body) {
		t.Errorf("user token: %d %.300s", resp.StatusCode, body)
	}
	if resp, _ := c.do("GET", link, nil, nil); resp.StatusCode != http.StatusSeeOther ||
		!strings.HasPrefix(resp.Header.Get("Location"), "/admin/login?next=") {
		t.Errorf("anonymous: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	// A bad address says which parameter is wrong.
	for bad, want := range map[string]string{
		strings.Replace(link, "count=notify", "count=rate", 1):       "count=&#34;rate&#34; is not a count",
		strings.Replace(link, "day=", "day=yesterday", 1):            "is not a day (YYYY-MM-DD, UTC)",
		link + "&after=" + url.QueryEscape("2026-11-30T00:00:00Z,x"): "is not a cursor of this list",
	} {
		if resp, body := c.do("GET", bad, nil, adminAuth); resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, want) {
			t.Errorf("%s: %d, want 400 with %q: %.500s", bad, resp.StatusCode, want, body)
		}
	}
}
