package architecture

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/lookout-dev/lookout"

// pkg is what `go list -json` says of one package of the module.
type pkg struct {
	ImportPath string
	Dir        string
	Imports    []string // non-test imports
	Deps       []string // transitive non-test dependencies
}

// rel is a package's path inside the module: "internal/outbox", "cmd/syncer".
func rel(importPath string) string {
	return strings.TrimPrefix(strings.TrimPrefix(importPath, module), "/")
}

var (
	listOnce []pkg
	listErr  error
)

// list runs `go list -json ./...` from the module root once per test binary.
func list(t *testing.T) []pkg {
	t.Helper()
	if listOnce != nil || listErr != nil {
		if listErr != nil {
			t.Fatal(listErr)
		}
		return listOnce
	}
	cmd := exec.Command("go", "list", "-json", "./...")
	cmd.Dir = root(t)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		listErr = fmt.Errorf("go list -json ./...: %w: %s", err, stderr.String())
		t.Fatal(listErr)
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			listErr = fmt.Errorf("decode go list output: %w", err)
			t.Fatal(listErr)
		}
		listOnce = append(listOnce, p)
	}
	return listOnce
}

// root is the module root (two levels above this package).
func root(t *testing.T) string {
	t.Helper()
	abs, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return abs
}

// internalImports keeps the module's own packages of paths, as rel paths.
func internalImports(paths []string) []string {
	var out []string
	for _, p := range paths {
		if p == module || strings.HasPrefix(p, module+"/") {
			out = append(out, rel(p))
		}
	}
	return out
}

// mapEntry is one row of the package map in docs/development.md.
type mapEntry struct {
	line     int
	mayUse   []string
	anything bool // "may import: anything" (mains, tests, benchmark)
}

// mapRow matches a row of the package map table:
//
//	| `internal/outbox` | the notifications table … | `db`, `metrics` |
var mapRow = regexp.MustCompile("^\\|\\s*`([a-z0-9_/.-]+)`\\s*\\|[^|]*\\|([^|]*)\\|\\s*$")

