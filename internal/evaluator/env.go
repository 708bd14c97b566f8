package evaluator

import "github.com/lookout-dev/lookout/internal/watchspec"

// whenEnv builds the expression environment of one change (watchspec's
// Change.Env, shared with the replay).
func whenEnv(c *change) map[string]any {
	return watchspec.Change{ID: c.ID, Source: c.Source, Kind: c.Kind, Version: c.Version, ChangedFields: c.ChangedFields,
		Record: c.Record, Previous: c.Previous}.Env()
}
