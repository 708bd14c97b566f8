package evaluator

import "slices"

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
