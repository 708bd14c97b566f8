package pgtest

// EachPlanNode calls f on an EXPLAIN (FORMAT JSON) plan node and on every
// node below it, parents first: how a plan test reads the scans of a
// statement's plan.
func EachPlanNode(node map[string]any, f func(node map[string]any)) {
	f(node)
	kids, _ := node["Plans"].([]any)
	for _, k := range kids {
		if m, ok := k.(map[string]any); ok {
			EachPlanNode(m, f)
		}
	}
}
