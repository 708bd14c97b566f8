package architecture

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// transports are the packages that serve the api's requests (HTTP, MCP,
// the admin page): they reach the database through control's named
// functions and never hold a pool.
var transports = []string{"internal/api", "internal/mcp", "internal/admin"}

// poolHolders may call a Pool() method: the test database helpers.
var poolHolders = []string{"internal/pgtest", "internal/db"}

// poolEscapes returns where src (file path, of package dir) hands out or
// takes a pool behind its owner's back: a method or function of
// internal/control that returns a *pgxpool.Pool (the escape hatch
// control.Service.Pool() was), a call of a Pool() method outside the
// database helpers, or a transport importing pgxpool.
func poolEscapes(dir, path string, src []byte) ([]string, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, src, 0)
	if err != nil {
		return nil, err
	}
	var out []string
	at := func(n ast.Node, msg string) {
		out = append(out, fmt.Sprintf("%s:%d: %s", path, fset.Position(n.Pos()).Line, msg))
	}
	if slices.Contains(transports, dir) {
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); p == "github.com/jackc/pgx/v5/pgxpool" {
				at(imp, "a transport imports pgxpool: it reaches the database through control's named functions")
			}
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch x := n.(type) {
		case *ast.FuncDecl:
			if dir != "internal/control" || x.Type.Results == nil || !x.Name.IsExported() {
				return true
			}
			for _, r := range x.Type.Results.List {
				if star, ok := r.Type.(*ast.StarExpr); ok {
					if sel, ok := star.X.(*ast.SelectorExpr); ok && sel.Sel.Name == "Pool" {
						at(x, "control."+x.Name.Name+" returns its pool: control owns its transactions, callers use its named functions")
					}
				}
			}
		case *ast.CallExpr:
			if sel, ok := x.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "Pool" && len(x.Args) == 0 && !slices.Contains(poolHolders, dir) {
				at(x, "calls a Pool() escape hatch: go through the named functions of control or of the table's owner")
			}
		}
		return true
	})
	return out, nil
}

// sqlParams returns where src (a file of internal/control) takes SQL
// text from its callers: an exported function or method with a string
// parameter named sql, query, stmt or statement. The admin page's
// statements are control's (ReportQuery, a closed set), so a transport
// cannot send its own.
func sqlParams(path string, src []byte) ([]string, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, src, 0)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || !fn.Name.IsExported() {
			continue
		}
		for _, field := range fn.Type.Params.List {
			if id, ok := field.Type.(*ast.Ident); !ok || id.Name != "string" {
				continue
			}
			for _, n := range field.Names {
				switch strings.ToLower(n.Name) {
				case "sql", "query", "stmt", "statement":
					out = append(out, fmt.Sprintf("%s:%d: control.%s takes SQL text (%s string) from its caller: "+
						"control runs its own named statements (ReportQuery), never one a transport sends", path, fset.Position(n.Pos()).Line, fn.Name.Name, n.Name))
				}
			}
		}
	}
	return out, nil
}

// TestControlOwnsItsTransactions: no Pool() escape hatch. control hands
// no pool out, nothing calls a Pool() method to get one, and the
// transports (api, mcp, admin) hold none; and control takes no SQL text
// from them (sqlParams).
func TestControlOwnsItsTransactions(t *testing.T) {
	goSources(t, func(dir, path string, src []byte) {
		bad, err := poolEscapes(dir, path, src)
		if err != nil {
			t.Fatal(err)
		}
		if dir == "internal/control" {
			more, err := sqlParams(path, src)
			if err != nil {
				t.Fatal(err)
			}
			bad = append(bad, more...)
		}
		for _, b := range bad {
			t.Error(b)
		}
	})
}

// sqlWord is an SQL keyword as the statements write it (upper case).
var sqlWord = regexp.MustCompile(`\b(SELECT|FROM|WHERE|AND|OR|ORDER BY|GROUP BY|LIMIT|UNION|JOIN)\b`)

