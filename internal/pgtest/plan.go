package pgtest

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

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

// ExplainAnalyze runs EXPLAIN (ANALYZE, options, FORMAT JSON) of query in
// a transaction it rolls back (what the statement writes is undone) and
// returns the plan's top node; options is "" or e.g. "WAL, BUFFERS".
func ExplainAnalyze(tb testing.TB, pool *pgxpool.Pool, options, query string, args ...any) map[string]any {
	tb.Helper()
	ctx := context.Background()
	if options != "" {
		options = ", " + options
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	var raw []byte
	err = tx.QueryRow(ctx, `EXPLAIN (ANALYZE`+options+`, FORMAT JSON) `+query, args...).Scan(&raw)
	_ = tx.Rollback(ctx)
	if err != nil {
		tb.Fatalf("explain %.60q: %v", query, err)
	}
	var plans []map[string]any
	if err := json.Unmarshal(raw, &plans); err != nil {
		tb.Fatalf("explain %.60q: decode the plan: %v", query, err)
	}
	return plans[0]["Plan"].(map[string]any)
}
