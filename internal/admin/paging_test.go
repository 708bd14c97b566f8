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