// stringOps are the functions that cut or assemble text.
var stringOps = map[string]bool{
	"fmt.Sprintf": true, "fmt.Sprint": true, "fmt.Fprintf": true, "strings.Replace": true, "strings.ReplaceAll": true,
	"strings.Cut": true, "strings.Index": true, "strings.Join": true, "strings.Contains": true, "strings.Split": true,
	"strings.TrimSuffix": true, "strings.TrimPrefix": true,
}

// sqlBuilding returns where src (a file of internal/admin) builds or cuts
// SQL text instead of sending a named statement with its parameters: a
// string operation (fmt.Sprintf, strings.Replace, strings.Cut, …) given
// an SQL fragment or a statement (a variable or field named sql), a +
// or += with an SQL fragment outside a const declaration.
func sqlBuilding(path string, src []byte) ([]string, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, src, 0)
	if err != nil {
		return nil, err
	}
	var out []string
	at := func(n ast.Node, msg string) {
		out = append(out, fmt.Sprintf("%s:%d: %s", path, fset.Position(n.Pos()).Line, msg))
	}
	isSQL := func(e ast.Expr) bool {
		switch x := e.(type) {
		case *ast.BasicLit:
			s, err := strconv.Unquote(x.Value)
			return err == nil && x.Kind == token.STRING && sqlWord.MatchString(s)
		case *ast.Ident:
			return x.Name == "sql"
		case *ast.SelectorExpr:
			return x.Sel.Name == "sql"
		}
		return false
	}
	for _, d := range f.Decls {
		if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.CONST {
			continue // constants are named statements, folded by the compiler
		}
		ast.Inspect(d, func(n ast.Node) bool {
			switch x := n.(type) {
			case *ast.CallExpr:
				sel, ok := x.Fun.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				pkg, ok := sel.X.(*ast.Ident)
				if !ok || !stringOps[pkg.Name+"."+sel.Sel.Name] {
					return true
				}
				if slices.ContainsFunc(x.Args, isSQL) {
					at(x, pkg.Name+"."+sel.Sel.Name+" on SQL: a statement is a named constant whose filters are parameters")
				}
			case *ast.BinaryExpr:
				if x.Op == token.ADD && (isSQL(x.X) || isSQL(x.Y)) {
					at(x, "SQL assembled with +: a statement is a named constant whose filters are parameters")
					return false
				}
			case *ast.AssignStmt:
				if x.Tok == token.ADD_ASSIGN && (slices.ContainsFunc(x.Lhs, isSQL) || slices.ContainsFunc(x.Rhs, isSQL)) {
					at(x, "SQL assembled with +=: a statement is a named constant whose filters are parameters")
				}
			}
			return true
		})
	}
	return out, nil
}

// sqlStatement is the start of an SQL statement's text.
var sqlStatement = regexp.MustCompile(`(?is)^\s*(SELECT\b.*\bFROM\b|WITH\b.*\bAS\s*\(|INSERT\s+INTO\b|UPDATE\b.*\bSET\b|DELETE\s+FROM\b)`)

// sqlText returns where src (a file of internal/admin) holds the text of
// a statement: a string literal, constant or not, that is one. The admin
// page's statements are control's named report queries
// (internal/control/report_queries.go); the page names them
// (control.ReportSources) and passes their parameters.
func sqlText(path string, src []byte) ([]string, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, src, 0)
	if err != nil {
		return nil, err
	}
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
			if s, err := strconv.Unquote(lit.Value); err == nil && sqlStatement.MatchString(s) {
				out = append(out, fmt.Sprintf("%s:%d: SQL text in the admin page: its statements are control's named report queries (control.Report*)",
					path, fset.Position(lit.Pos()).Line))
			}
		}
		return true
	})
	return out, nil
}

// TestAdminSendsNamedStatements: the admin page builds no SQL and holds
// none. Each of its lists is one of control's named statements
// (control.ReportQuery, with the type of its rows) whose filters and
// cursor are parameters (`$1::text IS NULL OR kind = $1`); no WHERE is
// cut into or appended to a statement's text, and no statement's text is
// in the admin package at all.
func TestAdminSendsNamedStatements(t *testing.T) {
	goSources(t, func(dir, path string, src []byte) {
		if dir != "internal/admin" {
			return
		}
		bad, err := sqlBuilding(path, src)
		if err != nil {
			t.Fatal(err)
		}
		text, err := sqlText(path, src)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range append(bad, text...) {
			t.Error(b)
		}
	})
}

