package db_test

import (
	"context"
	"slices"
	"testing"

	"github.com/lookout-dev/lookout/internal/db"
	"github.com/lookout-dev/lookout/internal/pgtest"
)

// Groups keeps the claim's order: each group in the order of the keys,
// the groups in the order of their first key, every key once. On one
// PostgreSQL it is one group; with simulated shards (and on Citus, make
// test-citus) every group is the keys of one shard, and the claim
// statement restricted to a group locks with SKIP LOCKED.
func TestShardGroupsKeepTheClaimsOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	keys := []string{"s9", "s1", "s2", "s8", "s3", "s1", "s4", "s5", "s6", "s7"}
	unique := []string{"s9", "s1", "s2", "s8", "s3", "s4", "s5", "s6", "s7"}

	check := func(t *testing.T, groups [][]string, wantOne bool) {
		t.Helper()
		var flat []string
		for _, g := range groups {
			flat = append(flat, g...)
		}
		slices.SortStableFunc(flat, func(a, b string) int { return slices.Index(unique, a) - slices.Index(unique, b) })
		if !slices.Equal(flat, unique) {
			t.Fatalf("groups %v hold %v, want each of %v once", groups, flat, unique)
		}
		if wantOne != (len(groups) == 1) {
			t.Fatalf("groups %v: want one group %t", groups, wantOne)
		}
		for i, g := range groups {
			if !slices.IsSortedFunc(g, func(a, b string) int { return slices.Index(unique, a) - slices.Index(unique, b) }) {
				t.Errorf("group %d %v is not in the keys' order", i, g)
			}
			if i > 0 && slices.Index(unique, groups[i-1][0]) > slices.Index(unique, g[0]) {
				t.Errorf("group %d %v comes after %v, whose first key comes later", i, g, groups[i-1])
			}
		}
	}

	t.Run("this database", func(t *testing.T) {
		pool := pgtest.Pool(t)
		sh, err := db.ShardingOf(ctx, pool)
		if err != nil {
			t.Fatal(err)
		}
		citus := hasCitus(t, pool)
		if sh.Distributed() != citus && !sh.Distributed() {
			t.Fatalf("Distributed() = %t on a database whose citus extension's presence is %t", sh.Distributed(), citus)
		}
		groups, err := sh.Groups(ctx, pool, "sources", keys)
		if err != nil {
			t.Fatal(err)
		}
		check(t, groups, !sh.Distributed())
		if !citus {
			return
		}
		// Each group is one shard: the claim's lock is a router query.
		for _, g := range groups {
			tx, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(ctx, `SELECT name FROM sources WHERE name = ANY($1) FOR UPDATE SKIP LOCKED`, g); err != nil {
				t.Errorf("lock the sources of group %v: %v", g, err)
			}
			_ = tx.Rollback(ctx)
		}
	})
	t.Run("simulated shards", func(t *testing.T) {
		pool := pgtest.Pool(t)
		db.SimulateShards(pool, 4)
		sh, err := db.ShardingOf(ctx, pool)
		if err != nil {
			t.Fatal(err)
		}
		if !sh.Distributed() {
			t.Fatal("Distributed() = false with simulated shards")
		}
		groups, err := sh.Groups(ctx, pool, "sources", keys)
		if err != nil {
			t.Fatal(err)
		}
		check(t, groups, false)
	})
}
