package httpjson_test

import (
	"testing"
	"time"

	"github.com/lookout-dev/lookout/internal/connectors/conntest"
	"github.com/lookout-dev/lookout/internal/connectors/httpjson"
)

func TestBlockDefaults(t *testing.T) {
	t.Parallel()
	decode := func(src string) *httpjson.Settings {
		t.Helper()
		cfg, err := conntest.LoadSource(t, src)
		if err != nil {
			t.Fatal(err)
		}
		h, err := httpjson.Decode(cfg.Sources[0])
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	h := decode("name: s\nconnector: http\nhttp:\n  url: https://api.test/items\n  cursor: body.next\n  cursor_param: after\n")
	if h.Pagination != "cursor" || h.MaxPages != 1000 || *h.Lookback != time.Second || h.SinceFormat != "rfc3339" || *h.PageStart != 1 {
		t.Errorf("http defaults: %+v", h)
	}
	if h := decode("name: s\nconnector: http\nhttp:\n  url: https://api.test/items\n  page_param: p\n"); h.Pagination != "page" || *h.PageStart != 1 {
		t.Errorf("page defaults: %+v", h)
	}
}

func TestBlockErrors(t *testing.T) {
	t.Parallel()
	cases := []struct{ src, want string }{
		{"name: s\nconnector: http\nhttp:\n  url: https://x.test/\n  max_pages: -1\n", "sources/s.yaml:5: http.max_pages must be positive"},
		{"name: s\nconnector: http\nhttp:\n  url: https://x.test/\n  lookback: -5s\n", "sources/s.yaml:5: http.lookback must not be negative"},
		{"name: s\nconnector: http\nhttp:\n  url: https://x.test/\n  updated_at: item.modified\n", "sources/s.yaml:5: http.updated_at is set but http.since is not (updated_at feeds the since cursor)"},
		{"name: s\nconnector: http\nhttp:\n  url: https://x.test/\n  page_start: 0\n", "sources/s.yaml:5: http.page_start is set but pagination is none (it is used by pagination page)"},
		{"name: s\nconnector: http\nhttp:\n  url: https://\n", `sources/s.yaml:4: http.url has no host: "https://"`},
		{"name: s\nconnector: http\nhttp:\n  url: https://x.test/\n  pagination: cursor\n", "sources/s.yaml:5: http.cursor is required with pagination cursor (an expression over body returning the next cursor)\nsources/s.yaml:5: http.cursor_param is required with pagination cursor (the query parameter that carries the cursor)"},
		{"name: s\nconnector: http\nhttp:\n  url: https://x.test/\n  max_pages: ten\n", `sources/s.yaml:5: http.max_pages must be an integer, not "ten"`},
		{"name: s\nconnector: http\nhttp:\n  url: https://x.test/\n  method: POST\n", "sources/s.yaml:5: http.method is not a known key (known: cursor, cursor_param, headers, items, lookback, max_pages, next, page_param, page_start, pagination, since, since_format, snapshot, updated_at, url)"},
		{"name: s\nconnector: http\nhttp:\n", `sources/s.yaml:2: connector "http" needs a http: block`},
	}
	for _, tc := range cases {
		_, err := conntest.LoadSource(t, tc.src)
		if err == nil || err.Error() != tc.want {
			t.Errorf("source\n%s\nerror = %v\nwant %q", tc.src, err, tc.want)
		}
	}
}
