package pgtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lookout-dev/lookout/internal/db"
)

// On Citus a test cannot have a database of its own (the workers know
// only the database with the extension), and making a schema there costs
// 110 to 140 s on a busy machine, most of it create_distributed_table of
// about 50 tables and partitions. So the tests lease schemas from a pool
// of migrated, distributed schemas in the coordinator's database, kept
// between test binaries and runs (like the template databases):
//
//   - a schema is leased by one test at a time: a session advisory lock on
//     the coordinator (Citus keeps advisory locks there), held by a
//     connection the test keeps open until its end, so concurrent test
//     binaries never share one;
//   - at lease, the schema is emptied (TRUNCATE of every table, identities
//     restarted) and the rows its migrations wrote are put back: the test
//     sees exactly what a freshly migrated schema holds, ids from 1;
//   - a schema whose objects differ from what its migrations made (a test
//     altered, dropped or added a table, constraint, function or trigger,
//     or dropped a partition the migrations made) is dropped and made
//     again, as is one whose reset fails;
//   - when every schema is leased, the test makes a new one (so the pool
//     grows to the number of tests running at once, 4 with go test's
//     defaults on 2 cores).
//
// Tests stay as isolated as with a schema each: one test at a time sees a
// schema, and it starts from the migrated state. Sharing one schema
// between concurrent tests with a source namespace each would not be:
// the daemons' claims take due work of every source, so one test's
// evaluator would take another test's changes.

// citusPoolEnv names the environment variable that, set to 0, makes
// every test on Citus migrate a schema of its own instead of leasing one
// (slow: to check the pool itself).
const citusPoolEnv = "LOOKOUT_PGTEST_CITUS_POOL"

// citusPoolPrefix begins the names of the pool's schemas, with the
// version of what their comment records (a binary that reads another
// one uses other schemas); the migrations' hash follows, so binaries with
// other migrations use other schemas.
const citusPoolPrefix = "pgtest2_"

var citusBases struct {
	sync.Mutex
	byBase map[string]bool
}

// hasCitus reports, once per base URL, whether its database has the
// citus extension.
func hasCitus(ctx context.Context, base string) (bool, error) {
	citusBases.Lock()
	defer citusBases.Unlock()
	if v, ok := citusBases.byBase[base]; ok {
		return v, nil
	}
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		return false, fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.Background())
	var citus bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')`).Scan(&citus); err != nil {
		return false, fmt.Errorf("look for the citus extension: %w", err)
	}
	if citusBases.byBase == nil {
		citusBases.byBase = map[string]bool{}
	}
	citusBases.byBase[base] = citus
	return citus, nil
}

// poolState is what a pool schema's comment records when it is made: the
// fingerprint of its objects and the rows its migrations wrote, by table.
type poolState struct {
	Fingerprint string                     `json:"fingerprint"`
	Seeds       map[string]json.RawMessage `json:"seeds"`
	// Partitions are the partitions the migrations made (the weeks around
	// the schema's making). The fingerprint leaves partitions out, since
	// the daemons add weeks as they run; but a test that drops one (the
	// retention tests do) left the schema without it, and a later test's
	// rows of that week went to the default partition: a schema missing
	// one of these is made again.
	Partitions []string `json:"partitions"`
}

// fromCitusPool leases a schema of the pool (see above) for the test and
// returns its name and URL; false when base has no Citus or the pool is
// turned off.
func fromCitusPool(t testing.TB, ctx context.Context, base string) (string, string, bool) {
	t.Helper()
	if os.Getenv(citusPoolEnv) == "0" {
		return "", "", false
	}
	citus, err := hasCitus(ctx, base)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	if !citus {
		return "", "", false
	}
	sum, err := migrationsHash()
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	lock, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	// Closing the connection ends the lease; it runs after the test's
	// own cleanups (its pools and daemons), registered after this one.
	t.Cleanup(func() { lock.Close(context.Background()) })
	for n := 1; ; n++ {
		schema := fmt.Sprintf("%s%s_%d", citusPoolPrefix, sum[:12], n)
		var leased bool
		if err := lock.QueryRow(ctx, `SELECT pg_try_advisory_lock(hashtext('lookout.pgtest.' || $1))`, schema).Scan(&leased); err != nil {
			t.Fatalf("pgtest: lease %s: %v", schema, err)
		}
		if !leased {
			continue
		}
		start := time.Now()
		how, err := readyPoolSchema(ctx, lock, base, schema)
		if err != nil {
			t.Fatalf("pgtest: %v", err)
		}
		t.Logf("pgtest: leased schema %s on Citus (%s in %s)", schema, how, time.Since(start).Round(10*time.Millisecond))
		return schema, WithSearchPath(base, schema), true
	}
}

