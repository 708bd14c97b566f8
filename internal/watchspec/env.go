package watchspec

import "slices"

// Change is a change as a watch's `when` sees it.
type Change struct {
	ID            int64
	Source        string
	Kind          string
	Version       int
	ChangedFields []string
	// Record is the record after the change; Previous before it (nil for
	// a created record).
	Record, Previous map[string]any
}

// Env builds the expression environment of c: the variables
// normalize.CompileWhen declares (record, previous, change, source,
// changed). The evaluator and the replay (internal/replay) both run
// Match over it.
func (c Change) Env() map[string]any {
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
