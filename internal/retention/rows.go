package retention

import (
	"context"
	"fmt"
	"github.com/lookout-dev/lookout/internal/db"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lookout-dev/lookout/internal/audit"
	"github.com/lookout-dev/lookout/internal/definitions"
	"github.com/lookout-dev/lookout/internal/drift"
	"github.com/lookout-dev/lookout/internal/idempotency"
	"github.com/lookout-dev/lookout/internal/inbound"
	"github.com/lookout-dev/lookout/internal/outbox"
	"github.com/lookout-dev/lookout/internal/semantic"
	"github.com/lookout-dev/lookout/internal/tasks"
	"github.com/lookout-dev/lookout/internal/tokens"
)

// rowTable is a table that is not partitioned: its old rows are deleted in
// batches by its owner's named prune query, which knows what is pending in
// it and reads an index (migration 21). The tables without an owner
// package that the pruner may change — sync_run_hours (written by the
// syncer's quiet runs) and activity_hour_totals (kept by triggers) — have
// their prune queries in this package's queries.go.
type rowTable struct {
	name   string
	window func(Config) time.Duration
	// prune deletes one batch of at most limit rows older than before and
	// returns how many; count counts every such row (the dry run).
	prune func(ctx context.Context, conn *pgx.Conn, before time.Time, limit int) (int64, error)
	count func(ctx context.Context, conn *pgx.Conn, before time.Time) (int64, error)
}

// rowTables in pruning order.
var rowTables = []rowTable{
	{
		name: "delivery_attempts", window: func(c Config) time.Duration { return c.DeliveryAttempts },
		prune: func(ctx context.Context, c *pgx.Conn, b time.Time, n int) (int64, error) {
			return outbox.PruneAttempts(ctx, c, b, n)
		},
		count: func(ctx context.Context, c *pgx.Conn, b time.Time) (int64, error) {
			return outbox.CountPrunableAttempts(ctx, c, b)
		},
	},
	{
		name: "task_runs", window: func(c Config) time.Duration { return c.TaskRuns },
		prune: func(ctx context.Context, c *pgx.Conn, b time.Time, n int) (int64, error) {
			return tasks.Prune(ctx, c, b, n)
		},
		count: func(ctx context.Context, c *pgx.Conn, b time.Time) (int64, error) {
			return tasks.CountPrunable(ctx, c, b)
		},
	},
	{
		name: "inbound_events", window: func(c Config) time.Duration { return c.InboundEvents },
		prune: func(ctx context.Context, c *pgx.Conn, b time.Time, n int) (int64, error) {
			return inbound.Prune(ctx, c, b, n)
		},
		count: func(ctx context.Context, c *pgx.Conn, b time.Time) (int64, error) {
			return inbound.CountPrunable(ctx, c, b)
		},
	},
	{
		name: "idempotency_keys", window: func(c Config) time.Duration { return c.IdempotencyKeys },
		prune: func(ctx context.Context, c *pgx.Conn, b time.Time, n int) (int64, error) {
			return idempotency.PruneBatch(ctx, c, b, n)
		},
		count: func(ctx context.Context, c *pgx.Conn, b time.Time) (int64, error) {
			return idempotency.CountExpired(ctx, c, b)
		},
	},
	{
		name: "definition_deletions", window: func(c Config) time.Duration { return c.DefinitionDeletions },
		prune: func(ctx context.Context, c *pgx.Conn, b time.Time, n int) (int64, error) {
			return definitions.PruneDeletions(ctx, c, b, n)
		},
		count: func(ctx context.Context, c *pgx.Conn, b time.Time) (int64, error) {
			return definitions.CountDeletions(ctx, c, b)
		},
	},
	{
		name: "sign_in_links", window: func(c Config) time.Duration { return c.SignInLinks },
		prune: func(ctx context.Context, c *pgx.Conn, b time.Time, n int) (int64, error) {
			return tokens.PruneLinks(ctx, c, b, n)
		},
		count: func(ctx context.Context, c *pgx.Conn, b time.Time) (int64, error) {
			return tokens.CountPrunableLinks(ctx, c, b)
		},
	},
	{
		name: "audit_log", window: func(c Config) time.Duration { return c.AuditLog },
		prune: func(ctx context.Context, c *pgx.Conn, b time.Time, n int) (int64, error) {
			return audit.Prune(ctx, c, b, n)
		},
		count: func(ctx context.Context, c *pgx.Conn, b time.Time) (int64, error) {
			return audit.CountPrunable(ctx, c, b)
		},
	},
	{
		name: "model_budgets", window: func(c Config) time.Duration { return c.ModelBudgets },
		prune: func(ctx context.Context, c *pgx.Conn, b time.Time, n int) (int64, error) {
			return semantic.PruneBudgets(ctx, c, b, n)
		},
		count: func(ctx context.Context, c *pgx.Conn, b time.Time) (int64, error) {
			return semantic.CountBudgets(ctx, c, b)
		},
	},
	{
		name: "briefings", window: func(c Config) time.Duration { return c.Briefings },
		prune: func(ctx context.Context, c *pgx.Conn, b time.Time, n int) (int64, error) {
			return semantic.PruneBriefings(ctx, c, b, n)
		},
		count: func(ctx context.Context, c *pgx.Conn, b time.Time) (int64, error) {
			return semantic.CountBriefings(ctx, c, b)
		},
	},
	{
		name: "verdicts", window: func(c Config) time.Duration { return c.Verdicts },
		prune: func(ctx context.Context, c *pgx.Conn, b time.Time, n int) (int64, error) {
			return semantic.PruneVerdicts(ctx, c, b, n)
		},
		count: func(ctx context.Context, c *pgx.Conn, b time.Time) (int64, error) {
			return semantic.CountVerdicts(ctx, c, b)
		},
	},
	{
		name: "drift_embeddings", window: func(c Config) time.Duration { return c.DriftEmbeddings },
		prune: func(ctx context.Context, c *pgx.Conn, b time.Time, n int) (int64, error) {
			return drift.Prune(ctx, c, b, n)
		},
		count: func(ctx context.Context, c *pgx.Conn, b time.Time) (int64, error) {
			return drift.CountPrunable(ctx, c, b)
		},
	},
	{
		name: "sync_run_hours", window: func(c Config) time.Duration { return c.SyncRunHours },
		prune: func(ctx context.Context, c *pgx.Conn, b time.Time, n int) (int64, error) {
			deleted, err := db.PruneEachShard(ctx, c, "sync_run_hours", b, n, pruneRunHoursCandidates, pruneRunHours)
			if err != nil {
				return deleted, fmt.Errorf("prune sync_run_hours older than %s: %w", b.UTC().Format(time.RFC3339), err)
			}
			return deleted, nil
		},
		count: func(ctx context.Context, c *pgx.Conn, b time.Time) (int64, error) {
			return scanCount(ctx, c, "sync_run_hours", countRunHours, b)
		},
	},
	{
		name: "activity_hour_totals", window: func(c Config) time.Duration { return c.ActivityHourTotals },
		prune: func(ctx context.Context, c *pgx.Conn, b time.Time, n int) (int64, error) {
			return execCount(ctx, c, "activity_hour_totals", pruneActivityHours, b, n)
		},
		count: func(ctx context.Context, c *pgx.Conn, b time.Time) (int64, error) {
			return scanCount(ctx, c, "activity_hour_totals", countActivityHours, b)
		},
	},
}

