package normalize_test

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lookout-dev/lookout/internal/normalize"
)

var updateGolden = flag.Bool("update-golden", false, "rewrite testdata/golden/*.txt from the current code")

// goldenMappers are the mappings the golden items go through: the default
// one (the bench's), volatile paths, and expressions for every field.
var goldenMappers = []struct {
	name     string
	fields   normalize.FieldExprs
	volatile []string
}{
	{name: "default"},
	{name: "volatile", volatile: []string{"updated_at", "extra.views", "extra.meta"}},
	{name: "exprs", fields: normalize.FieldExprs{
		ID: "item.number", Title: "item.subject", Status: "item.state", Labels: "item.tags",
		UpdatedAt: "item.modified", Author: `item.user?.login ?? ""`,
	}},
	{name: "extra-exprs", fields: normalize.FieldExprs{
		Extra: map[string]string{
			"team": `item.owner?.team`, "n": `len(item.tags ?? [])`, "ints": `[1, 2, 3]`,
			"copy": `item.meta`, "label": `"x-" + string(item.id)`,
		},
	}, volatile: []string{"extra.n"}},
}

// goldenItems are varied items, each mapped by every golden mapper: the
// bench's tickets, nested objects, unicode and escapes, numbers of every
// kind, nulls, empty strings, labels, times in several formats, volatile
// keys, and text PostgreSQL cannot store.
var goldenItems = append(benchTickets(0, 6), []string{
	`{"id": "n1", "title": "nested", "meta": {"z": {"b": [1, {"y": null, "x": "é"}], "a": {}}, "a": []}, "views": 12}`,
	`{"id": "u1", "title": "üñíçødé 日本語 🎉 \u00e9\u2028\u2029", "body": "line1\nline2\ttab \"quoted\" back\\slash \u0001 \u001f <b>&amp;</b> \/ slash", "author": "Zoë"}`,
	`{"id": "u2", "title": "pair \ud83d\ude00 end", "body": "lone \ud800 surrogate", "x": "\uDC00"}`,
	`{"id": "u3", "title": "nul \u0000 inside", "k\u0000ey": "v"}`,
	`{"id": 9007199254740993, "big": 12345678901234567890, "neg": -42, "zero": 0, "negzero": -0.0, "f": 0.1, "g": 1.5e-7, "h": 1e21, "i": 1e300, "j": 123456789.125, "k": 2.0, "l": -1e-6, "m": 100000000000000000000}`,
	`{"id": 3.5, "title": null, "body": "", "url": null, "labels": null, "created_at": null, "extra_null": null, "empty": ""}`,
	`{"id": "l1", "labels": ["b", "a", "b"]}`,
	`{"id": "l2", "labels": [{"name": "bug", "color": "red"}, {"name": "p1"}]}`,
	`{"id": "l3", "labels": "single"}`,
	`{"id": "l4", "labels": [1, 2.5, true, "x"]}`,
	`{"id": "l5", "labels": []}`,
	`{"id": "t1", "created_at": "2026-03-04T05:06:07+02:00", "updated_at": "2026-03-04T05:06:07.123456789Z"}`,
	`{"id": "t2", "created_at": "Wed, 04 Mar 2026 05:06:07 +0100", "updated_at": "Wed, 04 Mar 2026 05:06:07 GMT"}`,
	`{"id": "t3", "created_at": "2026-03-04 05:06:07", "updated_at": "2026-03-04 05:06:07+05:30"}`,
	`{"id": "t4", "created_at": "2026-03-04", "updated_at": "2026-03-04T05:06:07"}`,
	`{"id": "t5", "created_at": 1772600000, "updated_at": 1772600000.25}`,
	`{"id": "v1", "title": "volatile", "views": 99, "updated_at": "2026-01-01T00:00:00Z", "meta": {"etag": "x"}}`,
	`{"id": "s1", "status": 3, "url": true, "author": 1.5, "title": 7}`,
	`{"number": 17, "subject": "mapped", "state": "open", "tags": ["a", "b"], "modified": "2026-05-06T07:08:09Z", "user": {"login": "ann"}, "owner": {"team": "core"}, "meta": {"k": [1, 2]}, "id": "orig"}`,
	`{"number": 18, "subject": "mapped", "tags": [{"name": "x"}], "owner": {"team": null}}`,
	`{"id": "e1"}`,
	`{"id": "e2", "extra": {"nested": "key named extra"}, "id2": "x", "ID": "upper"}`,
}...)

// benchTickets renders tickets n0..n1-1 as internal/bench NewAPI does.
func benchTickets(n0, n1 int) []string {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var out []string
	for i := n0; i < n1; i++ {
		ts := base.Add(time.Duration(i) * time.Minute).Format(time.RFC3339)
		out = append(out, fmt.Sprintf(`{"id":%d,"title":"Ticket %d: printer on floor %d is jammed again","body":"Reported by the front desk. The printer shows error E%d and the tray is stuck; please check the rollers and replace the toner if needed.","url":"https://tickets.example.com/t/%d","author":"user%d","status":"%s","labels":["facilities","floor-%d"],"created_at":"%s","updated_at":"%s","priority":%d,"assignee":"agent%d"}`,
			i, i, i%12, i%97, i, i%500, []string{"open", "pending", "closed"}[i%3], i%12, ts, ts, i%4, i%40))
	}
	return out
}

// goldenRaws are items handed over with their raw JSON (as the github and
// notion connectors do), including raw text PostgreSQL cannot store.
var goldenRaws = []string{
	`{"id": "r1", "b": 1, "a": "as received"}`,
	`{"id":"r2","title":"bad ` + "\xff\xfe" + ` utf8"}`,
	`{"id": "r3", "title": "nul \u0000"}`,
	`{"id": "r4", "title": "lone \ud800"}`,
	`{"id": "r5", "title": "pair \uD83D\uDE00"}`,
	`{"id": "r6", "title": "` + "raw \xc3\x28 invalid" + `", "n": 1}`,
}