// readyPoolSchema makes schema ready for a test: reset when it exists and
// is what its migrations made, made (again) otherwise. It says which.
func readyPoolSchema(ctx context.Context, conn *pgx.Conn, base, schema string) (string, error) {
	var comment *string
	err := conn.QueryRow(ctx, `SELECT obj_description(oid, 'pg_namespace') FROM pg_namespace WHERE nspname = $1`, schema).Scan(&comment)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return "made", makePoolSchema(ctx, conn, base, schema)
	case err != nil:
		return "", fmt.Errorf("read the pool schema %s: %w", schema, err)
	}
	var st poolState
	if comment != nil {
		_ = json.Unmarshal([]byte(*comment), &st) // a schema half made has none: made again
	}
	changed := st.Fingerprint == ""
	if !changed {
		fp, err := fingerprint(ctx, conn, schema)
		changed = err != nil || fp != st.Fingerprint
	}
	if !changed && len(st.Partitions) > 0 {
		have, err := poolPartitions(ctx, conn, schema)
		changed = err != nil || !containsAll(have, st.Partitions)
	}
	if changed {
		if _, err := conn.Exec(ctx, "DROP SCHEMA "+db.Quote(schema)+" CASCADE"); err != nil {
			return "", fmt.Errorf("drop the changed pool schema %s: %w", schema, err)
		}
		return "made again (its objects had changed)", makePoolSchema(ctx, conn, base, schema)
	}
	if err := resetPoolSchema(ctx, conn, schema, st.Seeds); err != nil {
		return "", err
	}
	return "reset", nil
}

// makePoolSchema creates, migrates (and so distributes) schema and
// records its state in its comment.
func makePoolSchema(ctx context.Context, conn *pgx.Conn, base, schema string) error {
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+db.Quote(schema)); err != nil {
		return fmt.Errorf("create the pool schema %s: %w", schema, err)
	}
	pool, err := db.Open(ctx, WithSearchPath(base, schema))
	if err != nil {
		return err
	}
	_, err = db.Migrate(ctx, pool)
	pool.Close()
	if err != nil {
		return fmt.Errorf("migrate the pool schema %s: %w", schema, err)
	}
	st := poolState{Seeds: map[string]json.RawMessage{}}
	tables, err := poolTables(ctx, conn, schema)
	if err != nil {
		return err
	}
	for _, table := range tables {
		var rows []byte
		if err := conn.QueryRow(ctx, fmt.Sprintf(`SELECT coalesce(json_agg(t), '[]') FROM %s.%s t`,
			db.Quote(schema), db.Quote(table))).Scan(&rows); err != nil {
			return fmt.Errorf("read the rows the migrations wrote in %s.%s: %w", schema, table, err)
		}
		if string(rows) != "[]" {
			st.Seeds[table] = rows
		}
	}
	if st.Fingerprint, err = fingerprint(ctx, conn, schema); err != nil {
		return err
	}
	if st.Partitions, err = poolPartitions(ctx, conn, schema); err != nil {
		return err
	}
	b, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("pool schema %s: %w", schema, err)
	}
	if _, err := conn.Exec(ctx, fmt.Sprintf("COMMENT ON SCHEMA %s IS %s", db.Quote(schema), quoteLiteral(string(b)))); err != nil {
		return fmt.Errorf("record the state of the pool schema %s: %w", schema, err)
	}
	return nil
}

