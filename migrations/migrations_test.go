package migrations_test

import (
	"io/fs"
	"regexp"
	"strings"
	"testing"

	"github.com/lookout-dev/lookout/migrations"
)

// iofs silently skips misnamed files: every file must match the pattern and
// every up migration must have its down.
func TestFilesAreNamedAndPaired(t *testing.T) {
	re := regexp.MustCompile(`^([0-9]+)_[a-z0-9_]+\.(up|down)\.sql$`)
	entries, err := fs.ReadDir(migrations.FS, ".")
	if err != nil {
		t.Fatal(err)
	}
	ups, downs := map[string]bool{}, map[string]bool{}
	for _, e := range entries {
		m := re.FindStringSubmatch(e.Name())
		if m == nil {
			t.Errorf("%s does not match %s", e.Name(), re)
			continue
		}
		base := strings.TrimSuffix(strings.TrimSuffix(e.Name(), ".up.sql"), ".down.sql")
		if m[2] == "up" {
			ups[base] = true
		} else {
			downs[base] = true
		}
	}
	if len(ups) == 0 {
		t.Fatal("no migrations embedded")
	}
	for b := range ups {
		if !downs[b] {
			t.Errorf("%s.up.sql has no down migration", b)
		}
	}
	for b := range downs {
		if !ups[b] {
			t.Errorf("%s.down.sql has no up migration", b)
		}
	}
}
