package file_test

import (
	"testing"

	"github.com/lookout-dev/lookout/internal/connectors/conntest"
)

func TestBlockErrors(t *testing.T) {
	t.Parallel()
	cases := []struct{ src, want string }{
		{"name: s\nconnector: file\nfile:\n  items: doc.x\n", "sources/s.yaml:3: file.paths is required (a list of glob patterns)"},
		{"name: s\nconnector: file\nfile:\n  paths: [a.json, \" \"]\n", "sources/s.yaml:4: file.paths[1] is empty"},
		{"name: s\nconnector: file\nfile:\n  paths: [a.json]\n  glob: x\n", "sources/s.yaml:5: file.glob is not a known key (known: items, paths)"},
		{"name: s\nconnector: file\nfile:\n  paths: a.json\n", `sources/s.yaml:4: file.paths must be a list, not "a.json"`},
	}
	for _, tc := range cases {
		_, err := conntest.LoadSource(t, tc.src)
		if err == nil || err.Error() != tc.want {
			t.Errorf("source\n%s\nerror = %v\nwant %q", tc.src, err, tc.want)
		}
	}
}
