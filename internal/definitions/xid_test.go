package definitions_test

import (
	"context"
	"testing"

	"github.com/lookout-dev/lookout/internal/pgtest"
)

// Every row of the definitions tables carries the transaction that wrote
// it last (migration 33); since migration 65 the trigger that stamps it
// runs only when the row does not carry it already: not on an insert that
// leaves xid to its default, still on an update and on a write of another
// xid.
func TestXidTriggerStampsOnlyWhatTheDefaultDidNot(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SET LOCAL track_functions = 'all'`); err != nil {
		t.Fatal(err)
	}
	calls := func() int64 {
		t.Helper()
		var n int64
		if err := tx.QueryRow(ctx, `SELECT coalesce(pg_stat_get_xact_function_calls('definitions_stamp_xid'::regproc), 0)`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	stamped := func(what, query string) {
		t.Helper()
		var ok bool
		if err := tx.QueryRow(ctx, query).Scan(&ok); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if !ok {
			t.Errorf("%s: xid is not the writing transaction's", what)
		}
	}
	for _, q := range []string{
		`INSERT INTO source_definitions (name, managed_by, connector, definition, definition_hash, version) VALUES ('s', 'api', 'http', '{}', 'h', 1)`,
		`INSERT INTO watches (source, name, managed_by, definition, definition_hash, version) VALUES ('s', 'w', 'api', '{}', 'h', 1)`,
		`INSERT INTO definition_deletions (version, source, managed_by) VALUES (1, 'gone', 'api')`,
	} {
		if _, err := tx.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if n := calls(); n != 0 {
		t.Errorf("the trigger ran %d times on inserts that left xid to its default, want 0", n)
	}
	stamped("insert", `SELECT bool_and(xid = pg_current_xact_id()) FROM (
		SELECT xid FROM source_definitions UNION ALL SELECT xid FROM watches UNION ALL SELECT xid FROM definition_deletions) x`)

	// An explicit xid, on insert or update, is replaced by the writer's.
	if _, err := tx.Exec(ctx, `INSERT INTO watches (source, name, managed_by, definition, definition_hash, version, xid) VALUES ('s', 'w2', 'api', '{}', 'h', 1, '1')`); err != nil {
		t.Fatal(err)
	}
	stamped("insert of another xid", `SELECT xid = pg_current_xact_id() FROM watches WHERE name = 'w2'`)
	if _, err := tx.Exec(ctx, `UPDATE source_definitions SET xid = '1'`); err != nil {
		t.Fatal(err)
	}
	stamped("update to another xid", `SELECT xid = pg_current_xact_id() FROM source_definitions`)
	if n := calls(); n != 2 {
		t.Errorf("the trigger ran %d times on two writes of another xid, want 2", n)
	}

	// An update that does not set xid, by a later transaction, stamps it.
	if _, err := tx.Exec(ctx, `UPDATE watches SET xid = '1' WHERE name = 'w'`); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `ALTER TABLE watches DISABLE TRIGGER watches_stamp_xid`); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `UPDATE watches SET xid = '1' WHERE name = 'w'`); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `ALTER TABLE watches ENABLE TRIGGER watches_stamp_xid`); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `UPDATE watches SET paused = true WHERE name = 'w'`); err != nil {
		t.Fatal(err)
	}
	stamped("update", `SELECT xid = pg_current_xact_id() FROM watches WHERE name = 'w'`)
}