// TestGolden pins the content hash, the snapshot, the extra JSON and the
// raw JSON of varied items to the values stored by earlier versions: the
// hash is a stored contract (a changed hash makes every record look updated
// after an upgrade), and the snapshot, extra and raw are what records hold.
// Regenerate only on purpose: go test -run TestGolden -update-golden.
func TestGolden(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	for _, gm := range goldenMappers {
		m, err := normalize.NewMapper(gm.fields, gm.volatile)
		if err != nil {
			t.Fatal(err)
		}
		for i, item := range goldenItems {
			v, err := normalize.Decode([]byte(item))
			if err != nil {
				t.Fatalf("decode item %d: %v", i, err)
			}
			r, err := m.Map(v, nil)
			writeGolden(&b, fmt.Sprintf("%s item %d", gm.name, i), r, err)
			if err == nil {
				checkConsistent(t, fmt.Sprintf("%s item %d", gm.name, i), m.Hasher(), r)
			}
		}
		for i, raw := range goldenRaws {
			v, err := normalize.Decode([]byte(raw))
			if err != nil {
				t.Fatalf("decode raw %d: %v", i, err)
			}
			r, err := m.Map(v, []byte(raw))
			writeGolden(&b, fmt.Sprintf("%s raw %d", gm.name, i), r, err)
			if err == nil {
				checkConsistent(t, fmt.Sprintf("%s raw %d", gm.name, i), m.Hasher(), r)
			}
		}
	}
	// A whole page decoded at once, as the http connector reads it.
	page := `{"data":[` + strings.Join(goldenItems, ",") + `],"links":{"next":null}}`
	doc, err := normalize.Decode([]byte(page))
	if err != nil {
		t.Fatal(err)
	}
	m, err := normalize.NewMapper(normalize.FieldExprs{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range doc.(map[string]any)["data"].([]any) {
		r, err := m.Map(v, nil)
		writeGolden(&b, fmt.Sprintf("page item %d", i), r, err)
	}
	checkGolden(t, "records.txt", b.String())
}

// checkConsistent checks a mapped record against the generic encodings:
// its snapshot is the canonical JSON of its fields, its extra that of its
// extra object, and hashing it again from its fields gives its hash.
func checkConsistent(t *testing.T, name string, h *normalize.Hasher, r normalize.Record) {
	t.Helper()
	if want := normalize.Canonical(r.Fields()); string(r.Snapshot) != string(want) {
		t.Errorf("%s: snapshot\n got %s\nwant %s", name, r.Snapshot, want)
	}
	if want := normalize.Canonical(r.Fields()["extra"]); string(r.ExtraJSON) != string(want) {
		t.Errorf("%s: extra %s, want %s", name, r.ExtraJSON, want)
	}
	again := r
	again.Snapshot, again.ExtraJSON, again.Hash = nil, nil, ""
	if h.Hash(&again); again.Hash != r.Hash || string(again.Snapshot) != string(r.Snapshot) {
		t.Errorf("%s: Hasher.Hash gives %s, Map gave %s", name, again.Hash, r.Hash)
	}
}

func writeGolden(b *strings.Builder, name string, r normalize.Record, err error) {
	if err != nil {
		fmt.Fprintf(b, "%s\n  error %q\n", name, err)
		return
	}
	fmt.Fprintf(b, "%s\n  hash %s\n  snapshot %q\n  extra %q\n  raw %q\n  repaired %v\n", name, r.Hash, r.Snapshot, r.ExtraJSON, r.Raw, r.Repaired)
}

// checkGolden compares got with testdata/golden/<name>, line by line.
func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", "golden", name)
	if *updateGolden {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden file: %v", err)
	}
	if got == string(want) {
		return
	}
	gl, wl := strings.Split(got, "\n"), strings.Split(string(want), "\n")
	for i := range max(len(gl), len(wl)) {
		var g, w string
		if i < len(gl) {
			g = gl[i]
		}
		if i < len(wl) {
			w = wl[i]
		}
		if g != w {
			// Name the record: the nearest preceding unindented line.
			rec := ""
			for j := i; j >= 0 && j < len(wl); j-- {
				if !strings.HasPrefix(wl[j], " ") {
					rec = wl[j]
					break
				}
			}
			t.Fatalf("%s differs at line %d (%s):\n got: %s\nwant: %s", path, i+1, rec, g, w)
		}
	}
}

// TestMapConcurrent maps items of many shapes from several goroutines at
// once through one mapper (the key order cache, the mapper's layout and
// the scratch buffers are shared) and checks every record against the one
// mapped alone.
func TestMapConcurrent(t *testing.T) {
	t.Parallel()
	m, err := normalize.NewMapper(normalize.FieldExprs{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var items []any
	var want []normalize.Record
	for _, s := range append(benchTickets(0, 20), goldenItems...) {
		v, err := normalize.Decode([]byte(s))
		if err != nil {
			t.Fatal(err)
		}
		r, err := m.Map(v, nil)
		if err != nil {
			continue
		}
		items, want = append(items, v), append(want, r)
	}
	errs := make(chan error, 4)
	for g := range 4 {
		go func() {
			for n := range 200 {
				i := (n*7 + g*13) % len(items)
				r, err := m.Map(items[i], nil)
				if err == nil && (r.Hash != want[i].Hash || string(r.Snapshot) != string(want[i].Snapshot) || string(r.Raw) != string(want[i].Raw)) {
					err = fmt.Errorf("item %d mapped concurrently: hash %s, want %s", i, r.Hash, want[i].Hash)
				}
				if err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}
