package normalize

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/file"
	"github.com/expr-lang/expr/parser"
	"github.com/expr-lang/expr/types"
	"github.com/expr-lang/expr/vm"

	"github.com/lookout-dev/lookout/internal/intern"
)

// Condition is a compiled boolean expression over named variables of a
// known shape: a watch's `when` (CompileWhen) or a source's `stop.when`
// (CompileStopWhen). It is compiled and type-checked once; Run only runs it.
type Condition struct {
	src  string
	prog *vm.Program
}

// String returns the expression as written.
func (c *Condition) String() string { return c.src }

// Run evaluates the condition with the variables of env (see CompileWhen
// and CompileStopWhen for the names and their shapes).
func (c *Condition) Run(env map[string]any) (bool, error) {
	return c.result(expr.Run(c.prog, env))
}

// RunOn is Run on the VM m, which a caller running many conditions in one
// goroutine reuses from run to run: expr.Run makes a new VM, its stack and
// its variables at every run. m is not safe for concurrent use.
func (c *Condition) RunOn(m *vm.VM, env map[string]any) (bool, error) {
	return c.result(m.Run(c.prog, env))
}

// result reads what a run of the condition gave.
func (c *Condition) result(out any, err error) (bool, error) {
	if err != nil {
		return false, runError(err)
	}
	b, ok := out.(bool)
	if !ok {
		return false, fmt.Errorf("returned %s, want a boolean", article(fmt.Sprintf("%T", out)))
	}
	return b, nil
}

// runError words an error of a running condition without expr's source
// snippet (the caller names the expression).
func runError(err error) error {
	var fe *file.Error
	if !errors.As(err, &fe) {
		return err
	}
	if t, ok := strings.CutPrefix(fe.Message, "invalid operation: bool("); ok {
		return fmt.Errorf("returned %s, want a boolean", article(strings.TrimSuffix(t, ")")))
	}
	return errors.New(fe.Message)
}

// ExprError is one problem found in an expression before it ever runs: an
// unknown variable or field, a type mismatch, a result that is not a
// boolean. Msg names the offending part ("unknown field record.stauts (did
// you mean record.status?)"); the caller adds the configuration key.
type ExprError struct {
	Msg string
}

func (e *ExprError) Error() string { return e.Msg }

