package mcp_test

import (
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
