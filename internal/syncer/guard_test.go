package syncer_test

// Syncer behaviour seen through the real file and http connectors: the
// deletion guard of snapshot sources and the repair of text PostgreSQL
// cannot store.

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lookout-dev/lookout/internal/changes"
	"github.com/lookout-dev/lookout/internal/connectors/conntest"
	_ "github.com/lookout-dev/lookout/internal/connectors/file"
	_ "github.com/lookout-dev/lookout/internal/connectors/httpjson"
	"github.com/lookout-dev/lookout/internal/pgtest"
	"github.com/lookout-dev/lookout/internal/syncer/syncertest"
)

const fileSource = `name: tasks
connector: file
rate_limit: {per_second: 100}
file:
  paths: ["data/*.jsonl", "data/*.json"]
fields:
  status: item.state
`

// liveRecords counts source's records that are not deleted.
func liveRecords(t *testing.T, pool *pgxpool.Pool, source string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM records WHERE source = $1 AND deleted_at IS NULL`, source).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func jsonl(ids ...string) string {
	var b strings.Builder
	for _, id := range ids {
		fmt.Fprintf(&b, `{"id": %q, "title": "Task %s", "state": "open"}`+"\n", id, id)
	}
	return b.String()
}

// A truncated JSONL file would delete most records: the deletion guard
// fails the run and deletes nothing, while what the run created stays;
// max_delete_fraction: 1 lets the deletions through.
func TestTruncatedFileDeletesNothing(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ids := []string{"t1", "t2", "t3", "t4", "t5", "t6", "t7", "t8", "t9", "t10"}
	dir := conntest.WriteConfig(t, map[string]string{"sources/tasks.yaml": fileSource, "data/inbox.jsonl": jsonl(ids...)})
	s := syncertest.New(t, pool, dir)
	syncertest.SyncNow(t, pool, s)
	if status, errText := syncertest.LastRun(t, pool, "tasks"); status != "succeeded" {
		t.Fatalf("first run %s: %s", status, errText)
	}

	// Cut short while being rewritten: two old lines and one new one.
	conntest.WriteFile(t, filepath.Join(dir, "data/inbox.jsonl"), jsonl("t1", "t2", "t11"))
	syncertest.SyncNow(t, pool, s)
	status, errText := syncertest.LastRun(t, pool, "tasks")
	if status != "failed" {
		t.Fatalf("run %s, want failed by the deletion guard", status)
	}
	for _, want := range []string{"source tasks", "would delete 8 of 11 live records", "max_delete_fraction 0.5", filepath.Join("sources", "tasks.yaml"), "nothing was deleted"} {
		if !strings.Contains(errText, want) {
			t.Errorf("error %q does not say %q", errText, want)
		}
	}
	for _, c := range conntest.Changes(t, pool, "tasks") {
		if c.Kind == changes.Deleted {
			t.Errorf("%s was deleted despite the guard", c.RecordID)
		}
	}
	if n := liveRecords(t, pool, "tasks"); n != 11 {
		t.Errorf("%d live records, want the 10 old ones and t11, created by the refused run", n)
	}

	// An empty file: the same.
	conntest.WriteFile(t, filepath.Join(dir, "data/inbox.jsonl"), "")
	syncertest.SyncNow(t, pool, s)
	if status, errText := syncertest.LastRun(t, pool, "tasks"); status != "failed" || !strings.Contains(errText, "would delete 11 of 11 live records") {
		t.Errorf("empty file: run %s (%s), want failed by the deletion guard", status, errText)
	}

	// The owner says the deletions are real.
	conntest.WriteFile(t, filepath.Join(dir, "sources/tasks.yaml"), fileSource+"max_delete_fraction: 1\n")
	s = syncertest.New(t, pool, dir)
	syncertest.SyncNow(t, pool, s)
	if status, errText := syncertest.LastRun(t, pool, "tasks"); status != "succeeded" {
		t.Fatalf("with max_delete_fraction 1: run %s (%s), want succeeded", status, errText)
	}
	if n := liveRecords(t, pool, "tasks"); n != 0 {
		t.Errorf("%d live records, want every one deleted", n)
	}
}

// The guard leaves small sources alone: deleting fewer than
// config.MinGuardedDeletes records is never a mass deletion, and deleting
// half of the records is not more than the default fraction.
func TestDeletionGuardFloor(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	dir := conntest.WriteConfig(t, map[string]string{"sources/tasks.yaml": fileSource, "data/inbox.jsonl": jsonl("a", "b", "c", "d", "e", "f", "g", "h")})
	s := syncertest.New(t, pool, dir)
	for _, step := range []struct {
		lines string
		live  int
	}{
		{jsonl("a", "b", "c", "d"), 4}, // 4 of 8: not more than half
		{jsonl("a", "b"), 2},           // 2 of 4: half
		{"", 0},                        // 2 of 2: fewer than the floor
		{jsonl("x", "y", "z"), 3},
	} {
		conntest.WriteFile(t, filepath.Join(dir, "data/inbox.jsonl"), step.lines)
		syncertest.SyncNow(t, pool, s)
		if status, errText := syncertest.LastRun(t, pool, "tasks"); status != "succeeded" {
			t.Fatalf("%q: run %s (%s), want succeeded", step.lines, status, errText)
		}
		if n := liveRecords(t, pool, "tasks"); n != step.live {
			t.Fatalf("%q: %d live records, want %d", step.lines, n, step.live)
		}
	}
	// 3 of 3: at the floor and more than half.
	conntest.WriteFile(t, filepath.Join(dir, "data/inbox.jsonl"), "")
	syncertest.SyncNow(t, pool, s)
	if status, errText := syncertest.LastRun(t, pool, "tasks"); status != "failed" || !strings.Contains(errText, "would delete 3 of 3 live records") {
		t.Errorf("3 of 3: run %s (%s), want failed by the guard", status, errText)
	}
}

// Text PostgreSQL cannot store (invalid UTF-8, like a Latin-1 é; NUL) is
// replaced by U+FFFD and counted in the run, which succeeds; the other
// items are untouched.
func TestFileInvalidUTF8IsReplacedAndCounted(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	dir := conntest.WriteConfig(t, map[string]string{
		"sources/tasks.yaml": fileSource,
		"data/inbox.jsonl": "{\"id\": \"t1\", \"title\": \"caf\xe9 au lait\", \"state\": \"open\"}\n" +
			"{\"id\": \"t2\", \"title\": \"Plain\", \"note\": \"bad \xff in extra\"}\n" +
			`{"id": "t3", "title": "nul \u0000 here"}` + "\n" +
			`{"id": "t4", "title": "lone \ud800 surrogate", "emoji": "\ud83d\ude00"}` + "\n" +
			`{"id": "t5", "title": "fine \ufffd already"}` + "\n",
		"data/later.json": "[{\"id\": \"t6\", \"title\": \"na\xefve\"}]",
	})
	s := syncertest.New(t, pool, dir)
	syncertest.SyncNow(t, pool, s)
	if status, errText := syncertest.LastRun(t, pool, "tasks"); status != "succeeded" {
		t.Fatalf("run %s: %s", status, errText)
	}
	var repaired, created int
	if err := pool.QueryRow(context.Background(), `SELECT items_repaired, items_created FROM sync_runs WHERE source = 'tasks'`).Scan(&repaired, &created); err != nil {
		t.Fatal(err)
	}
	if repaired != 4 || created != 6 {
		t.Errorf("items_repaired %d items_created %d, want 4 (t1, t2, t3, t6) and 6", repaired, created)
	}
	want := map[string]string{
		"t1": "caf\uFFFD au lait", "t2": "Plain", "t3": "nul \uFFFD here", "t4": "lone \uFFFD surrogate",
		"t5": "fine \uFFFD already", "t6": "na\uFFFDve",
	}
	rows, err := pool.Query(context.Background(), `SELECT record_id, title, coalesce(extra->>'note', ''), raw::text FROM records WHERE source = 'tasks'`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var id, title, note, raw string
		if err := rows.Scan(&id, &title, &note, &raw); err != nil {
			t.Fatal(err)
		}
		if title != want[id] {
			t.Errorf("%s: title %q, want %q", id, title, want[id])
		}
		if id == "t2" && note != "bad \uFFFD in extra" {
			t.Errorf("t2: extra.note %q", note)
		}
		if id == "t4" && !strings.Contains(raw, "\U0001F600") {
			t.Errorf("t4: raw %s lost the emoji", raw)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
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
	s := syncertest.New(t, pool, dir)
	syncertest.SyncNow(t, pool, s)
	if status, errText := syncertest.LastRun(t, pool, "shop"); status != "succeeded" {
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
		syncertest.SyncNow(t, pool, s)
		status, errText := syncertest.LastRun(t, pool, "shop")
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
	s = syncertest.New(t, pool, dir)
	syncertest.SyncNow(t, pool, s)
	if status, errText := syncertest.LastRun(t, pool, "shop"); status != "succeeded" {
		t.Fatalf("with max_delete_fraction 1: run %s (%s)", status, errText)
	}
	if n := live(); n != 0 {
		t.Errorf("%d live records, want every one deleted", n)
	}
}

// An http answer with invalid UTF-8 in one item (a Latin-1 é) does not fail
// the run: the bad bytes become U+FFFD, the run counts the item in
// items_repaired, and the other items are untouched.
func TestHTTPInvalidUTF8IsReplacedAndCounted(t *testing.T) {
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
	s := syncertest.New(t, pool, dir)
	syncertest.SyncNow(t, pool, s)
	if status, errText := syncertest.LastRun(t, pool, "shop"); status != "succeeded" {
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
