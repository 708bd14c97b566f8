package config_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lookout-dev/lookout/internal/config"
)

func loadSource(t *testing.T, source string) (*config.Config, error) {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "sources"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "sources", "s.yaml"), []byte(source), 0o644); err != nil {
		t.Fatal(err)
	}
	return config.Load(dir)
}

func TestConnectorBlockDefaults(t *testing.T) {
	t.Parallel()
	cfg, err := loadSource(t, "name: s\nconnector: http\nhttp:\n  url: https://api.test/items\n  cursor: body.next\n  cursor_param: after\n")
	if err != nil {
		t.Fatal(err)
	}
	h := cfg.Sources[0].HTTP
	if h.Pagination != "cursor" || h.MaxPages != 1000 || *h.Lookback != time.Second || h.SinceFormat != "rfc3339" || *h.PageStart != 1 {
		t.Errorf("http defaults: %+v", h)
	}
	cfg, err = loadSource(t, "name: s\nconnector: http\nhttp:\n  url: https://api.test/items\n  page_param: p\n")
	if err != nil {
		t.Fatal(err)
	}
	if h := cfg.Sources[0].HTTP; h.Pagination != "page" || *h.PageStart != 1 {
		t.Errorf("page defaults: %+v", h)
	}
	cfg, err = loadSource(t, "name: s\nconnector: github\ngithub:\n  repo: golang/go\n")
	if err != nil {
		t.Fatal(err)
	}
	g := cfg.Sources[0].GitHub
	if g.State != "all" || g.BaseURL != "https://api.github.com" || *g.Lookback != time.Minute || g.PerPage != 100 || g.MaxPages != 1000 {
		t.Errorf("github defaults: %+v", g)
	}
}

func TestConnectorBlockErrors(t *testing.T) {
	t.Parallel()
	cases := []struct{ src, want string }{
		{"name: s\nconnector: rss\nrss:\n  headers: {Accept: x}\n", "sources/s.yaml:3: rss.url is required"},
		{"name: s\nconnector: rss\nrss:\n  url: feed.xml\n", `sources/s.yaml:4: rss.url must start with http:// or https://, not "feed.xml"`},
		{"name: s\nconnector: rss\nrss:\n  url: https://x.test/feed\n  headers: {\"Bad Name\": x}\n", "sources/s.yaml:5: rss.headers.Bad Name is not a valid header name"},
		{"name: s\nconnector: file\nfile:\n  items: doc.x\n", "sources/s.yaml:3: file.paths is required"},
		{"name: s\nconnector: http\nhttp:\n  url: https://x.test/\n  max_pages: -1\n", "sources/s.yaml:5: http.max_pages must be positive"},
		{"name: s\nconnector: http\nhttp:\n  url: https://x.test/\n  lookback: -5s\n", "sources/s.yaml:5: http.lookback must not be negative"},
		{"name: s\nconnector: http\nhttp:\n  url: https://x.test/\n  updated_at: item.modified\n", "sources/s.yaml:5: http.updated_at is set but http.since is not"},
		{"name: s\nconnector: http\nhttp:\n  url: https://x.test/\n  page_start: 0\n", "sources/s.yaml:5: http.page_start is set but pagination is none"},
		{"name: s\nconnector: http\nhttp:\n  url: https://\n", `sources/s.yaml:4: http.url has no host`},
		{"name: s\nconnector: github\ngithub:\n  repo: a/b/c\n", `sources/s.yaml:4: github.repo must be owner/name, not "a/b/c"`},
		{"name: s\nconnector: github\nrss:\n  url: https://x.test/\n", `sources/s.yaml:2: connector "github" needs a github: block`},
	}
	for _, tc := range cases {
		_, err := loadSource(t, tc.src)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("source\n%s\nerror = %v\nwant it to contain %q", tc.src, err, tc.want)
		}
	}
}
