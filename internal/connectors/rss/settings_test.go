package rss_test

import (
	"testing"

	"github.com/lookout-dev/lookout/internal/connectors/conntest"
)

func TestBlockErrors(t *testing.T) {
	t.Parallel()
	cases := []struct{ src, want string }{
		{"name: s\nconnector: rss\nrss:\n  headers: {Accept: x}\n", "sources/s.yaml:3: rss.url is required"},
		{"name: s\nconnector: rss\nrss:\n  url: feed.xml\n", `sources/s.yaml:4: rss.url must start with http:// or https://, not "feed.xml"`},
		{"name: s\nconnector: rss\nrss:\n  url: https://x.test/feed\n  headers: {\"Bad Name\": x}\n", "sources/s.yaml:5: rss.headers.Bad Name is not a valid header name"},
		{"name: s\nconnector: rss\nrss:\n  url: https://x.test/feed\n  ttl: 5m\n", "sources/s.yaml:5: rss.ttl is not a known key (known: headers, url)"},
	}
	for _, tc := range cases {
		_, err := conntest.LoadSource(t, tc.src)
		if err == nil || err.Error() != tc.want {
			t.Errorf("source\n%s\nerror = %v\nwant %q", tc.src, err, tc.want)
		}
	}
}
