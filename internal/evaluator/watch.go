package evaluator

import (
	"fmt"
	"slices"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/vm"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/semantic"
)

// watch is a compiled config.Watch.
type watch struct {
	cfg    *config.Watch
	source string
	when   *vm.Program
	// question is the model step of a watch with an ask; nil without.
	question *semantic.Question
}

// compileEnv declares the variables a `when` expression sees:
//
//	record    the normalized record after the change (id, title, body, url,
//	          author, status, labels, created_at, updated_at, extra)
//	previous  the record before the change; nil for a created record
//	change    id, kind (created/updated/deleted), version, changed_fields
//	source    the source name
//	changed   changed("status") reports whether a field changed
var compileEnv = map[string]any{
	"record":   map[string]any{},
	"previous": map[string]any{},
	"change":   map[string]any{},
	"source":   "",
	"changed":  func(string) bool { return false },
}

// compileWhen compiles a watch condition.
func compileWhen(src string) (*vm.Program, error) {
	p, err := expr.Compile(src, expr.Env(compileEnv), expr.AsBool())
	if err != nil {
		return nil, fmt.Errorf("expression %q: %w", src, err)
	}
	return p, nil
}

// whenEnv builds the expression environment of one change.
func whenEnv(c *change) map[string]any {
	var prev any
	if c.Previous != nil {
		prev = c.Previous
	}
	fields := c.ChangedFields
	return map[string]any{
		"record":   c.Record,
		"previous": prev,
		"change": map[string]any{
			"id":             c.ID,
			"kind":           c.Kind,
			"version":        c.Version,
			"changed_fields": toAny(fields),
		},
		"source":  c.Source,
		"changed": func(f string) bool { return slices.Contains(fields, f) },
	}
}

func toAny(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

// match runs the watch's condition against one change.
func (w *watch) match(vmEnv map[string]any) (bool, error) {
	out, err := expr.Run(w.when, vmEnv)
	if err != nil {
		return false, err
	}
	b, ok := out.(bool)
	if !ok {
		return false, fmt.Errorf("condition returned %T, want a boolean", out)
	}
	return b, nil
}
