package control

import (
	"bytes"
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
)

// An OPML document as Miniflux exports it (categories as outlines
// holding the feeds) imports as rss sources; the export lists the same
// feeds, and importing it again changes nothing.
func TestOPMLImportExport(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := defService(t)
	doc, err := os.ReadFile("testdata/miniflux.opml")
	if err != nil {
		t.Fatal(err)
	}
	feeds, err := ParseOPML(bytes.NewReader(doc))
	if err != nil {
		t.Fatal(err)
	}
	if len(feeds) != 3 || feeds[1].Category != "News & Blogs" || feeds[0].Line != 9 {
		t.Fatalf("feeds: %+v", feeds)
	}
	dry, err := s.ImportFeeds(ctx, alice, feeds, FeedImport{DryRun: true, Where: "OPML line %d"})
	if err != nil {
		t.Fatal(err)
	}
	if dry.Created != 3 {
		t.Fatalf("dry run: %+v", dry)
	}
	res, err := s.ImportFeeds(ctx, alice, feeds, FeedImport{Where: "OPML line %d"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Created != 3 || res.Items[0].Name != "the-go-blog" {
		t.Fatalf("import: %+v", res)
	}
	out, err := s.ExportOPML(ctx, alice)
	if err != nil {
		t.Fatal(err)
	}
	again, err := ParseOPML(bytes.NewReader(out))
	if err != nil {
		t.Fatalf("the export does not parse: %v\n%s", err, out)
	}
	urls := func(fs []Feed) []string {
		var u []string
		for _, f := range fs {
			u = append(u, f.XMLURL)
		}
		slices.Sort(u)
		return u
	}
	if !slices.Equal(urls(again), urls(feeds)) || !strings.Contains(string(out), `type="rss"`) {
		t.Fatalf("the export lists other feeds:\n%s", out)
	}
	res, err = s.ImportFeeds(ctx, alice, again, FeedImport{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Created != 0 || res.Unchanged != 3 {
		t.Fatalf("re-import of the export: %+v", res)
	}
}

func TestOPMLErrorsNameTheLine(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ doc, want string }{
		{"<opml>\n<body>\n<outline text=\"a\">\n</body></opml>", "OPML line 4: element <outline> closed by </body>"},
		{"<rss></rss>", "OPML line 1: the document's root is <rss>, not <opml>"},
		{"", "the document is empty"},
		{"<opml>" + strings.Repeat(" ", OPMLMaxBytes) + "</opml>", "larger than"},
	} {
		_, err := ParseOPML(strings.NewReader(tc.doc))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseOPML(%.40q) = %v, want %q", tc.doc, err, tc.want)
		}
	}
}

// A list of URLs names the lines it cannot read, and the line of a feed
// whose source is refused.
func TestURLListNamesTheLine(t *testing.T) {
	t.Parallel()
	_, err := ParseURLList("https://go.dev/blog/feed.atom\n\n# mine\nnot a url\nftp://x.example/f\n")
	var ie *InvalidError
	if !errors.As(err, &ie) || len(ie.Errors) != 2 || !strings.Contains(ie.Errors[0].Detail, "line 4:") || !strings.Contains(ie.Errors[1].Detail, "line 5:") {
		t.Fatalf("ParseURLList: %v", err)
	}
	ctx := context.Background()
	s := defService(t)
	feeds, err := ParseURLList("https://go.dev/blog/feed.atom\nhttps://unknown.example/feed\n")
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.ImportFeeds(ctx, alice, feeds, FeedImport{Kind: "web"})
	if !errors.As(err, &ie) || !strings.Contains(ie.Error(), "line 2: web/url") {
		t.Fatalf("import of an unresolvable URL: %v", err)
	}
	res, err := s.ImportFeeds(ctx, alice, feeds[:1], FeedImport{Kind: "web"})
	if err != nil || res.Created != 1 || res.Items[0].Name != "go-dev" {
		t.Fatalf("import: %+v, %v", res, err)
	}
}
