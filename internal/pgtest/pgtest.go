// Package pgtest gives tests a real PostgreSQL: a fresh, migrated schema per
// test on the cluster named by TEST_DATABASE_URL (scripts/test.sh starts a
// throwaway cluster and sets it). There is no mocked database.
//
// Each test's schema lives in a database of its own, a copy of a template
// database migrated once per cluster and set of migrations (see
// fromTemplate); on Citus (the database has the citus extension) it is a
// schema leased from a pool of distributed schemas in TEST_DATABASE_URL's
// database, emptied for the test (see fromCitusPool); when the role cannot
// create databases, or with LOOKOUT_PGTEST_TEMPLATE=0 (and
// LOOKOUT_PGTEST_CITUS_POOL=0 on Citus), the schema is migrated in
// TEST_DATABASE_URL's database instead (on Citus the migration distributes
// it: db.Migrate).
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lookout-dev/lookout/internal/db"
)

// URL returns TEST_DATABASE_URL or fails the test with instructions.
func URL(t testing.TB) string {
	t.Helper()
	u := os.Getenv("TEST_DATABASE_URL")
	if u == "" {
		t.Fatal("TEST_DATABASE_URL is not set: run the suite with `make test` (scripts/test.sh starts a throwaway PostgreSQL), or point it at a database you can create schemas in")
	}
	return u
}

var unsafe = regexp.MustCompile(`[^a-z0-9_]+`)

// Schema creates a fresh, migrated schema named after the test (in a
// database of the same name copied from the template) and returns a URL whose
// connections use it as search_path. It is dropped when the test ends.
func Schema(t testing.TB) (schema, url string) {
	t.Helper()
	return SchemaAt(t, 0)
}

// SchemaAt is Schema migrated to version instead of the latest (0 is the
// latest): the schema an older release's binaries ran on, to migrate up
// from in a test.
func SchemaAt(t testing.TB, version uint) (schema, url string) {
	t.Helper()
	base := URL(t)
	ctx, cancel := context.WithTimeout(context.Background(), migrateTimeout(t))
	defer cancel()

	name := strings.ToLower(t.Name())
	name = unsafe.ReplaceAllString(name, "_")
	// The schema names NOTIFY channels ("<schema>.notifications"), which
	// Postgres caps at 63 bytes: keep "t_" + name + "_" + 8 hex within 45.
	if len(name) > 34 {
		name = name[:34]
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	schema = fmt.Sprintf("t_%s_%s", name, hex.EncodeToString(b[:]))

	if version == 0 {
		if url, ok := fromTemplate(t, ctx, base, schema); ok {
			return schema, url
		}
		if schema, url, ok := fromCitusPool(t, ctx, base); ok {
			return schema, url
		}
	}
	admin, err := db.Open(ctx, base)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	defer admin.Close()
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+db.Quote(schema)); err != nil {
		t.Fatalf("pgtest: create schema: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		admin, err := db.Open(ctx, base)
		if err != nil {
			t.Errorf("pgtest: drop schema %s: %v", schema, err)
			return
		}
		defer admin.Close()
		// An autovacuum ANALYZE of a partitioned table locks its
		// partitions one by one: the DROP, which locks every object of
		// the schema, can deadlock with it and is then the one PostgreSQL
		// cancels. Nothing else uses the schema any more: try again.
		for attempt := 1; ; attempt++ {
			_, err := admin.Exec(ctx, "DROP SCHEMA "+db.Quote(schema)+" CASCADE")
			var pgErr *pgconn.PgError
			if err != nil && attempt < 5 && errors.As(err, &pgErr) && pgErr.Code == "40P01" {
				continue
			}
			if err != nil {
				t.Errorf("pgtest: drop schema %s: %v", schema, err)
			}
			break
		}
	})

	url = WithSearchPath(base, schema)
	pool, err := db.Open(ctx, url)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	defer pool.Close()
	if version == 0 {
		_, err = db.Migrate(ctx, pool)
	} else {
		_, err = db.MigrateTo(ctx, pool, version)
	}
	if err != nil {
		t.Fatalf("pgtest: migrate %s: %v", schema, err)
	}
	return schema, url
}

// MigrateTimeoutEnv names the environment variable that bounds making a
// test's schema (a Go duration; default 1m). On Citus each schema's
// tables are distributed as it is migrated, which takes minutes on a
// busy machine: scripts/test_citus.sh sets it to 10m.
const MigrateTimeoutEnv = "LOOKOUT_PGTEST_MIGRATE_TIMEOUT"

func migrateTimeout(t testing.TB) time.Duration {
	t.Helper()
	v := os.Getenv(MigrateTimeoutEnv)
	if v == "" {
		return time.Minute
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("pgtest: %s=%q is not a positive duration (for example 10m)", MigrateTimeoutEnv, v)
	}
	return d
}

// Pool returns a pool on a fresh migrated schema (see Schema), closed when
// the test ends.
func Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	_, url := Schema(t)
	return PoolFor(t, url)
}

// PoolFor opens a pool on url, closed when the test ends.
func PoolFor(t testing.TB, url string) *pgxpool.Pool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := db.Open(ctx, url)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(pool.Close)
	if v := os.Getenv(ShardsEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			t.Fatalf("pgtest: %s=%q is not a positive number of shards", ShardsEnv, v)
		}
		db.SimulateShards(pool, n)
	}
	return pool
}

// ShardsEnv, when set to n, makes the claims of every pool PoolFor opens
// take their Citus form on plain PostgreSQL, over n simulated shards
// (db.SimulateShards): `LOOKOUT_PGTEST_SHARDS=4 go test ./internal/syncer/`
// runs the claims' tests in the form a Citus cluster runs.
const ShardsEnv = "LOOKOUT_PGTEST_SHARDS"

// WithSearchPath returns url with search_path set to schema.
func WithSearchPath(url, schema string) string {
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	return url + sep + "search_path=" + schema
}
