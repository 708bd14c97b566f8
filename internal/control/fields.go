package control

import (
	"fmt"
	"slices"
	"strings"

	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/parser"
)

// The fields of record and previous, and of change, as a `when`
// expression sees them (normalize.Record.Fields, evaluator's whenEnv).
var (
	recordFields = []string{"author", "body", "created_at", "extra", "id", "labels", "status", "title", "updated_at", "url"}
	changeFields = []string{"changed_fields", "id", "kind", "version"}
)

// checkWhen finds fields a `when` expression names that records do not
// have (record.titel): expr compiles them (records are maps), and they
// would silently be nil. Syntax errors are left to the validation path.
func checkWhen(when, pointer string) error {
	if strings.TrimSpace(when) == "" {
		return nil
	}
	tree, err := parser.Parse(when)
	if err != nil {
		return nil
	}
	v := &fieldVisitor{}
	ast.Walk(&tree.Node, v)
	if len(v.bad) == 0 {
		return nil
	}
	out := &InvalidError{}
	for _, b := range v.bad {
		out.Errors = append(out.Errors, FieldError{Pointer: pointer, Value: when, Detail: b})
	}
	return out
}

type fieldVisitor struct{ bad []string }

func (f *fieldVisitor) Visit(node *ast.Node) {
	m, ok := (*node).(*ast.MemberNode)
	if !ok {
		return
	}
	id, ok := m.Node.(*ast.IdentifierNode)
	if !ok {
		return
	}
	prop, ok := m.Property.(*ast.StringNode)
	if !ok {
		return
	}
	var known []string
	switch id.Value {
	case "record", "previous":
		known = recordFields
	case "change":
		known = changeFields
	default:
		return
	}
	if !slices.Contains(known, prop.Value) {
		msg := fmt.Sprintf("%s.%s is not a field: %s has %s", id.Value, prop.Value, id.Value, strings.Join(known, ", "))
		if id.Value != "change" {
			msg += fmt.Sprintf("; a connector's own fields are under %s.extra (e.g. %s.extra.%s); describe_source lists them", id.Value, id.Value, prop.Value)
		}
		f.bad = append(f.bad, msg)
	}
}
