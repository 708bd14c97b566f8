package admin_test

import (
	"fmt"
	"html"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// manyDeadLetters makes n dead letters in all: copies of the story's one,
// whose dead_at step back a second every three rows (so that rows share a
// dead_at and the pages must break ties by id).
func (w *world) manyDeadLetters(n int) {
	w.t.Helper()
	if got := w.count(`SELECT count(*) FROM notifications WHERE status = 'dead'`); got != 1 {
		w.t.Fatalf("the story made %d dead letters, want 1", got)
	}
	cols := w.queryMap(`SELECT string_agg(quote_ident(column_name), ', ' ORDER BY ordinal_position) AS cols
		FROM information_schema.columns
		WHERE table_schema = current_schema() AND table_name = 'notifications' AND column_name NOT IN ('id', 'dedupe_key', 'dead_at')`)[0]["cols"].(string)
	w.exec(fmt.Sprintf(`INSERT INTO notifications (%[1]s, dedupe_key, dead_at)
		SELECT %[1]s, dedupe_key || '-' || g, dead_at - (g / 3) * interval '1 second'
		FROM notifications, generate_series(1, %[2]d) g
		WHERE status = 'dead'`, cols, n-1))
	if got := w.count(`SELECT count(*) FROM notifications WHERE status = 'dead'`); got != int64(n) {
		w.t.Fatalf("%d dead letters, want %d", got, n)
	}
}

var (
	retryOneID = regexp.MustCompile(`<input type="hidden" name="id" value="(\d+)"><input type="hidden" name="back"[^>]*><button type="submit" class="retry-one">`)
	nextLink   = regexp.MustCompile(`<a class="next" href="([^"]+)"`)
)

// listedIDs returns the ids of the dead letters a page lists (the rows'
// own Retry buttons) and its next page's link ("" on the last page).
func listedIDs(t *testing.T, page string) (ids []int64, next string) {
	t.Helper()
	for _, m := range retryOneID.FindAllStringSubmatch(page, -1) {
		n, err := strconv.ParseInt(m[1], 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, n)
	}
	if m := nextLink.FindStringSubmatch(page); m != nil {
		next = html.UnescapeString(m[1])
	}
	return ids, next
}

// TestDeadLettersPageAndRetryListed: 752 dead letters show 200 to a page,
// each page's next link reaches the rest (every row once, in the view's
// order), and the bulk retry says how many rows it retries and sends back
// to pending exactly the rows the page lists, never the other 552.
func TestDeadLettersPageAndRetryListed(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.populate()
	w.manyDeadLetters(752)
	w.serve()
	c := newClient(w)
	c.login(w.adminTok)

	order := w.queryMap(`SELECT id FROM report_dead_letters`)
	var want []int64
	for _, r := range order {
		want = append(want, r["id"].(int64))
	}
	var seen []int64
	var first string
	pages := 0
	for path := "/admin/dead"; path != ""; pages++ {
		if pages > 10 {
			t.Fatalf("more than 10 pages of dead letters: the next links loop")
		}
		resp, page := c.do("GET", path, nil, nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d %.500s", path, resp.StatusCode, page)
		}
		if first == "" {
			first = page
		}
		ids, next := listedIDs(t, page)
		if next != "" && len(ids) != 200 {
			t.Errorf("%s lists %d dead letters and has a next page, want 200", path, len(ids))
		}
		seen = append(seen, ids...)
		path = next
	}
	if !slices.Equal(seen, want) {
		t.Errorf("the pages list %d dead letters (%d pages), want the %d of report_dead_letters in its order", len(seen), pages, len(want))
	}

	listed, _ := listedIDs(t, first)
	form := hiddenFields(t, first, `class="actions"`)
	if !strings.Contains(first, `id="retry-all">Retry 200 listed</button>`) {
		t.Errorf("the bulk retry button does not say it retries the 200 listed rows:\n%.2000s", first[strings.Index(first, `class="actions"`):])
	}
	resp, _ := c.do("POST", "/admin/dead/retry", form, nil)
	if resp.StatusCode != http.StatusSeeOther || !strings.Contains(resp.Header.Get("Location"), "done=sent+200+dead") {
		t.Errorf("retry of the listed rows: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	pending := w.queryMap(`SELECT id FROM notifications WHERE status = 'pending' AND manual_retries > 0 ORDER BY id`)
	var got []int64
	for _, r := range pending {
		got = append(got, r["id"].(int64))
	}
	slices.Sort(listed)
	if !slices.Equal(got, listed) {
		t.Errorf("the retry sent back %d notifications, want exactly the %d listed", len(got), len(listed))
	}
	if n := w.count(`SELECT count(*) FROM notifications WHERE status = 'dead'`); n != 552 {
		t.Errorf("%d dead letters left after retrying the 200 listed, want 552", n)
	}
}

var (
	firstBody = regexp.MustCompile(`(?s)<tbody>(.*?)</tbody>`)
	tableRow  = regexp.MustCompile(`(?s)<tr>(.*?)</tr>`)
)

// TestEveryListPages: with a page of one row, every list of rows of the
// admin page — the rows behind a number, pending work, the report pages,
// the dead letters — shows one row and a next link, and following the
// links lists every row the list's SQL counts, each once.
func TestEveryListPages(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.populate()
	w.secondDeadLetter()
	// Rows for the lists the story leaves empty: retried changes and
	// notifications waiting for long (pending work, high retry, stuck),
	// failing sources, disabled and paused ones (one without a time).
	w.exec(`UPDATE changes SET eval_status = 'pending', eval_attempts = 2, eval_error = 'model timed out'`)
	w.exec(`UPDATE notifications SET status = 'pending', attempts = 2, last_error = 'refused', next_attempt_at = now() - interval '2 days'
		WHERE status = 'delivered'`)
	w.exec(`UPDATE sources SET failure_count = 3`)
	// Three task runs, two of them changed at the same instant (the id
	// breaks the tie).
	w.exec(`INSERT INTO task_runs (source, task, record_id, record_version, content_version, idempotency_key, run_id,
		claimed_by, claimed_at, claim_expires_at, executor, updated_at)
		SELECT 'tickets', 'triage', g::text, 1, 'v1', 'key-' || g, 'run-' || g, 'syncer-1', now(), now() + interval '1 minute',
		       'command', now() - (g / 2) * interval '1 second'
		FROM generate_series(1, 3) g`)
	w.exec(`UPDATE sources SET status = 'paused', status_changed_at = now() WHERE name = 'tickets'`)
	w.exec(`UPDATE sources SET status = 'disabled', status_changed_at = NULL WHERE name <> 'tickets'`)
	w.listPage = 1
	w.serve()
	c := newClient(w)
	c.login(w.adminTok)

	for _, l := range []struct{ path, count string }{
		{"/admin/rows/runs?since=all", `SELECT count(*) FROM sync_runs`},
		{"/admin/rows/quiet?since=all", `SELECT count(*) FROM sync_run_hours`},
		{"/admin/rows/changes?since=all", `SELECT count(*) FROM changes`},
		{"/admin/rows/evaluations?since=all", `SELECT count(*) FROM evaluations`},
		{"/admin/rows/notifications?since=all", `SELECT count(*) FROM notifications`},
		{"/admin/rows/model_calls?since=all", `SELECT count(*) FROM model_calls`},
		{"/admin/rows/pending_changes", `SELECT count(*) FROM changes WHERE eval_status = 'pending'`},
		{"/admin/rows/pending_notifications", `SELECT count(*) FROM notifications WHERE status IN ('pending', 'held')`},
		{"/admin/stuck", `SELECT count(*) FROM report_stuck`},
		{"/admin/failures", `SELECT count(*) FROM report_recent_failures`},
		{"/admin/retry", `SELECT count(*) FROM report_high_retry`},
		{"/admin/disabled", `SELECT count(*) FROM report_disabled_sources`},
		{"/admin/tasks", `SELECT count(*) FROM report_task_runs`},
		{"/admin/dead", `SELECT count(*) FROM report_dead_letters`},
	} {
		want := w.count(l.count)
		var rows []string
		pages := 0
		for path := l.path; path != ""; pages++ {
			if pages > int(want)+1 {
				t.Fatalf("%s: more pages than rows (%d): the next links loop", l.path, want)
			}
			resp, page := c.do("GET", path, nil, nil)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("%s: %d %.500s", path, resp.StatusCode, page)
			}
			var got []string
			if m := firstBody.FindStringSubmatch(page); m != nil {
				for _, r := range tableRow.FindAllStringSubmatch(m[1], -1) {
					got = append(got, r[1])
				}
			}
			_, next := listedIDs(t, page)
			if len(got) > 1 || (next != "" && len(got) != 1) {
				t.Errorf("%s lists %d rows (next page %q), want 1 a page", path, len(got), next)
			}
			rows = append(rows, got...)
			path = next
		}
		if int64(len(rows)) != want {
			t.Errorf("%s: its %d pages list %d rows, want the %d its SQL counts", l.path, pages, len(rows), want)
		}
		if want < 2 {
			t.Errorf("%s: the story has %d rows for it: no second page to follow", l.path, want)
		}
		seen := map[string]bool{}
		for _, r := range rows {
			if seen[r] {
				t.Errorf("%s lists a row twice: %.300s", l.path, r)
			}
			seen[r] = true
		}
	}
}
