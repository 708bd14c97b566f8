package evaluator

import (
	"slices"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/normalize"
	"github.com/lookout-dev/lookout/internal/semantic"
)

// watch is a compiled config.Watch.
type watch struct {
	cfg    *config.Watch
	source string
	// when is the watch's condition, compiled and type-checked against
	// the source's record shape by normalize.CompileWhen (the check
	// config.Load runs too).
	when *normalize.Condition
	// owner is the user the watch belongs to ("" for the operator's).
	owner string
	// question is the model step of a watch with an ask; nil without.
	question *semantic.Question
}

// whenEnv builds the expression environment of one change: the variables
// normalize.CompileWhen declares.
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
	return w.when.Run(vmEnv)
}
