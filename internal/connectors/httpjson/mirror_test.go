package httpjson_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/lookout-dev/lookout/internal/changes"
	"github.com/lookout-dev/lookout/internal/connectors"
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
func TestSnapshotTombstones(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	snap := newFakeAPI(t, "link", 5)
	inc := newFakeAPI(t, "link", 5)
	snapConn := build(t, fmt.Sprintf("  url: %s\n  items: body.data\n  pagination: link\n  snapshot: true\n", snap.URL()))
	incConn := build(t, fmt.Sprintf("  url: %s\n  items: body.data\n  pagination: link\n  since: updated_since\n", inc.URL()))
	run := func(name string, conn connectors.Connector, cursor json.RawMessage) json.RawMessage {
		t.Helper()
		r := conntest.Fetch(t, conn, cursor)
		if r.Err != nil {
			t.Fatalf("%s: %v", name, r.Err)
		}
		conntest.Mirror(t, pool, name, normalize.FieldExprs{}, nil, r)
		return r.Cursor(cursor)
	}
	snapCur, incCur := run("snap", snapConn, nil), run("inc", incConn, nil)
	snap.remove(2)
	inc.remove(2)
	run("snap", snapConn, snapCur)
	run("inc", incConn, incCur)

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