// packageMap reads the package map of docs/development.md: package →
// the module packages it may import. Names in the "may import" column are
// written without the internal/ prefix ("db", "connectors/file");
// "anything" allows every package.
func packageMap(t *testing.T) map[string]mapEntry {
	t.Helper()
	path := filepath.Join(root(t), "docs", "development.md")
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m := map[string]mapEntry{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		sub := mapRow.FindStringSubmatch(sc.Text())
		if sub == nil {
			continue
		}
		name := strings.TrimSuffix(sub[1], "/")
		e := mapEntry{line: n}
		may := strings.TrimSpace(sub[2])
		switch {
		case may == "anything":
			e.anything = true
		case may == "—" || may == "-" || may == "":
		default:
			for _, f := range strings.Split(may, ",") {
				f = strings.Trim(strings.TrimSpace(f), "`")
				if f == "" {
					continue
				}
				if f != "migrations" && !strings.HasPrefix(f, "cmd/") {
					f = "internal/" + f
				}
				e.mayUse = append(e.mayUse, f)
			}
		}
		if _, dup := m[name]; dup {
			t.Errorf("docs/development.md:%d: %s is listed twice in the package map", n, name)
		}
		m[name] = e
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(m) == 0 {
		t.Fatalf("docs/development.md has no package map rows (| `internal/x` | purpose | may import |)")
	}
	return m
}

// TestPackageMap checks docs/development.md's package map against the tree:
// every package is listed, every listed package exists, and every package
// imports only what its row allows. A back-edge (a domain package importing
// a daemon, plumbing importing a domain room) fails here.
func TestPackageMap(t *testing.T) {
	pkgs := list(t)
	m := packageMap(t)
	seen := map[string]bool{}
	for _, p := range pkgs {
		name := rel(p.ImportPath)
		seen[name] = true
		e, ok := m[name]
		if !ok {
			t.Errorf("package %s is not in docs/development.md's package map", name)
			continue
		}
		if e.anything {
			continue
		}
		for _, imp := range internalImports(p.Imports) {
			if !slices.Contains(e.mayUse, imp) {
				t.Errorf("%s imports %s, which its row in docs/development.md (line %d) does not allow (may import: %s)",
					name, imp, e.line, strings.Join(e.mayUse, ", "))
			}
		}
	}
	for name, e := range m {
		if !seen[name] {
			t.Errorf("docs/development.md:%d lists %s, which is not a package of the module", e.line, name)
		}
	}
}

// TestDomainRoomsStayApart checks the rules the issue names, transitively:
// outbox delivery, the model path and retention never depend on the change
// log, and nothing below the daemons depends on them.
func TestDomainRoomsStayApart(t *testing.T) {
	never := map[string][]string{
		"internal/notify":     {"internal/changes", "internal/syncer", "internal/evaluator"},
		"internal/semantic":   {"internal/changes", "internal/syncer", "internal/evaluator"},
		"internal/retention":  {"internal/changes", "internal/syncer", "internal/evaluator"},
		"internal/outbox":     {"internal/changes", "internal/syncer", "internal/evaluator", "internal/notify"},
		"internal/changes":    {"internal/syncer", "internal/evaluator"},
		"internal/connectors": {"internal/syncer", "internal/evaluator"},
	}
	for _, p := range list(t) {
		name := rel(p.ImportPath)
		for room, banned := range never {
			if name != room && !strings.HasPrefix(name, room+"/") {
				continue
			}
			deps := internalImports(p.Deps)
			for _, b := range banned {
				if slices.Contains(deps, b) {
					t.Errorf("%s depends on %s (go list -deps); it must not", name, b)
				}
			}
		}
	}
}

// TestBinariesLinkTheirSide checks that each binary links only its side of
// the flow: the syncer no evaluator, sink or model code, the evaluator no
// connector code, the api no syncer (it links the connectors to validate).
func TestBinariesLinkTheirSide(t *testing.T) {
	deps := map[string][]string{}
	for _, p := range list(t) {
		deps[rel(p.ImportPath)] = p.Deps
	}
	check := func(bin string, banned ...string) {
		d, ok := deps[bin]
		if !ok {
			t.Fatalf("no package %s", bin)
		}
		for _, dep := range d {
			for _, b := range banned {
				if dep == b || strings.HasPrefix(dep, b+"/") || (!strings.Contains(b, "/") && strings.Contains(dep, b)) {
					t.Errorf("go list -deps ./%s contains %s", bin, dep)
				}
			}
		}
	}
	check("cmd/syncer", "ollama",
		module+"/internal/evaluator", module+"/internal/semantic", module+"/internal/notify", module+"/internal/outbox")
	check("cmd/evaluator", module+"/internal/connectors", module+"/internal/syncer")
	// The api links the connectors to validate the sources made through
	// it (decoders and constructors: the one validation path), and runs
	// none: no syncer.
	check("cmd/api", module+"/internal/syncer")
}

// apiModelEdges are the only imports through which cmd/api may still
// reach the evaluator or the model client (internal/semantic, the
// Ollama API package), each with why: a ratchet that
// TestAPILinksNoEvaluatorOrModel keeps from growing. Empty since issue 21
// (dry runs replay through internal/replay; those with the model are
// answered by the evaluator deployment); never add one without an issue.
var apiModelEdges = map[[2]string]string{}

// TestAPILinksNoEvaluatorOrModel: the api validates watches through
// watchspec, below the evaluator; no package cmd/api links may import
// internal/evaluator, internal/semantic or the Ollama API package except
// through an edge of apiModelEdges (the imports inside those packages
// are theirs).
func TestAPILinksNoEvaluatorOrModel(t *testing.T) {
	pkgs := map[string]pkg{}
	for _, p := range list(t) {
		pkgs[p.ImportPath] = p
	}
	banned := func(path string) bool {
		switch {
		case path == module+"/internal/evaluator", path == module+"/internal/semantic":
			return true
		case strings.HasPrefix(path, "github.com/ollama/ollama/"):
			return true
		}
		return false
	}
	api, ok := pkgs[module+"/cmd/api"]
	if !ok {
		t.Fatal("no package cmd/api")
	}
	linked := append([]string{api.ImportPath}, api.Deps...)
	used := map[[2]string]bool{}
	for _, path := range linked {
		p, ok := pkgs[path]
		if !ok || banned(path) {
			continue // outside the module, or inside what is banned
		}
		for _, imp := range p.Imports {
			if !banned(imp) {
				continue
			}
			edge := [2]string{rel(p.ImportPath), rel(imp)}
			if _, ok := apiModelEdges[edge]; !ok {
				t.Errorf("cmd/api links %s through %s, which imports it: the api links no evaluator and no model client", rel(imp), rel(p.ImportPath))
				continue
			}
			used[edge] = true
		}
	}
	for edge, why := range apiModelEdges {
		if !used[edge] {
			t.Errorf("apiModelEdges allows %s → %s (%s), which cmd/api no longer links: remove the edge", edge[0], edge[1], why)
		}
	}
}

// writes finds a statement that writes table in Go source: INSERT INTO,
// UPDATE, DELETE FROM, COPY, TRUNCATE, or a pgx CopyFrom on its identifier.
func writes(table string) *regexp.Regexp {
	return regexp.MustCompile(`(?i)\b(insert\s+into|update|delete\s+from|copy|truncate(\s+table)?)\s+(only\s+)?("?\w+"?\.)?"?` +
		table + `"?(\s|$|\(|;)|Identifier\{"` + table + `"\}`)
}

// goSources yields every non-test .go file of the module with its rel dir.
func goSources(t *testing.T, fn func(dir, path string, src []byte)) {
	t.Helper()
	base := root(t)
	err := filepath.WalkDir(base, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", ".data", ".tools", "bin", "testdata", "node_modules":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		r, _ := filepath.Rel(base, filepath.Dir(path))
		fn(filepath.ToSlash(r), filepath.ToSlash(path[len(base)+1:]), src)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// owners is the one owner package of every table of the schema: the only
// package whose Go sources write it (INSERT, UPDATE, DELETE, COPY,
// TRUNCATE). A new table gets a row here (TestEveryTableHasAnOwner).
var owners = map[string]string{
	"notifications":        "internal/outbox",
	"notification_keys":    "internal/outbox",
	"delivery_attempts":    "internal/outbox",
	"records":              "internal/changes",
	"changes":              "internal/changes",
	"activity_hour_totals": "internal/changes",
	"api_tokens":           "internal/tokens",
	"sign_in_links":        "internal/tokens",
	"audit_log":            "internal/audit",
	"idempotency_keys":     "internal/idempotency",
	"source_definitions":   "internal/definitions",
	"watches":              "internal/definitions",
	"config_version":       "internal/definitions",
	"definition_deletions": "internal/definitions",
	"config_generations":   "internal/definitions",
	"inbound_events":       "internal/inbound",
	"task_runs":            "internal/tasks",
	"task_reviews":         "internal/tasks",
	"sources":              "internal/sources",
	"sync_runs":            "internal/sources",
	"sync_run_hours":       "internal/syncer",
	"host_limits":          "internal/syncer",
	"evaluations":          "internal/evaluator",
	"model_drift_days":     "internal/evaluator",
	"verdicts":             "internal/semantic",
	"briefings":            "internal/semantic",
	"model_calls":          "internal/semantic",
	"model_budgets":        "internal/semantic",
	"dry_run_requests":     "internal/replay",
	"drift_embeddings":     "internal/drift",
	"model_versions":       "internal/drift",
}

// ownerExceptions are the packages that write tables they do not own,
// each documented in docs/development.md: internal/retention deletes the
// expired history of the partitioned tables and the hourly rollups (it
// builds its DELETEs per table), and internal/bench fills the throwaway
// schemas of its measurements with synthetic sources and runs a raw claim
// loop as the baseline of the syncer's.
var ownerExceptions = map[string]bool{"internal/retention": true, "internal/bench": true}

// schemaTables lists the tables the migrations create (and do not drop
// again), in migrations/*.up.sql.
func schemaTables(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root(t), "migrations", "*.up.sql"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no migrations found (%v)", err)
	}
	slices.Sort(files)
	create := regexp.MustCompile(`(?i)\bcreate\s+(?:unlogged\s+)?table\s+(?:if\s+not\s+exists\s+)?"?(\w+)"?(\s+partition\s+of\b)?`)
	drop := regexp.MustCompile(`(?i)\bdrop\s+table\s+(?:if\s+exists\s+)?"?(\w+)"?`)
	tables := map[string]bool{}
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		src = regexp.MustCompile(`--[^\n]*`).ReplaceAll(src, nil)
		for _, m := range create.FindAllSubmatch(src, -1) {
			if m[2] == nil { // a partition belongs to its parent
				tables[strings.ToLower(string(m[1]))] = true
			}
		}
		for _, m := range drop.FindAllSubmatch(src, -1) {
			delete(tables, strings.ToLower(string(m[1])))
		}
	}
	return slices.Sorted(maps.Keys(tables))
}

// TestEveryTableHasAnOwner fails for a table of the migrations without a
// row in owners, and for a row whose table the migrations do not have.
func TestEveryTableHasAnOwner(t *testing.T) {
	tables := schemaTables(t)
	if len(tables) < len(owners)/2 {
		t.Fatalf("found only %d tables in the migrations: %v", len(tables), tables)
	}
	for _, table := range tables {
		if _, ok := owners[table]; !ok {
			t.Errorf("table %s has no owner: add it to owners (internal/architecture) with the one package that writes it", table)
		}
	}
	for table := range owners {
		if !slices.Contains(tables, table) {
			t.Errorf("owners lists %s, which the migrations do not create", table)
		}
	}
}

// TestOneOwnerPerTable greps the SQL in Go sources: only a table's owner
// writes it, except that the evaluator may set the eval_* columns (and
// evaluated_at) of changes, and the exceptions of ownerExceptions.
func TestOneOwnerPerTable(t *testing.T) {
	goSources(t, func(dir, path string, src []byte) {
		if ownerExceptions[dir] {
			return
		}
		for table, owner := range owners {
			if dir == owner {
				continue
			}
			re := writes(table)
			for _, loc := range re.FindAllIndex(src, -1) {
				stmt := string(src[loc[0]:loc[1]])
				line := 1 + bytes.Count(src[:loc[0]], []byte("\n"))
				if table == "changes" && dir == "internal/evaluator" && evalColumnsOnly(statement(src, loc[0])) {
					continue
				}
				t.Errorf("%s:%d writes %s (%q); only %s may", path, line, table, firstLine(stmt), owner)
			}
		}
	})
}

// TestOnePrunerPerTable: a table that grows with time is pruned by one
// pruner, internal/retention, honouring its retention.* window; nothing
// else calls an owner's prune query (the api once pruned idempotency_keys
// every hour at a fixed 24 h, whatever retention.idempotency_keys said).
func TestOnePrunerPerTable(t *testing.T) {
	prune := regexp.MustCompile(`\b(\w+)\.(Prune\w*)\(`)
	goSources(t, func(dir, path string, src []byte) {
		if dir == "internal/retention" {
			return
		}
		for _, loc := range prune.FindAllSubmatchIndex(src, -1) {
			pkg := string(src[loc[2]:loc[3]])
			if !slices.Contains(slices.Collect(maps.Values(owners)), "internal/"+pkg) {
				continue
			}
			line := 1 + bytes.Count(src[:loc[0]], []byte("\n"))
			t.Errorf("%s:%d calls %s.%s: only internal/retention prunes (through the owner's prune query, with the table's retention window)",
				path, line, pkg, src[loc[4]:loc[5]])
		}
	})
}

// setClause finds the SET list of an UPDATE, up to WHERE, FROM or RETURNING.
var setClause = regexp.MustCompile(`(?is)^update\s+\w+(\s+(as\s+)?\w+)??\s+set\s+(.*?)(\bwhere\b|\bfrom\b|\breturning\b|$)`)

// evalColumnsOnly reports whether stmt (an UPDATE up to the end of its Go
// string) assigns only eval_* columns and evaluated_at.
func evalColumnsOnly(stmt []byte) bool {
	sub := setClause.FindSubmatch(stmt)
	if sub == nil {
		return false
	}
	assign := regexp.MustCompile(`(?:^|,)\s*(\w+)\s*=`)
	cols := assign.FindAllSubmatch(stripParens(sub[3]), -1)
	if len(cols) == 0 {
		return false
	}
	for _, c := range cols {
		col := string(c[1])
		if !strings.HasPrefix(col, "eval_") && col != "evaluated_at" {
			return false
		}
	}
	return true
}

// statement returns src from start to the end of the Go string it is in
// (the next backquote or double quote).
func statement(src []byte, start int) []byte {
	end := bytes.IndexAny(src[start:], "`\"")
	if end < 0 {
		return src[start:]
	}
	return src[start : start+end]
}

// stripParens removes parenthesised sub-expressions so that commas inside
// function calls do not look like column separators.
func stripParens(b []byte) []byte {
	var out []byte
	depth := 0
	for _, c := range b {
		switch {
		case c == '(':
			depth++
		case c == ')' && depth > 0:
			depth--
		case depth == 0:
			out = append(out, c)
		}
	}
	return out
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " …"
	}
	return s
}

