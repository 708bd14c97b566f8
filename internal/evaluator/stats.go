package evaluator

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// claimStats keeps the planner's statistics of the partitions of changes
// true enough for claimSQL while a backlog drains.
//
// Without statistics (a partition filled in one burst, before autovacuum
// analyzed it: it analyzes a partition a minute or so after it grew by a
// tenth) the planner takes eval_status = 'pending' as 0.5% of the rows.
// A batch is then more than the changes it expects, so instead of reading
// changes_pending_idx in id order until the batch is full it reads every
// pending change, checks the record order of each and sorts them: every
// claim reads the whole backlog, and a drain of n changes reads
// n²/(2 × batch) of them (docs/benchmarks.md, (4)). So before a claim
// that may find a backlog — the first, and every one after a full batch —
// the evaluator analyzes the partitions that are more than twice the size
// their statistics describe (pg_class.relpages against the file's size),
// at most once a second; the other workers wait for it rather than run
// the claim it is meant to fix. A partition it may not analyze (another
// role owns it) is skipped with a warning by PostgreSQL; on Citus the
// coordinator's partitions hold no rows and none is analyzed.
type claimStats struct {
	mu   sync.Mutex
	last time.Time
	// settled: no check is due (none since the last check claimed a full
	// batch). False at first: the first claim checks.
	settled atomic.Bool
}

// claimStatsEvery is the least time between two checks.
const claimStatsEvery = time.Second

// staleChangesSQL lists the partitions of changes whose file holds more
// than twice the pages their statistics counted, and at least 32 more
// (256 kB: below that, reading a partition's pending changes is cheap).
const staleChangesSQL = `
	SELECT n.nspname, c.relname
	FROM pg_inherits i
	JOIN pg_class c ON c.oid = i.inhrelid
	JOIN pg_namespace n ON n.oid = c.relnamespace
	WHERE i.inhparent = 'changes'::regclass AND c.relkind = 'r'
	  AND pg_relation_size(c.oid) / current_setting('block_size')::int > 2 * greatest(c.relpages, 0) + 32`

// backlog notes that a claim took a full batch: the next claim checks.
func (s *claimStats) backlog() { s.settled.Store(false) }

// ensure analyzes the stale partitions of changes when a check is due
// (the first claim, or one after a full batch, and at most once per
// claimStatsEvery). A failure is logged: the claim goes on, only slower.
func (s *claimStats) ensure(ctx context.Context, pool *pgxpool.Pool, logger *slog.Logger) {
	if s.settled.Load() {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.last.IsZero() && time.Since(s.last) < claimStatsEvery {
		return
	}
	s.settled.Store(true)
	s.last = time.Now()
	parts, err := staleChanges(ctx, pool)
	for _, p := range parts {
		if err != nil {
			break
		}
		start := time.Now()
		if _, err = pool.Exec(ctx, `ANALYZE `+p.Sanitize()); err == nil {
			logger.Info("analyzed a partition of changes without up-to-date statistics before claiming",
				"partition", p[1], "took_ms", time.Since(start).Milliseconds())
		}
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		logger.Warn("analyze the partitions of changes before claiming", "error", err)
	}
}

// staleChanges returns the partitions of changes staleChangesSQL lists.
func staleChanges(ctx context.Context, pool *pgxpool.Pool) ([]pgx.Identifier, error) {
	rows, err := pool.Query(ctx, staleChangesSQL)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (pgx.Identifier, error) {
		var schema, name string
		err := r.Scan(&schema, &name)
		return pgx.Identifier{schema, name}, err
	})
}
