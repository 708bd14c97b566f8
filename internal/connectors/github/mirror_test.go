package github_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/connectors"
	"github.com/lookout-dev/lookout/internal/connectors/conntest"
	"github.com/lookout-dev/lookout/internal/connectors/github/githubtest"
	"github.com/lookout-dev/lookout/internal/normalize"
	"github.com/lookout-dev/lookout/internal/pgtest"
)

// Through changes.Apply on a real Postgres: an issue that closes is an
// updated change whose changed fields name status, with the token read
// from ${ENV}.
func TestIssueClosingIsAStatusChange(t *testing.T) {
	t.Setenv("LOOKOUT_TEST_GH_TOKEN", "ghp_from_env")
	pool := pgtest.Pool(t)
	f := githubtest.New(t)
	f.Token = "ghp_from_env"
	f.Seed(4)
	dir := conntest.WriteConfig(t, map[string]string{"sources/gh.yaml": fmt.Sprintf(`name: gh
connector: github
rate_limit: {per_second: 100}
github:
  repo: %s
  base_url: %s
  token: ${LOOKOUT_TEST_GH_TOKEN}
  per_page: 2
`, f.Repo, f.Srv.URL)})
	cfg, err := config.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := connectors.New(cfg.Sources[0], connectors.Env{Dir: dir, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	r1 := conntest.Fetch(t, conn, nil)
	if r1.Err != nil {
		t.Fatalf("first run: %v", r1.Err)
	}
	conntest.Mirror(t, pool, "gh", normalize.FieldExprs{}, nil, r1)

	is := f.Get(2)
	closed := is.Updated.Add(2 * time.Hour)
	is.State, is.StateReason, is.Closed, is.Updated = "closed", "completed", &closed, closed
	f.Put(is)
	r2 := conntest.Fetch(t, conn, r1.Cursor(nil))
	if r2.Err != nil {
		t.Fatalf("second run: %v", r2.Err)
	}
	conntest.Mirror(t, pool, "gh", normalize.FieldExprs{}, nil, r2)

	var updated []conntest.Change
	for _, c := range conntest.Changes(t, pool, "gh") {
		switch c.Kind {
		case "updated":
			updated = append(updated, c)
		case "deleted":
			t.Errorf("github never guesses deletions, got one for %s", c.RecordID)
		}
	}
	if len(updated) != 1 || updated[0].RecordID != "2" {
		t.Fatalf("updated changes = %+v, want one for issue 2", updated)
	}
	c := updated[0]
	if !slices.Contains(c.ChangedFields, "status") || !slices.Contains(c.ChangedFields, "extra.closed_at") {
		t.Errorf("changed_fields = %v, want status and extra.closed_at", c.ChangedFields)
	}
	if c.Record["status"] != "closed" || c.Version != 2 {
		t.Errorf("record = %v version %d", c.Record, c.Version)
	}
	var status string
	if err := pool.QueryRow(context.Background(), `SELECT status FROM records WHERE source = 'gh' AND record_id = '2'`).Scan(&status); err != nil || status != "closed" {
		t.Errorf("records.status = %q (%v), want closed", status, err)
	}
	if cursor, want := string(r2.Cursor(r1.Cursor(nil))), closed.Format(time.RFC3339); !strings.Contains(cursor, want) {
		t.Errorf("cursor %s does not hold max_updated_at %s", cursor, want)
	}
}
