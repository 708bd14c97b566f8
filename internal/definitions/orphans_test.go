package definitions_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/connectors/conntest"
	"github.com/lookout-dev/lookout/internal/definitions"
	"github.com/lookout-dev/lookout/internal/pgtest"
)

func load(t *testing.T, dir string) *config.Config {
	t.Helper()
	cfg, err := config.Load(dir)
	if err != nil {
		t.Fatalf("load %s: %v", dir, err)
	}
	return cfg
}

func applyWith(t *testing.T, pool *pgxpool.Pool, dir string, opts definitions.ApplyOptions) definitions.Diff {
	t.Helper()
	d, err := definitions.Apply(context.Background(), pool, load(t, dir), opts)
	if err != nil {
		t.Fatalf("apply %s: %v", dir, err)
	}
	return d
}

func count(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// A directory without a source users watch through the API orphans the
// source: the users' watches stay, intact, the file's own go, an audit
// row says so for the source and for each user's watch, the API's read of
// the watch says its source is orphaned. The directory with the source
// again adopts it, watches intact; once its users deleted their watches,
// the next apply without it removes it.
func TestApplyOrphansWatchedSource(t *testing.T) {
	t.Parallel()
	pool, dir := setup(t)
	ctx := context.Background()
	first := applyWith(t, pool, dir, definitions.ApplyOptions{})
	s := newStore(t, pool)
	alice := definitions.Actor{Owner: "alice"}
	if _, err := s.CreateWatch(ctx, alice, "acme", []byte("name: mine\nwhen: record.status == \"open\"\n")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "sources/acme.yaml")); err != nil {
		t.Fatal(err)
	}

	d := applyWith(t, pool, dir, definitions.ApplyOptions{Base: first.Hash, By: "test"})
	if !reflect.DeepEqual(d.Orphaned, []string{"acme"}) || !reflect.DeepEqual(d.Removed, []string{"acme/closed", "acme/open"}) || len(d.Added)+len(d.Adopted) > 0 {
		t.Fatalf("apply without acme.yaml = %+v, want acme orphaned and its file's watches removed", d)
	}
	if n := count(t, pool, `SELECT count(*) FROM watches WHERE source = 'acme' AND name = 'mine' AND owner = 'alice'`); n != 1 {
		t.Fatalf("alice's watch on acme after acme.yaml was removed: %d rows, want 1", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM source_definitions WHERE name = 'acme' AND orphaned_at IS NOT NULL`); n != 1 {
		t.Errorf("acme not orphaned")
	}
	w, err := s.GetWatch(ctx, alice, "acme", "mine")
	if err != nil || w.SourceOrphanedAt == nil {
		t.Errorf("alice's watch as the API reads it = %+v (%v), want its source orphaned", w, err)
	}
	if ws, err := s.ListWatches(ctx, alice, "", definitions.ListOptions{}); err != nil || len(ws) != 1 || ws[0].SourceOrphanedAt == nil {
		t.Errorf("alice's watches = %+v (%v), want one with its source orphaned", ws, err)
	}
	if n := count(t, pool, `SELECT count(*) FROM audit_log WHERE via = 'config' AND action = 'orphan' AND kind = 'source' AND target = 'acme'
		AND actor = 'test' AND after->'watches' = '["mine"]'`); n != 1 {
		t.Errorf("audit rows of the orphaned source: %d, want 1", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM audit_log WHERE via = 'config' AND action = 'orphan' AND kind = 'watch' AND target = 'acme/mine'
		AND owner = 'alice' AND (after->>'source_orphaned')::boolean`); n != 1 {
		t.Errorf("audit rows of alice's watch: %d, want 1", n)
	}
	// A new watch on an orphan is refused, saying why.
	var ce *definitions.ConflictError
	if _, err := s.CreateWatch(ctx, alice, "acme", []byte("name: more\n")); !errors.As(err, &ce) || !strings.Contains(err.Error(), "is orphaned since") {
		t.Errorf("a watch on an orphaned source: %v, want a conflict", err)
	}
	// Applying the same directory again changes nothing.
	if again := applyWith(t, pool, dir, definitions.ApplyOptions{}); !again.Empty() || again.Generation != d.Generation {
		t.Errorf("the same directory again = %+v, want no change", again)
	}

	// The source comes back: adopted, alice's watch intact and no longer
	// orphaned, the file's watches again.
	conntest.WriteFile(t, filepath.Join(dir, "sources/acme.yaml"), acme)
	d = applyWith(t, pool, dir, definitions.ApplyOptions{Force: true})
	if !reflect.DeepEqual(d.Adopted, []string{"acme"}) || !reflect.DeepEqual(d.Added, []string{"acme/closed", "acme/open"}) || len(d.Orphaned)+len(d.Removed) > 0 {
		t.Fatalf("apply with acme.yaml again = %+v, want acme adopted", d)
	}
	if w, err := s.GetWatch(ctx, alice, "acme", "mine"); err != nil || w.SourceOrphanedAt != nil || w.Version != 2 {
		t.Errorf("alice's watch after the adoption = %+v (%v), want it untouched (version 2) and its source not orphaned", w, err)
	}
	if n := count(t, pool, `SELECT count(*) FROM audit_log WHERE via = 'config' AND action = 'adopt' AND target IN ('acme', 'acme/mine')`); n != 2 {
		t.Errorf("adopt audit rows: %d, want 2", n)
	}

	// Orphaned again; alice deletes her watch; the next apply without
	// the file removes the source.
	if err := os.Remove(filepath.Join(dir, "sources/acme.yaml")); err != nil {
		t.Fatal(err)
	}
	if d := applyWith(t, pool, dir, definitions.ApplyOptions{Force: true}); !reflect.DeepEqual(d.Orphaned, []string{"acme"}) {
		t.Fatalf("apply = %+v, want acme orphaned", d)
	}
	if err := s.DeleteWatch(ctx, alice, "acme", "mine"); err != nil {
		t.Fatal(err)
	}
	if d := applyWith(t, pool, dir, definitions.ApplyOptions{}); !reflect.DeepEqual(d.Removed, []string{"acme"}) {
		t.Errorf("apply after alice's deletion = %+v, want acme removed", d)
	}
	if n := count(t, pool, `SELECT count(*) FROM source_definitions WHERE name = 'acme'`); n != 0 {
		t.Errorf("acme still defined")
	}
}

// The owner deleting a source deletes its watches (no cascade does it
// any more), each with its tombstone.
func TestDeleteSourceDeletesItsWatches(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	s := newStore(t, pool)
	ctx := context.Background()
	alice := definitions.Actor{Owner: "alice"}
	if _, _, err := s.CreateSource(ctx, alice, []byte(`{"name": "a", "connector": "file", "file": {"paths": ["a.json"]},
		"watches": [{"name": "w1"}, {"name": "w2"}]}`)); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteSource(ctx, alice, "a"); err != nil {
		t.Fatal(err)
	}
	if n := count(t, pool, `SELECT count(*) FROM watches`); n != 0 {
		t.Errorf("watches left: %d", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM definition_deletions WHERE source = 'a'`); n != 3 {
		t.Errorf("tombstones: %d, want 3 (the source and its two watches)", n)
	}
}

// A directory that differs from the applied generation is refused when
// the caller was not in step with it (a daemon starting with another
// directory, an older directory), naming both hashes, and nothing is
// written; a running daemon's edit (Base) and --force apply it, each
// recorded as a generation.
func TestApplyRefusesDivergentDirectory(t *testing.T) {
	t.Parallel()
	pool, dir := setup(t)
	ctx := context.Background()
	first := applyWith(t, pool, dir, definitions.ApplyOptions{By: "syncer on a"})
	if first.Generation != 1 || first.Hash == "" {
		t.Fatalf("first apply = %+v, want generation 1", first)
	}
	other := conntest.WriteConfig(t, map[string]string{"sources/blog.yaml": blog})
	version := count(t, pool, `SELECT last_value FROM config_version_seq`)

	_, err := definitions.Apply(ctx, pool, load(t, other), definitions.ApplyOptions{By: "syncer on b"})
	var de *definitions.DivergedError
	if !errors.As(err, &de) {
		t.Fatalf("a divergent directory applied without --force: %v", err)
	}
	if de.Applied.Number != 1 || de.Applied.Hash != first.Hash || de.Hash == first.Hash || de.Older != 0 ||
		!reflect.DeepEqual(de.Diff.Removed, []string{"acme"}) {
		t.Errorf("refusal = %+v", de)
	}
	for _, want := range []string{definitions.Short(de.Hash), definitions.Short(first.Hash), "generation 1", "syncer on a", "apply --force", "removed acme"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not say %q", err, want)
		}
	}
	if v := count(t, pool, `SELECT last_value FROM config_version_seq`); v != version {
		t.Errorf("config version moved from %d to %d on a refused directory", version, v)
	}
	if n := count(t, pool, `SELECT count(*) FROM source_definitions WHERE name = 'acme'`); n != 1 {
		t.Errorf("acme removed by a refused directory")
	}

	// Forced: applied, generation 2, forced.
	d := applyWith(t, pool, other, definitions.ApplyOptions{Force: true, By: "syncer apply --force"})
	if d.Generation != 2 || !reflect.DeepEqual(d.Removed, []string{"acme"}) {
		t.Errorf("forced apply = %+v, want generation 2", d)
	}
	if n := count(t, pool, `SELECT count(*) FROM config_generations WHERE generation = 2 AND forced AND applied_by = 'syncer apply --force'`); n != 1 {
		t.Errorf("generation 2 not recorded as forced")
	}
	// The first directory again: older, refused, saying so.
	_, err = definitions.Apply(ctx, pool, load(t, dir), definitions.ApplyOptions{})
	if !errors.As(err, &de) || de.Older != 1 || !strings.Contains(err.Error(), "is generation 1, older than the applied generation 2") {
		t.Errorf("an older directory: %v", err)
	}
	// A daemon in step with generation 2 whose directory changed applies
	// its edit (a reload): generation 3.
	conntest.WriteFile(t, filepath.Join(other, "sources/blog.yaml"), blog+"    urgency: high\n")
	if d := applyWith(t, pool, other, definitions.ApplyOptions{Base: d.Hash}); d.Generation != 3 || !reflect.DeepEqual(d.Changed, []string{"blog/any"}) {
		t.Errorf("a reload's edit = %+v, want generation 3", d)
	}
	if g, err := definitions.AppliedGeneration(ctx, pool); err != nil || g.Number != 3 || g.Forced {
		t.Errorf("applied generation = %+v (%v)", g, err)
	}
}
