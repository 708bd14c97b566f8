package evaluator

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/lookout-dev/lookout/internal/db"
	"github.com/lookout-dev/lookout/internal/normalize"
	"github.com/lookout-dev/lookout/internal/pgtest"
)

// claimAlias is the claim's own scan of changes (ch, or ch_N on a
// partition), not the order check's (p) or the oldest pending change's (o).
var claimAlias = regexp.MustCompile(`^ch(_[0-9]+)?$`)

// sumPlan adds up f over an EXPLAIN (ANALYZE, FORMAT JSON) plan node and
// every node below it.
func sumPlan(node map[string]any, f func(node map[string]any) float64) float64 {
	var n float64
	pgtest.EachPlanNode(node, func(node map[string]any) { n += f(node) })
	return n
}

// claimRowsRead returns the rows the scans of changes under alias ch
// returned in a plan node, over all loops.
func claimRowsRead(node map[string]any) float64 {
	return sumPlan(node, func(node map[string]any) float64 {
		alias, _ := node["Alias"].(string)
		rel, _ := node["Relation Name"].(string)
		if !claimAlias.MatchString(alias) || !strings.HasPrefix(rel, "changes") {
			return 0
		}
		rows, _ := node["Actual Rows"].(float64)
		loops, _ := node["Actual Loops"].(float64)
		return rows * loops
	})
}

// TestClaimOnAFreshPartitionReadsItsBatch: the claim of a batch out of a
// backlog written in one burst into a partition PostgreSQL has no
// statistics of (autovacuum has not analyzed it yet: the bench's (4) claims
// right after filling) reads about its batch, not the whole backlog.
// Without statistics the planner takes 'pending' as 0.5% of the rows,
// fewer than a batch, and reads, anti-joins and sorts every pending change
// for each claim: a drain of n changes read n²/(2 × batch) of them.
func TestClaimOnAFreshPartitionReadsItsBatch(t *testing.T) {
	t.Parallel()
	h := newHarness(t, baseGlobal, map[string]string{"tasks.yaml": anySource})
	pgtest.SkipOnCitus(t, h.pool, "the test deletes the statistics of the coordinator's tables, and the workers plan the claim on their shards, with their own")
	const backlog, limit = 10_000, 500
	body := strings.Repeat("generated ", 20)
	for i := 0; i < backlog; i += 1000 {
		recs := make([]normalize.Record, 1000)
		for j := range recs {
			recs[j] = normalize.Record{ID: fmt.Sprintf("T-%d", i+j), Title: "t", Body: body, Status: "open"}
		}
		h.sync("tasks", recs...)
	}
	// No statistics, as after a burst before autovacuum: the partitions'
	// column statistics deleted and their sizes unknown.
	const rels = `SELECT c.oid FROM pg_class c
		WHERE c.relnamespace = current_schema()::regnamespace AND (c.relname LIKE 'changes%' OR c.relname LIKE 'records%')`
	h.exec(`DELETE FROM pg_statistic WHERE starelid IN (` + rels + `)`)
	h.exec(`UPDATE pg_class SET reltuples = -1, relpages = 0 WHERE oid IN (` + rels + `)`)

	// The evaluator's claim, as a drain starts it.
	if got := len(h.claimedIDs(false)); got != limit {
		t.Fatalf("the claim took %d changes; want %d", got, limit)
	}
	tx, err := h.pool.Begin(h.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.WithoutCancel(h.ctx))
	var raw []byte
	if err := tx.QueryRow(h.ctx, `EXPLAIN (ANALYZE, FORMAT JSON) `+claimSQL, limit, nil).Scan(&raw); err != nil {
		t.Fatalf("explain the claim: %v", err)
	}
	var plans []map[string]any
	if err := json.Unmarshal(raw, &plans); err != nil {
		t.Fatal(err)
	}
	if got := claimRowsRead(plans[0]["Plan"].(map[string]any)); got > 2*limit {
		t.Fatalf("a claim of %d out of %d pending changes in a partition without statistics read %.0f of them; want at most %d",
			limit, backlog, got, 2*limit)
	}
}

// snapshotsRead returns the loops of the scans of records (alias r, the
// claim's record snapshot) in a plan node: how many changes the claim
// built a snapshot for.
func snapshotsRead(node map[string]any) float64 {
	return sumPlan(node, func(node map[string]any) float64 {
		alias, _ := node["Alias"].(string)
		rel, _ := node["Relation Name"].(string)
		if alias != "r" || rel != "records" {
			return 0
		}
		loops, _ := node["Actual Loops"].(float64)
		return loops
	})
}

