// Package retention bounds the history: the large append-only tables
// (changes, evaluations, notifications, sync_runs, model_calls) are
// partitioned by week (migration 16), and a Pruner keeps their partitions
// (made ahead of time) and prunes what is older than each table's window.
// A partition past the window is dropped whole when it holds no pending
// work; one that does is kept and its other rows are deleted in bounded
// batches, each its own short transaction, as are the rows of the default
// partition. Pending work is never deleted: changes still pending,
// evaluations of those changes, running runs and each source's latest run,
// pending and held notifications. A notification's dedupe key goes with
// it, except a dedupe: record key (source/record/watch, without a
// version), which suppresses every later notification of the record and
// stays in notification_keys.
//
// The other tables that grow with time — delivery_attempts, task_runs,
// inbound_events, idempotency_keys, definition_deletions, sign_in_links,
// audit_log, model_budgets, briefings, verdicts, drift_embeddings,
// sync_run_hours and activity_hour_totals — are not
// partitioned: their old rows are deleted in batches, each its own
// statement, by the named prune query of the table's owner package
// (tasks.Prune, inbound.Prune, ...; rows.go), which leaves what is
// pending or live in the table (an unprocessed event, a task attempt in
// progress, a key in its window, the current hour's rollup) and reads an
// index. The two rollups, which have no owner package, have their prune
// queries in queries.go.
//
// The evaluator daemon runs a Pruner on a timer; any number of replicas may
// do so, since a session advisory lock (one per schema) lets one replica
// prune at a time and the others skip that round.
package retention

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/db"
	"github.com/lookout-dev/lookout/internal/metrics"
	"github.com/lookout-dev/lookout/internal/service"
)

// Config are the pruner's typed settings: lookout.yaml's retention block.
// New uses them as given; the defaults below are the ones the config
// loader applies, and FromConfig carries its values over.
type Config struct {
	// Changes, SyncRuns, Evaluations, Notifications and ModelCalls are the
	// windows of their tables (retention.changes, ...): rows older than the
	// window are pruned; 0 keeps the table's rows forever. Changes,
	// SyncRuns and Evaluations default to 720h (30 days), Notifications and
	// ModelCalls to 2160h (90 days).
	Changes       time.Duration
	SyncRuns      time.Duration
	Evaluations   time.Duration
	Notifications time.Duration
	ModelCalls    time.Duration
	// TaskRuns, InboundEvents, IdempotencyKeys, DefinitionDeletions,
	// AuditLog, ModelBudgets, Briefings, Verdicts, SyncRunHours and
	// ActivityHourTotals are the windows of the tables that are not
	// partitioned (retention.task_runs, ...), pruned by rows through each
	// table's owner (rows.go); 0 keeps the table's rows forever. TaskRuns,
	// ModelBudgets, Briefings, Verdicts and ActivityHourTotals default to
	// 2160h (90 days), InboundEvents, DefinitionDeletions and SyncRunHours
	// to 720h (30 days), IdempotencyKeys to 24h and AuditLog to 8760h (365
	// days).
	TaskRuns            time.Duration
	InboundEvents       time.Duration
	IdempotencyKeys     time.Duration
	DefinitionDeletions time.Duration
	AuditLog            time.Duration
	ModelBudgets        time.Duration
	Briefings           time.Duration
	Verdicts            time.Duration
	// DriftEmbeddings is drift_embeddings' window
	// (retention.drift_embeddings). Defaults to 8760h (365 days).
	DriftEmbeddings time.Duration
	// DeliveryAttempts is delivery_attempts' window
	// (retention.delivery_attempts), pruned through outbox: attempts that
	// started before the cutoff. Defaults to Notifications' window.
	DeliveryAttempts time.Duration
	// SignInLinks is sign_in_links' window (retention.sign_in_links),
	// pruned through tokens: links that expired, or were used, before the
	// cutoff. Defaults to 720h (30 days).
	SignInLinks        time.Duration
	SyncRunHours       time.Duration
	ActivityHourTotals time.Duration
	// BatchSize is the most rows one DELETE removes (retention.batch_size).
	// Defaults to 5000.
	BatchSize int
	// Interval is the time between two rounds of Start's loop
	// (retention.interval). Defaults to 1h.
	Interval time.Duration
	// Metrics counts the rows and partitions pruned per table; nil records
	// nothing. Defaults to nil.
	Metrics *metrics.Metrics
	// Now is the clock of a prune: the current week, whose partition and
	// the Ahead weeks after it are made, and the cutoffs (now minus each
	// window). The statements' own guards of what is live (the current
	// hour of a rollup, a key in its window) keep reading the database's
	// clock. Defaults to time.Now.
	Now func() time.Time
}

