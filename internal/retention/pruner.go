// Package retention prunes old history: evaluated changes, finished sync
// runs, evaluations, finished notifications and model calls older than
// their configured window are deleted in bounded batches, each its own
// short transaction. Pending work is never deleted: changes still pending,
// evaluations of those changes, running runs and each source's latest run,
// pending and held notifications, and notifications whose dedupe key must
// outlive them (dedupe: record).
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
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/service"
)

// Config are the pruner's typed settings: lookout.yaml's retention block.
// New uses them as given; the defaults below are the ones the config
// loader applies, and FromConfig carries its values over.
type Config struct {
	// Changes, SyncRuns, Evaluations, Notifications and ModelCalls are the
	// windows of their tables (retention.changes, ...): rows older than the
	// window are pruned; 0 keeps the table's rows forever. Default to 0.
	Changes       time.Duration
	SyncRuns      time.Duration
	Evaluations   time.Duration
	Notifications time.Duration
	ModelCalls    time.Duration
	// BatchSize is the most rows one DELETE removes (retention.batch_size).
	// Defaults to 5000.
	BatchSize int
	// Interval is the time between two prunes of Start's loop
	// (retention.interval). Defaults to 1h.
	Interval time.Duration
}

// FromConfig returns the pruner settings of lookout.yaml's retention
// block, with the defaults the config loader applied.
func FromConfig(r config.Retention) Config {
	return Config{Changes: r.Changes, SyncRuns: r.SyncRuns, Evaluations: r.Evaluations,
		Notifications: r.Notifications, ModelCalls: r.ModelCalls, BatchSize: r.BatchSize, Interval: r.Interval}
}

// Enabled reports whether any window is set.
func (c Config) Enabled() bool {
	for _, t := range tables {
		if t.window(c) > 0 {
			return true
		}
	}
	return false
}

// table describes how one table is pruned. Every pruned table has an
// increasing bigserial id and a time column that grows with it (rows are
// appended), which lets a prune walk the primary key instead of scanning.
type table struct {
	name   string
	window func(Config) time.Duration
	// at is the time column compared with the window.
	at string
	// deletable is the SQL condition, besides age, a row must meet to be
	// deleted: it is what keeps pending work.
	deletable string
}

// tables in pruning order: notifications first (digest summaries are
// referenced by their members), model calls before the changes they name.
var tables = []table{
	{
		name: "notifications", at: "created_at",
		window: func(c Config) time.Duration { return c.Notifications },
		// Finished rows only; a dedupe: record key (source/record/watch,
		// without a version) suppresses every later notification of the
		// record, so such rows stay.
		deletable: `status IN ('delivered', 'dead', 'digested')
		            AND dedupe_key <> source || '/' || record_id || '/' || watch`,
	},
	{
		name: "evaluations", at: "created_at",
		window: func(c Config) time.Duration { return c.Evaluations },
		// A held change keeps the decisions of its other watches until it
		// is decided.
		deletable: `change_id NOT IN (SELECT id FROM changes WHERE eval_status = 'pending')`,
	},
	{
		name: "model_calls", at: "created_at",
		window:    func(c Config) time.Duration { return c.ModelCalls },
		deletable: `true`,
	},
	{
		name: "changes", at: "created_at",
		window:    func(c Config) time.Duration { return c.Changes },
		deletable: `eval_status = 'done'`,
	},
	{
		name: "sync_runs", at: "started_at",
		window: func(c Config) time.Duration { return c.SyncRuns },
		// A running run is in progress (or stuck, which report_stuck
		// shows); sources.run_id is each source's latest run.
		deletable: `status <> 'running'
		            AND id NOT IN (SELECT run_id FROM sources WHERE run_id IS NOT NULL)`,
	},
}

// TableResult is what a prune did (or, dry, would do) to one table.
type TableResult struct {
	Table  string
	Window time.Duration
	// Cutoff is now minus the window: older rows are pruned.
	Cutoff time.Time
	// Rows deleted (or that a dry run would delete).
	Rows int64
	// Batches is the number of DELETE statements run.
	Batches int
}

// Result is what one prune did.
type Result struct {
	Tables []TableResult
	// Skipped is set when another replica was pruning: nothing was done.
	Skipped bool
	// Dry is set for a dry run: nothing was deleted.
	Dry bool
}

// Rows is the total of rows deleted.
func (r Result) Rows() int64 {
	var n int64
	for _, t := range r.Tables {
		n += t.Rows
	}
	return n
}

// Pruner deletes history older than the configured windows.
type Pruner struct {
	pool   *pgxpool.Pool
	conf   Config
	logger *slog.Logger
	loop   service.Loop
}

// New returns a pruner with the settings of conf, used as given.
func New(pool *pgxpool.Pool, conf Config, logger *slog.Logger) *Pruner {
	return &Pruner{pool: pool, conf: conf, logger: logger.With("component", "retention")}
}

// Start prunes now and then every interval in the background, until Stop.
// Without any window set it does nothing.
func (p *Pruner) Start(ctx context.Context) error {
	if !p.conf.Enabled() {
		p.logger.Debug("retention is off: no window is set")
		return nil
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

// Prune deletes, table by table, the rows older than their window in
// batches of at most BatchSize rows, each in its own transaction. It holds a
// session advisory lock of the schema meanwhile; when another replica holds
// it, Prune returns at once with Skipped set.
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
		if tr.Rows > 0 {
			p.logger.Info("pruned", "table", t.name, "rows", tr.Rows, "batches", tr.Batches,
				"cutoff", tr.Cutoff.UTC().Format(time.RFC3339), "duration_ms", time.Since(start).Milliseconds())
		}
	}
	return res, nil
}

