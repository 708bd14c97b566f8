package mcp_test

import (
	"strings"
	"testing"
)

// The export tool gives the user's source with its watch; import into
// another user creates it (dry run first), and again changes nothing;
// import_feeds reads OPML and names a bad line of a URL list.
func TestExportImportTools(t *testing.T) {
	f := setup(t)
	alice, bob := f.connect("alice", nil), f.connect("bob", nil)
	call[map[string]any](t, alice, "create_watch", map[string]any{
		"new_source": map[string]any{"name": "blog", "connector": "rss", "every": "1h", "rss": map[string]any{"url": "https://feeds.example/blog.xml"}},
		"watch":      map[string]any{"name": "posts", "when": "change.kind == \"created\"", "notify": []any{"log"}}})

	exp := call[struct {
		Export struct {
			Format  string           `json:"format"`
			Sources []map[string]any `json:"sources"`
		} `json:"export"`
	}](t, alice, "export", map[string]any{})
	if len(exp.Export.Sources) != 1 || exp.Export.Sources[0]["name"] != "blog" {
		t.Fatalf("export: %+v", exp)
	}
	y := call[struct {
		Text string `json:"text"`
	}](t, alice, "export", map[string]any{"format": "yaml"})
	if !strings.Contains(y.Text, "connector: rss") || !strings.Contains(y.Text, "- name: posts") {
		t.Fatalf("YAML export:\n%s", y.Text)
	}

	type result struct {
		DryRun    bool `json:"dry_run"`
		Created   int  `json:"created"`
		Unchanged int  `json:"unchanged"`
	}
	if back := call[result](t, alice, "import", map[string]any{"yaml": y.Text}); back.Created != 0 || back.Unchanged != 2 {
		t.Fatalf("import of the YAML export: %+v", back)
	}

	src := exp.Export.Sources[0]
	src["name"] = "bobs-blog"
	dry := call[result](t, bob, "import", map[string]any{"sources": []any{src}, "dry_run": true})
	if !dry.DryRun || dry.Created != 2 {
		t.Fatalf("dry run: %+v", dry)
	}
	res := call[result](t, bob, "import", map[string]any{"format": "lookout-export/v1", "sources": []any{src}})
	if res.Created != 2 {
		t.Fatalf("import: %+v", res)
	}
	res = call[result](t, bob, "import", map[string]any{"sources": []any{src}})
	if res.Created != 0 || res.Unchanged != 2 {
		t.Fatalf("import again: %+v", res)
	}
	src["every"] = "2h"
	if msg := toolError(t, bob, "import", map[string]any{"sources": []any{src}}); !strings.Contains(msg, `source "bobs-blog" (/sources/0) exists with a different definition`) {
		t.Fatalf("conflict: %s", msg)
	}

	opml := `<opml version="2.0"><head><title>Miniflux</title></head><body><outline text="All">
<outline title="News" text="News" xmlUrl="https://feeds.example/news.xml" htmlUrl="https://feeds.example/"></outline></outline></body></opml>`
	res = call[result](t, bob, "import_feeds", map[string]any{"opml": opml})
	if res.Created != 1 {
		t.Fatalf("import_feeds: %+v", res)
	}
	o := call[struct {
		Text string `json:"text"`
	}](t, bob, "export", map[string]any{"format": "opml"})
	if !strings.Contains(o.Text, `xmlUrl="https://feeds.example/news.xml"`) || !strings.Contains(o.Text, `xmlUrl="https://feeds.example/blog.xml"`) {
		t.Fatalf("OPML export:\n%s", o.Text)
	}
	if msg := toolError(t, bob, "import_feeds", map[string]any{"urls": "https://feeds.example/x.xml\nhtp:/x\n"}); !strings.Contains(msg, `/urls: line 2: "htp:/x" is not an http(s) URL`) {
		t.Fatalf("a bad URL: %s", msg)
	}
}