// FromConfig returns the pruner settings of lookout.yaml's retention
// block, with the defaults the config loader applied.
func FromConfig(r config.Retention) Config {
	return Config{Changes: r.Changes, SyncRuns: r.SyncRuns, Evaluations: r.Evaluations,
		Notifications: r.Notifications, ModelCalls: r.ModelCalls,
		TaskRuns: r.TaskRuns, InboundEvents: r.InboundEvents, IdempotencyKeys: r.IdempotencyKeys,
		DefinitionDeletions: r.DefinitionDeletions, AuditLog: r.AuditLog, ModelBudgets: r.ModelBudgets,
		Briefings: r.Briefings, Verdicts: r.Verdicts, DriftEmbeddings: r.DriftEmbeddings, SyncRunHours: r.SyncRunHours, ActivityHourTotals: r.ActivityHourTotals,
		DeliveryAttempts: r.DeliveryAttempts, SignInLinks: r.SignInLinks,
		BatchSize: r.BatchSize, Interval: r.Interval}
}

// Enabled reports whether any window is set.
func (c Config) Enabled() bool {
	for _, t := range tables {
		if t.window(c) > 0 {
			return true
		}
	}
	for _, t := range rowTables {
		if t.window(c) > 0 {
			return true
		}
	}
	return false
}

// table describes how one table is kept. Every pruned table has an
// increasing bigserial id and a time column that grows with it (rows are
// appended), which lets a prune by rows walk the primary key instead of
// scanning.
type table struct {
	name   string
	window func(Config) time.Duration
	// at is the time column compared with the window, and key the
	// partition key (the same column, except for evaluations: the time of
	// the change decided).
	at, key string
	// deletable is the SQL condition, besides age, a row must meet to be
	// deleted: it is what keeps pending work.
	deletable string
	// pending is a query (%s: a partition) that is true when the partition
	// holds a row that must stay: the partition is then kept. Empty: no
	// row of the table is ever pending.
	pending string
	// returning is what the DELETE of a batch returns (id at least), and
	// afterDelete a CTE over the deleted rows (named deleted) run in the
	// same statement.
	returning, afterDelete string
	// onDrop runs (%s: the partition) in the transaction that drops a
	// partition whole; onDropDistributed instead, when set, on Citus
	// (db.Sharding), where the tables it joins are not co-located.
	onDrop, onDropDistributed string
}

// forgetKeys deletes the dedupe keys of notifications (%s: their rows),
// except the dedupe: record keys (source/record/watch): such a key
// suppresses every later notification of the record, so it outlives its
// notification.
const forgetKeys = `
	DELETE FROM notification_keys k USING %s d
	WHERE k.dedupe_key = d.dedupe_key AND k.sink = d.sink AND k.notification_id = d.id
	  AND d.dedupe_key <> d.source || '/' || d.record_id || '/' || d.watch`

