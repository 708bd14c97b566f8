package httpjson_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lookout-dev/lookout/internal/changes"
	"github.com/lookout-dev/lookout/internal/connectors/conntest"
	"github.com/lookout-dev/lookout/internal/normalize"
	"github.com/lookout-dev/lookout/internal/pgtest"
)

// Items at the since boundary are read again on every run; the content
// hash makes the unchanged ones no-ops while a new item that shares the
// boundary timestamp is still created.
func TestSinceBoundaryTiesAreNoOpsThroughApply(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	api := newFakeAPI(t, "link", 3)
	conn := build(t, fmt.Sprintf("  url: %s\n  items: body.data\n  pagination: link\n  since: updated_since\n  lookback: 0s\n", api.URL()))
	fields := normalize.FieldExprs{}

	r1 := conntest.Fetch(t, conn, nil)
	if r1.Err != nil {
		t.Fatal(r1.Err)
	}
	if st := conntest.Mirror(t, pool, "tickets", fields, nil, r1); st.Created != 3 {
		t.Fatalf("first run: %+v, want 3 created", st)
	}

	// A fourth ticket appears with exactly the boundary timestamp.
	boundary := api.ticket(3).Updated
	api.set(ticket{ID: 4, Title: "Ticket 4", Status: "open", Updated: boundary})
	n := len(api.log())
	r2 := conntest.Fetch(t, conn, r1.Cursor(nil))
	if r2.Err != nil {
		t.Fatal(r2.Err)
	}
	if got := query(t, api.log(), n).Get("updated_since"); got != boundary.Format(time.RFC3339) {
		t.Errorf("updated_since = %s, want the boundary %s", got, boundary.Format(time.RFC3339))
	}
	if got := r2.IDs(); !slices.Equal(got, []string{"3", "4"}) {
		t.Errorf("second run ids = %v, want the boundary ticket again and the new one", got)
	}
	st := conntest.Mirror(t, pool, "tickets", fields, nil, r2)
	if (st != changes.Stats{Seen: 2, Created: 1, Unchanged: 1}) {
		t.Errorf("second run: %+v, want ticket 3 unchanged and ticket 4 created", st)
	}
	var kinds []string
	for _, c := range conntest.Changes(t, pool, "tickets") {
		kinds = append(kinds, c.RecordID+":"+c.Kind)
	}
	if !slices.Equal(kinds, []string{"1:created", "2:created", "3:created", "4:created"}) {
		t.Errorf("changes = %v", kinds)
	}
	// A third run over the same boundary writes nothing at all.
	r3 := conntest.Fetch(t, conn, r2.Cursor(r1.Cursor(nil)))
	if st := conntest.Mirror(t, pool, "tickets", fields, nil, r3); st.Changed() != 0 {
		t.Errorf("third run changed %+v, want nothing", st)
	}
}

// A snapshot http source records deleted changes for records that vanished
// upstream; an incremental one never guesses deletions.
func TestSnapshotTombstonesThroughSyncer(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	snap := newFakeAPI(t, "link", 5)
	inc := newFakeAPI(t, "link", 5)
	dir := conntest.WriteConfig(t, map[string]string{
		"sources/snap.yaml": fmt.Sprintf("name: snap\nconnector: http\nrate_limit: {per_second: 1000}\nhttp:\n  url: %s\n  items: body.data\n  pagination: link\n  snapshot: true\n", snap.URL()),
		"sources/inc.yaml":  fmt.Sprintf("name: inc\nconnector: http\nrate_limit: {per_second: 1000}\nhttp:\n  url: %s\n  items: body.data\n  pagination: link\n  since: updated_since\n", inc.URL()),
	})
	s := conntest.Syncer(t, pool, dir)
	conntest.SyncNow(t, pool, s)
	for _, name := range []string{"snap", "inc"} {
		if status, errText := conntest.LastRun(t, pool, name); status != "succeeded" {
			t.Fatalf("%s: run %s: %s", name, status, errText)
		}
	}
	snap.remove(2)
	inc.remove(2)
	conntest.SyncNow(t, pool, s)

	var deleted []string
	for _, c := range conntest.Changes(t, pool, "snap") {
		if c.Kind == changes.Deleted {
			deleted = append(deleted, c.RecordID)
			if c.Record["title"] != "Ticket 2" {
				t.Errorf("tombstone carries %v, want the last content", c.Record)
			}
		}
	}
	if !slices.Equal(deleted, []string{"2"}) {
		t.Errorf("snapshot deletions = %v, want [2]", deleted)
	}
	for _, c := range conntest.Changes(t, pool, "inc") {
		if c.Kind == changes.Deleted {
			t.Errorf("incremental source recorded a deletion of %s", c.RecordID)
		}
	}
}

