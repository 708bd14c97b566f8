package api

import (
	"encoding/json"
	"io"
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/lookout-dev/lookout/internal/control"
)

// Alice exports her source (with its watch) and her watch of a shared
// source; bob imports it (dry run first, then for real, then again:
// unchanged); a changed definition is a 409 naming it.
func TestExportImportOverHTTP(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.svc.SetResolver(resolver{"feeds.example": {netip.MustParseAddr("93.184.216.34")}})
	f.shared("news")
	f.do(http.MethodPost, "/v1/sources", "alice", body(`{"name": "blog", "connector": "rss", "every": "1h", "rss": {"url": "https://feeds.example/blog.xml"},
		"watches": [{"name": "posts", "when": "change.kind == \"created\"", "notify": ["log"]}]}`), nil)
	f.do(http.MethodPost, "/v1/watches", "alice", body(`{"source": "news", "watch": {"name": "all", "when": "true", "notify": ["log"]}}`), nil)

	var exp control.Export
	if resp := f.do(http.MethodGet, "/v1/export", "alice", nil, &exp); resp.StatusCode != http.StatusOK {
		t.Fatalf("export: %d", resp.StatusCode)
	}
	if len(exp.Sources) != 1 || len(exp.Watches) != 1 || exp.Watches[0].Source != "news" || exp.Note == "" {
		t.Fatalf("export: %+v", exp)
	}
	req, _ := http.NewRequest(http.MethodGet, f.srv.URL+"/v1/export", nil)
	req.Header.Set("Authorization", "Bearer "+f.tokens["alice"])
	req.Header.Set("Accept", "application/yaml")
	resp, err := f.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	y, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "application/yaml" || !strings.Contains(string(y), "name: blog") {
		t.Fatalf("YAML export: Content-Type %q\n%s", ct, y)
	}
	// The YAML export imports back into alice unchanged.
	yb, _ := json.Marshal(map[string]any{"yaml": string(y)})
	var back control.ImportResult
	f.do(http.MethodPost, "/v1/import", "alice", strings.NewReader(string(yb)), &back)
	if back.Created != 0 || back.Unchanged != 3 {
		t.Fatalf("import of the YAML export: %+v", back)
	}

	// Bob: rename the source (alice holds "blog"), keep the watch of news.
	exp.Sources[0] = json.RawMessage(strings.Replace(string(exp.Sources[0]), `"name":"blog"`, `"name":"bobs-blog"`, 1))
	// Watch names are unique per source: alice's news/all is taken.
	p := f.problem(http.MethodPost, "/v1/import", "bob", strings.NewReader(`{"watches": [{"source": "news", "watch": {"name": "all", "when": "true"}}]}`), http.StatusConflict)
	if !strings.HasPrefix(p.Detail, `watch "news/all" (/watches/0/watch):`) {
		t.Fatalf("conflict with alice's watch: %+v", p)
	}
	exp.Watches[0].Watch = json.RawMessage(strings.Replace(string(exp.Watches[0].Watch), `"name":"all"`, `"name":"bobs"`, 1))
	imp, _ := json.Marshal(map[string]any{"sources": exp.Sources, "watches": exp.Watches, "dry_run": true})
	var res control.ImportResult
	if resp := f.do(http.MethodPost, "/v1/import", "bob", strings.NewReader(string(imp)), &res); resp.StatusCode != http.StatusOK {
		t.Fatalf("dry run: %d", resp.StatusCode)
	}
	if !res.DryRun || res.Created != 3 {
		t.Fatalf("dry run: %+v", res)
	}
	var page control.SourcePage
	f.do(http.MethodGet, "/v1/sources", "bob", nil, &page)
	for _, s := range page.Items {
		if s.Owner == "bob" {
			t.Fatalf("a dry run saved %s", s.Name)
		}
	}
	imp, _ = json.Marshal(map[string]any{"format": exp.Format, "note": exp.Note, "sources": exp.Sources, "watches": exp.Watches})
	f.do(http.MethodPost, "/v1/import", "bob", strings.NewReader(string(imp)), &res)
	if res.DryRun || res.Created != 3 {
		t.Fatalf("import: %+v", res)
	}
	f.do(http.MethodPost, "/v1/import", "bob", strings.NewReader(string(imp)), &res)
	if res.Created != 0 || res.Unchanged != 3 {
		t.Fatalf("import again: %+v", res)
	}
	changed := strings.Replace(string(imp), `change.kind == \"created\"`, `change.kind == \"updated\"`, 1)
	p = f.problem(http.MethodPost, "/v1/import", "bob", strings.NewReader(changed), http.StatusConflict)
	if !strings.Contains(p.Detail, `watch "bobs-blog/posts" (/sources/0/watches/0) exists with a different definition`) {
		t.Fatalf("conflict: %+v", p)
	}
}

