package migrations_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/lookout-dev/lookout/internal/db"
	"github.com/lookout-dev/lookout/internal/pgtest"
	"github.com/lookout-dev/lookout/migrations"
)

// TestPreviousReleaseRunsOnLatestSchema is the rule of rolling upgrades
// (docs/deploy.md, "Schema compatibility"): the binaries of the last
// release keep working on the schema the migrations after it make. A
// fresh schema is migrated to the release's version, where every SQL
// statement its binaries send (testdata/release-<name>.sql, recorded from
// the test suite) is prepared and planned, then up to the latest, where
// each is prepared and planned again: none may fail (a dropped or renamed
// column or table, an ON CONFLICT target with no unique index left), its
// parameters and result columns keep their types, and no table the
// release knew gains a NOT NULL column without a default (its INSERTs and
// COPYs would fail).
//
// The sub-tests prove that the check fails: each applies one more,
// breaking, migration on the same schema in a transaction it rolls back,
// and the check must name the statement it breaks and why.
func TestPreviousReleaseRunsOnLatestSchema(t *testing.T) {
	t.Parallel()
	rel := migrations.Releases[len(migrations.Releases)-1]
	file, stmts := releaseStatements(t, rel)
	up := upgrade(t, file, rel.Schema, 0, stmts)
	for _, p := range up.check(t, "", nil) {
		t.Error(p)
	}
	t.Logf("%d statements of %s (schema %d) checked on schema %d", len(stmts), rel.Name, rel.Schema, up.version)

	// find returns the first recorded statement matching re: the one the
	// breaking migration must be blamed for.
	find := func(t *testing.T, re string) pgtest.Statement {
		t.Helper()
		i := slices.IndexFunc(stmts, func(s pgtest.Statement) bool { return regexp.MustCompile(re).MatchString(s.SQL) })
		if i < 0 {
			t.Fatalf("%s has no statement matching %s", file, re)
		}
		return stmts[i]
	}
	for _, c := range []struct {
		name, stmt, table, migration, want string
	}{{
		name:      "drops a column",
		stmt:      `(?s)^UPDATE notifications SET duplicates_suppressed`,
		table:     "notifications",
		migration: `ALTER TABLE notifications DROP COLUMN duplicates_suppressed CASCADE`,
		want:      `column "duplicates_suppressed" does not exist (SQLSTATE 42703)`,
	}, {
		name:      "renames a table",
		stmt:      `^COPY "changes" `,
		table:     "changes",
		migration: `ALTER TABLE changes RENAME TO change_log`,
		want:      `relation "changes" does not exist (SQLSTATE 42P01)`,
	}, {
		name:      "drops the unique index of an ON CONFLICT",
		stmt:      `(?s)INSERT INTO notification_keys .*ON CONFLICT \(dedupe_key, sink\)`,
		table:     "notification_keys",
		migration: `ALTER TABLE notification_keys DROP CONSTRAINT notification_keys_pkey`,
		want:      `there is no unique or exclusion constraint matching the ON CONFLICT specification (SQLSTATE 42P10)`,
	}, {
		name:      "changes a column's type",
		stmt:      `^SELECT record_id, title, body, url, author, `,
		table:     "records",
		migration: `DROP VIEW changes_with_record; ALTER TABLE records ALTER COLUMN author TYPE bytea USING author::bytea`, // the view reads author (migration 34)
		want:      `column author: text → bytea`,
	}, {
		name:  "adds a NOT NULL column without a default",
		stmt:  `^COPY "evaluations" `,
		table: "evaluations",
		migration: `ALTER TABLE evaluations ADD COLUMN tenant text NOT NULL DEFAULT 'x';
			ALTER TABLE evaluations ALTER COLUMN tenant DROP DEFAULT`,
		want: `evaluations.tenant is NOT NULL without a default (a new column since schema`,
	}} {
		t.Run("fails when a migration "+c.name, func(t *testing.T) {
			stmt := find(t, c.stmt)
			// The statements that name the table: enough to find the
			// one, and quicker than all of them.
			names := regexp.MustCompile(`\b` + c.table + `\b`)
			problems := up.check(t, c.migration, func(s pgtest.Statement) bool { return names.MatchString(s.SQL) })
			blamed(t, file, problems, stmt, c.want)
		})
	}
}

