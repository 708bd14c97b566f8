package definitions_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lookout-dev/lookout/internal/config"
	_ "github.com/lookout-dev/lookout/internal/connectors/all" // the connectors' block decoders
	"github.com/lookout-dev/lookout/internal/connectors/conntest"
	"github.com/lookout-dev/lookout/internal/definitions"
	"github.com/lookout-dev/lookout/internal/pgtest"
	"github.com/lookout-dev/lookout/internal/testsignal"
)

const acme = `name: acme
connector: file
file:
  paths: [data.json]
every: 5m
watches:
  - name: open
    when: record.status == "open"
  - name: closed
    when: record.status == "closed"
`

const blog = `name: blog
connector: file
file:
  paths: [blog.json]
watches:
  - name: any
`

func setup(t *testing.T) (*pgxpool.Pool, string) {
	t.Helper()
	pool := pgtest.Pool(t)
	dir := conntest.WriteConfig(t, map[string]string{"sources/acme.yaml": acme, "sources/blog.yaml": blog})
	return pool, dir
}

func apply(t *testing.T, pool *pgxpool.Pool, dir string) definitions.Diff {
	t.Helper()
	cfg, err := config.Load(dir)
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	// These tests edit one directory and apply it again, as `apply
	// --force` would: the generations have tests of their own (orphans_test.go).
	d, err := definitions.Apply(context.Background(), pool, cfg, definitions.ApplyOptions{Force: true})
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	return d
}

type row struct {
	Name, Owner, ManagedBy string
	Version                int64
}

func rows(t *testing.T, pool *pgxpool.Pool) []row {
	t.Helper()
	r, err := pool.Query(context.Background(), `
		SELECT name, owner, managed_by, version FROM source_definitions
		UNION ALL SELECT source || '/' || name, owner, managed_by, version FROM watches ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var out []row
	for r.Next() {
		var x row
		if err := r.Scan(&x.Name, &x.Owner, &x.ManagedBy, &x.Version); err != nil {
			t.Fatal(err)
		}
		out = append(out, x)
	}
	return out
}

func version(t *testing.T, pool *pgxpool.Pool) int64 {
	t.Helper()
	v, err := definitions.NewStore(pool, nil).Version(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// Applying the directory writes one row per source and watch, managed by
// its file; applying it again writes nothing; an edit changes one
// definition with one version bump; a removed file removes its
// definitions (and a removed watch its row), each with a tombstone.
func TestApplyDiff(t *testing.T) {
	t.Parallel()
	pool, dir := setup(t)
	ctx := context.Background()

	d := apply(t, pool, dir)
	if want := []string{"acme", "acme/closed", "acme/open", "blog", "blog/any"}; !reflect.DeepEqual(d.Added, want) || len(d.Changed)+len(d.Removed) > 0 {
		t.Fatalf("first apply = %+v, want added %v", d, want)
	}
	want := []row{{"acme", "", "file:sources/acme.yaml", 1}, {"acme/closed", "", "file:sources/acme.yaml", 1},
		{"acme/open", "", "file:sources/acme.yaml", 1}, {"blog", "", "file:sources/blog.yaml", 1}, {"blog/any", "", "file:sources/blog.yaml", 1}}
	if got := rows(t, pool); !reflect.DeepEqual(got, want) {
		t.Fatalf("rows = %+v\nwant %+v", got, want)
	}
	var def string
	if err := pool.QueryRow(ctx, `SELECT definition::text FROM watches WHERE name = 'open'`).Scan(&def); err != nil || def != `{"name": "open", "when": "record.status == \"open\""}` {
		t.Errorf("watch definition = %s (%v)", def, err)
	}

	// Again: nothing written, no version bump.
	if d := apply(t, pool, dir); !d.Empty() || d.Version != 1 {
		t.Errorf("second apply = %+v, want no change at version 1", d)
	}
	if got := rows(t, pool); !reflect.DeepEqual(got, want) {
		t.Errorf("rows after a second apply = %+v", got)
	}

	// An edit of one watch: one changed definition, version 2.
	conntest.WriteFile(t, filepath.Join(dir, "sources/acme.yaml"), strings.Replace(acme, `record.status == "closed"`, `record.status == "done"`, 1))
	if d := apply(t, pool, dir); !reflect.DeepEqual(d.Changed, []string{"acme/closed"}) || len(d.Added)+len(d.Removed) > 0 || d.Version != 2 {
		t.Errorf("apply after an edit = %+v, want acme/closed changed at version 2", d)
	}
	if v := version(t, pool); v != 2 {
		t.Errorf("config version = %d, want 2", v)
	}

	// A watch removed from its file, and a file removed.
	conntest.WriteFile(t, filepath.Join(dir, "sources/acme.yaml"), strings.Split(acme, "  - name: closed")[0])
	if err := os.Remove(filepath.Join(dir, "sources/blog.yaml")); err != nil {
		t.Fatal(err)
	}
	d = apply(t, pool, dir)
	if !reflect.DeepEqual(d.Removed, []string{"acme/closed", "blog"}) || d.Version != 3 {
		t.Errorf("apply after removals = %+v, want acme/closed and blog removed at version 3", d)
	}
	if got := rows(t, pool); len(got) != 2 || got[0].Name != "acme" || got[1].Name != "acme/open" {
		t.Errorf("rows after removals = %+v", got)
	}
	var tombstones int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM definition_deletions WHERE version = 3`).Scan(&tombstones); err != nil || tombstones != 2 {
		t.Errorf("tombstones = %d (%v), want 2", tombstones, err)
	}
}