// Through the syncer: a 429 half-way defers the run (not a failure), the
// pages before it are committed with their resume cursor, and the next run
// goes on from the page that was refused.
func TestRetryAfterDefersAndResumesThroughSyncer(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	api := newFakeAPI(t, "link", 7)
	refused := 0
	api.intercept = func(w http.ResponseWriter, r *http.Request, n int) bool {
		if r.URL.Query().Get("page") != "2" || refused > 0 {
			return false
		}
		refused++
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusTooManyRequests)
		return true
	}
	dir := conntest.WriteConfig(t, map[string]string{
		"sources/t.yaml": fmt.Sprintf("name: t\nconnector: http\nrate_limit: {per_second: 1000}\nhttp:\n  url: %s\n  items: body.data\n  pagination: link\n  since: updated_since\n", api.URL()),
	})
	s := conntest.Syncer(t, pool, dir)
	start := time.Now()
	conntest.SyncNow(t, pool, s)
	if status, errText := conntest.LastRun(t, pool, "t"); status != "deferred" || !strings.Contains(errText, "429") {
		t.Fatalf("run %s (%s), want deferred by the 429", status, errText)
	}
	var cursor string
	var next time.Time
	var failures int
	if err := pool.QueryRow(context.Background(), `SELECT cursor::text, next_run_at, failure_count FROM sources WHERE name = 't'`).Scan(&cursor, &next, &failures); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(cursor, `"resume"`) || !strings.Contains(cursor, "page=2") || failures != 0 {
		t.Errorf("after the 429: cursor %s failures %d, want a resume at page 2 and no failure", cursor, failures)
	}
	if next.Before(start.Add(time.Second - 10*time.Millisecond).Truncate(time.Second)) {
		t.Errorf("next_run_at %s is before the Retry-After", next)
	}
	n := len(api.log())
	// Run again until the upstream's pause is over and the run succeeds.
	deadline := time.Now().Add(10 * time.Second)
	for {
		conntest.SyncNow(t, pool, s)
		if status, _ := conntest.LastRun(t, pool, "t"); status == "succeeded" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the resumed run did not succeed")
		}
		time.Sleep(100 * time.Millisecond) // polling a condition with a deadline
	}
	reqs := api.log()[n:]
	if first := reqs[0].URL.Query().Get("page"); first != "2" {
		t.Errorf("the resumed run started at page %q, want 2", first)
	}
	var count int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM records WHERE source = 't'`).Scan(&count); err != nil || count != 7 {
		t.Errorf("records = %d (%v), want all 7", count, err)
	}
}

// An http snapshot source whose upstream answers 200 with `[]` or `null`
// (an outage behind a proxy, an emptied cache) would delete every record:
// the deletion guard fails the run and deletes nothing; with
// max_delete_fraction: 1 the deletions go through.
func TestEmptySnapshotAnswerDeletesNothing(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	var mu sync.Mutex
	body := `[{"id": 1, "title": "a"}, {"id": 2, "title": "b"}, {"id": 3, "title": "c"}, {"id": 4, "title": "d"}]`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	setBody := func(b string) {
		mu.Lock()
		defer mu.Unlock()
		body = b
	}
	src := fmt.Sprintf("name: shop\nconnector: http\nrate_limit: {per_second: 1000}\nhttp:\n  url: %s/products\n  snapshot: true\n", srv.URL)
	dir := conntest.WriteConfig(t, map[string]string{"sources/shop.yaml": src})
	s := conntest.Syncer(t, pool, dir)
	conntest.SyncNow(t, pool, s)
	if status, errText := conntest.LastRun(t, pool, "shop"); status != "succeeded" {
		t.Fatalf("first run %s: %s", status, errText)
	}
	live := func() int {
		var n int
		if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM records WHERE source = 'shop' AND deleted_at IS NULL`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, empty := range []string{`[]`, `null`} {
		setBody(empty)
		conntest.SyncNow(t, pool, s)
		status, errText := conntest.LastRun(t, pool, "shop")
		if status != "failed" || !strings.Contains(errText, "source shop") || !strings.Contains(errText, "would delete 4 of 4 live records") ||
			!strings.Contains(errText, "max_delete_fraction") {
			t.Errorf("%s: run %s (%s), want failed by the deletion guard", empty, status, errText)
		}
		if n := live(); n != 4 {
			t.Errorf("%s: %d live records, want 4", empty, n)
		}
	}
	for _, c := range conntest.Changes(t, pool, "shop") {
		if c.Kind == changes.Deleted {
			t.Errorf("%s was deleted despite the guard", c.RecordID)
		}
	}

	conntest.WriteFile(t, filepath.Join(dir, "sources/shop.yaml"), src+"max_delete_fraction: 1\n")
	s = conntest.Syncer(t, pool, dir)
	conntest.SyncNow(t, pool, s)
	if status, errText := conntest.LastRun(t, pool, "shop"); status != "succeeded" {
		t.Fatalf("with max_delete_fraction 1: run %s (%s)", status, errText)
	}
	if n := live(); n != 0 {
		t.Errorf("%d live records, want every one deleted", n)
	}
}

