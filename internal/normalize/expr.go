package normalize

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/vm"
)

// Program is a compiled user expression over a fixed set of variables of
// dynamic type. It is what every mapping, item and paging expression in the
// configuration compiles to, so they all accept the same language
// (expr-lang/expr) and an unknown variable is a compile-time error.
type Program struct {
	prog *vm.Program
	env  reflect.Type
}

// Compile compiles src with the given variable names.
func Compile(src string, vars ...string) (*Program, error) {
	fields := make([]reflect.StructField, len(vars))
	for i, v := range vars {
		fields[i] = reflect.StructField{
			Name: "V" + strings.ToUpper(v[:1]) + v[1:],
			Type: reflect.TypeFor[any](),
			Tag:  reflect.StructTag(fmt.Sprintf(`expr:%q`, v)),
		}
	}
	env := reflect.StructOf(fields)
	p, err := expr.Compile(src, expr.Env(reflect.New(env).Elem().Interface()))
	if err != nil {
		return nil, &ExprError{Msg: fmt.Sprintf("expression %q: %s", src, exprMessage(err, vars))}
	}
	return &Program{prog: p, env: env}, nil
}

// Run evaluates the program with values for the variables, in the order
// they were given to Compile.
func (p *Program) Run(vals ...any) (any, error) {
	env := reflect.New(p.env).Elem()
	for i, v := range vals {
		if v != nil {
			env.Field(i).Set(reflect.ValueOf(v))
		}
	}
	return expr.Run(p.prog, env.Interface())
}
