package definitions_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lookout-dev/lookout/internal/definitions"
	"github.com/lookout-dev/lookout/internal/pgtest"
	"github.com/lookout-dev/lookout/internal/sources"
)

// A source whose definition is deleted is shown as removed, never as an
// active source that is due and never runs (no syncer claims a source
// without a definition): the deletion marks its row removed in the same
// transaction, the overview does not count it as due, and an operator's
// resume refuses it. Created again, the syncer registers it active.
func TestDeletedSourceIsRemovedNotDue(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	s := newStore(t, pool)
	ctx := context.Background()
	alice := definitions.Actor{Owner: "alice"}
	if _, _, err := s.CreateSource(ctx, alice, []byte(`{"name": "a", "connector": "file", "file": {"paths": ["a.json"]}}`)); err != nil {
		t.Fatal(err)
	}
	if err := sources.Ensure(ctx, pool, "a", "file"); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE sources SET next_run_at = now() - interval '1 hour' WHERE name = 'a'`); err != nil {
		t.Fatal(err)
	}
	if n := count(t, pool, `SELECT sources_due FROM report_overview`); n != 1 {
		t.Fatalf("due before the deletion: %d, want 1", n)
	}
	if err := s.DeleteSource(ctx, alice, "a"); err != nil {
		t.Fatal(err)
	}
	if n := count(t, pool, `SELECT sources_due FROM report_overview`); n != 0 {
		t.Errorf("a deleted source is counted as due: %d", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM report_sources WHERE name = 'a' AND state = 'removed'`); n != 1 {
		t.Errorf("report_sources does not show the deleted source as removed")
	}
	var re *sources.RemovedError
	if _, err := sources.Resume(ctx, pool, "a", time.Now()); !errors.As(err, &re) || !strings.Contains(err.Error(), `source "a" was removed`) {
		t.Errorf("resume of a removed source: %v", err)
	}
}
