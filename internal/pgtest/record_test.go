package pgtest

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/lookout-dev/lookout/internal/db"
)

// The recorder keeps what lookout's code sends and leaves out what a test
// sends itself; the merge writes a file that parses back.
func TestRecorderKeepsWhatLookoutSends(t *testing.T) {
	dir := t.TempDir()
	rec := &recorder{dir: dir, seen: map[[2]string]bool{}}
	prev := db.SetTracer(rec)
	t.Cleanup(func() { db.SetTracer(prev) })

	_, url := Schema(t)
	ctx := context.Background()
	pool, err := db.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	for range 2 { // twice: recorded once
		if _, err := db.CurrentSchema(ctx, pool); err != nil { // lookout's code
			t.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, `SELECT 1 FROM schema_migrations`); err != nil { // the test's own
		t.Fatal(err)
	}
	b := &pgx.Batch{}
	b.Queue(`SELECT 2`)
	if err := pool.SendBatch(ctx, b).Close(); err != nil { // the test's own
		t.Fatal(err)
	}

	got, err := ReadRecording(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []Statement{{SQL: "SELECT current_schema()", From: []string{"internal/db.CurrentSchema"}}}
	if !reflect.DeepEqual(got.Statements, want) {
		t.Errorf("recorded %+v, want %+v", got.Statements, want)
	}

	// A second process's file with another sender and a skipped
	// statement merges in.
	other := `{"sql":"SELECT current_schema()","from":"internal/cli.Migrate"}
{"sql":"SELECT * FROM t_x_0123abcd.records","skip":"names a per-test schema"}
{"sql":"COPY \"changes\" (\"a\", \"b\") FROM STDIN","from":"internal/changes.(*batch).write"}
`
	if err := os.WriteFile(filepath.Join(dir, "sql-other.jsonl"), []byte(other), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err = ReadRecording(dir)
	if err != nil {
		t.Fatal(err)
	}
	want = []Statement{
		{SQL: `COPY "changes" ("a", "b") FROM STDIN`, From: []string{"internal/changes.(*batch).write"}},
		{SQL: "SELECT current_schema()", From: []string{"internal/cli.Migrate", "internal/db.CurrentSchema"}},
	}
	if !reflect.DeepEqual(got.Statements, want) {
		t.Errorf("merged %+v, want %+v", got.Statements, want)
	}
	if s := got.Skipped["names a per-test schema"]; len(s) != 1 {
		t.Errorf("skipped = %v, want the per-test schema's statement", got.Skipped)
	}

	var out bytes.Buffer
	if err := WriteStatements(&out, "header\n\nmore", got.Statements); err != nil {
		t.Fatal(err)
	}
	parsed, err := ParseStatements(&out, "x.sql")
	if err != nil {
		t.Fatal(err)
	}
	want[0].Line, want[1].Line = 6, 10
	if !reflect.DeepEqual(parsed, want) {
		t.Errorf("parsed back %+v, want %+v (file:\n%s)", parsed, want, out.String())
	}
}

func TestNormalize(t *testing.T) {
	for _, c := range []struct{ in, sql, skip string }{
		{"\n\t\tSELECT a\n\n\t\tFROM t;\n", "SELECT a\nFROM t", ""},
		{"-- why\n/* how */ WITH x AS (SELECT 1) SELECT * FROM x", "-- why\n/* how */ WITH x AS (SELECT 1) SELECT * FROM x", ""},
		{"(SELECT 1) UNION (SELECT 2)", "(SELECT 1) UNION (SELECT 2)", ""},
		{`SELECT min(id) FROM "changes_p20261130"`, `SELECT min(id) FROM "changes"`, ""},
		{`DELETE FROM t_testfoo_bar_0123abcd.records`, `DELETE FROM t_testfoo_bar_0123abcd.records`, "names a per-test schema"},
		{`COPY "records" ("a") FROM STDIN`, `COPY "records" ("a") FROM STDIN`, ""},
		{"/* not recorded: made from the catalog */ WITH moved AS (DELETE FROM x_default RETURNING a) INSERT INTO x (a) SELECT a FROM moved", "/* not recorded: made from the catalog */ WITH moved AS (DELETE FROM x_default RETURNING a) INSERT INTO x (a) SELECT a FROM moved", "made from the catalog"},
		{"CREATE TABLE x (a int)", "", ""},
		{"SET LOCAL lock_timeout = '1s'", "", ""},
		{"LISTEN \"s.changes\"", "", ""},
		{"begin", "", ""},
	} {
		sql, skip := Normalize(c.in)
		if sql != c.sql || skip != c.skip {
			t.Errorf("Normalize(%q) = %q, %q; want %q, %q", c.in, sql, skip, c.sql, c.skip)
		}
	}
}

func TestSplitStatements(t *testing.T) {
	in := `SET x = 'a;b'; SELECT "c;d" -- e;f
		FROM t; DO $body$ BEGIN PERFORM 1; END $body$; /* g; */ SELECT $1;`
	want := []string{`SET x = 'a;b'`, "SELECT \"c;d\" -- e;f\n\t\tFROM t", `DO $body$ BEGIN PERFORM 1; END $body$`, `/* g; */ SELECT $1`}
	if got := SplitStatements(in); !reflect.DeepEqual(got, want) {
		t.Errorf("SplitStatements = %q\nwant %q", got, want)
	}
}

func TestSenderLeavesOutTestPackages(t *testing.T) {
	for pkg, want := range map[string]bool{
		"internal/pgtest": true, "internal/clitest": true, "internal/connectors/conntest": true,
		"internal/syncer/syncertest": true, "internal/e2e": true, "internal/bench": true,
		"internal/outbox": false, "cmd/syncer": false, "internal/testsignal": false,
	} {
		if got := testOnly(pkg); got != want {
			t.Errorf("testOnly(%s) = %t, want %t", pkg, got, want)
		}
	}
	if got := pkgOf("internal/outbox.(*Outbox).Enqueue.func1"); got != "internal/outbox" {
		t.Errorf("pkgOf = %q", got)
	}
	if !strings.HasPrefix(CopyStatement(pgx.Identifier{"evaluations"}, []string{"id", "watch"}), `COPY "evaluations" ("id", "watch") FROM STDIN`) {
		t.Errorf("CopyStatement = %q", CopyStatement(pgx.Identifier{"evaluations"}, []string{"id", "watch"}))
	}
}
