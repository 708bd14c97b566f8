package evaluator

import "github.com/lookout-dev/lookout/internal/watchspec"

// whenEnv builds the expression environment of one change (watchspec's
// Change.Env, shared with the replay) in r's reused environment.
func whenEnv(r *watchspec.Runner, c *change) map[string]any {
	return r.Env(&watchspec.Change{ID: c.ID, Source: c.Source, Kind: c.Kind, Version: c.Version, ChangedFields: c.ChangedFields,
		Record: c.Record, Previous: c.Previous})
}