// Several replicas applying one directory at once write it once.
func TestApplyConcurrent(t *testing.T) {
	t.Parallel()
	pool, dir := setup(t)
	cfg, err := config.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			_, err := definitions.Apply(context.Background(), pool, cfg, definitions.ApplyOptions{})
			errs <- err
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatalf("apply: %v", err)
		}
	}
	if v := version(t, pool); v != 1 {
		t.Errorf("config version = %d after 4 concurrent applies, want 1", v)
	}
	if got := rows(t, pool); len(got) != 5 {
		t.Errorf("rows = %+v, want 5", got)
	}
}

func newStore(t *testing.T, pool *pgxpool.Pool) *definitions.Store {
	t.Helper()
	g := &config.Global{}
	cfg, err := config.Load(conntest.WriteConfig(t, nil))
	if err != nil {
		t.Fatal(err)
	}
	*g = cfg.Global
	return definitions.NewStore(pool, &definitions.Validator{Global: g})
}

// The API's view: owners see their own definitions and the shared ones,
// another owner's are not found, file-managed ones cannot be changed
// (a conflict naming the file), invalid ones are refused with pointers.
func TestStoreScopes(t *testing.T) {
	t.Parallel()
	pool, dir := setup(t)
	apply(t, pool, dir)
	s := newStore(t, pool)
	ctx := context.Background()
	alice, bob, admin := definitions.Actor{Owner: "alice"}, definitions.Actor{Owner: "bob"}, definitions.Actor{Admin: true}

	src, ws, err := s.CreateSource(ctx, alice, []byte(`{"name": "alice-repo", "connector": "file", "file": {"paths": ["a.json"]},
		"watches": [{"name": "mine", "when": "true"}]}`))
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if src.Owner != "alice" || src.ManagedBy != "api" || len(ws) != 1 || ws[0].Owner != "alice" || src.Version != 2 {
		t.Errorf("created %+v %+v", src, ws)
	}
	if _, err := s.GetSource(ctx, bob, "alice-repo"); !errors.Is(err, definitions.ErrNotFound) {
		t.Errorf("bob gets alice's source: %v, want ErrNotFound", err)
	}
	if _, err := s.GetSource(ctx, bob, "acme"); err != nil {
		t.Errorf("bob gets the shared source: %v", err)
	}
	if _, err := s.GetSource(ctx, admin, "alice-repo"); err != nil {
		t.Errorf("admin gets alice's source: %v", err)
	}
	if err := s.DeleteSource(ctx, bob, "alice-repo"); !errors.Is(err, definitions.ErrNotFound) {
		t.Errorf("bob deletes alice's source: %v, want ErrNotFound", err)
	}

	// A watch of bob on the shared source; alice does not see it.
	if _, err := s.CreateWatch(ctx, bob, "acme", []byte("name: bobs\nwhen: record.title != ''\n")); err != nil {
		t.Fatalf("bob watches acme: %v", err)
	}
	if _, err := s.GetWatch(ctx, alice, "acme", "bobs"); !errors.Is(err, definitions.ErrNotFound) {
		t.Errorf("alice gets bob's watch: %v", err)
	}
	if got, err := s.ListWatches(ctx, bob, "", definitions.ListOptions{}); err != nil || len(got) != 1 || got[0].Name != "bobs" {
		t.Errorf("bob's watches = %+v (%v)", got, err)
	}

	// The file-managed ones are read-only to the API.
	var ce *definitions.ConflictError
	if _, err := s.UpdateWatch(ctx, admin, "acme", "open", []byte(`{"name": "open"}`)); !errors.As(err, &ce) || ce.File != "sources/acme.yaml" {
		t.Errorf("update a file watch: %v, want a conflict naming sources/acme.yaml", err)
	}
	if _, err := s.PauseSource(ctx, admin, "acme", true, "x"); !errors.As(err, &ce) || !strings.Contains(err.Error(), "sources/acme.yaml") {
		t.Errorf("pause a file source: %v", err)
	}
	if _, _, err := s.CreateSource(ctx, alice, []byte(`{"name": "acme", "connector": "file", "file": {"paths": ["a.json"]}}`)); !errors.As(err, &ce) {
		t.Errorf("create over a file source: %v, want a conflict", err)
	}

	// Invalid: pointers into the definition.
	var ve *definitions.ValidationError
	_, err = s.CreateWatch(ctx, alice, "alice-repo", []byte(`{"name": "bad", "urgency": "extreme", "nope": 1}`))
	if !errors.As(err, &ve) {
		t.Fatalf("invalid watch: %v, want a ValidationError", err)
	}
	got := map[string]bool{}
	for _, p := range ve.Problems {
		got[p.Pointer] = true
	}
	if !got["/nope"] {
		t.Errorf("problems = %+v, want /nope", ve.Problems)
	}
	_, _, err = s.CreateSource(ctx, alice, []byte(`{"name": "x", "connector": "file", "file": {"paths": ["a.json"]}, "rate_limit": {"per_second": -1},
		"watches": [{"name": "w", "urgency": "extreme"}]}`))
	if !errors.As(err, &ve) {
		t.Fatalf("invalid source: %v", err)
	}
	want := map[string]bool{"/rate_limit/per_second": true, "/watches/0/urgency": true}
	got = map[string]bool{}
	for _, p := range ve.Problems {
		got[p.Pointer] = true
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("problems = %+v, want pointers %v", ve.Problems, want)
	}

	// Pause, version bumps; delete leaves a tombstone.
	v0 := version(t, pool)
	if w, err := s.PauseWatch(ctx, alice, "alice-repo", "mine", true, "holiday"); err != nil || !w.Paused || w.Version != v0+1 {
		t.Errorf("pause = %+v (%v)", w, err)
	}
	if err := s.DeleteSource(ctx, alice, "alice-repo"); err != nil {
		t.Errorf("delete: %v", err)
	}
	if _, err := s.GetSource(ctx, admin, "alice-repo"); !errors.Is(err, definitions.ErrNotFound) {
		t.Errorf("deleted source: %v", err)
	}
}