// Migration 16 partitioned the history tables; the outbox's enqueue of
// the commit before it (59b6dff^, internal/outbox/queries.go) inserted
// into notifications ON CONFLICT (dedupe_key, sink), which a partitioned
// notifications cannot have, and 16 gave evaluations a NOT NULL
// change_created_at that the evaluator before it did not write. Had 15
// been a release, the check would have refused 16.
func TestCompatibilityCheckRefusesMigration16(t *testing.T) {
	t.Parallel()
	const file = "outbox@59b6dff^"
	before16 := []pgtest.Statement{{Line: 1, From: []string{"internal/outbox.(*Outbox).Enqueue"}, SQL: strings.Join([]string{
		`INSERT INTO notifications (dedupe_key, sink, source, record_id, watch, kind, change_id, content_hash,`,
		`title, body, urgency, reason, payload, status, digest_due_at, digest_count, owner)`,
		`SELECT u.key, u.sink, u.source, u.record_id, u.watch, u.kind, u.change_id, NULLIF(u.hash, ''),`,
		`u.title, u.body, u.urgency, u.reason, u.payload::jsonb, u.status, u.due, u.count, u.owner`,
		`FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::bigint[], $8::text[],`,
		`$9::text[], $10::text[], $11::text[], $12::text[], $13::text[], $14::text[], $15::timestamptz[], $16::int[],`,
		`$17::text[])`,
		`WITH ORDINALITY AS u(key, sink, source, record_id, watch, kind, change_id, hash, title, body, urgency, reason,`,
		`payload, status, due, count, owner, ord)`,
		`ORDER BY u.ord`,
		`ON CONFLICT (dedupe_key, sink) DO NOTHING`,
		`RETURNING id, dedupe_key, sink, true`,
	}, "\n")}}
	up := upgrade(t, file, 15, 16, before16)
	if up.version != 16 {
		t.Fatalf("migrated to %d, want 16", up.version)
	}
	problems := up.check(t, "", nil)
	blamed(t, file, problems, before16[0], `there is no unique or exclusion constraint matching the ON CONFLICT specification`)
	if !slices.ContainsFunc(problems, func(p string) bool {
		return strings.Contains(p, "evaluations.change_created_at is NOT NULL without a default (a new column since schema 15)")
	}) {
		t.Errorf("no problem names evaluations.change_created_at; problems:\n%s", strings.Join(problems, "\n"))
	}
}

// blamed asserts that a problem names stmt (file:line and its text) and
// carries want (PostgreSQL's error, or what changed).
func blamed(t *testing.T, file string, problems []string, stmt pgtest.Statement, want string) {
	t.Helper()
	loc := fmt.Sprintf("%s:%d:", file, stmt.Line)
	for _, p := range problems {
		if strings.HasPrefix(p, loc) && strings.Contains(p, indent(stmt.SQL)) && strings.Contains(p, want) {
			return
		}
	}
	t.Errorf("no problem names %s (%.60q…) with %q; problems:\n%s", loc, stmt.SQL, want, strings.Join(problems, "\n"))
}

// TestReleases checks the list of releases: names unique, schemas in
// order and embedded, the last release's statements recorded.
func TestReleases(t *testing.T) {
	latest, err := db.LatestVersion()
	if err != nil {
		t.Fatal(err)
	}
	if len(migrations.Releases) == 0 {
		t.Fatal("migrations.Releases is empty")
	}
	seen := map[string]bool{}
	var prev uint
	for i, r := range migrations.Releases {
		if !regexp.MustCompile(`^v[0-9]+\.[0-9]+\.[0-9]+$`).MatchString(r.Name) {
			t.Errorf("Releases[%d]: name %q is not a vMAJOR.MINOR.PATCH tag", i, r.Name)
		}
		if seen[r.Name] {
			t.Errorf("Releases[%d]: %s is listed twice", i, r.Name)
		}
		seen[r.Name] = true
		if r.Schema < prev || r.Schema > latest || r.Schema == 0 {
			t.Errorf("Releases[%d]: %s has schema %d; want %d..%d (after the previous release, at most the latest migration)", i, r.Name, r.Schema, prev, latest)
		}
		prev = r.Schema
	}
	last := migrations.Releases[len(migrations.Releases)-1]
	if _, err := os.Stat(releaseFile(last)); err != nil {
		t.Errorf("the last release's statements are missing (`make record-sql RELEASE=%s` on its commit): %v", last.Name, err)
	}
}

// releaseFile is where rel's statements are recorded.
func releaseFile(rel migrations.Release) string {
	return filepath.Join("testdata", "release-"+rel.Name+".sql")
}

func releaseStatements(t *testing.T, rel migrations.Release) (string, []pgtest.Statement) {
	t.Helper()
	file := releaseFile(rel)
	f, err := os.Open(file)
	if err != nil {
		t.Fatalf("the statements of release %s: %v (record them with `make record-sql RELEASE=%s` on its commit)", rel.Name, err, rel.Name)
	}
	defer f.Close()
	stmts, err := pgtest.ParseStatements(f, file)
	if err != nil {
		t.Fatal(err)
	}
	return filepath.ToSlash(filepath.Join("migrations", file)), stmts
}