// resetPoolSchema empties every table of schema, restarts its sequences,
// and writes back the rows the migrations wrote (schema_migrations' too),
// in one transaction. It deletes rather than truncates: TRUNCATE makes
// new files for every shard, partition and index (about 100 s for a
// schema on a busy machine), while a test leaves few rows, which DELETE
// removes in moments. The tables are emptied referencing tables first.
func resetPoolSchema(ctx context.Context, conn *pgx.Conn, schema string, seeds map[string]json.RawMessage) error {
	tables, err := poolTables(ctx, conn, schema)
	if err != nil {
		return err
	}
	tables, err = referencingFirst(ctx, conn, schema, tables)
	if err != nil {
		return err
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("reset the pool schema %s: %w", schema, err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit it does nothing
	for _, table := range tables {
		rel := db.Quote(schema) + "." + db.Quote(table)
		if _, err := tx.Exec(ctx, "DELETE FROM "+rel); err != nil {
			return fmt.Errorf("empty %s: %w", rel, err)
		}
	}
	if _, err := tx.Exec(ctx, `SELECT setval(s.seqrelid, s.seqstart, false) FROM pg_sequence s
		JOIN pg_class c ON c.oid = s.seqrelid WHERE c.relnamespace = $1::regnamespace`, schema); err != nil {
		return fmt.Errorf("restart the sequences of %s: %w", schema, err)
	}
	for _, table := range tables {
		rows, ok := seeds[table]
		if !ok {
			continue
		}
		rel := db.Quote(schema) + "." + db.Quote(table)
		if _, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %s OVERRIDING SYSTEM VALUE SELECT * FROM json_populate_recordset(NULL::%s, $1::json)`,
			rel, rel), string(rows)); err != nil {
			return fmt.Errorf("write back the migrations' rows of %s: %w", rel, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("reset the pool schema %s: %w", schema, err)
	}
	return nil
}

// referencingFirst orders tables so that a table comes before the tables
// its foreign keys reference (a cycle keeps the given order).
func referencingFirst(ctx context.Context, conn *pgx.Conn, schema string, tables []string) ([]string, error) {
	rows, err := conn.Query(ctx, `
		SELECT r.relname::text, f.relname::text
		FROM pg_constraint c JOIN pg_class r ON r.oid = c.conrelid JOIN pg_class f ON f.oid = c.confrelid
		WHERE c.contype = 'f' AND c.conparentid = 0 AND r.relnamespace = $1::regnamespace AND c.conrelid <> c.confrelid`, schema)
	if err != nil {
		return nil, fmt.Errorf("read the foreign keys of %s: %w", schema, err)
	}
	refs := map[string][]string{} // referenced table -> tables referencing it
	for rows.Next() {
		var fromName, toName string
		if err := rows.Scan(&fromName, &toName); err != nil {
			return nil, fmt.Errorf("read the foreign keys of %s: %w", schema, err)
		}
		refs[toName] = append(refs[toName], fromName)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the foreign keys of %s: %w", schema, err)
	}
	out := make([]string, 0, len(tables))
	state := map[string]int{} // 1 visiting, 2 done
	var visit func(string)
	visit = func(t string) {
		if state[t] != 0 {
			return
		}
		state[t] = 1
		for _, r := range refs[t] {
			visit(r)
		}
		state[t] = 2
		out = append(out, t)
	}
	for _, t := range tables {
		visit(t)
	}
	// A referencing table outside tables (none: every table is listed)
	// would be in out too; keep only the listed ones.
	listed := make(map[string]bool, len(tables))
	for _, t := range tables {
		listed[t] = true
	}
	kept := out[:0]
	for _, t := range out {
		if listed[t] {
			kept = append(kept, t)
		}
	}
	return kept, nil
}

// poolTables lists schema's tables but partitions.
func poolTables(ctx context.Context, conn *pgx.Conn, schema string) ([]string, error) {
	return poolRelations(ctx, conn, schema, false)
}

// poolPartitions lists schema's partitions.
func poolPartitions(ctx context.Context, conn *pgx.Conn, schema string) ([]string, error) {
	return poolRelations(ctx, conn, schema, true)
}

// poolRelations lists schema's tables that are partitions, or those that
// are not.
func poolRelations(ctx context.Context, conn *pgx.Conn, schema string, partitions bool) ([]string, error) {
	what := map[bool]string{false: "tables", true: "partitions"}[partitions]
	rows, err := conn.Query(ctx, `
		SELECT c.relname::text FROM pg_class c
		WHERE c.relnamespace = $1::regnamespace AND c.relkind IN ('r', 'p') AND c.relispartition = $2
		ORDER BY 1`, schema, partitions)
	if err != nil {
		return nil, fmt.Errorf("list the %s of %s: %w", what, schema, err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list the %s of %s: %w", what, schema, err)
	}
	return names, nil
}

// containsAll reports whether have holds every name of want.
func containsAll(have, want []string) bool {
	set := make(map[string]bool, len(have))
	for _, h := range have {
		set[h] = true
	}
	for _, w := range want {
		if !set[w] {
			return false
		}
	}
	return true
}

// fingerprint sums what a test could change in schema's objects: its
// relations but partitions (name, kind, columns, layout on Citus), their
// constraints and triggers, and its functions. The migration version is
// a row of schema_migrations, which the reset writes back (a test that
// marks the schema dirty or newer leaves its objects as they were).
func fingerprint(ctx context.Context, conn *pgx.Conn, schema string) (string, error) {
	var fp string
	err := conn.QueryRow(ctx, `
		SELECT md5(concat_ws('|',
		  (SELECT string_agg(format('%s:%s:%s:%s', c.relname, c.relkind, c.relnatts, coalesce(p.partmethod::text, '-')), ',' ORDER BY c.relname)
		   FROM pg_class c LEFT JOIN pg_dist_partition p ON p.logicalrelid = c.oid
		   WHERE c.relnamespace = $1::regnamespace AND NOT c.relispartition AND c.relkind IN ('r', 'p', 'v', 'm', 'S', 'i')),
		  (SELECT string_agg(format('%s.%s:%s', c.relname, k.conname, k.contype), ',' ORDER BY c.relname, k.conname)
		   FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid
		   WHERE c.relnamespace = $1::regnamespace AND NOT c.relispartition),
		  (SELECT string_agg(format('%s.%s', c.relname, g.tgname), ',' ORDER BY c.relname, g.tgname)
		   FROM pg_trigger g JOIN pg_class c ON c.oid = g.tgrelid
		   WHERE c.relnamespace = $1::regnamespace AND NOT c.relispartition AND NOT g.tgisinternal),
		  (SELECT string_agg(p.oid::regprocedure::text, ',' ORDER BY 1) FROM pg_proc p WHERE p.pronamespace = $1::regnamespace)))`,
		schema).Scan(&fp)
	if err != nil {
		return "", fmt.Errorf("read the objects of the pool schema %s: %w", schema, err)
	}
	return fp, nil
}

// quoteLiteral quotes s as an SQL string literal.
func quoteLiteral(s string) string {
	out := []byte{'\''}
	for i := 0; i < len(s); i++ {
		if s[i] == '\'' {
			out = append(out, '\'')
		}
		out = append(out, s[i])
	}
	return string(append(out, '\''))
}

// OnCitus reports whether pool's database is a Citus coordinator (the
// citus extension: make test-citus), where a test that checks one
// PostgreSQL's plan or injects a failure with a trigger cannot run.
func OnCitus(tb testing.TB, pool *pgxpool.Pool) bool {
	tb.Helper()
	var citus bool
	if err := pool.QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')`).Scan(&citus); err != nil {
		tb.Fatalf("is the database a Citus coordinator: %v", err)
	}
	return citus
}

// SkipOnCitus skips the test when pool's database is a Citus coordinator,
// for the reason given: what the test does that Citus does not, as
// docs/scaling.md lists it.
func SkipOnCitus(tb testing.TB, pool *pgxpool.Pool, why string) {
	tb.Helper()
	if OnCitus(tb, pool) {
		tb.Skip("on Citus: " + why)
	}
}