// tables in pruning order: notifications first (digest summaries are
// referenced by their members), model calls before the changes they name.
var tables = []table{
	{
		name: "notifications", at: "created_at", key: "created_at",
		window:    func(c Config) time.Duration { return c.Notifications },
		deletable: `status IN ('delivered', 'dead', 'digested')`,
		// Two EXISTS: each reads its partial index.
		pending: `SELECT EXISTS (SELECT 1 FROM %[1]s WHERE status = 'pending')
		              OR EXISTS (SELECT 1 FROM %[1]s WHERE status = 'held')`,
		returning: `id, dedupe_key, sink, source, record_id, watch`,
		// The keys of the batch, through arrays: one probe of the key's
		// primary key per row (a join with the CTE would hash the table).
		afterDelete: `, forgotten AS (` + fmt.Sprintf(forgetKeys, `(
		    SELECT * FROM unnest((SELECT array_agg(id) FROM deleted), (SELECT array_agg(dedupe_key) FROM deleted),
		                         (SELECT array_agg(sink) FROM deleted), (SELECT array_agg(source) FROM deleted),
		                         (SELECT array_agg(record_id) FROM deleted), (SELECT array_agg(watch) FROM deleted))
		           AS b(id, dedupe_key, sink, source, record_id, watch))`) + `)`,
		onDrop: forgetKeys,
		// On Citus notification_keys is distributed by its key and a
		// partition of notifications by source: Citus refuses their
		// join ("complex joins are only supported when all distributed
		// tables are co-located"), and joins the keys' shards with the
		// partition's rows read first (a materialized CTE: an
		// intermediate result).
		onDropDistributed: `WITH dropped AS MATERIALIZED (
		    SELECT id, dedupe_key, sink, source, record_id, watch FROM %s)` +
			fmt.Sprintf(forgetKeys, `dropped`),
	},
	{
		name: "evaluations", at: "created_at", key: "change_created_at",
		window: func(c Config) time.Duration { return c.Evaluations },
		// A held change keeps the decisions of its other watches until it
		// is decided.
		deletable: `change_id NOT IN (SELECT id FROM changes WHERE eval_status = 'pending')`,
		// An evaluation has its change's source: joined on it, the
		// distribution column of the co-located tables on Citus.
		pending: `SELECT EXISTS (SELECT 1 FROM changes c WHERE c.eval_status = 'pending'
		                          AND EXISTS (SELECT 1 FROM %s e WHERE e.change_id = c.id AND e.source = c.source))`,
	},
	{
		name: "model_calls", at: "created_at", key: "created_at",
		window:    func(c Config) time.Duration { return c.ModelCalls },
		deletable: `true`,
	},
	{
		name: "changes", at: "created_at", key: "created_at",
		window:    func(c Config) time.Duration { return c.Changes },
		deletable: `eval_status = 'done'`,
		pending:   `SELECT EXISTS (SELECT 1 FROM %s WHERE eval_status = 'pending')`,
	},
	{
		name: "sync_runs", at: "started_at", key: "started_at",
		window: func(c Config) time.Duration { return c.SyncRuns },
		// A running run is in progress (or stuck, which report_stuck
		// shows); sources.run_id is each source's latest run (joined on
		// the source too: Citus's distribution column).
		deletable: `status <> 'running'
		            AND id NOT IN (SELECT run_id FROM sources WHERE run_id IS NOT NULL)`,
		pending: `SELECT EXISTS (SELECT 1 FROM %[1]s WHERE status = 'running')
		              OR EXISTS (SELECT 1 FROM sources s JOIN %[1]s r ON r.id = s.run_id AND r.source = s.name)`,
	},
}

// TableResult is what a prune did (or, dry, would do) to one table.
type TableResult struct {
	Table  string
	Window time.Duration
	// Cutoff is now (Config.Now) minus the window: older rows are pruned.
	Cutoff time.Time
	// Dropped lists the partitions dropped whole (or that a dry run would
	// drop).
	Dropped []string
	// Kept lists the partitions past the window kept for the pending work
	// they hold (their other rows are deleted).
	Kept []string
	// Rows deleted one by one (or that a dry run would delete), from kept
	// partitions and the default partition.
	Rows int64
	// Batches is the number of DELETE statements run.
	Batches int
}

// Result is what one prune did.
type Result struct {
	Tables []TableResult
	// Made lists the partitions made (ahead of time, or for rows of the
	// default partition).
	Made []string
	// Skipped is set when another replica was pruning: nothing was done.
	Skipped bool
	// Dry is set for a dry run: nothing was deleted.
	Dry bool
}

// Rows is the total of rows deleted one by one.
func (r Result) Rows() int64 {
	var n int64
	for _, t := range r.Tables {
		n += t.Rows
	}
	return n
}

// Dropped is the total of partitions dropped.
func (r Result) Dropped() int {
	var n int
	for _, t := range r.Tables {
		n += len(t.Dropped)
	}
	return n
}

// Pruner keeps the partitions of the history tables and deletes history
// older than the configured windows.
type Pruner struct {
	pool   *pgxpool.Pool
	conf   Config
	logger *slog.Logger
	loop   service.Loop
}

