package normalize

import (
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// changedFieldsReference is ChangedFields as it was before its fast paths:
// the reference its answers must equal (they are stored with every change).
func (h *Hasher) changedFieldsReference(old, new map[string]any) []string {
	var out []string
	if old == nil {
		for _, name := range fieldNames {
			if !h.volatile[name] && !isEmpty(new[name]) {
				out = append(out, name)
			}
		}
		extra, _ := new["extra"].(map[string]any)
		for _, k := range slices.Sorted(maps.Keys(extra)) {
			if !h.volatile["extra."+k] {
				out = append(out, "extra."+k)
			}
		}
		return out
	}
	for _, name := range fieldNames {
		if h.volatile[name] {
			continue
		}
		if !equalJSON(old[name], new[name]) {
			out = append(out, name)
		}
	}
	oe, _ := old["extra"].(map[string]any)
	ne, _ := new["extra"].(map[string]any)
	keys := map[string]bool{}
	for k := range oe {
		keys[k] = true
	}
	for k := range ne {
		keys[k] = true
	}
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		if h.volatile["extra."+k] {
			continue
		}
		if !equalJSON(oe[k], ne[k]) {
			out = append(out, "extra."+k)
		}
	}
	return out
}

// TestChangedFieldsMatchesReference compares ChangedFields with the
// reference on every pair of varied records (and nil, a created record),
// with and without volatile paths, fresh and read back from JSON.
func TestChangedFieldsMatchesReference(t *testing.T) {
	t.Parallel()
	items := []string{
		`{"id": "a"}`,
		`{"id": "a", "title": "t", "status": "open", "labels": ["x"], "n": 1, "views": 3}`,
		`{"id": "a", "title": "t", "status": "closed", "labels": ["x", "y"], "n": 1, "m": 2, "views": 4}`,
		`{"id": "a", "title": "", "body": "b", "labels": [], "n": 1.0, "meta": {"k": [1, 2]}, "updated_at": "2026-01-01T00:00:00Z"}`,
		`{"id": "a", "title": "t", "body": "b", "n": 2, "meta": {"k": [1, 3]}, "updated_at": "2026-01-02T00:00:00Z", "created_at": "2026-01-01"}`,
		"{\"id\": \"a\", \"title\": \"bad \xff\", \"extra_null\": null, \"empty\": \"\"}",
		"{\"id\": \"a\", \"title\": \"bad \xfe\"}",
		`{"id": "a", "title": "bad", "extra_null": null, "empty": "", "a_very_long_extra_key_name_that_exceeds_the_path_buffer_of_sixty_four_bytes": 1}`,
	}
	for _, volatile := range [][]string{nil, {"id", "title"}, {"updated_at", "extra.views", "extra.meta", "extra.a_very_long_extra_key_name_that_exceeds_the_path_buffer_of_sixty_four_bytes"}} {
		m, err := NewMapper(FieldExprs{}, volatile)
		if err != nil {
			t.Fatal(err)
		}
		h := m.Hasher()
		var fields []map[string]any
		for _, s := range items {
			v, err := Decode([]byte(s))
			if err != nil {
				t.Fatal(err)
			}
			r, err := m.Map(v, nil)
			if err != nil {
				t.Fatal(err)
			}
			fields = append(fields, r.Fields())
			back, err := Decode(Canonical(r.Fields()))
			if err != nil {
				t.Fatal(err)
			}
			fields = append(fields, back.(map[string]any))
		}
		for i, a := range append([]map[string]any{nil}, fields...) {
			for j, b := range fields {
				got, want := h.ChangedFields(a, b), h.changedFieldsReference(a, b)
				if !reflect.DeepEqual(got, want) {
					t.Errorf("volatile %v, pair %d/%d: ChangedFields = %#v, want %#v", volatile, i, j, got, want)
				}
			}
		}
	}
}

// hashFieldsReference is how the hash of a record with volatile paths was
// computed before appendHashed: the canonical JSON of its fields, cloned,
// without the volatile paths.
func (h *Hasher) hashFieldsReference(f map[string]any) string {
	f = maps.Clone(f)
	extra, _ := f["extra"].(map[string]any)
	if extra != nil {
		extra = maps.Clone(extra)
		f["extra"] = extra
	}
	for p := range h.volatile {
		if sub, ok := strings.CutPrefix(p, "extra."); ok {
			delete(extra, sub)
		} else {
			delete(f, p)
		}
	}
	return hexSum(Canonical(f))
}

// TestVolatileHashMatchesReference compares the hash of records with
// volatile paths with the reference, for several sets of paths.
func TestVolatileHashMatchesReference(t *testing.T) {
	t.Parallel()
	items := []string{
		`{"id": "a"}`,
		`{"id": 7, "title": "t", "body": "b\n\"q\"", "url": "u", "author": "x", "status": "open", "labels": ["x", "y"], "n": 1, "views": 3,
		  "created_at": "2026-01-02T03:04:05.123+02:00", "updated_at": "2026-01-02T03:04:05Z", "meta": {"k": [1, 2.5, null]}, "x.y": true}`,
		`{"id": "b", "labels": [], "views": null, "meta": {}}`,
		"{\"id\": \"c\", \"title\": \"bad \xff\", \"views\": \"\\u0000\"}",
	}
	sets := [][]string{
		{"updated_at"}, {"extra.views"}, {"extra.views", "extra.meta", "extra.x.y", "extra.none"},
		{"id", "title", "body", "url", "author", "status", "labels", "created_at", "updated_at"},
		{"labels", "extra.n", "extra.views", "extra.meta", "extra.x.y"},
	}
	for _, volatile := range sets {
		m, err := NewMapper(FieldExprs{}, volatile)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range items {
			v, err := Decode([]byte(s))
			if err != nil {
				t.Fatal(err)
			}
			r, err := m.Map(v, nil)
			if err != nil {
				t.Fatal(err)
			}
			if want := m.Hasher().hashFieldsReference(r.Fields()); r.Hash != want {
				t.Errorf("volatile %v, item %s: hash %s, want %s", volatile, s, r.Hash, want)
			}
			r.Extra = nil // as a record read back without extra
			if got, want := m.Hasher().Hash(&r), m.Hasher().hashFieldsReference(r.Fields()); got != want {
				t.Errorf("volatile %v, item %s without extra: hash %s, want %s", volatile, s, got, want)
			}
		}
	}
}