// TestClaimBuildsNoSnapshotOfALockedChange: a claim that meets the changes
// another worker holds (the second worker of a drain starts at the same
// head of the backlog) skips them without building their record
// snapshots: it reads the snapshot of each change it locked, and no other.
// The snapshot is built from the record in the claim's target list; below
// the row locks it was built for every candidate, the skipped ones too.
func TestClaimBuildsNoSnapshotOfALockedChange(t *testing.T) {
	t.Parallel()
	h := newHarness(t, baseGlobal, map[string]string{"tasks.yaml": anySource})
	pgtest.SkipOnCitus(t, h.pool, "the test explains one PostgreSQL's claim over every source; on Citus the claim runs once per shard, a statement the workers plan")
	const backlog, held, limit = 600, 300, 100
	recs := make([]normalize.Record, backlog)
	for i := range recs {
		recs[i] = normalize.Record{ID: fmt.Sprintf("T-%d", i), Title: "t", Status: "open"}
	}
	h.sync("tasks", recs...)

	// Another worker's batch: the oldest changes, locked.
	other, err := h.pool.Begin(h.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Rollback(context.WithoutCancel(h.ctx))
	if _, err := other.Exec(h.ctx, `SELECT id FROM changes WHERE source = 'tasks' ORDER BY id LIMIT $1 FOR UPDATE`, held); err != nil {
		t.Fatal(err)
	}

	tx, err := h.pool.Begin(h.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.WithoutCancel(h.ctx))
	var raw []byte
	if err := tx.QueryRow(h.ctx, `EXPLAIN (ANALYZE, FORMAT JSON) `+claimSQL, limit, nil).Scan(&raw); err != nil {
		t.Fatalf("explain the claim: %v", err)
	}
	var plans []map[string]any
	if err := json.Unmarshal(raw, &plans); err != nil {
		t.Fatal(err)
	}
	plan := plans[0]["Plan"].(map[string]any)
	if got, _ := plan["Actual Rows"].(float64); got != limit {
		t.Fatalf("the claim took %.0f changes; want %d", got, limit)
	}
	if got := snapshotsRead(plan); got > limit {
		t.Fatalf("a claim of %d changes behind %d another worker holds built %.0f record snapshots; want at most %d",
			limit, held, got, limit)
	}
	// And the claim itself: the changes after the held ones, each with its
	// snapshot.
	if err := other.Rollback(h.ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := len(h.claimedIDs(false)), min(backlog, h.ev.conf.BatchSize); got != want {
		t.Fatalf("the claim took %d changes; want %d", got, want)
	}
}

// orderChecks returns the most loops of any scan of changes under alias p
// (the order check, one scan per partition) in a plan node: how many
// candidates the claim checked for an earlier pending change.
func orderChecks(node map[string]any) float64 {
	var most float64
	pgtest.EachPlanNode(node, func(node map[string]any) {
		alias, _ := node["Alias"].(string)
		rel, _ := node["Relation Name"].(string)
		if !regexp.MustCompile(`^p(_[0-9]+)?$`).MatchString(alias) || !strings.HasPrefix(rel, "changes") {
			return
		}
		if loops, _ := node["Actual Loops"].(float64); loops > most {
			most = loops
		}
	})
	return most
}

// TestClaimChecksNoOrderOfARecordsFirstChange: a change at version 1 is
// the first change of its record, so the claim takes it without looking
// for an earlier pending change of the record; an update is still
// checked. A backlog of an initial sync (version 1 throughout) paid a
// probe of changes_record_idx in every partition per candidate before.
func TestClaimChecksNoOrderOfARecordsFirstChange(t *testing.T) {
	t.Parallel()
	h := newHarness(t, baseGlobal, map[string]string{"tasks.yaml": anySource})
	pgtest.SkipOnCitus(t, h.pool, "the test explains one PostgreSQL's claim over every source; on Citus the claim runs once per shard, a statement the workers plan")
	const created, updated = 150, 50
	recs := make([]normalize.Record, updated)
	for i := range recs {
		recs[i] = normalize.Record{ID: fmt.Sprintf("U-%d", i), Title: "t", Status: "open"}
	}
	h.sync("tasks", recs...)
	h.drain()
	for i := range recs {
		recs[i].Title = "t2"
	}
	for i := range created {
		recs = append(recs, normalize.Record{ID: fmt.Sprintf("C-%d", i), Title: "t", Status: "open"})
	}
	h.sync("tasks", recs...)
	if got := h.count(`SELECT count(*) FROM changes WHERE eval_status = 'pending' AND version > 1`); got != updated {
		t.Fatalf("%d pending updates; want %d", got, updated)
	}

	tx, err := h.pool.Begin(h.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.WithoutCancel(h.ctx))
	var raw []byte
	if err := tx.QueryRow(h.ctx, `EXPLAIN (ANALYZE, FORMAT JSON) `+claimSQL, 1000, nil).Scan(&raw); err != nil {
		t.Fatalf("explain the claim: %v", err)
	}
	var plans []map[string]any
	if err := json.Unmarshal(raw, &plans); err != nil {
		t.Fatal(err)
	}
	plan := plans[0]["Plan"].(map[string]any)
	if got, _ := plan["Actual Rows"].(float64); got != created+updated {
		t.Fatalf("the claim took %.0f changes; want %d", got, created+updated)
	}
	if got := orderChecks(plan); got > updated {
		t.Fatalf("a claim of %d created and %d updated records checked the order of %.0f changes; want at most %d (the updates)",
			created, updated, got, updated)
	}
}

// changesRead returns the rows tx read from the partitions of changes so
// far (index and sequential scans: pg_stat_xact_user_tables).
func changesRead(t *testing.T, h *harness, tx pgx.Tx) int64 {
	t.Helper()
	var n int64
	if err := tx.QueryRow(h.ctx, `SELECT coalesce(sum(coalesce(idx_tup_fetch, 0) + seq_tup_read), 0)::bigint
		FROM pg_stat_xact_user_tables WHERE schemaname = current_schema() AND relname LIKE 'changes%'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestSecondClaimStartsAfterTheBatchAnotherHolds: while one worker holds a
// full batch of a backlog, another worker's claim starts after it, without
// reading the held changes; once no full batch is held, a claim starts at
// the head again, and the drain takes every change.
func TestSecondClaimStartsAfterTheBatchAnotherHolds(t *testing.T) {
	t.Parallel()
	const batch = 100
	h := newHarnessWith(t, Config{BatchSize: batch}, baseGlobal, map[string]string{"tasks.yaml": anySource})
	sh, err := db.ShardingOf(h.ctx, h.pool)
	if err != nil {
		t.Fatal(err)
	}
	if sh.Distributed() {
		t.Skip("on Citus (and simulated shards) a claim runs once per shard, unbounded")
	}
	recs := make([]normalize.Record, 20*batch)
	for i := range recs {
		recs[i] = normalize.Record{ID: fmt.Sprintf("T-%d", i), Title: "t", Status: "open"}
	}
	h.sync("tasks", recs...)
	// With statistics, as the evaluator keeps them (claimStats): a claim
	// reads changes_pending_idx in id order until its batch is full.
	h.exec(`ANALYZE changes`)

	first, got1, err := h.ev.claim(h.ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Rollback(context.WithoutCancel(h.ctx))
	if len(got1) != batch {
		t.Fatalf("the first claim took %d changes; want %d", len(got1), batch)
	}
	second, got2, err := h.ev.claim(h.ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Rollback(context.WithoutCancel(h.ctx))
	if len(got2) != batch || got2[0].ID <= got1[len(got1)-1].ID {
		t.Fatalf("the second claim took %d changes from %d; want %d after %d", len(got2), got2[0].ID, batch, got1[len(got1)-1].ID)
	}
	// The first claim read its batch; the second, the same number of
	// rows, not the first's batch as well.
	read1, read2 := changesRead(t, h, first), changesRead(t, h, second)
	t.Logf("rows of changes read: first claim %d, second %d", read1, read2)
	if read2 > read1+batch/2 {
		t.Errorf("the second claim read %d rows of changes, the first %d: it read the %d changes the first holds", read2, read1, batch)
	}

	// Both batches end; a claim from the head takes what is left, in order.
	if err := first.Rollback(h.ctx); err != nil {
		t.Fatal(err)
	}
	if err := second.Rollback(h.ctx); err != nil {
		t.Fatal(err)
	}
	if got := h.claimedIDs(false); len(got) != batch || got[0] != got1[0].ID {
		t.Fatalf("with no batch held the claim took %d changes from %v; want %d from the head %d", len(got), got[:min(1, len(got))], batch, got1[0].ID)
	}
	if n := h.drain(); n != len(recs) {
		t.Fatalf("drained %d changes; want %d", n, len(recs))
	}
}
