package architecture

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"regexp"
	"slices"
	"strconv"
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

// TestControlOwnsItsTransactions: no Pool() escape hatch. control hands
// no pool out, nothing calls a Pool() method to get one, and the
// transports (api, mcp, admin) hold none.
func TestControlOwnsItsTransactions(t *testing.T) {
	goSources(t, func(dir, path string, src []byte) {
		bad, err := poolEscapes(dir, path, src)
		if err != nil {
			t.Fatal(err)
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

// TestAdminSendsNamedStatements: the admin page builds no SQL. Each of
// its lists is one constant statement whose filters and cursor are
// parameters (`$1::text IS NULL OR kind = $1`), sent through
// control.Report; no WHERE is cut into or appended to a statement's text.
func TestAdminSendsNamedStatements(t *testing.T) {
	goSources(t, func(dir, path string, src []byte) {
		if dir != "internal/admin" {
			return
		}
		bad, err := sqlBuilding(path, src)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range bad {
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
		{"control's named functions", "internal/control", `package control
func (s *Service) Report(ctx context.Context, sql string) error { return nil }`, 0},
	} {
		bad, err := poolEscapes(tc.dir, "planted.go", []byte(tc.src))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
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
		{"named constants and messages", `package admin
const queryA = "SELECT 1" + " FROM x"
func f(n int) string { return fmt.Sprintf("Retry takes at most %d ids.", n) + " Try again." }`, 0},
	} {
		bad, err := sqlBuilding("planted.go", []byte(tc.src))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if len(bad) != tc.want {
			t.Errorf("%s: %d findings %q, want %d", tc.name, len(bad), bad, tc.want)
		}
	}
}
