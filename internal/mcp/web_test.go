package mcp_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/lookout-dev/lookout/internal/control"
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