// Problems lists the problems of an error returned by CompileWhen,
// CompileStopWhen (*ExprError values) or NewMapper (*KeyError and others),
// one per problem; nil for nil.
func Problems(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// recordFields are the normalized record's fields as expressions see them
// (Record.Fields): text fields are strings, labels a list of strings,
// times RFC 3339 strings or nil, extra an object.
var recordFields = []string{"id", "title", "body", "url", "author", "status", "labels", "created_at", "updated_at", "extra"}

// changeFields are the keys of `change` in a watch's condition.
var changeFields = []string{"id", "kind", "version", "changed_fields"}

// recordType is the shape of `record` and `previous` for a source whose
// fields.extra declares extra (nil: not set).
func recordType(extra map[string]string) types.Map {
	ext := types.Map{}
	for k := range extra {
		ext[k] = types.Any
	}
	return types.Map{
		"id": types.String, "title": types.String, "body": types.String, "url": types.String,
		"author": types.String, "status": types.String,
		"labels":     types.Array(types.String),
		"created_at": types.Any, "updated_at": types.Any,
		"extra": ext,
	}
}

// CompileWhen compiles and type-checks a watch condition against the shape
// of the source's records. The variables are
//
//	record    the record after the change: id, title, body, url, author,
//	          status (strings), labels (list of strings), created_at,
//	          updated_at (RFC 3339 strings or nil), extra (an object)
//	previous  the record before the change, same shape; nil when created
//	change    id, kind (created, updated, deleted), version, changed_fields
//	source    the source name
//	changed   changed("status") reports whether a field changed
//
// When fields.extra is set (f.Extra not nil), record.extra holds exactly
// its keys, and record.extra.<key> must be one of them. Otherwise extra
// holds whatever item keys no field consumed, which no check can know:
// such a key is read with get(record.extra, "key") (nil when absent), so
// that a typo in a field name is never silently nil.
//
// Every problem is an *ExprError (joined): an unknown variable or field
// (with a "did you mean" suggestion), a type mismatch, a result that is
// not a boolean.
//
// Conditions are interned: equal text over the same shape (the same keys
// of f.Extra, or none) gives the one *Condition while anything holds it,
// so that watches copying a condition share its compiled program.
func CompileWhen(src string, f FieldExprs) (*Condition, error) {
	return whens.Get(whenKey(src, f.Extra), func() (*Condition, error) { return compileWhen(src, f) })
}

// whens interns CompileWhen's conditions.
var whens intern.Cache[Condition]

// whenKey is what a condition of CompileWhen depends on: its text, the
// keys of extra (nil and empty differ) and which of them map to "" (the
// check takes those as undeclared).
func whenKey(src string, extra map[string]string) string {
	var b strings.Builder
	if extra == nil {
		b.WriteString("-")
	} else {
		for _, k := range slices.Sorted(maps.Keys(extra)) {
			b.WriteString(strconv.Quote(k))
			if extra[k] == "" {
				b.WriteByte('!')
			}
		}
	}
	b.WriteByte(0)
	b.WriteString(src)
	return b.String()
}

func compileWhen(src string, f FieldExprs) (*Condition, error) {
	rec := recordType(f.Extra)
	env := types.Map{
		"record":   rec,
		"previous": rec,
		"change": types.Map{
			"id": types.Int64, "kind": types.String, "version": types.Int,
			"changed_fields": types.Array(types.String),
		},
		"source":  types.String,
		"changed": types.TypeOf(func(string) bool { return false }),
	}
	roots := map[string]*root{
		"record":   {fields: recordFields, extra: f.Extra, declared: f.Extra != nil},
		"previous": {fields: recordFields, extra: f.Extra, declared: f.Extra != nil},
		"change":   {fields: changeFields},
	}
	return compileCondition(src, env, roots, func(c *checker, n *ast.CallNode) {
		if id, ok := n.Callee.(*ast.IdentifierNode); !ok || id.Value != "changed" || len(n.Arguments) != 1 {
			return
		}
		s, ok := n.Arguments[0].(*ast.StringNode)
		if !ok {
			return
		}
		c.changedArg(s.Value, f.Extra)
	})
}

// stopRunFields and stopSourceFields are the keys of `run` and `source`
// in a source's stop.when.
var (
	stopRunFields = []string{"id", "reason", "status", "error", "pages", "requests", "rate_limit_waits", "seen",
		"created", "updated", "unchanged", "deleted", "changes", "started_at", "finished_at", "duration_seconds"}
	stopSourceFields = []string{"name", "connector", "failure_count", "last_change_at", "last_success_at"}
)

// CompileStopWhen compiles and type-checks a source's stop.when over
// `run` (id, reason, status, error, pages, requests, rate_limit_waits,
// seen, created, updated, unchanged, deleted, changes, started_at,
// finished_at, duration_seconds) and `source` (name, connector,
// failure_count, last_change_at, last_success_at). Problems are reported
// as by CompileWhen.
func CompileStopWhen(src string) (*Condition, error) {
	tm := types.TypeOf(time.Time{})
	run := types.Map{"id": types.Int64, "reason": types.String, "status": types.String, "error": types.String,
		"started_at": tm, "finished_at": tm, "duration_seconds": types.Float64}
	for _, k := range stopRunFields {
		if run[k] == nil {
			run[k] = types.Int // the counters
		}
	}
	source := types.Map{"name": types.String, "connector": types.String, "failure_count": types.Int,
		"last_change_at": types.Any, "last_success_at": types.Any} // times, nil before the first
	env := types.Map{"run": run, "source": source}
	roots := map[string]*root{"run": {fields: stopRunFields}, "source": {fields: stopSourceFields}}
	return compileCondition(src, env, roots, nil)
}

// root is a variable whose fields are known.
type root struct {
	fields []string
	// extra are the declared extra keys of a record; declared is whether
	// fields.extra is set at all.
	extra    map[string]string
	declared bool
}

// checker walks an expression's tree for the mistakes expr's own checker
// words poorly or cannot see: unknown fields of the known variables, with
// suggestions, and unknown field names given to changed() and get().
type checker struct {
	roots map[string]*root
	probs []error
}

func (c *checker) add(format string, args ...any) {
	c.probs = append(c.probs, &ExprError{Msg: fmt.Sprintf(format, args...)})
}

// chain returns the variable and keys of a member chain such as
// record.extra.plan ("record", ["extra", "plan"]), or ok false.
func chain(n ast.Node) (name string, keys []string, ok bool) {
	for {
		switch x := n.(type) {
		case *ast.IdentifierNode:
			slices.Reverse(keys)
			return x.Value, keys, true
		case *ast.MemberNode:
			s, isStr := x.Property.(*ast.StringNode)
			if !isStr {
				return "", nil, false
			}
			keys = append(keys, s.Value)
			n = x.Node
		case *ast.ChainNode:
			n = x.Node
		default:
			return "", nil, false
		}
	}
}

// member checks one field access whose base is a known variable.
func (c *checker) member(n *ast.MemberNode) {
	prop, ok := n.Property.(*ast.StringNode)
	if !ok {
		return
	}
	name, keys, ok := chain(n.Node)
	if !ok {
		return
	}
	r := c.roots[name]
	if r == nil {
		return
	}
	path := strings.Join(append(append([]string{name}, keys...), prop.Value), ".")
	switch {
	case len(keys) == 0:
		if !slices.Contains(r.fields, prop.Value) {
			c.add("unknown field %s%s", path, suggest(prop.Value, r.fields, name+"."))
		}
	case len(keys) == 1 && keys[0] == "extra" && slices.Contains(r.fields, "extra"):
		base := name + ".extra"
		switch {
		case !r.declared:
			c.add("unknown field %s: the source's fields.extra is not set, so extra holds whatever keys the item has; "+
				"read one with get(%s, %q), which is nil when the item has no such key", path, base, prop.Value)
		case r.extra[prop.Value] == "":
			c.add("unknown field %s%s", path, suggestExtra(prop.Value, r.extra, base+"."))
		}
	}
}

// get checks get(record.extra, "key") against the declared extra keys.
func (c *checker) get(args []ast.Node) {
	if len(args) != 2 {
		return
	}
	key, ok := args[1].(*ast.StringNode)
	if !ok {
		return
	}
	name, keys, ok := chain(args[0])
	r := c.roots[name]
	if !ok || r == nil || !r.declared || len(keys) != 1 || keys[0] != "extra" {
		return
	}
	if _, ok := r.extra[key.Value]; !ok {
		c.add("unknown field %s.extra.%s%s", name, key.Value, suggestExtra(key.Value, r.extra, name+".extra."))
	}
}

// changedArg checks the field name given to changed(): a record field or
// extra.<key> (a declared key when fields.extra is set).
func (c *checker) changedArg(field string, extra map[string]string) {
	if k, ok := strings.CutPrefix(field, "extra."); ok && k != "" {
		if extra == nil {
			return
		}
		if _, ok := extra[k]; ok {
			return
		}
		c.add("changed(%q) names an unknown field%s", field, suggestExtra(k, extra, "extra."))
		return
	}
	known := slices.DeleteFunc(slices.Clone(recordFields), func(s string) bool { return s == "extra" })
	if slices.Contains(known, field) {
		return
	}
	if s := suggest(field, known, ""); s != "" {
		c.add("changed(%q) names an unknown field%s", field, s)
		return
	}
	c.add("changed(%q) names an unknown field (known: %s, extra.<key>)", field, strings.Join(known, ", "))
}

func suggestExtra(key string, extra map[string]string, prefix string) string {
	if len(extra) == 0 {
		return " (fields.extra declares no keys)"
	}
	s := suggest(key, slices.Sorted(maps.Keys(extra)), prefix)
	if s == "" {
		return fmt.Sprintf(" (fields.extra declares %s)", strings.Join(slices.Sorted(maps.Keys(extra)), ", "))
	}
	return s
}

// visitor adapts checker to ast.Walk.
type visitor struct {
	c    *checker
	call func(*checker, *ast.CallNode)
}

func (v visitor) Visit(node *ast.Node) {
	switch n := (*node).(type) {
	case *ast.MemberNode:
		v.c.member(n)
	case *ast.BuiltinNode:
		if n.Name == "get" {
			v.c.get(n.Arguments)
		}
	case *ast.CallNode:
		if id, ok := n.Callee.(*ast.IdentifierNode); ok && id.Value == "get" {
			v.c.get(n.Arguments)
		}
		if v.call != nil {
			v.call(v.c, n)
		}
	}
}

// compileCondition parses src, reports every unknown field of the known
// roots, then compiles it with expr's checker against env as a boolean.
func compileCondition(src string, env types.Map, roots map[string]*root, call func(*checker, *ast.CallNode)) (*Condition, error) {
	tree, err := parser.Parse(src)
	if err != nil {
		return nil, &ExprError{Msg: exprMessage(err, nil)}
	}
	c := &checker{roots: roots}
	ast.Walk(&tree.Node, visitor{c: c, call: call})
	if len(c.probs) > 0 {
		return nil, errors.Join(c.probs...)
	}
	prog, err := expr.Compile(src, expr.Env(env), expr.AsBool())
	if err != nil {
		return nil, &ExprError{Msg: exprMessage(err, slices.Sorted(maps.Keys(env)))}
	}
	return &Condition{src: src, prog: prog}, nil
}

// exprMessage words an error of expr's parser or checker without its
// source snippet: a non-boolean result says what the result is, an
// unknown name suggests a variable.
func exprMessage(err error, names []string) string {
	msg := err.Error()
	var fe *file.Error
	if errors.As(err, &fe) {
		msg = fe.Message
	}
	if got, ok := strings.CutPrefix(msg, "expected bool, but got "); ok {
		return fmt.Sprintf("must be true or false, not %s", article(got))
	}
	if name, ok := strings.CutPrefix(msg, "unknown name "); ok {
		return fmt.Sprintf("unknown name %s%s (known: %s)", name, suggest(name, names, ""), strings.Join(names, ", "))
	}
	if fe != nil && fe.Line > 0 {
		return fmt.Sprintf("%s (at %d:%d)", msg, fe.Line, fe.Column+1)
	}
	return msg
}

// article names an expr type for a message: "a string", "a list".
func article(t string) string {
	switch {
	case t == "string":
		return "a string"
	case t == "int" || t == "int64" || t == "float64" || t == "float":
		return "a number"
	case strings.HasPrefix(t, "[]") || strings.HasPrefix(t, "Array"):
		return "a list"
	case strings.HasPrefix(t, "map[") || strings.HasPrefix(t, "Map"):
		return "an object"
	case t == "nil" || t == "<nil>":
		return "nil"
	case t == "bool":
		return "a boolean"
	case t == "time.Time":
		return "a time"
	}
	return "a " + t
}

// suggest returns " (did you mean <prefix><best>?)" for the candidate
// closest to name, or "" when none is close.
func suggest(name string, candidates []string, prefix string) string {
	best, bestD := "", -1
	for _, c := range candidates {
		d := editDistance(strings.ToLower(name), strings.ToLower(c))
		if bestD < 0 || d < bestD {
			best, bestD = c, d
		}
	}
	limit := 2
	if len(name) <= 3 {
		limit = 1
	}
	if n := len(name) / 3; n > limit {
		limit = n
	}
	if bestD < 0 || bestD > limit || bestD == len(name) {
		return ""
	}
	return fmt.Sprintf(" (did you mean %s%s?)", prefix, best)
}

// editDistance is the optimal string alignment distance: insertions,
// deletions, substitutions and transpositions of adjacent letters.
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	d := make([][]int, len(ra)+1)
	for i := range d {
		d[i] = make([]int, len(rb)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(ra); i++ {
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(ra)][len(rb)]
}
