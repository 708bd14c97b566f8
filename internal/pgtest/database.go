package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	neturl "net/url"
	"strings"
	"testing"
	"time"

	"github.com/lookout-dev/lookout/internal/db"
)

// Database creates an empty database (no migrations, no lookout schema)
// on TEST_DATABASE_URL's cluster and returns its URL: a second database
// for a test that reads another PostgreSQL, such as the upstream of the
// postgres connector. It is dropped, its connections closed, when the
// test ends. The role must be allowed to create databases.
func Database(t testing.TB) string {
	t.Helper()
	base := URL(t)
	u, err := neturl.Parse(base)
	if err != nil || u.Scheme == "" {
		t.Fatalf("pgtest: TEST_DATABASE_URL must be a URL (postgres://…) to make a database of its own: %q", base)
	}
	name := strings.ToLower(t.Name())
	name = unsafe.ReplaceAllString(name, "_")
	if len(name) > 40 {
		name = name[:40]
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	name = fmt.Sprintf("up_%s_%s", name, hex.EncodeToString(b[:]))

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin, err := db.Open(ctx, base)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	defer admin.Close()
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+db.Quote(name)); err != nil {
		t.Fatalf("pgtest: create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		admin, err := db.Open(ctx, base)
		if err != nil {
			t.Errorf("pgtest: drop database %s: %v", name, err)
			return
		}
		defer admin.Close()
		if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+db.Quote(name)+" WITH (FORCE)"); err != nil {
			t.Errorf("pgtest: drop database %s: %v", name, err)
		}
	})
	u.Path = "/" + name
	return u.String()
}