// An http answer with invalid UTF-8 in one item (a Latin-1 é) does not fail
// the run: the bad bytes become U+FFFD, the run counts the item in
// items_repaired, and the other items are untouched.
func TestInvalidUTF8IsReplacedAndCounted(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, "[{\"id\": 1, \"title\": \"caf\xe9\"}, {\"id\": 2, \"title\": \"ok\", \"tags\": [\"\xff\"]}, {\"id\": 3, \"title\": \"fine\"}]")
	}))
	t.Cleanup(srv.Close)
	dir := conntest.WriteConfig(t, map[string]string{
		"sources/shop.yaml": fmt.Sprintf("name: shop\nconnector: http\nrate_limit: {per_second: 1000}\nhttp:\n  url: %s/products\n  snapshot: true\n", srv.URL),
	})
	s := conntest.Syncer(t, pool, dir)
	conntest.SyncNow(t, pool, s)
	if status, errText := conntest.LastRun(t, pool, "shop"); status != "succeeded" {
		t.Fatalf("run %s: %s", status, errText)
	}
	var repaired, created int
	if err := pool.QueryRow(context.Background(), `SELECT items_repaired, items_created FROM sync_runs WHERE source = 'shop'`).Scan(&repaired, &created); err != nil {
		t.Fatal(err)
	}
	if repaired != 2 || created != 3 {
		t.Errorf("items_repaired %d items_created %d, want 2 and 3", repaired, created)
	}
	var title, tags string
	if err := pool.QueryRow(context.Background(), `SELECT title FROM records WHERE source = 'shop' AND record_id = '1'`).Scan(&title); err != nil || title != "caf\uFFFD" {
		t.Errorf("title %q (%v), want caf\uFFFD", title, err)
	}
	if err := pool.QueryRow(context.Background(), `SELECT extra->>'tags' FROM records WHERE source = 'shop' AND record_id = '2'`).Scan(&tags); err != nil || tags != `["`+"\uFFFD"+`"]` {
		t.Errorf("extra.tags %s (%v), want [\"\uFFFD\"]", tags, err)
	}
}
