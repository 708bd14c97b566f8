package mcp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/connectors"
	"github.com/lookout-dev/lookout/internal/control"
	"github.com/lookout-dev/lookout/internal/definitions"
)

// An assistant creates a web source with its watch through create_watch;
// render: browser is refused at its pointer.
func TestCreateWebSourceTool(t *testing.T) {
	f := setup(t)
	alice := f.connect("alice", nil)
	web := map[string]any{"url": "https://feeds.example/slots", "items": "table.slots tr.slot", "id": "@data-slot-id", "fields": map[string]any{"title": "td.when"}}
	got := call[control.CreatedWatch](t, alice, "create_watch", map[string]any{
		"new_source": map[string]any{"name": "alice-slots", "connector": "web", "every": "30m", "web": web},
		"watch":      map[string]any{"name": "bookable", "when": `record.body contains "Book"`, "notify": []string{"log"}}})
	if got.Source == nil || got.Source.Name != "alice-slots" || got.Watch.Name != "bookable" {
		t.Fatalf("create_watch with a web source = %+v", got)
	}
	browser := map[string]any{"url": "https://feeds.example/app", "render": "browser"}
	msg := toolError(t, alice, "create_watch", map[string]any{
		"new_source": map[string]any{"name": "alice-app", "connector": "web", "every": "30m", "web": browser},
		"watch":      map[string]any{"name": "x"}})
	if !strings.Contains(msg, "\n/new_source/web/render: render: browser is for sources the operator declares") {
		t.Errorf("create_watch with render: browser: %s", msg)
	}
}

// The preview tool answers the records of a page (the same control
// function as POST /v1/preview), and says when items matches nothing.
func TestPreviewTool(t *testing.T) {
	f := setup(t)
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/docs" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/html")
		_, _ = io.WriteString(w, `<html><body><ul class="documents">
<li class="doc"><a href="files/price-list-2026.pdf">Price list 2026</a></li>
<li class="doc"><a href="files/terms.pdf">Terms of delivery</a></li></ul></body></html>`)
	}))
	t.Cleanup(site.Close)
	alice := f.connect("alice", nil)
	rep := call[control.PreviewReport](t, alice, "preview", map[string]any{"url": site.URL + "/docs",
		"web": map[string]any{"items": "ul.documents li.doc", "id": "a@href", "fields": map[string]any{"title": "a"}}})
	if rep.Matched != 2 || len(rep.Records) != 2 || rep.Records[0].ID != site.URL+"/files/price-list-2026.pdf" || rep.Records[0].Record["title"] != "Price list 2026" {
		t.Errorf("preview = %+v", rep)
	}
	rep = call[control.PreviewReport](t, alice, "preview", map[string]any{"url": site.URL + "/docs", "web": map[string]any{"items": "table tr"}})
	if rep.Matched != 0 || !strings.Contains(rep.Summary, `web.items "table tr" matched nothing`) {
		t.Errorf("preview of a selector matching nothing = %+v", rep)
	}
	if msg := toolError(t, alice, "preview", map[string]any{"url": site.URL + "/missing"}); !strings.Contains(msg, "\n/url: the page could not be read") {
		t.Errorf("preview of a missing page: %s", msg)
	}
	if got := call[control.WatchPage](t, alice, "list_watches", map[string]any{}); len(got.Items) != 0 {
		t.Errorf("preview saved a watch: %+v", got)
	}
}

// webSite serves a booking table and a product page whose content the
// test changes between runs; robots.txt is absent (404: allowed).
type webSite struct {
	mu      sync.Mutex
	slots   string
	product string // the JSON-LD offers
	price   string // the price as the page shows it
}

func (s *webSite) set(slots, product, price string) {
	s.mu.Lock()
	s.slots, s.product, s.price = slots, product, price
	s.mu.Unlock()
}