// upgraded is a scratch schema migrated from a release's version to a
// later one, with what the release's statements were on the release's
// schema.
type upgraded struct {
	file    string
	stmts   []pgtest.Statement
	conn    *pgx.Conn
	from    uint
	version uint // the schema's version after the upgrade

	old      []*pgconn.StatementDescription // per statement, at from
	before   map[column]columnInfo          // the columns at from
	problems []string                       // statements that failed at from
	names    int                            // prepared statements so far
}

// upgrade migrates a scratch schema to version from, prepares and plans
// stmts there (the release's own schema: a failure is a bad recording,
// reported by check), and migrates it to version to (0: the latest).
func upgrade(t *testing.T, file string, from, to uint, stmts []pgtest.Statement) *upgraded {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	_, url := pgtest.SchemaAt(t, from)
	t.Logf("schema at version %d made in %v", from, time.Since(start).Round(time.Millisecond))
	pool := pgtest.PoolFor(t, url)
	pc, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pc.Release)
	up := &upgraded{file: file, stmts: stmts, conn: pc.Conn(), from: from, old: make([]*pgconn.StatementDescription, len(stmts))}
	// EXPLAIN EXECUTE plans a prepared statement as it is (parameters
	// stay parameters): planning is where an ON CONFLICT finds its unique
	// index, which Parse does not check.
	if _, err := up.conn.Exec(ctx, `SET plan_cache_mode = force_generic_plan`); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	for i, s := range stmts {
		sd, err := up.describe(ctx, s.SQL)
		if err != nil {
			up.problems = append(up.problems, problem(file, s, fmt.Sprintf("does not run on its own release's schema %d, so the recording is wrong", from), err))
		}
		up.old[i] = sd
	}
	if up.before, err = readColumns(ctx, up.conn); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d statements prepared and planned on it in %v", len(stmts), time.Since(start).Round(time.Millisecond))
	if to == 0 {
		up.version, err = db.Migrate(ctx, pool)
	} else {
		up.version, err = db.MigrateTo(ctx, pool, to)
	}
	if err != nil {
		t.Fatalf("migrate from %d: %v", from, err)
	}
	return up
}

// check prepares and plans the statements that keep (nil: all) on the
// upgraded schema, after extra (a migration to come, run in a transaction
// rolled back after; for the tests of the check), and returns what broke,
// each problem starting with file:line of the statement.
func (up *upgraded) check(t *testing.T, extra string, keep func(pgtest.Statement) bool) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	problems := slices.Clone(up.problems)
	if up.version == up.from && extra == "" {
		return problems // the same schema: nothing to check again
	}
	version := fmt.Sprint(up.version)
	begin := func() {}
	if extra != "" {
		version += " and the extra migration"
		// A failed statement aborts the transaction: begin again.
		begin = func() {
			t.Helper()
			if _, err := up.conn.Exec(ctx, "BEGIN"); err != nil {
				t.Fatal(err)
			}
			if _, err := up.conn.Exec(ctx, extra); err != nil {
				t.Fatalf("the extra migration: %v", err)
			}
		}
		begin()
		defer func() {
			if _, err := up.conn.Exec(ctx, "ROLLBACK"); err != nil {
				t.Error(err)
			}
		}()
	}
	for i, s := range up.stmts {
		if keep != nil && !keep(s) {
			continue
		}
		sd, err := up.describe(ctx, s.SQL)
		if err != nil {
			problems = append(problems, problem(up.file, s, "no longer runs on schema "+version, err))
			if extra != "" {
				if _, err := up.conn.Exec(ctx, "ROLLBACK"); err != nil {
					t.Fatal(err)
				}
				begin()
			}
			continue
		}
		if up.old[i] == nil {
			continue
		}
		for _, d := range typeChanges(ctx, up.conn, up.old[i], sd) {
			problems = append(problems, problem(up.file, s, "changed on schema "+version, errors.New(d)))
		}
	}

	after, err := readColumns(ctx, up.conn)
	if err != nil {
		t.Fatal(err)
	}
	for key, c := range after {
		was, existed := up.before[key]
		_, tableExisted := up.before[column{table: key.table}]
		if !tableExisted || !c.notNull || c.hasDefault || (existed && was.notNull) {
			continue
		}
		what := "a new column"
		if existed {
			what = "made NOT NULL"
		}
		why := fmt.Errorf("%s.%s is NOT NULL without a default (%s since schema %d): this release's rows have no value for it", key.table, key.column, what, up.from)
		// Blame every statement of the release that writes the table.
		writes := regexp.MustCompile(`(?i)\b(INSERT\s+INTO|COPY)\s+"?` + regexp.QuoteMeta(key.table) + `"?[\s(]`)
		blamedOne := false
		for _, s := range up.stmts {
			if writes.MatchString(s.SQL) {
				blamedOne = true
				problems = append(problems, problem(up.file, s, "fails on schema "+version, why))
			}
		}
		if !blamedOne {
			problems = append(problems, fmt.Sprintf("%s: %v; the release's binaries write no row of %s here, but give it a default all the same", up.file, why, key.table))
		}
	}
	return problems
}

