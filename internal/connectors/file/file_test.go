package file_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lookout-dev/lookout/internal/changes"
	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/connectors"
	"github.com/lookout-dev/lookout/internal/connectors/conntest"
	_ "github.com/lookout-dev/lookout/internal/connectors/file"
	"github.com/lookout-dev/lookout/internal/pgtest"
)

const source = `name: tasks
connector: file
rate_limit: {per_second: 100}
file:
  paths: ["data/*.jsonl", "data/*.json"]
fields:
  status: item.state
`

// A file source is a snapshot: a deleted line and a deleted file become
// deleted changes that keep the record's last content; the rest is untouched.
func TestDeletedLinesAndFilesAreTombstoned(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	dir := conntest.WriteConfig(t, map[string]string{
		"sources/tasks.yaml": source,
		"data/inbox.jsonl":   `{"id": "t1", "title": "Pay rent", "state": "open"}` + "\n" + `{"id": "t2", "title": "Call the plumber", "state": "open"}` + "\n",
		"data/later.json":    `[{"id": "t3", "title": "Plan the trip", "state": "open"}]`,
	})
	s := conntest.Syncer(t, pool, dir)
	conntest.SyncNow(t, pool, s)
	if status, errText := conntest.LastRun(t, pool, "tasks"); status != "succeeded" {
		t.Fatalf("first run %s: %s", status, errText)
	}

	// t2's line goes; t1 is edited.
	conntest.WriteFile(t, filepath.Join(dir, "data/inbox.jsonl"), `{"id": "t1", "title": "Pay rent", "state": "done"}`+"\n")
	conntest.SyncNow(t, pool, s)
	// later.json goes: but not every file, so this is a deletion, not a missing mount.
	conntest.WriteFile(t, filepath.Join(dir, "data/later.json"), `[]`)
	conntest.SyncNow(t, pool, s)

	var got []string
	for _, c := range conntest.Changes(t, pool, "tasks") {
		got = append(got, c.RecordID+":"+c.Kind)
		if c.Kind == changes.Deleted {
			if c.Record["title"] == nil || c.Record["title"] == "" {
				t.Errorf("tombstone of %s lost its last content: %v", c.RecordID, c.Record)
			}
		}
	}
	want := []string{"t1:created", "t2:created", "t3:created", "t1:updated", "t2:deleted", "t3:deleted"}
	if !slices.Equal(got, want) {
		t.Errorf("changes = %v, want %v", got, want)
	}
	// A record that comes back is created again, on top of its tombstone.
	conntest.WriteFile(t, filepath.Join(dir, "data/later.json"), `[{"id": "t3", "title": "Plan the trip", "state": "open"}]`)
	conntest.SyncNow(t, pool, s)
	chs := conntest.Changes(t, pool, "tasks")
	if last := chs[len(chs)-1]; last.RecordID != "t3" || last.Kind != changes.Created || last.Version != 3 {
		t.Errorf("last change = %+v, want t3 created again at version 3", last)
	}
}