// New returns a pruner with the settings of conf, used as given.
func New(pool *pgxpool.Pool, conf Config, logger *slog.Logger) *Pruner {
	if conf.Now == nil {
		conf.Now = time.Now
	}
	return &Pruner{pool: pool, conf: conf, logger: logger.With("component", "retention")}
}

// Start prunes now and then every interval in the background, until Stop.
// Without any window set it still makes the partitions ahead of time.
func (p *Pruner) Start(ctx context.Context) error {
	if !p.conf.Enabled() {
		p.logger.Info("retention is off: every window is 0; history is kept forever (partitions are still made ahead)")
	}
	return p.loop.Start(ctx, p.run)
}

// Stop stops the loop and waits for a prune in progress to end its batch.
func (p *Pruner) Stop() error { return p.loop.Stop() }

func (p *Pruner) run(ctx context.Context) error {
	for {
		if _, err := p.Prune(ctx); err != nil && ctx.Err() == nil {
			p.logger.Error("prune old history", "error", err)
		}
		if !service.Sleep(ctx, p.conf.Interval) {
			return nil
		}
	}
}

// lockKey names the advisory lock of this schema's pruner.
const lockKey = `hashtext(current_schema() || '.lookout.retention')`

// Prune makes the partitions the tables need (Ahead), then prunes, table by
// table, what is older than its window: partitions dropped whole, rows
// deleted in batches of at most BatchSize, each in its own transaction. It
// holds a session advisory lock of the schema meanwhile; when another
// replica holds it, Prune returns at once with Skipped set.
func (p *Pruner) Prune(ctx context.Context) (Result, error) {
	conn, err := p.pool.Acquire(ctx)
	if err != nil {
		return Result{}, fmt.Errorf("prune: %w", err)
	}
	defer conn.Release()
	var locked bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock(`+lockKey+`)`).Scan(&locked); err != nil {
		return Result{}, fmt.Errorf("prune: take the retention lock: %w", err)
	}
	if !locked {
		p.logger.Debug("another replica is pruning; skipped")
		return Result{Skipped: true}, nil
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if _, err := conn.Exec(uctx, `SELECT pg_advisory_unlock(`+lockKey+`)`); err != nil {
			// The lock lives as long as the session: end it rather than
			// hand a locked connection back to the pool.
			p.logger.Warn("release the retention lock; closing the connection", "error", err)
			_ = conn.Hijack().Close(uctx)
		}
	}()
	var res Result
	for _, t := range tables {
		made, err := p.ensure(ctx, conn.Conn(), t)
		res.Made = append(res.Made, made...)
		if err != nil {
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && pgErr.Code == "55P03" { // lock_not_available: next round
				p.logger.Warn("partition not made: its table is busy; made at a later round", "table", t.name, "error", err)
				continue
			}
			return res, err
		}
	}
	for _, t := range tables {
		w := t.window(p.conf)
		if w <= 0 {
			continue
		}
		start := time.Now()
		tr, err := p.pruneTable(ctx, conn.Conn(), t, w, false)
		res.Tables = append(res.Tables, tr)
		if err != nil {
			return res, fmt.Errorf("prune %s older than %s: %w", t.name, w, err)
		}
		p.report(tr, start)
	}
	for _, t := range rowTables {
		w := t.window(p.conf)
		if w <= 0 {
			continue
		}
		start := time.Now()
		tr, err := p.pruneByOwner(ctx, conn.Conn(), t, w, false)
		res.Tables = append(res.Tables, tr)
		if err != nil {
			return res, fmt.Errorf("prune %s older than %s: %w", t.name, w, err)
		}
		p.report(tr, start)
	}
	return res, nil
}

// report logs and counts what a prune did to one table.
func (p *Pruner) report(tr TableResult, start time.Time) {
	p.conf.Metrics.Pruned(tr.Table, tr.Rows, len(tr.Dropped))
	if tr.Rows > 0 || len(tr.Dropped) > 0 {
		p.logger.Info("pruned", "table", tr.Table, "partitions_dropped", len(tr.Dropped), "rows", tr.Rows,
			"batches", tr.Batches, "partitions_kept", len(tr.Kept),
			"cutoff", tr.Cutoff.UTC().Format(time.RFC3339), "duration_ms", time.Since(start).Milliseconds())
	}
}

// DryRun counts, without changing anything, the partitions a prune would
// drop and the rows it would delete now.
func (p *Pruner) DryRun(ctx context.Context) (Result, error) {
	conn, err := p.pool.Acquire(ctx)
	if err != nil {
		return Result{}, fmt.Errorf("prune: %w", err)
	}
	defer conn.Release()
	res := Result{Dry: true}
	for _, t := range tables {
		w := t.window(p.conf)
		if w <= 0 {
			continue
		}
		tr, err := p.pruneTable(ctx, conn.Conn(), t, w, true)
		res.Tables = append(res.Tables, tr)
		if err != nil {
			return res, fmt.Errorf("count %s older than %s: %w", t.name, w, err)
		}
	}
	for _, t := range rowTables {
		w := t.window(p.conf)
		if w <= 0 {
			continue
		}
		tr, err := p.pruneByOwner(ctx, conn.Conn(), t, w, true)
		res.Tables = append(res.Tables, tr)
		if err != nil {
			return res, fmt.Errorf("count %s older than %s: %w", t.name, w, err)
		}
	}
	return res, nil
}

// pruneRows deletes (or counts, when dry) the rows of rel (a partition of
// t) older than cutoff, and returns how many and in how many batches.
//
// It first finds the frontier, the first id whose time is not older than
// the cutoff, by binary search over the primary key (a few dozen index
// probes), then deletes by ascending id below the frontier, one bounded
// batch per statement. Every statement is an index range scan on the
// primary key: no batch scans the recent rows, however many there are. The
// DELETE checks the time of each row itself, so a row appended out of
// order is never deleted early; it goes in a later prune.
func (p *Pruner) pruneRows(ctx context.Context, conn *pgx.Conn, t table, rel string, cutoff time.Time, dry bool) (int64, int, error) {
	frontier, err := p.frontier(ctx, conn, t, rel, cutoff)
	if err != nil || frontier == 0 {
		return 0, 0, err
	}
	if dry {
		var n int64
		err := conn.QueryRow(ctx, t.countSQL(rel), frontier, cutoff).Scan(&n)
		return n, 0, err
	}
	del, cand := t.deleteSQL(rel), t.candidatesSQL(rel)
	var after, last, rows int64
	batches := 0
	for {
		// One batch: on one PostgreSQL one statement (one group, every
		// source); on Citus one router statement per shard of the
		// batch's candidates (db.ClaimGroups), where Citus takes row
		// locks.
		groups, err := db.ClaimGroups(ctx, conn, t.name, p.conf.BatchSize, cand, after, frontier, cutoff, p.conf.BatchSize)
		if err != nil {
			return rows, batches, err
		}
		var n int64
		for _, g := range groups {
			var gn, glast int64
			if err := conn.QueryRow(ctx, del, after, frontier, cutoff, g.Limit, g.Restriction()).Scan(&gn, &glast); err != nil {
				return rows, batches, err
			}
			n += gn
			// The groups split the first BatchSize candidates after
			// after: the batch ends at the highest id any group deleted.
			last = max(last, glast)
		}
		batches++
		rows += n
		if n < int64(p.conf.BatchSize) {
			return rows, batches, nil
		}
		after = last
		if err := ctx.Err(); err != nil {
			return rows, batches, err
		}
	}
}

// frontier returns an id such that the rows of rel below it are the ones
// older than cutoff (as far as ids follow time), or 0 when rel is empty.
func (p *Pruner) frontier(ctx context.Context, conn *pgx.Conn, t table, rel string, cutoff time.Time) (int64, error) {
	var lo, hi *int64
	if err := conn.QueryRow(ctx, t.boundsSQL(rel)).Scan(&lo, &hi); err != nil {
		return 0, err
	}
	if lo == nil {
		return 0, nil
	}
	// Invariant: rows with id < l are older than cutoff; the first row at
	// or after h (if any) is not.
	l, h := *lo, *hi+1
	probe := t.probeSQL(rel)
	for l < h {
		mid := l + (h-l)/2
		var id int64
		var old bool
		err := conn.QueryRow(ctx, probe, mid, cutoff).Scan(&id, &old)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			h = mid
		case err != nil:
			return 0, err
		case old:
			l = id + 1
		default:
			h = mid
		}
	}
	return l, nil
}

// boundsSQL reads the lowest and highest id of rel.
func (t table) boundsSQL(rel string) string {
	return fmt.Sprintf(`SELECT min(id), max(id) FROM %s`, pgx.Identifier{rel}.Sanitize())
}

// probeSQL ($1 id, $2 cutoff) reads the first row of rel at or after an id
// and whether it is older than the cutoff: one step of the frontier search.
func (t table) probeSQL(rel string) string {
	return fmt.Sprintf(`SELECT id, %[2]s < $2 FROM %[1]s WHERE id >= $1 ORDER BY id LIMIT 1`, pgx.Identifier{rel}.Sanitize(), t.at)
}

// deleteSQL ($1 after id, $2 frontier, $3 cutoff, $4 batch size, $5 the
// sources it is restricted to, NULL for every source) deletes one batch of
// rel and returns how many rows and the highest id it deleted. On Citus,
// where rel is distributed by source, it runs once per shard of the
// batch's candidates (candidatesSQL), restricted to that shard's sources:
// a router statement, where Citus takes row locks (FOR UPDATE is refused
// across shards).
func (t table) deleteSQL(rel string) string {
	returning := t.returning
	if returning == "" {
		returning = "id"
	}
	return fmt.Sprintf(`
		WITH doomed AS (
		    SELECT id FROM %[1]s
		    WHERE id > $1 AND id < $2 AND %[2]s < $3 AND %[3]s
		      AND ($5::text[] IS NULL OR source = ANY($5::text[]))
		    ORDER BY id
		    LIMIT $4
		    FOR UPDATE SKIP LOCKED
		), deleted AS (
		    DELETE FROM %[1]s WHERE id IN (SELECT id FROM doomed)
		      AND ($5::text[] IS NULL OR source = ANY($5::text[]))
		    RETURNING %[4]s
		)%[5]s
		SELECT count(*), coalesce(max(id), 0) FROM deleted`, pgx.Identifier{rel}.Sanitize(), t.at, t.deletable, returning, t.afterDelete)
}

// candidatesSQL ($1 after id, $2 frontier, $3 cutoff, $4 batch size) is
// deleteSQL's pick without its locks: the source of each row it would
// delete now, in its order (db.ClaimGroups; run on Citus only).
func (t table) candidatesSQL(rel string) string {
	return fmt.Sprintf(`
		SELECT source FROM %[1]s
		WHERE id > $1 AND id < $2 AND %[2]s < $3 AND %[3]s
		ORDER BY id
		LIMIT $4`, pgx.Identifier{rel}.Sanitize(), t.at, t.deletable)
}

// countSQL ($1 frontier, $2 cutoff) counts what a prune of rel would
// delete.
func (t table) countSQL(rel string) string {
	return fmt.Sprintf(`SELECT count(*) FROM %[1]s WHERE id < $1 AND %[2]s < $2 AND %[3]s`, pgx.Identifier{rel}.Sanitize(), t.at, t.deletable)
}

// Statement is one SQL statement a prune runs, with example arguments.
type Statement struct {
	// Table is the table pruned.
	Table string
	// Name is bounds, probe, delete, count (the dry run) or pending.
	Name string
	SQL  string
	Args []any
}

// Statements lists the statements a prune runs on each table's rel
// partition (a name, or "" for the default partition), with example
// arguments — a frontier id, a cutoff, a batch size — for EXPLAIN:
// docs/performance.md shows their plans, and a test checks that none of
// them reads a whole table.
func Statements(rel func(table string) string, frontier int64, cutoff time.Time, batch int) []Statement {
	var out []Statement
	for _, t := range tables {
		r := rel(t.name)
		out = append(out,
			Statement{t.name, "bounds", t.boundsSQL(r), nil},
			Statement{t.name, "probe", t.probeSQL(r), []any{frontier, cutoff}},
			Statement{t.name, "delete", t.deleteSQL(r), []any{int64(0), frontier, cutoff, batch, nil}},
			Statement{t.name, "count", t.countSQL(r), []any{frontier, cutoff}},
		)
		if t.pending != "" {
			out = append(out, Statement{t.name, "pending", fmt.Sprintf(t.pending, pgx.Identifier{r}.Sanitize()), nil})
		}
	}
	return out
}
