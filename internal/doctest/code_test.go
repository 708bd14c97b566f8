package doctest

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// stdImports are the packages a Go snippet may use without importing them
// (a snippet is a function, not a file): the test adds their imports.
var stdImports = map[string]string{
	"base64": "encoding/base64", "hmac": "crypto/hmac", "sha256": "crypto/sha256", "errors": "errors",
	"fmt": "fmt", "http": "net/http", "io": "io", "json": "encoding/json", "math": "math", "os": "os",
	"strconv": "strconv", "strings": "strings", "time": "time", "context": "context",
}

var (
	importLine  = regexp.MustCompile(`(?m)^import\s+(\w+\s+)?"[^"]+"\s*$`)
	pkgUse      = regexp.MustCompile(`\b([a-z][a-z0-9]*)\.[A-Z]`)
	lineComment = regexp.MustCompile(`(?m)//.*$`)
)

// goFile makes a snippet a file of package snippet: its import lines
// moved to the top, the standard packages it uses imported.
func goFile(snippet string) string {
	imports := importLine.FindAllString(snippet, -1)
	body := importLine.ReplaceAllString(snippet, "")
	seen := map[string]bool{}
	for _, m := range pkgUse.FindAllStringSubmatch(lineComment.ReplaceAllString(body, ""), -1) {
		if path, ok := stdImports[m[1]]; ok && !seen[path] {
			seen[path] = true
			imports = append(imports, `import "`+path+`"`)
		}
	}
	slices.Sort(imports)
	return "package snippet\n\n" + strings.Join(imports, "\n") + "\n\n" + body
}

// runCode checks the code snippets: a Go block marked <!-- excerpt: PATH -->
// has every line in that file (whitespace aside); another Go block is
// vetted (`go vet`) as a package of the module, so it may import the
// module's dependencies; a Python block is parsed by python3.
func runCode(t *testing.T, ta *tally, blocks []*block) {
	for _, b := range blocks {
		ta.run(t, b, func(t *testing.T) {
			t.Parallel()
			switch {
			case b.lang == "python":
				cmd := exec.Command("python3", "-c", "import ast, sys; ast.parse(sys.stdin.read())")
				cmd.Stdin = strings.NewReader(b.body)
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Fatalf("python3 does not parse it: %v\n%s", err, out)
				}
			case hasMarker(b, "excerpt"):
				path, _ := b.marker("excerpt")
				src, err := os.ReadFile(filepath.Join(root, path))
				if err != nil {
					t.Fatal(err)
				}
				have := map[string]bool{}
				for _, l := range strings.Split(string(src), "\n") {
					have[strings.Join(strings.Fields(l), " ")] = true
				}
				for _, l := range strings.Split(b.body, "\n") {
					if l := strings.Join(strings.Fields(l), " "); l != "" && !have[l] {
						t.Errorf("%s has no line %q", path, l)
					}
				}
			default:
				// A folder of the module whose name starts with "_": go
				// build ./... and go vet ./... leave it out.
				dir, err := os.MkdirTemp(".", "_snippet")
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { os.RemoveAll(dir) })
				if err := os.WriteFile(filepath.Join(dir, "snippet.go"), []byte(goFile(b.body)), 0o644); err != nil {
					t.Fatal(err)
				}
				cmd := exec.Command("go", "vet", "./"+dir)
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Fatalf("go vet: %v\n%s\nthe file:\n%s", err, out, numbered(goFile(b.body)))
				}
			}
		})
	}
}

func hasMarker(b *block, key string) bool {
	_, ok := b.marker(key)
	return ok
}
