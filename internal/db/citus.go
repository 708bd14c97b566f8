package db

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// CitusTable is one table of lookout's layout on Citus (docs/scaling.md,
// "Past one PostgreSQL").
type CitusTable struct {
	// Name is the table's name in the schema.
	Name string
	// Column is the distribution column; empty for a reference table.
	Column string
	// ColocateWith is the table of the co-location group the table joins,
	// or "none" for a group of its own (for a distributed table).
	ColocateWith string
}

// CitusLayout is how Distribute lays the tables out, in the order it
// distributes them: the reference tables, then the tables of a source,
// distributed by the source key in the co-location group of sources (a
// source's definition, poll state, records, changes, decisions,
// notifications and runs on one node), then the tables distributed by a
// key of their own.
//
// The tables of CitusCoordinatorTables, and those of neither list
// (activity_hour_totals, schema_migrations, and the small queues and
// logs of CitusLocalTables), stay local tables of the coordinator.
//
// sign_in_links is a reference table beside api_tokens, which its rows
// reference (a foreign key between reference tables; a local table with
// that key would be made a Citus local table by Citus itself).
// task_reviews is distributed with the task runs it reviews (its foreign
// key names the run by id and source, migration 42).
var CitusLayout = []CitusTable{
	{Name: "config_generations"},
	{Name: "api_tokens"},
	{Name: "briefings"},
	{Name: "sign_in_links"},

	{Name: "sources", Column: "name", ColocateWith: "none"},
	{Name: "records", Column: "source", ColocateWith: "sources"},
	{Name: "changes", Column: "source", ColocateWith: "sources"},
	{Name: "evaluations", Column: "source", ColocateWith: "sources"},
	{Name: "notifications", Column: "source", ColocateWith: "sources"},
	{Name: "delivery_attempts", Column: "source", ColocateWith: "sources"},
	{Name: "model_calls", Column: "source", ColocateWith: "sources"},
	{Name: "sync_runs", Column: "source", ColocateWith: "sources"},
	{Name: "sync_run_hours", Column: "source", ColocateWith: "sources"},
	{Name: "verdicts", Column: "source", ColocateWith: "sources"},
	{Name: "model_budgets", Column: "source", ColocateWith: "sources"},
	{Name: "inbound_events", Column: "source", ColocateWith: "sources"},
	{Name: "task_runs", Column: "source", ColocateWith: "sources"},
	{Name: "task_reviews", Column: "source", ColocateWith: "sources"},

	{Name: "notification_keys", Column: "dedupe_key", ColocateWith: "none"},
	{Name: "host_limits", Column: "host", ColocateWith: "none"},
	{Name: "idempotency_keys", Column: "owner", ColocateWith: "none"},
	{Name: "audit_log", Column: "owner", ColocateWith: "idempotency_keys"},
}

// CitusCoordinatorTables are the definitions' tables, which stay local
// tables of the coordinator on Citus: a trigger stamps each of their rows
// with the transaction that wrote it (xid8, migration 33) and a
// definitions follower compares those stamps with its snapshot
// (internal/definitions). Distributed, or as reference tables, their rows
// would be stamped by the workers' transactions, which the coordinator's
// snapshot does not order, and Citus refuses to distribute a table with
// triggers ("cannot distribute relation ... because it has triggers").
// They are small and read whole by the followers; a statement that joins
// them with a distributed table is planned by Citus in two steps (the
// local rows first).
var CitusCoordinatorTables = []string{"source_definitions", "watches", "definition_deletions", "config_version"}

// CitusLocalTables are the other tables that stay local tables of the
// coordinator on Citus, by choice: dry_run_requests (a few rows in
// flight between the api and an evaluator), model_versions (a row when a
// model's digest changes, written under LOCK TABLE) and drift_embeddings
// (a queue of model decisions' reasons, a row per model call: model calls
// are rare next to changes, and its claim, FOR UPDATE SKIP LOCKED across
// sources, then runs on one node as on one PostgreSQL) and
// model_drift_days (the models page's daily rollup, migration 44: its
// triggers on evaluations are dropped on Citus like the activity
// rollup's, so it stays empty there; docs/scaling.md). Distribute
// leaves them alone; the list documents the choice and lets the layout
// test check that no table of the schema is forgotten.
var CitusLocalTables = []string{"activity_hour_totals", "schema_migrations", "dry_run_requests", "model_versions", "drift_embeddings", "model_drift_days"}

