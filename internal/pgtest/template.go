package pgtest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	neturl "net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/lookout-dev/lookout/internal/db"
	"github.com/lookout-dev/lookout/migrations"
)

// templateSchema is the schema of the template database. Each copy renames
// it to its test's schema name, so channel names and logs stay per test.
const templateSchema = "lookout_template"

// templates caches, per TEST_DATABASE_URL, the template database this
// process found or made (or why it could not).
var templates struct {
	sync.Mutex
	byBase map[string]templateResult
}

type templateResult struct {
	name     string
	strategy string // " STRATEGY FILE_COPY" from PostgreSQL 15 on, where WAL_LOG is the default (before, files are always copied)
	err      error  // errNoTemplates: use a schema in the base database
}

// errNoTemplates says the role or the URL cannot make databases: Schema
// falls back to a migrated schema in the base database.
var errNoTemplates = errors.New("pgtest: no template databases")

// fromTemplate gives the test its own database, a copy of a template
// migrated once per cluster and set of migrations (about 0.1 s instead of the
// 1.5 to 2 s of migrating a schema), with the schema renamed to schema. It
// reports false when templates cannot be used (TEST_DATABASE_URL is not a
// URL, the role may not create databases, its database has the citus
// extension, or LOOKOUT_PGTEST_TEMPLATE=0):
// the caller then migrates a schema in the base database as before.
func fromTemplate(t testing.TB, ctx context.Context, base, schema string) (string, bool) {
	t.Helper()
	if os.Getenv("LOOKOUT_PGTEST_TEMPLATE") == "0" {
		return "", false
	}
	tmpl, strategy, err := template(ctx, base)
	if errors.Is(err, errNoTemplates) {
		return "", false
	}
	if err != nil {
		t.Fatalf("pgtest: template database: %v", err)
	}
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	defer admin.Close(context.Background())
	// FILE_COPY copies the template's files after a checkpoint: with the
	// suite's fsync off it is several times faster than WAL_LOG, which
	// writes every page of the copy to the WAL.
	if _, err := admin.Exec(ctx, fmt.Sprintf("CREATE DATABASE %s TEMPLATE %s%s",
		db.Quote(schema), db.Quote(tmpl), strategy)); err != nil {
		t.Fatalf("pgtest: copy template %s: %v", tmpl, err)
	}
	t.Cleanup(func() { dropDatabase(t, base, schema) })

	url, err := withDatabase(base, schema)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, fmt.Sprintf("ALTER SCHEMA %s RENAME TO %s",
		db.Quote(templateSchema), db.Quote(schema))); err != nil {
		t.Fatalf("pgtest: rename the template's schema in %s: %v", schema, err)
	}
	return WithSearchPath(url, schema), true
}

// template returns the name of the template database of base's cluster for
// the migrations embedded in this binary, making it when it is missing. An
// advisory lock in the base database makes concurrent test binaries (go test
// runs packages in parallel) wait for the one that builds it.
func template(ctx context.Context, base string) (name, strategy string, err error) {
	templates.Lock()
	defer templates.Unlock()
	if r, ok := templates.byBase[base]; ok {
		return r.name, r.strategy, r.err
	}
	name, strategy, err = makeTemplate(ctx, base)
	if templates.byBase == nil {
		templates.byBase = map[string]templateResult{}
	}
	// A failure other than errNoTemplates (the cluster down, a broken
	// migration) is not cached: the next test tries again and says why.
	if err == nil || errors.Is(err, errNoTemplates) {
		templates.byBase[base] = templateResult{name: name, strategy: strategy, err: err}
	}
	return name, strategy, err
}