// DryRun counts, without deleting anything, the rows a prune would delete
// now.
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
	return res, nil
}

// pruneTable deletes (or counts, when dry) the rows of t older than w.
//
// It first finds the frontier, the first id whose time is not older than
// the cutoff, by binary search over the primary key (a few dozen index
// probes), then deletes by ascending id below the frontier, one bounded
// batch per statement. Every statement is an index range scan on the
// primary key: no batch scans the recent rows, however many there are. The
// DELETE checks the time of each row itself, so a row appended out of
// order is never deleted early; it goes in a later prune.
func (p *Pruner) pruneTable(ctx context.Context, conn *pgx.Conn, t table, w time.Duration, dry bool) (TableResult, error) {
	tr := TableResult{Table: t.name, Window: w}
	if err := conn.QueryRow(ctx, `SELECT now() - $1::interval`, w).Scan(&tr.Cutoff); err != nil {
		return tr, err
	}
	frontier, err := p.frontier(ctx, conn, t, tr.Cutoff)
	if err != nil || frontier == 0 {
		return tr, err
	}
	if dry {
		err := conn.QueryRow(ctx, t.countSQL(), frontier, tr.Cutoff).Scan(&tr.Rows)
		return tr, err
	}
	del := t.deleteSQL()
	var after int64
	for {
		var n, last int64
		if err := conn.QueryRow(ctx, del, after, frontier, tr.Cutoff, p.conf.BatchSize).Scan(&n, &last); err != nil {
			return tr, err
		}
		tr.Batches++
		tr.Rows += n
		if n < int64(p.conf.BatchSize) {
			return tr, nil
		}
		after = last
		if err := ctx.Err(); err != nil {
			return tr, err
		}
	}
}

// frontier returns an id such that the rows below it are the ones older
// than cutoff (as far as ids follow time), or 0 when the table is empty.
func (p *Pruner) frontier(ctx context.Context, conn *pgx.Conn, t table, cutoff time.Time) (int64, error) {
	var lo, hi *int64
	if err := conn.QueryRow(ctx, t.boundsSQL()).Scan(&lo, &hi); err != nil {
		return 0, err
	}
	if lo == nil {
		return 0, nil
	}
	// Invariant: rows with id < l are older than cutoff; the first row at
	// or after h (if any) is not.
	l, h := *lo, *hi+1
	probe := t.probeSQL()
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

// boundsSQL reads the lowest and highest id.
func (t table) boundsSQL() string {
	return fmt.Sprintf(`SELECT min(id), max(id) FROM %s`, t.name)
}

// probeSQL ($1 id, $2 cutoff) reads the first row at or after an id and
// whether it is older than the cutoff: one step of the frontier search.
func (t table) probeSQL() string {
	return fmt.Sprintf(`SELECT id, %[2]s < $2 FROM %[1]s WHERE id >= $1 ORDER BY id LIMIT 1`, t.name, t.at)
}

// deleteSQL ($1 after id, $2 frontier, $3 cutoff, $4 batch size) deletes
// one batch and returns how many rows and the highest id it deleted.
func (t table) deleteSQL() string {
	return fmt.Sprintf(`
		WITH doomed AS (
		    SELECT id FROM %[1]s
		    WHERE id > $1 AND id < $2 AND %[2]s < $3 AND %[3]s
		    ORDER BY id
		    LIMIT $4
		    FOR UPDATE SKIP LOCKED
		), deleted AS (
		    DELETE FROM %[1]s WHERE id IN (SELECT id FROM doomed) RETURNING id
		)
		SELECT count(*), coalesce(max(id), 0) FROM deleted`, t.name, t.at, t.deletable)
}

// countSQL ($1 frontier, $2 cutoff) counts what a prune would delete.
func (t table) countSQL() string {
	return fmt.Sprintf(`SELECT count(*) FROM %[1]s WHERE id < $1 AND %[2]s < $2 AND %[3]s`, t.name, t.at, t.deletable)
}

// Statement is one SQL statement a prune runs, with example arguments.
type Statement struct {
	// Table is the table pruned.
	Table string
	// Name is bounds, probe, delete or count (the dry run).
	Name string
	SQL  string
	Args []any
}

// Statements lists the statements a prune runs on each table, with
// example arguments — a frontier id, a cutoff, a batch size — for EXPLAIN:
// docs/performance.md shows their plans, and a test checks that none of
// them reads a whole table.
func Statements(frontier int64, cutoff time.Time, batch int) []Statement {
	var out []Statement
	for _, t := range tables {
		out = append(out,
			Statement{t.name, "bounds", t.boundsSQL(), nil},
			Statement{t.name, "probe", t.probeSQL(), []any{frontier, cutoff}},
			Statement{t.name, "delete", t.deleteSQL(), []any{int64(0), frontier, cutoff, batch}},
			Statement{t.name, "count", t.countSQL(), []any{frontier, cutoff}},
		)
	}
	return out
}