// pruneByOwner deletes (or counts, when dry) the rows of t older than its
// window w, one batch of at most BatchSize rows per statement (each its
// own transaction), until a batch is short.
func (p *Pruner) pruneByOwner(ctx context.Context, conn *pgx.Conn, t rowTable, w time.Duration, dry bool) (TableResult, error) {
	tr := TableResult{Table: t.name, Window: w, Cutoff: p.conf.Now().Add(-w)}
	if dry {
		n, err := t.count(ctx, conn, tr.Cutoff)
		tr.Rows = n
		return tr, err
	}
	for {
		n, err := t.prune(ctx, conn, tr.Cutoff, p.conf.BatchSize)
		if err != nil {
			return tr, err
		}
		tr.Batches++
		tr.Rows += n
		if n < int64(p.conf.BatchSize) {
			return tr, nil
		}
		if err := ctx.Err(); err != nil {
			return tr, err
		}
	}
}

// execCount runs a prune statement of this package and returns the rows
// it deleted.
func execCount(ctx context.Context, conn *pgx.Conn, table, sql string, before time.Time, limit int) (int64, error) {
	tag, err := conn.Exec(ctx, sql, before, limit)
	if err != nil {
		return 0, fmt.Errorf("prune %s older than %s: %w", table, before.UTC().Format(time.RFC3339), err)
	}
	return tag.RowsAffected(), nil
}

// scanCount runs a count statement of this package.
func scanCount(ctx context.Context, conn *pgx.Conn, table, sql string, before time.Time) (int64, error) {
	var n int64
	if err := conn.QueryRow(ctx, sql, before).Scan(&n); err != nil {
		return 0, fmt.Errorf("count %s older than %s: %w", table, before.UTC().Format(time.RFC3339), err)
	}
	return n, nil
}
