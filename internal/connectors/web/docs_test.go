package web_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Every test and benchmark docs/web.md names (its table of
// changedetection.io features above all) exists in the repository.
func TestDocsNameRealTests(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..", "..")
	doc, err := os.ReadFile(filepath.Join(root, "docs", "web.md"))
	if err != nil {
		t.Fatal(err)
	}
	defined := map[string]bool{}
	funcRE := regexp.MustCompile(`(?m)^func ((?:Test|Benchmark)\w+)\(`)
	err = filepath.WalkDir(filepath.Join(root, "internal"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range funcRE.FindAllSubmatch(b, -1) {
			defined[string(m[1])] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	named := regexp.MustCompile("`((?:Test|Benchmark)[A-Za-z0-9_]+)(\\*?)`").FindAllStringSubmatch(string(doc), -1)
	if len(named) < 30 {
		t.Fatalf("docs/web.md names %d tests; its table names more", len(named))
	}
	for _, m := range named {
		name, prefix := m[1], m[2] == "*"
		found := defined[name]
		for d := range defined {
			if prefix && strings.HasPrefix(d, name) {
				found = true
			}
		}
		if !found {
			t.Errorf("docs/web.md names %s, which no test file of internal/ defines", m[0])
		}
	}
}
