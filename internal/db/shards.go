package db

import (
	"context"
	"fmt"
	"hash/fnv"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Querier runs statements: a pool, a connection or a transaction.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Sharding says how a claim locks its rows (docs/scaling.md, "Claims on
// Citus"). On one PostgreSQL a claim is one statement that picks and
// locks its rows (FOR UPDATE SKIP LOCKED). Citus takes row locks only in a
// statement routed to one shard, so on Citus a claim first reads its
// candidates without locks and then runs the same claim statement once
// per shard that holds some of them, restricted to their distribution
// keys (`key = ANY($n)` of one shard's keys is a router query): every
// lock is a row lock, taken with SKIP LOCKED, as on one PostgreSQL.
//
// A database's Sharding is decided once, at its first use (a daemon's
// first claim): Citus when the database has the citus extension (the
// schema is then laid out as CitusLayout says).
type Sharding struct {
	citus     bool
	simulated int
}

type shardingOnce struct {
	once      sync.Once
	simulated int
	s         Sharding
	err       error
}

// shardings holds each database's Sharding, by the connection string of
// its pools and connections (string → *shardingOnce).
var shardings sync.Map

// shardingKey is the key of q's database in shardings: its connection
// string ("" when q is none of pgx's).
func shardingKey(q Querier) string {
	switch v := q.(type) {
	case *pgxpool.Pool:
		return v.Config().ConnConfig.ConnString()
	case interface{ Conn() *pgx.Conn }: // pgx.Tx, *pgxpool.Conn
		return v.Conn().Config().ConnString()
	case *pgx.Conn:
		return v.Config().ConnString()
	}
	return ""
}

// ShardingOf returns the Sharding of q's database (a pool, or a
// connection or transaction of one), deciding it at the first call for
// that database; the next calls cost nothing.
func ShardingOf(ctx context.Context, q Querier) (Sharding, error) {
	key := shardingKey(q)
	if key == "" {
		o := &shardingOnce{}
		o.decide(ctx, q)
		return o.s, o.err
	}
	v, _ := shardings.LoadOrStore(key, &shardingOnce{})
	o := v.(*shardingOnce)
	o.once.Do(func() { o.decide(ctx, q) })
	if o.err != nil {
		// Not decided: the next call asks again.
		shardings.CompareAndDelete(key, o)
		return Sharding{}, o.err
	}
	return o.s, nil
}

func (o *shardingOnce) decide(ctx context.Context, q Querier) {
	o.s.simulated = o.simulated
	if err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')`).Scan(&o.s.citus); err != nil {
		o.err = fmt.Errorf("look for the citus extension: %w", err)
	}
}

// SimulateShards makes the claims on pool's database take the Citus form
// on plain PostgreSQL, with the keys spread over n groups by a hash, as a
// Citus cluster spreads them over its shards, so that tests run both
// forms of every claim on one PostgreSQL (pgtest does it for every pool
// when LOOKOUT_PGTEST_SHARDS is set). Call it before the first claim.
func SimulateShards(pool *pgxpool.Pool, n int) {
	shardings.Store(shardingKey(pool), &shardingOnce{simulated: n})
}

// Distributed reports whether claims take the Citus form: candidates
// first, then one locking statement per shard.
func (s Sharding) Distributed() bool { return s.citus || s.simulated > 0 }

// Groups splits keys, values of table's distribution column (the
// candidates of a claim, in the order the claim prefers them), into the
// groups of keys that one shard holds: each group in the order of keys,
// the groups in the order of their first key. A key given twice is kept
// once. On one PostgreSQL (not Distributed) it is one group, keys
// themselves.
func (s Sharding) Groups(ctx context.Context, q Querier, table string, keys []string) ([][]string, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	switch {
	case s.citus:
		rows, err := q.Query(ctx, `
			SELECT array_agg(k ORDER BY o)
			FROM (SELECT DISTINCT ON (k) k, o FROM unnest($2::text[]) WITH ORDINALITY u(k, o) ORDER BY k, o) u
			GROUP BY get_shard_id_for_distribution_column($1::regclass, k)
			ORDER BY min(o)`, table, keys)
		if err != nil {
			return nil, fmt.Errorf("group the keys of %s by shard: %w", table, err)
		}
		groups, err := pgx.CollectRows(rows, pgx.RowTo[[]string])
		if err != nil {
			return nil, fmt.Errorf("group the keys of %s by shard: %w", table, err)
		}
		return groups, nil
	case s.simulated > 0:
		at := map[uint32]int{}
		seen := map[string]bool{}
		var groups [][]string
		for _, k := range keys {
			if seen[k] {
				continue
			}
			seen[k] = true
			h := fnv.New32a()
			h.Write([]byte(k))
			g := h.Sum32() % uint32(s.simulated)
			i, ok := at[g]
			if !ok {
				i = len(groups)
				at[g] = i
				groups = append(groups, nil)
			}
			groups[i] = append(groups[i], k)
		}
		return groups, nil
	default:
		seen := make(map[string]bool, len(keys))
		one := make([]string, 0, len(keys))
		for _, k := range keys {
			if !seen[k] {
				seen[k] = true
				one = append(one, k)
			}
		}
		return [][]string{one}, nil
	}
}

// ClaimGroup is one run of a claim statement: restricted to the
// distribution keys Keys (nil: no restriction, every key), taking at most
// Limit rows.
type ClaimGroup struct {
	Keys  []string
	Limit int
}

// Restriction is Keys as the statement's argument: NULL for nil.
func (g ClaimGroup) Restriction() any {
	if g.Keys == nil {
		return nil
	}
	return g.Keys
}

// ClaimGroups returns the runs of a claim statement that make up one
// claim of up to limit rows of table (see Sharding). On one PostgreSQL it
// is one run, unrestricted: the statement picks and locks in one go. On
// Citus it runs candidates with args first (the claim's pick without
// locks, one row per row the claim would take, each row the distribution
// key of that row, in the claim's order) and returns one run per shard
// that holds some of them, restricted to their keys and limited to their
// number: each run is a router query that locks with SKIP LOCKED what no
// other claim holds, and together they take at most the candidates. A
// candidate another claim took meanwhile is skipped, as on one
// PostgreSQL, and not replaced until the next claim.
func ClaimGroups(ctx context.Context, q Querier, table string, limit int, candidates string, args ...any) ([]ClaimGroup, error) {
	sh, err := ShardingOf(ctx, q)
	if err != nil {
		return nil, err
	}
	if !sh.Distributed() {
		return []ClaimGroup{{Limit: limit}}, nil
	}
	rows, err := q.Query(ctx, candidates, args...)
	if err != nil {
		return nil, fmt.Errorf("candidates of %s: %w", table, err)
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("candidates of %s: %w", table, err)
	}
	per := map[string]int{}
	for _, k := range keys {
		per[k]++
	}
	groups, err := sh.Groups(ctx, q, table, keys)
	if err != nil {
		return nil, err
	}
	out := make([]ClaimGroup, len(groups))
	for i, g := range groups {
		out[i].Keys = g
		for _, k := range g {
			out[i].Limit += per[k]
		}
	}
	return out, nil
}

// EachShard runs a statement that locks rows of the given keys (values
// of table's distribution column; FOR UPDATE SKIP LOCKED) once per group
// of keys that one shard holds, each run taking at most the rows left of
// limit, and returns the rows of every run (see Sharding): Citus locks
// rows only in a statement routed to one shard. On one PostgreSQL (not
// Distributed) it is one run over every key, the statement as it was.
// It is for the claims that are restricted to a list of keys already (a
// replica's sources); a claim over every key takes its candidates first
// (ClaimGroups).
func EachShard[T any](ctx context.Context, q Querier, table string, keys []string, limit int, run func(keys []string, limit int) ([]T, error)) ([]T, error) {
	sh, err := ShardingOf(ctx, q)
	if err != nil {
		return nil, err
	}
	if !sh.Distributed() {
		return run(keys, limit)
	}
	groups, err := sh.Groups(ctx, q, table, keys)
	if err != nil {
		return nil, err
	}
	var out []T
	for _, g := range groups {
		if len(out) >= limit {
			break
		}
		rows, err := run(g, limit-len(out))
		if err != nil {
			return nil, err
		}
		out = append(out, rows...)
	}
	return out, nil
}

// PruneEachShard deletes one batch of at most limit rows of table, a
// retention prune: prune ($1 before, $2 the most rows, $3 the keys it is
// restricted to, NULL for every key) is a DELETE that locks its rows with
// FOR UPDATE SKIP LOCKED, and candidates ($1 before, $2 limit) is its pick
// without the locks, the distribution key of each row it would delete, in
// its order (see ClaimGroups). On one PostgreSQL it is prune once,
// unrestricted; on Citus once per shard of the candidates, each a router
// statement, where Citus takes row locks. It returns how many rows it
// deleted in all.
func PruneEachShard(ctx context.Context, q Querier, table string, before any, limit int, candidates, prune string) (int64, error) {
	groups, err := ClaimGroups(ctx, q, table, limit, candidates, before, limit)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, g := range groups {
		tag, err := q.Exec(ctx, prune, before, g.Limit, g.Restriction())
		if err != nil {
			return n, err
		}
		n += tag.RowsAffected()
	}
	return n, nil
}