func makeTemplate(ctx context.Context, base string) (name, strategy string, err error) {
	if _, err := withDatabase(base, "x"); err != nil {
		return "", "", errNoTemplates
	}
	sum, err := migrationsHash()
	if err != nil {
		return "", "", err
	}
	name = "lookout_template_" + sum

	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		return "", "", fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.Background())
	var canCreate bool
	if err := conn.QueryRow(ctx, `SELECT rolcreatedb OR rolsuper FROM pg_roles WHERE rolname = current_user`).Scan(&canCreate); err != nil {
		return "", "", fmt.Errorf("read the role's privileges: %w", err)
	}
	if !canCreate {
		return "", "", errNoTemplates
	}
	// On Citus the extension lives in the base database and its workers
	// know only that one: a copy would be plain PostgreSQL, not the layout
	// under test (docs/scaling.md). Test in schemas of the base database.
	var citus bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')`).Scan(&citus); err != nil {
		return "", "", fmt.Errorf("look for the citus extension: %w", err)
	}
	if citus {
		return "", "", errNoTemplates
	}
	var version int
	if err := conn.QueryRow(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&version); err != nil {
		return "", "", fmt.Errorf("read the server's version: %w", err)
	}
	if version >= 150000 {
		strategy = " STRATEGY FILE_COPY"
	}
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock(hashtext('lookout.pgtest.template'))`); err != nil {
		return "", "", fmt.Errorf("lock: %w", err)
	}
	defer conn.Exec(context.Background(), `SELECT pg_advisory_unlock(hashtext('lookout.pgtest.template'))`) //nolint:errcheck // the connection closes next

	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		return "", "", fmt.Errorf("look for %s: %w", name, err)
	}
	if exists {
		return name, strategy, nil
	}
	// Build under another name, then rename: a binary killed halfway
	// leaves a _build database the next one drops, never a template
	// with half its migrations.
	build := name + "_build"
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+db.Quote(build)+" WITH (FORCE)"); err != nil {
		return "", "", fmt.Errorf("drop %s: %w", build, err)
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+db.Quote(build)); err != nil {
		return "", "", fmt.Errorf("create %s: %w", build, err)
	}
	url, err := withDatabase(base, build)
	if err != nil {
		return "", "", err
	}
	if err := migrateTemplate(ctx, url); err != nil {
		return "", "", fmt.Errorf("migrate %s: %w", build, err)
	}
	if _, err := conn.Exec(ctx, "ALTER DATABASE "+db.Quote(build)+" RENAME TO "+db.Quote(name)); err != nil {
		return "", "", fmt.Errorf("rename %s: %w", build, err)
	}
	return name, strategy, nil
}

func migrateTemplate(ctx context.Context, url string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	_, err = conn.Exec(ctx, "CREATE SCHEMA "+db.Quote(templateSchema))
	conn.Close(context.Background())
	if err != nil {
		return err
	}
	pool, err := db.Open(ctx, WithSearchPath(url, templateSchema))
	if err != nil {
		return err
	}
	defer pool.Close()
	_, err = db.Migrate(ctx, pool)
	return err
}

// migrationsHash names the migrations embedded in this binary: a template
// made by a binary with other migrations is another database.
func migrationsHash() (string, error) {
	h := sha256.New()
	err := fs.WalkDir(migrations.FS, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(migrations.FS, path)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", path, len(b))
		h.Write(b)
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("read embedded migrations: %w", err)
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// withDatabase returns base with its database replaced by name.
func withDatabase(base, name string) (string, error) {
	u, err := neturl.Parse(base)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return "", fmt.Errorf("TEST_DATABASE_URL is not a postgres:// URL")
	}
	u.Path = "/" + name
	u.RawPath = ""
	return u.String(), nil
}

func dropDatabase(t testing.TB, base, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Errorf("pgtest: drop database %s: %v", name, err)
		return
	}
	defer conn.Close(context.Background())
	// FORCE ends the sessions a test left behind (a daemon it started and
	// did not stop): the database is the test's alone.
	for attempt := 1; ; attempt++ {
		_, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+db.Quote(name)+" WITH (FORCE)")
		var pgErr *pgconn.PgError
		if err != nil && attempt < 5 && errors.As(err, &pgErr) && pgErr.Code == "55006" {
			continue // object in use: a backend still exiting
		}
		if err != nil {
			t.Errorf("pgtest: drop database %s: %v", name, err)
		}
		return
	}
}