// Distribute lays the pool's current schema out for Citus when the
// database has the citus extension, and reports whether it has: the
// tables of CitusLayout become reference tables or are distributed, each
// in its co-location group. On plain PostgreSQL it does nothing. Migrate
// calls it after the migrations, so the same migrations run on both and
// only this step differs.
//
// It is idempotent: a table laid out already is left alone, so a second
// run (every daemon start migrates) changes nothing, and a run that failed
// half-way resumes where it stopped. A table missing from the schema is
// skipped.
//
// Before distributing a table, each primary key or unique constraint
// that does not hold the distribution column gets it as its last column,
// under the same name: Citus enforces a constraint only within a shard,
// so it must hold the distribution column. Uniqueness is unchanged (each
// such key already determines the source: an id, a change, an
// idempotency key or an input hash naming its source), and the statements
// that upsert into those tables name the constraint (ON CONFLICT ON
// CONSTRAINT), which matches both layouts.
func Distribute(ctx context.Context, pool *pgxpool.Pool) (bool, error) {
	var citus bool
	if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')`).Scan(&citus); err != nil {
		return false, fmt.Errorf("look for the citus extension: %w", err)
	}
	if !citus {
		return false, nil
	}
	schema, err := CurrentSchema(ctx, pool)
	if err != nil {
		return true, err
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return true, fmt.Errorf("distribute: %w", err)
	}
	defer conn.Release()
	qualify := func(table string) string { return Quote(schema) + "." + Quote(table) }
	for _, t := range CitusLayout {
		rel := qualify(t.Name)
		var exists bool
		if err := conn.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, rel).Scan(&exists); err != nil {
			return true, fmt.Errorf("distribute %s: %w", rel, err)
		}
		if !exists {
			continue
		}
		done, err := laidOut(ctx, conn.Conn(), rel, t)
		if err != nil {
			return true, err
		}
		if done {
			continue
		}
		if t.Column == "" {
			if _, err := conn.Exec(ctx, `SELECT create_reference_table($1)`, rel); err != nil {
				return true, fmt.Errorf("make %s a reference table: %w", rel, err)
			}
			continue
		}
		with := t.ColocateWith
		if with != "none" {
			with = qualify(with)
		}
		if err := distribute(ctx, conn.Conn(), rel, t, with); err != nil {
			return true, err
		}
	}
	for _, f := range CitusFunctions {
		fn := Quote(schema) + "." + f
		var exists, done bool
		if err := conn.QueryRow(ctx, `SELECT to_regprocedure($1) IS NOT NULL,
			EXISTS (SELECT 1 FROM pg_dist_object WHERE classid = 'pg_proc'::regclass AND objid = to_regprocedure($1))`,
			fn).Scan(&exists, &done); err != nil {
			return true, fmt.Errorf("distribute the function %s: %w", fn, err)
		}
		if !exists || done {
			continue
		}
		if _, err := conn.Exec(ctx, `SELECT create_distributed_function($1)`, fn); err != nil {
			return true, fmt.Errorf("distribute the function %s: %w", fn, err)
		}
	}
	return true, nil
}

// CitusFunctions are the SQL functions that statements call on the
// shards (record_snapshot_of, in the evaluator's claim, the
// materializer and changes_with_record, which calls built-in functions
// only: a worker runs a shard's statement under its own search_path): Citus
// makes a function on the workers only when it is created after its
// schema was distributed, so Distribute distributes them (a function that
// is missing, or distributed already, is left alone).
var CitusFunctions = []string{
	"record_snapshot_of(text, text, text, text, text, text, text[], timestamptz, timestamptz, jsonb)",
}

