package db_test

import (
	"context"
	"net/url"
	"strings"
	"testing"

	"github.com/lookout-dev/lookout/internal/db"
	"github.com/lookout-dev/lookout/internal/pgtest"
)

func TestMigrateIsIdempotent(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t) // migrated once already
	ctx := context.Background()
	v, err := db.Migrate(ctx, pool)
	if err != nil {
		t.Fatalf("second Migrate: %v", err)
	}
	latest, err := db.LatestVersion()
	if err != nil {
		t.Fatal(err)
	}
	if v != latest {
		t.Errorf("version = %d, want latest %d", v, latest)
	}
	cur, dirty, lat, err := db.MigrationStatus(ctx, pool)
	if err != nil || cur != latest || dirty || lat != latest {
		t.Errorf("status = %d dirty=%t latest=%d err=%v", cur, dirty, lat, err)
	}
}

// An old binary restarting against a schema a newer release migrated
// (rolling upgrade) starts on it instead of failing with "no migration
// found".
func TestMigrateLeavesANewerSchemaAlone(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	latest, err := db.LatestVersion()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE schema_migrations SET version = $1`, latest+1); err != nil {
		t.Fatal(err)
	}
	v, err := db.Migrate(ctx, pool)
	if err != nil {
		t.Fatalf("Migrate on a newer schema: %v", err)
	}
	if v != latest+1 {
		t.Errorf("Migrate = %d, want the schema's %d", v, latest+1)
	}
}

func TestDirtyDatabaseIsRefused(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `UPDATE schema_migrations SET dirty = true`); err != nil {
		t.Fatal(err)
	}
	_, err := db.Migrate(ctx, pool)
	if err == nil {
		t.Fatal("Migrate on a dirty database succeeded")
	}
	latest, _ := db.LatestVersion()
	want := "database schema is dirty at version"
	if got := err.Error(); len(got) < len(want) || got[:len(want)] != want {
		t.Errorf("error = %q, want it to start with %q and say how to fix it", got, want)
	}
	if err := db.Force(ctx, pool, int(latest)); err != nil {
		t.Fatalf("Force: %v", err)
	}
	if _, err := db.Migrate(ctx, pool); err != nil {
		t.Errorf("Migrate after Force: %v", err)
	}
}

func TestConnectErrorHidesPassword(t *testing.T) {
	t.Parallel()
	for _, dsn := range []string{
		"postgres://lookout:s3cretpw@127.0.0.1:1/lookout?connect_timeout=2",
		"host=127.0.0.1 port=1 user=lookout password=s3cretpw dbname=lookout connect_timeout=2",
	} {
		_, err := db.Open(context.Background(), dsn)
		if err == nil {
			t.Fatalf("connected to a closed port with %q", dsn)
		}
		if strings.Contains(err.Error(), "s3cretpw") {
			t.Errorf("error shows the password: %v", err)
		}
	}
}

// TestConnectionsKeepAlive: every connection has TCP keepalives on the
// server's side (and a user timeout), so a half-open connection of a frozen
// or unplugged client is closed in seconds, not hours; a URL's own settings
// win.
func TestConnectionsKeepAlive(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	base := pgtest.URL(t)
	u, err := url.Parse(base)
	if err != nil || !strings.HasPrefix(u.Host, "127.0.0.1") && !strings.HasPrefix(u.Host, "localhost") {
		t.Skipf("TEST_DATABASE_URL %q is not a TCP URL: keepalives do not apply", base)
	}
	show := func(dsn string) map[string]string {
		t.Helper()
		pool, err := db.Open(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		out := map[string]string{}
		for _, k := range []string{"tcp_keepalives_idle", "tcp_keepalives_interval", "tcp_keepalives_count", "tcp_user_timeout"} {
			var v string
			if err := pool.QueryRow(ctx, "SELECT current_setting($1)", k).Scan(&v); err != nil {
				t.Fatal(err)
			}
			out[k] = v
		}
		return out
	}
	got := show(base)
	want := map[string]string{"tcp_keepalives_idle": "15", "tcp_keepalives_interval": "5", "tcp_keepalives_count": "3", "tcp_user_timeout": "30000"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	q := u.Query()
	q.Set("tcp_keepalives_idle", "7")
	u.RawQuery = q.Encode()
	if got := show(u.String()); got["tcp_keepalives_idle"] != "7" {
		t.Errorf("tcp_keepalives_idle from the URL = %q, want 7", got["tcp_keepalives_idle"])
	}
}
