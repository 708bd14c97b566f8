package evaluator

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
)

// orderCheckPartitions adds to into the partitions of changes that the
// claim's order check (the anti-join on alias p) read at least once.
func orderCheckPartitions(node map[string]any, into map[string]int) {
	rel, _ := node["Relation Name"].(string)
	alias, _ := node["Alias"].(string)
	if loops, _ := node["Actual Loops"].(float64); loops > 0 && strings.HasPrefix(rel, "changes_") &&
		(alias == "p" || strings.HasPrefix(alias, "p_")) {
		into[rel] += int(loops)
	}
	if kids, ok := node["Plans"].([]any); ok {
		for _, k := range kids {
			if m, ok := k.(map[string]any); ok {
				orderCheckPartitions(m, into)
			}
		}
	}
}

// TestClaimOrderCheckReadsOnlyPartitionsWithChanges: the claim's check
// that no earlier change of a claimed change's record is pending reads
// the partitions that hold changes only. By source, record and id alone
// (the partition key unbounded) every claimed change searched every
// partition of changes — the current week's, the empty weeks made ahead
// and the default — and the claim of a backlog of 30,000 spent about
// 40% of its time there (docs/benchmarks.md, issue 24).
func TestClaimOrderCheckReadsOnlyPartitionsWithChanges(t *testing.T) {
	t.Parallel()
	h := newHarness(t, baseGlobal, map[string]string{"tasks.yaml": anySource})
	for i := range 20 {
		h.sync("tasks", rec(fmt.Sprintf("T-%d", i), "title", ""))
	}
	h.exec(`ANALYZE changes`)
	var all, holding []string
	rows, err := h.pool.Query(h.ctx, `SELECT inhrelid::regclass::text FROM pg_inherits WHERE inhparent = 'changes'::regclass`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var p string
		if err := rows.Scan(&p); err != nil {
			t.Fatal(err)
		}
		all = append(all, p)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(all) < 2 {
		t.Fatalf("changes has partitions %v; the test needs at least 2", all)
	}
	rows, err = h.pool.Query(h.ctx, `SELECT DISTINCT tableoid::regclass::text FROM changes`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var p string
		if err := rows.Scan(&p); err != nil {
			t.Fatal(err)
		}
		holding = append(holding, p)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}

	tx, err := h.pool.Begin(h.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.WithoutCancel(h.ctx))
	var raw []byte
	if err := tx.QueryRow(h.ctx, `EXPLAIN (ANALYZE, FORMAT JSON) `+claimSQL, 10).Scan(&raw); err != nil {
		t.Fatalf("explain the claim: %v", err)
	}
	var plans []map[string]any
	if err := json.Unmarshal(raw, &plans); err != nil {
		t.Fatal(err)
	}
	read := map[string]int{}
	orderCheckPartitions(plans[0]["Plan"].(map[string]any), read)
	if len(read) == 0 {
		t.Fatalf("found no scan of the order check (alias p) in the claim's plan:\n%s", raw)
	}
	if got := slices.Sorted(maps.Keys(read)); !slices.Equal(got, slices.Sorted(slices.Values(holding))) {
		t.Errorf("claiming 10 changes, the order check read partitions %v (loops %v); want only %v, the partitions holding changes (of %v)",
			got, read, holding, all)
	}
}