// distribute distributes rel as t says, in one transaction with the
// changes it needs first: its keys hold the distribution column, its
// activity triggers are gone, and the views that call a function of its
// row type are dropped and made again after it (Citus refuses such a
// table as a circular dependency: the table, the view, the function, the
// table).
func distribute(ctx context.Context, conn *pgx.Conn, rel string, t CitusTable, with string) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("distribute %s: %w", rel, err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit it does nothing
	if err := keysWithColumn(ctx, tx.Conn(), rel, t.Column); err != nil {
		return err
	}
	if err := dropActivityTriggers(ctx, tx.Conn(), rel); err != nil {
		return err
	}
	views, err := dropRowTypeViews(ctx, tx.Conn(), rel)
	if err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `SELECT create_distributed_table($1, $2, colocate_with => $3)`, rel, t.Column, with); err != nil {
		return fmt.Errorf("distribute %s by %s (co-located with %s): %w", rel, t.Column, t.ColocateWith, err)
	}
	for _, v := range views {
		if _, err := tx.Exec(ctx, v); err != nil {
			return fmt.Errorf("make again a view on %s after distributing it (%.60s…): %w", rel, v, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("distribute %s: %w", rel, err)
	}
	return nil
}

// dropRowTypeViews drops the views on rel that call a function taking
// rel's row type (changes_with_record calls record_snapshot(records)) and
// returns the statements that make them again, comments included.
func dropRowTypeViews(ctx context.Context, conn *pgx.Conn, rel string) ([]string, error) {
	rows, err := conn.Query(ctx, `
		SELECT DISTINCT v.oid::regclass::text,
		       format('CREATE VIEW %s AS %s', v.oid::regclass, pg_get_viewdef(v.oid)),
		       obj_description(v.oid, 'pg_class')
		FROM pg_depend d
		JOIN pg_rewrite w ON w.oid = d.objid AND d.classid = 'pg_rewrite'::regclass
		JOIN pg_class v ON v.oid = w.ev_class AND v.relkind = 'v'
		WHERE d.refclassid = 'pg_class'::regclass AND d.refobjid = $1::regclass
		  AND EXISTS (SELECT 1 FROM pg_depend f JOIN pg_proc p ON p.oid = f.refobjid
		              WHERE f.classid = 'pg_rewrite'::regclass AND f.objid = w.oid AND f.refclassid = 'pg_proc'::regclass
		                AND (SELECT reltype FROM pg_class WHERE oid = $1::regclass) = ANY (p.proargtypes::oid[]))`, rel)
	if err != nil {
		return nil, fmt.Errorf("read the views on %s: %w", rel, err)
	}
	var names, creates []string
	for rows.Next() {
		var name, create string
		var comment *string
		if err := rows.Scan(&name, &create, &comment); err != nil {
			return nil, fmt.Errorf("read the views on %s: %w", rel, err)
		}
		names = append(names, name)
		creates = append(creates, create)
		if comment != nil {
			creates = append(creates, fmt.Sprintf("COMMENT ON VIEW %s IS %s", name, quoteLiteral(*comment)))
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the views on %s: %w", rel, err)
	}
	for _, name := range names {
		if _, err := conn.Exec(ctx, "DROP VIEW "+name); err != nil {
			return nil, fmt.Errorf("drop the view %s on %s before distributing it: %w", name, rel, err)
		}
	}
	return creates, nil
}

// quoteLiteral quotes s as an SQL string literal.
func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// laidOut reports whether rel is already what t says: distributed by
// t.Column, or a reference table. A table laid out otherwise (by another
// column, or a reference table that should be distributed) is an error
// naming both: Distribute does not move data between layouts.
func laidOut(ctx context.Context, conn *pgx.Conn, rel string, t CitusTable) (bool, error) {
	var method, model, column string
	err := conn.QueryRow(ctx, `
		SELECT partmethod::text, repmodel::text, coalesce(column_to_column_name(logicalrelid, partkey), '')
		FROM pg_dist_partition WHERE logicalrelid = $1::regclass`, rel).Scan(&method, &model, &column)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read the layout of %s: %w", rel, err)
	}
	switch {
	case t.Column == "" && method == "n" && model == "t":
		return true, nil
	case t.Column != "" && method == "h" && column == t.Column:
		return true, nil
	case method == "n" && model == "s":
		// A Citus local table (Citus made it one for a foreign key to a
		// reference table): create_* converts it.
		return false, nil
	}
	want := "a reference table"
	if t.Column != "" {
		want = "distributed by " + t.Column
	}
	return false, fmt.Errorf("%s should be %s but is already laid out otherwise (partition method %q, column %q): undistribute it first (undistribute_table)", rel, want, method, column)
}

// dropActivityTriggers drops the statement triggers that add rel's rows
// to activity_hour_totals (migration 18). Citus refuses to distribute a
// table with triggers unless citus.enable_unsafe_triggers is on, and then
// runs them on the workers, once per shard, where their INSERT into
// activity_hour_totals would be a distributed write from inside a
// worker's statement (the "visibility and deadlock issues" Citus warns
// of). On Citus the hourly activity counts only what the changes writer
// adds itself (changes); docs/scaling.md lists it. The same holds for
// the triggers that keep model_drift_days (migration 44): on Citus the
// models page's drift table is empty.
func dropActivityTriggers(ctx context.Context, conn *pgx.Conn, rel string) error {
	rows, err := conn.Query(ctx, `
		SELECT t.tgname::text FROM pg_trigger t JOIN pg_proc p ON p.oid = t.tgfoid
		WHERE t.tgrelid = $1::regclass AND NOT t.tgisinternal AND (p.proname LIKE 'activity\_hour\_totals\_%' OR p.proname LIKE 'model\_drift\_days\_%')
		ORDER BY 1`, rel)
	if err != nil {
		return fmt.Errorf("read the triggers of %s: %w", rel, err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("read the triggers of %s: %w", rel, err)
	}
	for _, name := range names {
		if _, err := conn.Exec(ctx, fmt.Sprintf("DROP TRIGGER %s ON %s", Quote(name), rel)); err != nil {
			return fmt.Errorf("drop the activity trigger %s of %s: %w", name, rel, err)
		}
	}
	return nil
}

// keysWithColumn adds column, as the last column, to each primary key and
// unique constraint of rel that does not hold it, keeping its name.
func keysWithColumn(ctx context.Context, conn *pgx.Conn, rel, column string) error {
	rows, err := conn.Query(ctx, `
		SELECT c.conname, c.contype::text,
		       array(SELECT a.attname::text FROM unnest(c.conkey) WITH ORDINALITY k(num, ord)
		             JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.num ORDER BY k.ord)
		FROM pg_constraint c
		WHERE c.conrelid = $1::regclass AND c.contype IN ('p', 'u')
		  AND NOT EXISTS (SELECT 1 FROM pg_attribute a
		                  WHERE a.attrelid = c.conrelid AND a.attname = $2 AND a.attnum = ANY (c.conkey))
		ORDER BY c.conname`, rel, column)
	if err != nil {
		return fmt.Errorf("read the keys of %s: %w", rel, err)
	}
	type key struct {
		name, kind string
		cols       []string
	}
	var keys []key
	for rows.Next() {
		var k key
		if err := rows.Scan(&k.name, &k.kind, &k.cols); err != nil {
			return fmt.Errorf("read the keys of %s: %w", rel, err)
		}
		keys = append(keys, k)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read the keys of %s: %w", rel, err)
	}
	for _, k := range keys {
		cols := make([]string, 0, len(k.cols)+1)
		for _, c := range k.cols {
			cols = append(cols, Quote(c))
		}
		cols = append(cols, Quote(column))
		kind := "UNIQUE"
		if k.kind == "p" {
			kind = "PRIMARY KEY"
		}
		stmt := fmt.Sprintf("ALTER TABLE %s DROP CONSTRAINT %s, ADD CONSTRAINT %s %s (%s)",
			rel, Quote(k.name), Quote(k.name), kind, strings.Join(cols, ", "))
		if _, err := conn.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("add %s to the key %s of %s: %w", column, k.name, rel, err)
		}
	}
	return nil
}