// TestWritesDetector keeps the SQL detector honest: it finds the forms of a
// write and lets the evaluator's eval_* updates through.
func TestWritesDetector(t *testing.T) {
	for _, tc := range []struct {
		table, src string
		want       bool
		evalOnly   bool
	}{
		{"notifications", "`INSERT INTO notifications (dedupe_key) VALUES ($1)`", true, false},
		{"notifications", "`UPDATE notifications n SET status = 'dead'`", true, false},
		{"notifications", "`delete from notifications where id = $1`", true, false},
		{"notifications", `tx.CopyFrom(ctx, pgx.Identifier{"notifications"}, cols, rows)`, true, false},
		{"notifications", "`SELECT * FROM notifications`", false, false},
		{"notifications", "`UPDATE notifications_archive SET x = 1`", false, false},
		{"changes", "`UPDATE changes SET eval_owner = $2, eval_lease_expires_at = now() + $3::interval WHERE id = ANY($1)`", true, true},
		{"changes", "`UPDATE changes SET eval_status = 'done', evaluated_at = clock_timestamp(), record = NULL WHERE id = $1`", true, false},
		{"changes", "`UPDATE changes c SET eval_next_at = u.next_at FROM u WHERE c.id = u.id`", true, true},
	} {
		re := writes(tc.table)
		loc := re.FindIndex([]byte(tc.src))
		if (loc != nil) != tc.want {
			t.Errorf("writes(%s) on %s: found %v, want %v", tc.table, tc.src, loc != nil, tc.want)
			continue
		}
		if loc != nil && tc.table == "changes" {
			if got := evalColumnsOnly(statement([]byte(tc.src), loc[0])); got != tc.evalOnly {
				t.Errorf("evalColumnsOnly(%s) = %v, want %v", tc.src, got, tc.evalOnly)
			}
		}
	}
}
