package normalize_test

import (
	"encoding/json"
	"testing"

	"github.com/lookout-dev/lookout/internal/normalize"
)

func TestCanonical(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   any
		want string
	}{
		{map[string]any{"b": 1, "a": []any{true, nil, 1.5}}, `{"a":[true,null,1.5],"b":1}`},
		{"quote \" back \\ nl \n tab \t ctl \x01 <html> é \u2028", `"quote \" back \\ nl \n tab \t ctl \u0001 <html> é \u2028"`},
		{"bad \xff utf8", "\"bad \uFFFD utf8\""},
		{int64(12345678901234567), `12345678901234567`},
		{float64(3), `3`},
		{1e300, `1e+300`},
		{0.000001, `0.000001`},
		{1e-7, `1e-07`},
		{[]string{"x", "y"}, `["x","y"]`},
		{[]int{1, 2}, `[1,2]`},
	}
	for _, tt := range tests {
		got := string(normalize.Canonical(tt.in))
		if got != tt.want {
			t.Errorf("Canonical(%#v) = %s, want %s", tt.in, got, tt.want)
		}
		if !json.Valid([]byte(got)) {
			t.Errorf("Canonical(%#v) = %s is not valid JSON", tt.in, got)
		}
	}
}

// FuzzCanonicalRoundTrip checks that canonical JSON is valid JSON that
// decodes back to a value with the same canonical form.
func FuzzCanonicalRoundTrip(f *testing.F) {
	f.Add(`{"a": [1, 2.5, "x\u0000"], "b": {"c": null}}`)
	f.Add(`"\u2028\ud800"`)
	f.Fuzz(func(t *testing.T, doc string) {
		v, err := normalize.Decode([]byte(doc))
		if err != nil {
			return
		}
		c := normalize.Canonical(v)
		if !json.Valid(c) {
			t.Fatalf("invalid JSON %s from %s", c, doc)
		}
		back, err := normalize.Decode(c)
		if err != nil {
			t.Fatal(err)
		}
		if c2 := normalize.Canonical(back); string(c2) != string(c) {
			t.Fatalf("not stable: %s then %s", c, c2)
		}
	})
}

// TestSnapshotIsCanonicalFields pins the hand-ordered snapshot writer to the
// generic encoding of Record.Fields.
func TestSnapshotIsCanonicalFields(t *testing.T) {
	t.Parallel()
	m, err := normalize.NewMapper(normalize.FieldExprs{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, item := range []string{
		`{"id": "a"}`,
		`{"id": 7, "title": "T \"q\"", "body": "b\n", "url": "u", "author": "x", "status": "s", "labels": ["l1", "l2"],
		  "created_at": "2026-01-02T03:04:05.123Z", "updated_at": "2026-01-02T03:04:05Z", "z": {"b": 1, "a": [null]}}`,
	} {
		v, err := normalize.Decode([]byte(item))
		if err != nil {
			t.Fatal(err)
		}
		r, err := m.Map(v, nil)
		if err != nil {
			t.Fatal(err)
		}
		if want := string(normalize.Canonical(r.Fields())); string(r.Snapshot) != want {
			t.Errorf("snapshot\n got %s\nwant %s", r.Snapshot, want)
		}
		if want := string(normalize.Canonical(r.Fields()["extra"])); string(r.ExtraJSON) != want {
			t.Errorf("extra %s, want %s", r.ExtraJSON, want)
		}
	}
}