// A file declaring a name the API already uses is refused, naming the file.
func TestApplyRefusesAPIName(t *testing.T) {
	t.Parallel()
	pool, dir := setup(t)
	s := newStore(t, pool)
	if _, _, err := s.CreateSource(context.Background(), definitions.Actor{Owner: "alice"}, []byte(blog)); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	_, err = definitions.Apply(context.Background(), pool, cfg, definitions.ApplyOptions{})
	if err == nil || !strings.Contains(err.Error(), `sources/blog.yaml:1: name "blog" is already the name of a source created through the API (owner "alice")`) {
		t.Errorf("apply = %v", err)
	}
}

// A follower loads everything first, then only what changed, parsed.
func TestFollower(t *testing.T) {
	t.Parallel()
	pool, dir := setup(t)
	apply(t, pool, dir)
	cfg, err := config.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []*definitions.Delta
	f := definitions.NewFollower(pool, &cfg.Global, func(_ context.Context, d *definitions.Delta) error {
		got = append(got, d)
		return nil
	})
	ctx := context.Background()
	if _, err := f.CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || !got[0].Full || len(got[0].Sources) != 2 || len(got[0].Sources[0].Config.Watches) != 2 || f.Version() != 1 {
		t.Fatalf("first catch-up = %+v", got)
	}
	if d, err := f.CatchUp(ctx); err != nil || d != nil || len(got) != 1 {
		t.Errorf("catch-up without change = %v, %v", d, err)
	}
	s := newStore(t, pool)
	if _, err := s.CreateWatch(ctx, definitions.Actor{Owner: "alice"}, "blog", []byte(`{"name": "alices", "when": "record.title != \"\""}`)); err != nil {
		t.Fatal(err)
	}
	conntest.WriteFile(t, filepath.Join(dir, "sources/acme.yaml"), strings.Replace(acme, "every: 5m", "every: 1m", 1))
	if err := os.Remove(filepath.Join(dir, "sources/blog.yaml")); err != nil {
		t.Fatal(err)
	}
	apply(t, pool, dir)
	if _, err := f.CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
	d := got[1]
	if d.Full || len(d.Sources) != 2 || d.Sources[0].Config.Every.String() != "1m0s" || len(d.Sources[0].Watches) != 2 ||
		len(d.RemovedSources) != 0 || !reflect.DeepEqual(d.RemovedWatches, [][2]string{{"blog", "any"}}) || d.To != 3 {
		t.Errorf("delta = %+v", d)
	}
	// alice's watch on blog (version 2) stays: blog is orphaned (version
	// 3), with her watch and without its file's.
	if len(d.Sources) == 2 {
		if b := d.Sources[1]; b.Row.Name != "blog" || !b.Row.Orphaned() || len(b.Watches) != 1 || b.Watches[0].Name != "alices" {
			t.Errorf("blog in the delta = %+v, want orphaned with alice's watch", b)
		}
	}
	if len(d.Watches) != 0 {
		t.Errorf("watches in the delta = %+v, want none", d.Watches)
	}
}

