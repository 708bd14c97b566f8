package deploy

import (
	"bufio"
	"bytes"
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

const module = "github.com/lookout-dev/lookout"

// dynamicEnv are the places that read an environment variable whose name
// is not a constant, and why the manifests need not name it.
var dynamicEnv = map[string]string{
	"internal/config":         "the ${ENV} references of the configuration directory (checked by running check with the container's environment)",
	"internal/notify/command": "a command sink passes on the variables its env: key names",
	"internal/taskrunner":     "a task watch's command executor passes on PATH, HOME, LANG, TZ and TMPDIR, whichever are set",
}

// unsetEnv are variables the code reads that a deployment does not set.
var unsetEnv = map[string]string{
	"USER":                       "the api's token commands name the operator by it (an interactive use)",
	"TEST_DATABASE_URL":          "tests only",
	"LOOKOUT_TOKEN":              "api mcp --stdio: a local assistant's token, not the daemon's",
	"LOOKOUT_CHROMIUM":           "web sources with render: browser: the default image has no Chromium (docs/web.md: build FROM a base that has it)",
	"LOOKOUT_CPUPROFILE":         "evaluator: a CPU profile of one run, for a benchmark (docs/benchmarks.md), never set in production",
	"LOOKOUT_HEAPPROFILE":        "syncer: a heap profile of the built daemon, for a benchmark (docs/benchmarks.md), never set in production",
	"LOOKOUT_TESTSIGNAL_TIMEOUT": "tests only: the bound of a test's wait (internal/testsignal, whose signals the daemons carry as no-ops; scripts/test_citus.sh sets it)",
}

type goPackage struct {
	importPath, dir string
	files           []*ast.File
}

var (
	pkgMu    sync.Mutex
	pkgCache = map[string][]goPackage{}
)

// modulePackages parses the non-test Go files of the module's packages
// that pattern names (with -deps: of what a binary links).
func modulePackages(t *testing.T, deps bool, pattern string) []goPackage {
	t.Helper()
	key := strconv.FormatBool(deps) + pattern
	pkgMu.Lock()
	defer pkgMu.Unlock()
	if p, ok := pkgCache[key]; ok {
		return p
	}
	args := []string{"list", "-f", "{{.ImportPath}}\t{{.Dir}}\t{{join .GoFiles \" \"}}"}
	if deps {
		args = append(args, "-deps")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", append(args, pattern)...)
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %s: %v", pattern, err)
	}
	var pkgs []goPackage
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Split(sc.Text(), "\t")
		if len(f) != 3 || !strings.HasPrefix(f[0], module) {
			continue
		}
		p := goPackage{importPath: f[0], dir: f[1]}
		fset := token.NewFileSet()
		for _, name := range strings.Fields(f[2]) {
			file, err := parser.ParseFile(fset, filepath.Join(f[1], name), nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			p.files = append(p.files, file)
		}
		pkgs = append(pkgs, p)
	}
	pkgCache[key] = pkgs
	return pkgs
}

func rel(importPath string) string {
	return strings.TrimPrefix(strings.TrimPrefix(importPath, module), "/")
}

// stringConsts are the package-level string constants of a package.
func stringConsts(p goPackage) map[string]string {
	c := map[string]string{}
	for _, f := range p.files {
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, s := range g.Specs {
				vs := s.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if i < len(vs.Values) {
						if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
							c[n.Name], _ = strconv.Unquote(lit.Value)
						}
					}
				}
			}
		}
	}
	return c
}

// envReads returns the environment variables that the module's code linked
// into binary (cmd/NAME) reads with os.Getenv or os.LookupEnv, resolving
// constants; a read of a name that is not a constant fails the test unless
// dynamicEnv explains it.
func envReads(t *testing.T, binary string) map[string]bool {
	t.Helper()
	pkgs := modulePackages(t, true, "./cmd/"+binary)
	consts := map[string]map[string]string{}
	for _, p := range pkgs {
		consts[p.importPath] = stringConsts(p)
	}
	names := map[string]bool{}
	for _, p := range pkgs {
		for _, f := range p.files {
			imports := map[string]string{}
			for _, im := range f.Imports {
				path, _ := strconv.Unquote(im.Path.Value)
				name := filepath.Base(path)
				if im.Name != nil {
					name = im.Name.Name
				}
				imports[name] = path
			}
			ast.Inspect(f, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok || len(call.Args) == 0 {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				if x, ok := sel.X.(*ast.Ident); !ok || imports[x.Name] != "os" || (sel.Sel.Name != "Getenv" && sel.Sel.Name != "LookupEnv") {
					return true
				}
				name, ok := "", false
				switch a := call.Args[0].(type) {
				case *ast.BasicLit:
					name, _ = strconv.Unquote(a.Value)
					ok = a.Kind == token.STRING
				case *ast.Ident:
					name, ok = consts[p.importPath][a.Name]
				case *ast.SelectorExpr:
					if x, isIdent := a.X.(*ast.Ident); isIdent {
						name, ok = consts[imports[x.Name]][a.Sel.Name]
					}
				}
				if ok {
					names[name] = true
				} else if _, known := dynamicEnv[rel(p.importPath)]; !known {
					t.Errorf("%s: %s reads an environment variable whose name is not a constant; name it, or explain it in dynamicEnv",
						rel(p.importPath), sel.Sel.Name)
				}
				return true
			})
		}
	}
	if !names["DATABASE_URL"] {
		t.Fatalf("found no read of DATABASE_URL in what cmd/%s links: the scan is broken", binary)
	}
	return names
}

var metricNameRE = regexp.MustCompile(`^lookout_[a-z0-9_]+$`)

// exportedMetrics returns the lookout_* names registered in
// internal/metrics: every string literal of its non-test files that is a
// metric name.
func exportedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	for _, p := range modulePackages(t, false, "./internal/metrics") {
		for _, f := range p.files {
			ast.Inspect(f, func(n ast.Node) bool {
				if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
					if s, err := strconv.Unquote(lit.Value); err == nil && metricNameRE.MatchString(s) {
						names[s] = true
					}
				}
				return true
			})
		}
	}
	if len(names) < 10 {
		t.Fatalf("found %d metric names in internal/metrics: the scan is broken", len(names))
	}
	return names
}

// watchdogKinds returns the values of the Kind* constants of
// internal/watchdog: the alerts the watchdog raises.
func watchdogKinds(t *testing.T) []string {
	t.Helper()
	var kinds []string
	for _, p := range modulePackages(t, false, "./internal/watchdog") {
		for name, v := range stringConsts(p) {
			if strings.HasPrefix(name, "Kind") {
				kinds = append(kinds, v)
			}
		}
	}
	if len(kinds) == 0 {
		t.Fatal("internal/watchdog has no Kind* constants: the scan is broken")
	}
	return kinds
}

// readFile reads a file of the repository.
func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, path))
	if err != nil {
		t.Fatal(err)
	}
	return b
}