// describe prepares sql under a new name (Parse and Describe, nothing
// executed) and plans it with EXPLAIN EXECUTE. A COPY FROM is checked as
// the INSERT of the same columns: the table exists, takes rows, and has
// those columns.
func (up *upgraded) describe(ctx context.Context, sql string) (*pgconn.StatementDescription, error) {
	up.names++
	name := fmt.Sprintf("compat_%d", up.names)
	if m := copyStatement.FindStringSubmatch(sql); m != nil {
		n := len(strings.Split(m[2], ", "))
		params := make([]string, n)
		for i := range params {
			params[i] = fmt.Sprintf("$%d", i+1)
		}
		sql = fmt.Sprintf("INSERT INTO %s (%s) VALUES (%s)", m[1], m[2], strings.Join(params, ", "))
	}
	sd, err := up.conn.PgConn().Prepare(ctx, name, sql, nil)
	if err != nil {
		return nil, err
	}
	explain := "EXPLAIN EXECUTE " + name
	if n := len(sd.ParamOIDs); n > 0 {
		explain += "(" + strings.TrimSuffix(strings.Repeat("NULL, ", n), ", ") + ")"
	}
	if _, err := up.conn.Exec(ctx, explain); err != nil {
		return nil, fmt.Errorf("plan: %w", err)
	}
	return sd, nil
}

// problem formats one finding: the statement's place, who sent it, what
// happened and the statement.
func problem(file string, s pgtest.Statement, what string, err error) string {
	return fmt.Sprintf("%s:%d: %s (sent by %s): %v\n%s", file, s.Line, what, strings.Join(s.From, ", "), err, indent(s.SQL))
}

// indent is sql as a problem quotes it: every line after a tab.
func indent(sql string) string { return "\t" + strings.ReplaceAll(sql, "\n", "\n\t") }

// copyStatement parses a COPY as pgtest.CopyStatement writes it.
var copyStatement = regexp.MustCompile(`^COPY ("[^"]+") \((.*)\) FROM STDIN$`)

// typeChanges lists how the latest schema changed what a statement takes
// and returns: a parameter's type, a result column's name or type, or a
// result column gone. Columns added at the end (a view's new column) are
// fine.
func typeChanges(ctx context.Context, conn *pgx.Conn, old, cur *pgconn.StatementDescription) []string {
	typ := func(oid uint32) string {
		var s string
		if err := conn.QueryRow(ctx, `SELECT format_type($1, NULL)`, oid).Scan(&s); err != nil {
			return fmt.Sprintf("type %d", oid)
		}
		return s
	}
	var out []string
	for i, o := range old.ParamOIDs {
		if i < len(cur.ParamOIDs) && cur.ParamOIDs[i] != o {
			out = append(out, fmt.Sprintf("parameter $%d: %s → %s", i+1, typ(o), typ(cur.ParamOIDs[i])))
		}
	}
	for i, f := range old.Fields {
		switch {
		case i >= len(cur.Fields):
			out = append(out, fmt.Sprintf("result column %s is gone", f.Name))
		case cur.Fields[i].Name != f.Name:
			out = append(out, fmt.Sprintf("result column %d: %s → %s", i+1, f.Name, cur.Fields[i].Name))
		case cur.Fields[i].DataTypeOID != f.DataTypeOID:
			out = append(out, fmt.Sprintf("column %s: %s → %s", f.Name, typ(f.DataTypeOID), typ(cur.Fields[i].DataTypeOID)))
		}
	}
	return out
}

// column names a column of a table of the current schema; a zero column
// stands for the table itself.
type column struct{ table, column string }

type columnInfo struct{ notNull, hasDefault bool }

// readColumns reads the columns of the current schema's tables
// (partitions left out: they have their parent's).
func readColumns(ctx context.Context, conn *pgx.Conn) (map[column]columnInfo, error) {
	rows, err := conn.Query(ctx, `
		SELECT c.relname, a.attname, a.attnotnull,
		       a.atthasdef OR a.attidentity <> '' OR a.attgenerated <> ''
		FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid
		WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'p')
		  AND NOT c.relispartition AND a.attnum > 0 AND NOT a.attisdropped`)
	if err != nil {
		return nil, fmt.Errorf("read the columns: %w", err)
	}
	out := map[column]columnInfo{}
	var table, name string
	var info columnInfo
	_, err = pgx.ForEachRow(rows, []any{&table, &name, &info.notNull, &info.hasDefault}, func() error {
		out[column{table, name}] = info
		out[column{table: table}] = columnInfo{}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the columns: %w", err)
	}
	return out, nil
}