// TestTransactionRulesCatchPlantedCases: each rule fails on a planted
// case (the shapes this code had before issue 21), and lets the ways that
// are allowed through.
func TestTransactionRulesCatchPlantedCases(t *testing.T) {
	for _, tc := range []struct {
		name, dir, src string
		want           int
	}{
		{"control hands its pool out", "internal/control", `package control
import "github.com/jackc/pgx/v5/pgxpool"
type Service struct{ pool *pgxpool.Pool }
func (s *Service) Pool() *pgxpool.Pool { return s.pool }`, 1},
		{"a transport takes the pool", "internal/admin", `package admin
import "github.com/jackc/pgx/v5/pgxpool"
type Admin struct{ pool *pgxpool.Pool }
func New(svc interface{ Pool() *pgxpool.Pool }) *Admin { return &Admin{pool: svc.Pool()} }`, 2},
		{"a daemon's command takes the pool", "cmd/api", `package main
func run(svc interface{ Pool() any }) { _ = svc.Pool() }`, 1},
		{"the test helpers hand pools out", "internal/pgtest", `package pgtest
func f(h interface{ Pool() any }) { _ = h.Pool() }`, 0},
		{"control runs SQL text its caller sends (the Report of before)", "internal/control", `package control
func (s *Service) Report(ctx context.Context, p Principal, sql string, args []any, scan func(pgx.Rows) error) error { return nil }`, 1},
		{"control's named functions", "internal/control", `package control
func ReportRows[T any](ctx context.Context, s *Service, p Principal, q ReportQuery[T], args ...any) ([]T, error) { return nil, nil }
func (s *Service) report(ctx context.Context, p Principal, name, sql string, args []any) error { return nil }`, 0},
	} {
		bad, err := poolEscapes(tc.dir, "planted.go", []byte(tc.src))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if tc.dir == "internal/control" {
			more, err := sqlParams("planted.go", []byte(tc.src))
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			bad = append(bad, more...)
		}
		if len(bad) != tc.want {
			t.Errorf("%s: %d findings %q, want %d", tc.name, len(bad), bad, tc.want)
		}
	}
	for _, tc := range []struct {
		name, src string
		want      int
	}{
		{"conditions added with Sprintf", `package admin
func f(args []any) string {
	sql := querySources
	sql += fmt.Sprintf(" AND status = $%d", len(args))
	return sql
}`, 2},
		{"a WHERE cut into a statement", `package admin
func filtered(sql string, conds []string) string {
	base, rest, _ := strings.Cut(sql, "\nORDER BY ")
	return base + "\nWHERE " + strings.Join(conds, " AND ") + "\nORDER BY " + rest
}`, 2},
		{"a condition replaced in", `package admin
func f(sql, cond string) string { return strings.Replace(sql, "\n\t\tORDER BY", "\n\t\t  AND "+cond+"\n\t\tORDER BY", 1) }`, 2},
		{"a planted statement passed to control", `package admin
func f(ctx context.Context, a *Admin, p *page) error {
	return a.svc.Report(ctx, p.who, "SELECT * FROM sources WHERE owner = $1", []any{"x"}, nil)
}`, 1},
		{"a statement of the admin's own", `package admin
const queryMine = ` + "`" + `
		SELECT name FROM sources
		WHERE status = $1` + "`" + `
`, 1},
		{"named statements of control and messages", `package admin
func f(ctx context.Context, a *Admin, p *page, n int) string {
	rows, _ := control.ReportRows(ctx, a.svc, p.who, control.ReportSources, control.SourcesFilter{}.Args()...)
	return fmt.Sprintf("Retry takes at most %d ids, %d selected from the list.", n, len(rows)) + " Try again."
}`, 0},
	} {
		bad, err := sqlBuilding("planted.go", []byte(tc.src))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		text, err := sqlText("planted.go", []byte(tc.src))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		bad = append(bad, text...)
		if len(bad) != tc.want {
			t.Errorf("%s: %d findings %q, want %d", tc.name, len(bad), bad, tc.want)
		}
	}
}