// A glob that matches nothing fails the run instead of deleting everything.
func TestNoMatchingFileDeletesNothing(t *testing.T) {
	t.Parallel()
	dir := conntest.WriteConfig(t, map[string]string{"sources/tasks.yaml": source, "data/a.jsonl": `{"id": "a"}`})
	cfg, err := config.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := connectors.New(cfg.Sources[0], connectors.Env{Dir: dir, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if r := conntest.Fetch(t, conn, nil); r.Err != nil || !r.Result.Complete || len(r.IDs()) != 1 {
		t.Fatalf("err %v complete %v ids %v", r.Err, r.Result.Complete, r.IDs())
	}
	if err := os.RemoveAll(filepath.Join(dir, "data")); err != nil {
		t.Fatal(err)
	}
	r := conntest.Fetch(t, conn, nil)
	if r.Err == nil || !strings.Contains(r.Err.Error(), "no file matches data/*.jsonl, data/*.json") || r.Result.Complete {
		t.Errorf("err %v complete %v, want a failure naming the globs", r.Err, r.Result.Complete)
	}
}

func TestMalformedLineIsLocated(t *testing.T) {
	t.Parallel()
	dir := conntest.WriteConfig(t, map[string]string{
		"sources/tasks.yaml": source,
		"data/inbox.jsonl":   `{"id": "t1"}` + "\n\n" + `{"id": "t2", "title": "unterminated}` + "\n",
	})
	cfg, err := config.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := connectors.New(cfg.Sources[0], connectors.Env{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	r := conntest.Fetch(t, conn, nil)
	var ie *connectors.ItemError
	if !errors.As(r.Err, &ie) || ie.Loc != filepath.Join("data", "inbox.jsonl")+":3" || len(r.Pages) != 0 {
		t.Errorf("err = %v (pages %d), want an ItemError at data/inbox.jsonl:3 before anything is emitted", r.Err, len(r.Pages))
	}
}

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
	dir := conntest.WriteConfig(t, map[string]string{"sources/tasks.yaml": source, "data/inbox.jsonl": jsonl(ids...)})
	s := conntest.Syncer(t, pool, dir)
	conntest.SyncNow(t, pool, s)
	if status, errText := conntest.LastRun(t, pool, "tasks"); status != "succeeded" {
		t.Fatalf("first run %s: %s", status, errText)
	}

	// Cut short while being rewritten: two old lines and one new one.
	conntest.WriteFile(t, filepath.Join(dir, "data/inbox.jsonl"), jsonl("t1", "t2", "t11"))
	conntest.SyncNow(t, pool, s)
	status, errText := conntest.LastRun(t, pool, "tasks")
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
	conntest.SyncNow(t, pool, s)
	if status, errText := conntest.LastRun(t, pool, "tasks"); status != "failed" || !strings.Contains(errText, "would delete 11 of 11 live records") {
		t.Errorf("empty file: run %s (%s), want failed by the deletion guard", status, errText)
	}

	// The owner says the deletions are real.
	conntest.WriteFile(t, filepath.Join(dir, "sources/tasks.yaml"), source+"max_delete_fraction: 1\n")
	s = conntest.Syncer(t, pool, dir)
	conntest.SyncNow(t, pool, s)
	if status, errText := conntest.LastRun(t, pool, "tasks"); status != "succeeded" {
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
	dir := conntest.WriteConfig(t, map[string]string{"sources/tasks.yaml": source, "data/inbox.jsonl": jsonl("a", "b", "c", "d", "e", "f", "g", "h")})
	s := conntest.Syncer(t, pool, dir)
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
		conntest.SyncNow(t, pool, s)
		if status, errText := conntest.LastRun(t, pool, "tasks"); status != "succeeded" {
			t.Fatalf("%q: run %s (%s), want succeeded", step.lines, status, errText)
		}
		if n := liveRecords(t, pool, "tasks"); n != step.live {
			t.Fatalf("%q: %d live records, want %d", step.lines, n, step.live)
		}
	}
	// 3 of 3: at the floor and more than half.
	conntest.WriteFile(t, filepath.Join(dir, "data/inbox.jsonl"), "")
	conntest.SyncNow(t, pool, s)
	if status, errText := conntest.LastRun(t, pool, "tasks"); status != "failed" || !strings.Contains(errText, "would delete 3 of 3 live records") {
		t.Errorf("3 of 3: run %s (%s), want failed by the guard", status, errText)
	}
}

// Text PostgreSQL cannot store (invalid UTF-8, like a Latin-1 é; NUL) is
// replaced by U+FFFD and counted in the run, which succeeds; the other
// items are untouched.
func TestInvalidUTF8IsReplacedAndCounted(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	dir := conntest.WriteConfig(t, map[string]string{
		"sources/tasks.yaml": source,
		"data/inbox.jsonl": "{\"id\": \"t1\", \"title\": \"caf\xe9 au lait\", \"state\": \"open\"}\n" +
			"{\"id\": \"t2\", \"title\": \"Plain\", \"note\": \"bad \xff in extra\"}\n" +
			`{"id": "t3", "title": "nul \u0000 here"}` + "\n" +
			`{"id": "t4", "title": "lone \ud800 surrogate", "emoji": "\ud83d\ude00"}` + "\n" +
			`{"id": "t5", "title": "fine \ufffd already"}` + "\n",
		"data/later.json": "[{\"id\": \"t6\", \"title\": \"na\xefve\"}]",
	})
	s := conntest.Syncer(t, pool, dir)
	conntest.SyncNow(t, pool, s)
	if status, errText := conntest.LastRun(t, pool, "tasks"); status != "succeeded" {
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