const minifluxOPML = `<?xml version="1.0" encoding="UTF-8"?>
<opml version="2.0">
    <head>
        <title>Miniflux</title>
        <dateCreated>Tue, 01 Dec 2026 12:00:00 UTC</dateCreated>
    </head>
    <body>
        <outline text="All">
            <outline title="Feeds Example" text="Feeds Example" xmlUrl="https://feeds.example/rss.xml" htmlUrl="https://feeds.example/" description=""></outline>
        </outline>
    </body>
</opml>
`

func TestOPMLAndURLsOverHTTP(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.svc.SetResolver(resolver{"feeds.example": {netip.MustParseAddr("93.184.216.34")}})
	var res control.ImportResult
	f.do(http.MethodPost, "/v1/import/opml", "alice", strings.NewReader(minifluxOPML), &res, "Content-Type", "text/x-opml")
	if res.Created != 1 || res.Items[0].Name != "feeds-example" {
		t.Fatalf("OPML import: %+v", res)
	}
	resp := f.do(http.MethodGet, "/v1/export.opml", "alice", nil, nil)
	if ct := resp.Header.Get("Content-Type"); ct != "text/x-opml" {
		t.Fatalf("OPML export: Content-Type %q", ct)
	}
	req, _ := http.NewRequest(http.MethodGet, f.srv.URL+"/v1/export.opml", nil)
	req.Header.Set("Authorization", "Bearer "+f.tokens["alice"])
	r, err := f.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(r.Body)
	r.Body.Close()
	if !strings.Contains(string(out), `xmlUrl="https://feeds.example/rss.xml"`) || !strings.Contains(string(out), `type="rss"`) {
		t.Fatalf("OPML export:\n%s", out)
	}
	p := f.problem(http.MethodPost, "/v1/import/opml", "alice", strings.NewReader("<opml>\n<body>\n<outline text=\"a\">\n</body></opml>"), http.StatusUnprocessableEntity, "Content-Type", "text/x-opml")
	if len(p.Errors) != 1 || !strings.Contains(p.Errors[0].Detail, "OPML line 4: element <outline> closed by </body>") {
		t.Fatalf("bad OPML: %+v", p)
	}
	p = f.problem(http.MethodPost, "/v1/import/urls", "alice", body(`{"urls": "https://feeds.example/a.xml\nnope\n", "kind": "rss"}`), http.StatusUnprocessableEntity)
	if len(p.Errors) != 1 || p.Errors[0].Pointer != "/urls" || !strings.Contains(p.Errors[0].Detail, `line 2: "nope" is not an http(s) URL`) {
		t.Fatalf("bad URL list: %+v", p)
	}
	f.do(http.MethodPost, "/v1/import/urls", "alice", body(`{"urls": "https://feeds.example/rss.xml\n", "kind": "rss"}`), &res)
	if res.Created != 0 || res.Unchanged != 1 {
		t.Fatalf("URL of an existing feed: %+v", res)
	}
}
