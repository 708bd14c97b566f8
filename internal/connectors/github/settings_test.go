package github_test

import (
	"testing"
	"time"

	"github.com/lookout-dev/lookout/internal/connectors/conntest"
	"github.com/lookout-dev/lookout/internal/connectors/github"
)

func TestBlockDefaults(t *testing.T) {
	t.Parallel()
	cfg, err := conntest.LoadSource(t, "name: s\nconnector: github\ngithub:\n  repo: golang/go\n")
	if err != nil {
		t.Fatal(err)
	}
	g, err := github.Decode(cfg.Sources[0])
	if err != nil {
		t.Fatal(err)
	}
	if g.State != "all" || g.BaseURL != "https://api.github.com" || *g.Lookback != time.Minute || g.PerPage != 100 || g.MaxPages != 1000 {
		t.Errorf("github defaults: %+v", g)
	}
}

func TestBlockErrors(t *testing.T) {
	t.Parallel()
	cases := []struct{ src, want string }{
		{"name: s\nconnector: github\ngithub:\n  repo: a/b/c\n", `sources/s.yaml:4: github.repo must be owner/name, not "a/b/c"`},
		{"name: s\nconnector: github\ngithub:\n  state: x\n", "sources/s.yaml:3: github.repo is required (owner/name)\nsources/s.yaml:4: github.state must be open, closed or all, not \"x\""},
		{"name: s\nconnector: github\ngithub:\n  repo: a/b\n  per_page: 500\n", "sources/s.yaml:5: github.per_page must be between 1 and 100, not 500"},
		{"name: s\nconnector: github\ngithub:\n  repo: a/b\n  per_page: lots\n", `sources/s.yaml:5: github.per_page must be an integer, not "lots"`},
		{"name: s\nconnector: github\ngithub:\n  repo: a/b\n  owner: a\n", "sources/s.yaml:5: github.owner is not a known key (known: base_url, lookback, max_pages, per_page, repo, state, task, token)"},
		{"name: s\nconnector: github\nhttp:\n  url: https://x.test/\n", "sources/s.yaml:2: connector \"github\" needs a github: block\nsources/s.yaml:3: http block is set but the connector is \"github\""},
	}
	for _, tc := range cases {
		_, err := conntest.LoadSource(t, tc.src)
		if err == nil || err.Error() != tc.want {
			t.Errorf("source\n%s\nerror = %v\nwant %q", tc.src, err, tc.want)
		}
	}
}