// A task watch with a command executor runs a program on the syncer's
// host: a definition made through the API may not have one.
func TestStoreRefusesTaskCommands(t *testing.T) {
	t.Parallel()
	pool, dir := setup(t)
	apply(t, pool, dir)
	s := newStore(t, pool)
	_, _, err := s.CreateSource(context.Background(), definitions.Actor{Owner: "alice"}, []byte(`{"name": "t", "connector": "file",
		"file": {"paths": ["a.json"]}, "tasks": [{"name": "run", "when": "record.status == \"todo\"", "command": ["/bin/sh", "-c", "id"]}]}`))
	var ve *definitions.ValidationError
	if !errors.As(err, &ve) || len(ve.Problems) != 1 || ve.Problems[0].Pointer != "/tasks/0/command" ||
		!strings.Contains(ve.Problems[0].Message, "only a source file of the configuration directory may do") {
		t.Errorf("create with a task command: %v", err)
	}
}

// A follower behind a deletion that retention pruned cannot learn of it
// from definition_deletions: it loads the definitions whole instead. A
// follower that had applied the deletion goes on by deltas.
func TestFollowerLoadsWholeAfterPrunedDeletions(t *testing.T) {
	t.Parallel()
	pool, dir := setup(t)
	apply(t, pool, dir)
	cfg, err := config.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	follower := func() (*definitions.Follower, *[]*definitions.Delta) {
		var got []*definitions.Delta
		f := definitions.NewFollower(pool, &cfg.Global, func(_ context.Context, d *definitions.Delta) error {
			got = append(got, d)
			return nil
		})
		if _, err := f.CatchUp(ctx); err != nil {
			t.Fatal(err)
		}
		return f, &got
	}
	behind, behindGot := follower()
	if err := os.Remove(filepath.Join(dir, "sources/blog.yaml")); err != nil {
		t.Fatal(err)
	}
	apply(t, pool, dir) // version 2: blog deleted
	// A follower whose snapshot has a transaction older than the pruned
	// deletion in progress (another test's, in the shared cluster) loads
	// whole too, to be safe: the follower that had applied the deletion
	// catches up once those ended.
	testsignal.Eventually(t, "the transactions older than the deletion to end", func() bool {
		var after bool
		if err := pool.QueryRow(ctx, `SELECT pg_snapshot_xmin(pg_current_snapshot()) > (SELECT max(xid) FROM definition_deletions)`).Scan(&after); err != nil {
			t.Fatal(err)
		}
		return after
	})
	current, currentGot := follower()

	if n, err := definitions.CountDeletions(ctx, pool, time.Now().Add(time.Hour)); err != nil || n != 1 {
		t.Fatalf("CountDeletions = %d, %v; want 1", n, err)
	}
	n, err := definitions.PruneDeletions(ctx, pool, time.Now().Add(time.Hour), 10)
	if err != nil || n != 1 {
		t.Fatalf("PruneDeletions = %d, %v; want 1", n, err)
	}
	if n, err := definitions.PruneDeletions(ctx, pool, time.Now().Add(time.Hour), 10); err != nil || n != 0 {
		t.Fatalf("PruneDeletions again = %d, %v; want 0", n, err)
	}

	if _, err := behind.CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
	d := (*behindGot)[len(*behindGot)-1]
	if !d.Full || len(d.Sources) != 1 || d.Sources[0].Row.Name != "acme" || d.To != 2 || behind.Version() != 2 {
		t.Errorf("the follower behind the pruned deletion got %+v, want a full load of acme alone at version 2", d)
	}

	conntest.WriteFile(t, filepath.Join(dir, "sources/acme.yaml"), strings.Replace(acme, "every: 5m", "every: 1m", 1))
	apply(t, pool, dir) // version 3
	if _, err := current.CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
	d = (*currentGot)[len(*currentGot)-1]
	if d.Full || len(d.Sources) != 1 || d.From != 2 || d.To != 3 {
		t.Errorf("the follower that had applied the deletion got %+v, want a delta from 2 to 3", d)
	}
}
