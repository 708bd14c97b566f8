package file_test

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/lookout-dev/lookout/internal/changes"
	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/connectors"
	"github.com/lookout-dev/lookout/internal/connectors/conntest"
	_ "github.com/lookout-dev/lookout/internal/connectors/file"
	"github.com/lookout-dev/lookout/internal/normalize"
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
	conn := build(t, dir)
	fields := normalize.FieldExprs{Status: "item.state"}
	sync := func() {
		t.Helper()
		r := conntest.Fetch(t, conn, nil)
		if r.Err != nil {
			t.Fatalf("run: %v", r.Err)
		}
		conntest.Mirror(t, pool, "tasks", fields, nil, r)
	}
	sync()

	// t2's line goes; t1 is edited.
	conntest.WriteFile(t, filepath.Join(dir, "data/inbox.jsonl"), `{"id": "t1", "title": "Pay rent", "state": "done"}`+"\n")
	sync()
	// later.json goes: but not every file, so this is a deletion, not a missing mount.
	conntest.WriteFile(t, filepath.Join(dir, "data/later.json"), `[]`)
	sync()

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
	sync()
	chs := conntest.Changes(t, pool, "tasks")
	if last := chs[len(chs)-1]; last.RecordID != "t3" || last.Kind != changes.Created || last.Version != 3 {
		t.Errorf("last change = %+v, want t3 created again at version 3", last)
	}
}

// build loads the configuration in dir and builds its one source.
func build(t *testing.T, dir string) connectors.Connector {
	t.Helper()
	cfg, err := config.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := connectors.New(cfg.Sources[0], connectors.Env{Dir: dir, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return conn
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
