package normalize_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/lookout-dev/lookout/internal/normalize"
)

func mustDecode(t *testing.T, s string) any {
	t.Helper()
	v, err := normalize.Decode([]byte(s))
	if err != nil {
		t.Fatalf("decode %s: %v", s, err)
	}
	return v
}

func mapOne(t *testing.T, m *normalize.Mapper, s string) normalize.Record {
	t.Helper()
	r, err := m.Map(mustDecode(t, s), nil)
	if err != nil {
		t.Fatalf("map %s: %v", s, err)
	}
	return r
}

func TestHashIgnoresKeyOrder(t *testing.T) {
	t.Parallel()
	m, err := normalize.NewMapper(normalize.FieldExprs{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	a := mapOne(t, m, `{"id": 1, "title": "x", "extra_b": {"y": 1, "z": [1, 2]}, "extra_a": true}`)
	b := mapOne(t, m, `{"extra_a": true, "extra_b": {"z": [1, 2], "y": 1}, "title": "x", "id": 1}`)
	if a.Hash != b.Hash {
		t.Errorf("hashes differ for the same content in another key order: %s vs %s", a.Hash, b.Hash)
	}
	c := mapOne(t, m, `{"id": 1, "title": "x", "extra_b": {"y": 2, "z": [1, 2]}, "extra_a": true}`)
	if c.Hash == a.Hash {
		t.Error("hash did not change when a nested value changed")
	}
	if len(a.Hash) != 64 {
		t.Errorf("hash %q is not hex SHA-256", a.Hash)
	}
}

func TestHashIgnoresVolatile(t *testing.T) {
	t.Parallel()
	m, err := normalize.NewMapper(normalize.FieldExprs{}, []string{"updated_at", "extra.views"})
	if err != nil {
		t.Fatal(err)
	}
	a := mapOne(t, m, `{"id": "a", "title": "t", "views": 10, "updated_at": "2026-01-01T00:00:00Z"}`)
	b := mapOne(t, m, `{"id": "a", "title": "t", "views": 99, "updated_at": "2026-02-01T00:00:00Z"}`)
	if a.Hash != b.Hash {
		t.Error("volatile fields changed the hash")
	}
	c := mapOne(t, m, `{"id": "a", "title": "T", "views": 99}`)
	if c.Hash == a.Hash {
		t.Error("a non-volatile change did not change the hash")
	}
	if got := m.Hasher().ChangedFields(a.Fields(), c.Fields()); !reflect.DeepEqual(got, []string{"title"}) {
		t.Errorf("changed fields = %v, want [title] (volatile left out)", got)
	}
}

func TestVolatileUnknownPath(t *testing.T) {
	t.Parallel()
	_, err := normalize.NewMapper(normalize.FieldExprs{}, []string{"view_count"})
	want := `volatile: "view_count" is not a record field (one of id, title, body, url, author, status, labels, created_at, updated_at, or extra.<key>)`
	if err == nil || err.Error() != want {
		t.Errorf("error = %v, want %s", err, want)
	}
}

func TestMapperExpressions(t *testing.T) {
	t.Parallel()
	m, err := normalize.NewMapper(normalize.FieldExprs{
		ID:        `item.key`,
		Title:     `item.summary + " (" + item.project.name + ")"`,
		Status:    `item.state`,
		Labels:    `map(item.tags, .label)`,
		UpdatedAt: `item.modified`,
		Extra:     map[string]string{"priority": `item.prio ?? 3`},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := mapOne(t, m, `{"key": 12345678901234567, "summary": "Fix", "project": {"name": "core"}, "state": "open",
		"tags": [{"label": "bug"}, {"label": "p1"}], "modified": "2026-03-04T05:06:07+02:00"}`)
	if r.ID != "12345678901234567" {
		t.Errorf("id = %q: large integer ids must stay exact", r.ID)
	}
	if r.Title != "Fix (core)" || r.Status != "open" || !reflect.DeepEqual(r.Labels, []string{"bug", "p1"}) {
		t.Errorf("record = %+v", r)
	}
	if r.UpdatedAt == nil || r.UpdatedAt.Format("2006-01-02T15:04:05Z07:00") != "2026-03-04T03:06:07Z" {
		t.Errorf("updated_at = %v, want 2026-03-04T03:06:07Z", r.UpdatedAt)
	}
	if r.Extra["priority"] != 3 && r.Extra["priority"] != int64(3) {
		t.Errorf("extra.priority = %#v, want 3", r.Extra["priority"])
	}
}

func TestDefaultMappingPutsRestInExtra(t *testing.T) {
	t.Parallel()
	m, err := normalize.NewMapper(normalize.FieldExprs{Status: "item.state"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := mapOne(t, m, `{"id": "a", "title": "t", "state": "open", "price": 9.5}`)
	if r.Status != "open" {
		t.Errorf("status = %q", r.Status)
	}
	if _, ok := r.Extra["state"]; ok {
		t.Error("a key consumed by a plain item.key mapping is repeated in extra")
	}
	if r.Extra["price"] != 9.5 {
		t.Errorf("extra = %v, want price 9.5", r.Extra)
	}
}

// TestMapErrors checks the exact text of mapping problems: each names the
// field, where its value came from (fields.<name> and its expression, or
// the item's key of the same name) and what kind the value is.
func TestMapErrors(t *testing.T) {
	t.Parallel()
	plain, err := normalize.NewMapper(normalize.FieldExprs{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	mapped, err := normalize.NewMapper(normalize.FieldExprs{ID: "item.number", Status: "item.state"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		m          *normalize.Mapper
		item, want string
	}{
		{plain, `{"title": "no id"}`, `item has no id: the item has no "id" key (map one with fields.id, e.g. fields.id: item.number)`},
		{plain, `{"id": ""}`, `item has no id: the item's "id" is an empty string (map another key with fields.id)`},
		{plain, `{"id": {"x": 1}}`, `item has no id: the item's "id" is an object, not a string or a number`},
		{plain, `"just text"`, `item has no id: the item is a string, not an object (map the id with fields.id)`},
		{mapped, `{"id": "a"}`, `item has no id: fields.id (item.number) is null`},
		{mapped, `{"number": " "}`, `item has no id: fields.id (item.number) is an empty string`},
		{mapped, `{"number": [1]}`, `item has no id: fields.id (item.number) is a list, not a string or a number`},
		{plain, `{"id": "a", "updated_at": "yesterday"}`, `record "a" field updated_at: "yesterday" is not a time (want RFC 3339, e.g. 2026-01-02T15:04:05Z)`},
		{plain, `{"id": "a", "title": ["x"]}`, `record "a" field title: the item's "title" is a list, not a string (map the field with fields.title)`},
		{plain, `{"id": "a", "status": {"name": "open"}}`, `record "a" field status: the item's "status" is an object, not a string (map the field with fields.status, e.g. item.status.name)`},
		{mapped, `{"number": 7, "state": {"name": "open"}}`, `record "7" field status: fields.status (item.state) is an object, not a string`},
		{plain, `{"id": "a", "labels": {"bug": true}}`, `record "a" field labels: the item's "labels" is an object, not a list of strings (map the field with fields.labels)`},
		{plain, `{"id": "a", "created_at": true}`, `record "a" field created_at: the item's "created_at" is a boolean, not a time (map the field with fields.created_at)`},
	}
	for _, tt := range tests {
		_, err := tt.m.Map(mustDecode(t, tt.item), nil)
		if err == nil || err.Error() != tt.want {
			t.Errorf("Map(%s) error:\n got: %v\nwant: %s", tt.item, err, tt.want)
		}
		if strings.Contains(tt.want, "no id") && !errors.Is(err, normalize.ErrNoID) {
			t.Errorf("Map(%s) error is not ErrNoID", tt.item)
		}
	}
}

func TestCompileErrorNamesExpression(t *testing.T) {
	t.Parallel()
	_, err := normalize.NewMapper(normalize.FieldExprs{Title: "item.title +"}, nil)
	if err == nil || !strings.HasPrefix(err.Error(), `fields.title: expression "item.title +": unexpected token EOF`) {
		t.Errorf("error = %v", err)
	}
	_, err = normalize.Compile("itme.title", "item")
	if err == nil || !strings.Contains(err.Error(), "unknown name itme") {
		t.Errorf("a misspelt variable must fail to compile, got %v", err)
	}
}

func TestChangedFields(t *testing.T) {
	t.Parallel()
	m, _ := normalize.NewMapper(normalize.FieldExprs{}, nil)
	a := mapOne(t, m, `{"id": "a", "title": "t", "status": "open", "labels": ["x"], "n": 1}`)
	b := mapOne(t, m, `{"id": "a", "title": "t", "status": "closed", "labels": ["x", "y"], "n": 1, "m": 2}`)
	got := m.Hasher().ChangedFields(a.Fields(), b.Fields())
	want := []string{"status", "labels", "extra.m"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("changed fields = %v, want %v", got, want)
	}
	// A snapshot read back from JSON ([]any, float64) equals the mapped values.
	back := mustDecode(t, string(normalize.Canonical(a.Fields()))).(map[string]any)
	if got := m.Hasher().ChangedFields(back, a.Fields()); len(got) != 0 {
		t.Errorf("round-tripped snapshot differs in %v", got)
	}
}
