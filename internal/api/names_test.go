package api

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"testing"
)

// Names are unique across owners (docs/schema.md: source_definitions.name
// is the primary key, a watch's name is unique on its source), so a name
// another owner uses is refused, but the 409 says nothing of that owner's
// object: the same words as a name that is simply not available, with no
// owner, no file, no "already exists". One's own name is said plainly.
func TestNameConflictsDoNotLeak(t *testing.T) {
	f := setup(t)
	f.shared("gh")
	f.svc.SetResolver(resolver{"feeds.example": {netip.MustParseAddr("93.184.216.34")}})
	src := func(name string) string {
		return fmt.Sprintf(`{"name":%q,"connector":"rss","every":"1h","rss":{"url":"https://feeds.example/a.xml"}}`, name)
	}
	if resp := f.do(http.MethodPost, "/v1/sources", "alice", body(src("q3-secret-plans")), nil); resp.StatusCode != 201 {
		t.Fatalf("alice's source: %d", resp.StatusCode)
	}
	if resp := f.do(http.MethodPost, "/v1/watches", "alice", body(`{"source":"gh","watch":{"name":"acquisition-target"}}`), nil); resp.StatusCode != 201 {
		t.Fatalf("alice's watch: %d", resp.StatusCode)
	}
	leaks := func(what string, p Problem) {
		t.Helper()
		text := p.Detail
		for _, e := range p.Errors {
			text += " " + e.Detail
		}
		for _, w := range []string{"alice", "taken", "exists", "already", "managed by"} {
			if strings.Contains(text, w) {
				t.Errorf("%s: the 409 says %q: %s", what, w, text)
			}
		}
	}
	p := f.problem(http.MethodPost, "/v1/sources", "bob", body(src("q3-secret-plans")), http.StatusConflict)
	leaks("bob's source", p)
	if want := `source name "q3-secret-plans" is not available: choose another name (source names are unique across all owners)`; p.Detail != want {
		t.Errorf("bob's source: %q, want %q", p.Detail, want)
	}
	p = f.problem(http.MethodPost, "/v1/watches", "bob", body(`{"source":"gh","watch":{"name":"acquisition-target"}}`), http.StatusConflict)
	leaks("bob's watch", p)
	if want := `watch name "acquisition-target" is not available on source "gh": choose another name (a watch's name is unique on its source, across all owners)`; p.Detail != want {
		t.Errorf("bob's watch: %q, want %q", p.Detail, want)
	}
	// Bob's own watch of that name on his own source is fine.
	if resp := f.do(http.MethodPost, "/v1/watches", "bob", body(`{"new_source":`+src("bob-feed")+`,"watch":{"name":"acquisition-target"}}`), nil); resp.StatusCode != 201 {
		t.Errorf("bob's watch on his source: %d", resp.StatusCode)
	}
	// Alice's own duplicate names her object.
	p = f.problem(http.MethodPost, "/v1/sources", "alice", body(src("q3-secret-plans")), http.StatusConflict)
	if !strings.Contains(p.Detail, `you already have source "q3-secret-plans"`) {
		t.Errorf("alice's duplicate: %q", p.Detail)
	}
}

// A name is at most 200 characters, and a number or boolean where a string
// belongs is a 422 naming the field by its JSON pointer, never a 400 or a
// 500, in a source, a new source and a watch.
func TestNamesAndTypesOverHTTP(t *testing.T) {
	f := setup(t)
	f.shared("gh")
	f.svc.SetResolver(resolver{"feeds.example": {netip.MustParseAddr("93.184.216.34")}})
	long := strings.Repeat("n", 201)
	tests := []struct {
		name, path, body, pointer, detail string
	}{
		{"long source name", "/v1/sources", `{"name":"` + long + `","connector":"rss","every":"1h","rss":{"url":"https://feeds.example/a.xml"}}`,
			"/name", "name: is 201 characters long; a name has at most 200"},
		{"long watch name", "/v1/watches", `{"source":"gh","watch":{"name":"` + long + `"}}`,
			"/watch/name", "name: is 201 characters long; a name has at most 200"},
		{"number for a source name", "/v1/sources", `{"name":123,"connector":"rss","every":"1h","rss":{"url":"https://feeds.example/a.xml"}}`,
			"/name", "name: must be a string, not 123"},
		{"boolean in a block", "/v1/sources", `{"name":"typed","connector":"rss","every":"1h","rss":{"url":true}}`,
			"/rss/url", "rss.url: must be a string, not true"},
		{"number for a watch name", "/v1/watches", `{"source":"gh","watch":{"name":42}}`,
			"/watch/name", "name: must be a string, not 42"},
		{"boolean for a when", "/v1/watches", `{"source":"gh","watch":{"name":"w","when":true}}`,
			"/watch/when", "when: must be a string, not true"},
		{"number in a new source", "/v1/watches", `{"new_source":{"name":"n","connector":"rss","every":"1h","rss":{"url":"https://feeds.example/a.xml"},"fields":{"title":7}},"watch":{"name":"w"}}`,
			"/new_source/fields/title", "fields.title: must be a string, not 7"},
		{"number in notify", "/v1/watches", `{"source":"gh","watch":{"name":"w","notify":[1]}}`,
			"/watch/notify/0", "notify[0]: must be a string, not 1"},
		{"number for source", "/v1/watches", `{"source":5,"watch":{"name":"w"}}`,
			"/source", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := f.problem(http.MethodPost, tt.path, "alice", body(tt.body), http.StatusUnprocessableEntity)
			if len(p.Errors) != 1 || p.Errors[0].Pointer != tt.pointer || !strings.Contains(p.Errors[0].Detail, tt.detail) {
				t.Errorf("errors = %+v, want one at %s saying %q", p.Errors, tt.pointer, tt.detail)
			}
		})
	}
	// A PUT of a source checks the same.
	if resp := f.do(http.MethodPost, "/v1/sources", "alice", body(`{"name":"mine","connector":"rss","every":"1h","rss":{"url":"https://feeds.example/a.xml"}}`), nil); resp.StatusCode != 201 {
		t.Fatalf("create: %d", resp.StatusCode)
	}
	p := f.problem(http.MethodPut, "/v1/sources/mine", "alice", body(`{"name":"mine","connector":"rss","every":"1h","rss":{"url":"https://feeds.example/a.xml"},"fields":{"id":1}}`), http.StatusUnprocessableEntity)
	if len(p.Errors) != 1 || p.Errors[0].Pointer != "/fields/id" {
		t.Errorf("update: %+v", p.Errors)
	}
}

// Numbers in a definition reach the stored row as sent: 2^53 + 1 through
// float64 would be stored as 9007199254740992.
func TestDefinitionNumbersExactOverHTTP(t *testing.T) {
	f := setup(t)
	f.shared("gh")
	const seed = "9007199254740993"
	if resp := f.do(http.MethodPost, "/v1/watches", "alice", body(`{"source":"gh","watch":{"name":"seeded","ask":"is it a bug?","model":{"options":{"seed":`+seed+`}}}}`), nil); resp.StatusCode != 201 {
		t.Fatalf("create: %d", resp.StatusCode)
	}
	var stored string
	if err := f.pool.QueryRow(context.Background(), `SELECT definition->'model'->'options'->>'seed' FROM watches WHERE name = 'seeded'`).Scan(&stored); err != nil || stored != seed {
		t.Errorf("stored seed = %q (%v), want %s", stored, err, seed)
	}
}