func (s *webSite) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	switch r.URL.Path {
	case "/slots":
		_, _ = io.WriteString(w, `<!doctype html><html><head><title>Slots</title></head><body><table class="slots">`+s.slots+`</table></body></html>`)
	case "/shoe":
		_, _ = io.WriteString(w, `<!doctype html><html><head><title>Trail shoe</title>
<script type="application/ld+json">{"@context":"https://schema.org","@type":"Product","name":"Trail shoe","offers":`+s.product+`}</script>
</head><body><h1>Trail shoe</h1><p>Light and waterproof.</p><p class="price">`+s.price+`</p></body></html>`)
	default:
		http.NotFound(w, r)
	}
}

const (
	slotFull = `<tr class="slot" data-slot-id="s-0900"><td class="when">Mon 09:00</td><td class="places">0 places</td><td>Full</td></tr>`
	slotFree = `<tr class="slot" data-slot-id="s-0900"><td class="when">Mon 09:00</td><td class="places">2 places</td><td><a href="/book/s-0900">Book</a></td></tr>`
	slotLate = `<tr class="slot" data-slot-id="s-1700"><td class="when">Mon 17:00</td><td class="places">0 places</td><td>Full</td></tr>`
)

// describe_source and dry_run on the operator's web sources: the
// fields of a booking table's items and of a whole product page (its
// structured price and availability, the diff keys) are described with
// examples for web pages, and dry_run replays the watches of
// docs/web.md (a slot becomes bookable, a price falls under a
// threshold, a restock) over the changes the real syncer recorded.
func TestDescribeAndDryRunWebSources(t *testing.T) {
	t.Parallel()
	f := setup(t)
	site := &webSite{}
	srv := httptest.NewServer(site)
	t.Cleanup(srv.Close)
	f.write("sources/slots.yaml", fmt.Sprintf(`name: slots
connector: web
rate_limit: {per_second: 1000, burst: 10}
web:
  url: %s/slots
  items: table.slots tr.slot
  id: "@data-slot-id"
  fields:
    title: td.when
    places: td.places
    link: a@href
`, srv.URL))
	f.write("sources/shoe.yaml", fmt.Sprintf(`name: shoe
connector: web
rate_limit: {per_second: 1000, burst: 10}
web:
  url: %s/shoe
`, srv.URL))
	cfg, err := config.Load(f.dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := definitions.Apply(context.Background(), f.pool, cfg, definitions.ApplyOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	site.set(slotFull+slotLate, `{"@type":"Offer","price":"129.95","priceCurrency":"EUR","availability":"https://schema.org/OutOfStock"}`, "129.95 EUR, sold out")
	f.pipeline()
	site.set(slotFree+slotLate, `{"@type":"Offer","price":"89.00","priceCurrency":"EUR","availability":"https://schema.org/InStock"}`, "89.00 EUR, in stock")
	f.pipeline()

	alice := f.connect("alice", nil)
	d := call[control.SourceDescription](t, alice, "describe_source", map[string]any{"source": "slots"})
	paths := map[string]control.FieldInfo{}
	for _, fi := range d.Fields {
		paths[fi.Path] = fi
	}
	if d.Connector != "web" || d.Sampled != 2 {
		t.Errorf("describe_source slots = %+v", d)
	}
	for _, p := range []string{"record.title", "record.body", "record.url", "record.extra.places", "record.extra.link"} {
		if _, ok := paths[p]; !ok {
			t.Errorf("describe_source slots lacks %s: %+v", p, d.Fields)
		}
	}
	if !slices.Contains(d.Examples, `record.body contains "Book" && !((previous?.body ?? "") contains "Book")`) {
		t.Errorf("describe_source slots: no example for a text that appears: %q", d.Examples)
	}
	d = call[control.SourceDescription](t, alice, "describe_source", map[string]any{"source": "shoe"})
	paths = map[string]control.FieldInfo{}
	for _, fi := range d.Fields {
		paths[fi.Path] = fi
	}
	if p := paths["record.extra.price"]; !slices.Equal(p.Types, []string{"number"}) || !slices.Contains(p.Examples, any(89.0)) {
		t.Errorf("record.extra.price described as %+v", p)
	}
	if a := paths["record.extra.availability"]; !slices.Contains(a.Examples, any("InStock")) {
		t.Errorf("record.extra.availability described as %+v", a)
	}
	for _, p := range []string{"record.extra.diff", "record.extra.added", "record.extra.removed", "record.extra.currency"} {
		if _, ok := paths[p]; !ok {
			t.Errorf("describe_source shoe lacks %s: %+v", p, d.Fields)
		}
	}
	for _, want := range []string{
		`(get(record.extra, "price") ?? 1e9) < 89 && (previous == nil || (get(previous.extra, "price") ?? 1e9) >= 89)`,
		`get(record.extra, "availability") == "InStock" && previous != nil && get(previous.extra, "availability") != "InStock"`,
		`any(get(record.extra, "added") ?? [], {# contains "89.00 EUR, in stock"})`,
	} {
		if !slices.Contains(d.Examples, want) {
			t.Errorf("describe_source shoe: no example %s in %q", want, d.Examples)
		}
	}
	// Every example describe_source gives is a valid watch of the source.
	for _, ex := range d.Examples {
		call[control.DryRunReport](t, alice, "dry_run", map[string]any{"source": "shoe", "watch": map[string]any{"name": "ex", "when": ex}})
	}

	for _, tc := range []struct {
		source, when string
		records      []string
	}{
		{"slots", `record.body contains "Book" && !((previous?.body ?? "") contains "Book")`, []string{"s-0900"}},
		{"slots", `change.kind == "created"`, []string{"s-0900", "s-1700"}},
		{"shoe", `(get(record.extra, "price") ?? 1e9) < 100 && (previous == nil || (get(previous.extra, "price") ?? 1e9) >= 100)`, []string{srv.URL + "/shoe"}},
		{"shoe", `get(record.extra, "availability") == "InStock" && previous != nil && get(previous.extra, "availability") != "InStock"`, []string{srv.URL + "/shoe"}},
		{"shoe", `change.kind == "updated" && any(get(record.extra, "added") ?? [], {# contains "Book"})`, nil},
		// Block while text present: a change notifies only while the
		// page does not say it.
		{"shoe", `change.kind == "updated" && !(record.body contains "sold out")`, []string{srv.URL + "/shoe"}},
		{"shoe", `change.kind == "updated" && !(record.body contains "in stock")`, nil},
	} {
		rep := call[control.DryRunReport](t, alice, "dry_run", map[string]any{"source": tc.source, "since": "1h", "watch": map[string]any{"name": "w", "when": tc.when}})
		var got []string
		for _, m := range rep.Matches {
			got = append(got, m.RecordID)
		}
		slices.Sort(got)
		if rep.Source != tc.source || !slices.Equal(got, tc.records) {
			t.Errorf("dry_run %s %s = %+v, want matches %v", tc.source, tc.when, rep, tc.records)
		}
	}
}

// describe_source's texts name every connector kind there is (web
// included) and say what a web source's records hold, so that an
// assistant asks for web sources and reads their fields.
func TestDescribeSourceNamesEveryConnector(t *testing.T) {
	t.Parallel()
	f := setup(t)
	cs := f.connect("alice", nil)
	var tool *mcpsdk.Tool
	for tl, err := range cs.Tools(context.Background(), nil) {
		if err != nil {
			t.Fatal(err)
		}
		if tl.Name == "describe_source" {
			tool = tl
		}
	}
	if tool == nil {
		t.Fatal("no describe_source tool")
	}
	schema, _ := json.Marshal(tool.InputSchema)
	notFound := toolError(t, cs, "describe_source", map[string]any{"source": "nope"})
	for _, name := range connectors.Names() {
		for what, text := range map[string]string{"description": tool.Description, "input schema": string(schema), "not-found error": notFound} {
			if !regexp.MustCompile(`\b` + name + `\b`).MatchString(text) {
				t.Errorf("describe_source's %s does not name the connector %s: %s", what, name, text)
			}
		}
	}
	if !strings.Contains(tool.Description, "record.extra.added") || !strings.Contains(tool.Description, "record.extra.price") {
		t.Errorf("describe_source's description does not say what a web source's records hold: %s", tool.Description)
	}
}
