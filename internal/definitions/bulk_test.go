package definitions_test

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/connectors/conntest"
	"github.com/lookout-dev/lookout/internal/definitions"
	"github.com/lookout-dev/lookout/internal/pgtest"
)

// statementCounter counts the statements a pool sends, those of a batch
// one by one, a COPY as one.
type statementCounter struct{ n atomic.Int64 }

func (c *statementCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}
func (c *statementCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (c *statementCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}
func (c *statementCounter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {
	c.n.Add(1)
}
func (c *statementCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}
func (c *statementCounter) TraceCopyFromStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceCopyFromStartData) context.Context {
	c.n.Add(1)
	return ctx
}
func (c *statementCounter) TraceCopyFromEnd(context.Context, *pgx.Conn, pgx.TraceCopyFromEndData) {}

// countingPool is a pool of pool's database whose statements c counts.
func countingPool(t *testing.T, pool *pgxpool.Pool) (*pgxpool.Pool, *statementCounter) {
	t.Helper()
	c := &statementCounter{}
	cfg := pool.Config()
	cfg.ConnConfig.Tracer = c
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p, c
}

// manyWatches is a directory of sources files of perSource watches each.
func manyWatches(t *testing.T, sources, perSource int, when string) string {
	t.Helper()
	files := map[string]string{}
	for i := range sources {
		var b strings.Builder
		fmt.Fprintf(&b, "name: s%03d\nconnector: file\nfile:\n  paths: [s%03d.json]\nwatches:\n", i, i)
		for j := range perSource {
			fmt.Fprintf(&b, "  - name: w%03d\n    when: %q\n", j, fmt.Sprintf(when, j))
		}
		files[fmt.Sprintf("sources/s%03d.yaml", i)] = b.String()
	}
	return conntest.WriteConfig(t, files)
}

// A directory of 1,000 watches is written in a few statements (rows in
// bulk, not one statement per definition), and applied again unchanged
// it writes no row: the plan compares content hashes read in one go.
// A changed condition is still written, in bulk.
func TestApplyWritesDefinitionsInBulk(t *testing.T) {
	t.Parallel()
	pool, c := countingPool(t, pgtest.Pool(t))
	ctx := context.Background()
	dir := manyWatches(t, 10, 100, `record.status == "s%d"`)
	opts := definitions.ApplyOptions{Force: true}

	c.n.Store(0)
	d := applyWith(t, pool, dir, opts)
	if len(d.Added) != 1010 {
		t.Fatalf("first apply added %d definitions, want 1010", len(d.Added))
	}
	if n := c.n.Load(); n > 20 {
		t.Errorf("the first apply of 10 sources and 1,000 watches sent %d statements, want at most 20 (rows in bulk)", n)
	}
	if got := count(t, pool, `SELECT count(*) FROM watches`); got != 1000 {
		t.Fatalf("watches after the first apply: %d, want 1000", got)
	}
	var xmin string
	if err := pool.QueryRow(ctx, `SELECT max(xmin::text::bigint)::text FROM watches`).Scan(&xmin); err != nil {
		t.Fatal(err)
	}

	c.n.Store(0)
	d = applyWith(t, pool, dir, opts)
	if !d.Empty() {
		t.Fatalf("second apply of the same directory: %s, want no change", d)
	}
	if n := c.n.Load(); n > 8 {
		t.Errorf("the second apply of an unchanged directory sent %d statements, want at most 8", n)
	}
	if got := count(t, pool, `SELECT count(*) FROM watches WHERE xmin::text::bigint > $1::bigint`, xmin); got != 0 {
		t.Errorf("the second apply of an unchanged directory wrote %d watch rows, want 0", got)
	}

	// Every watch's condition changed: 1,000 updates, still in bulk.
	changed := manyWatches(t, 10, 100, `record.status == "t%d"`)
	c.n.Store(0)
	d = applyWith(t, pool, changed, opts)
	if len(d.Changed) != 1000 || len(d.Added)+len(d.Removed) != 0 {
		t.Fatalf("apply of changed conditions: %d changed, %d added, %d removed; want 1000, 0, 0", len(d.Changed), len(d.Added), len(d.Removed))
	}
	if n := c.n.Load(); n > 20 {
		t.Errorf("the apply of 1,000 changed watches sent %d statements, want at most 20", n)
	}
	if got := count(t, pool, `SELECT count(*) FROM watches WHERE definition->>'when' LIKE 'record.status == "t%' AND version = $1`, d.Version); got != 1000 {
		t.Errorf("watches with the new condition at version %d: %d, want 1000", d.Version, got)
	}
}

// A daemon's start parses each file once: the follower's first load takes
// the sources of the directory it has just applied (ApplyKept, Reuse),
// their watches in the rows' order, when the rows are exactly the
// directory's; a source a user added a watch to since is parsed from its
// rows, with that watch. What the first load gives is what a parse of
// the rows gives. The definitions of the rows it takes are not read back
// (their Definition is nil); those of a source parsed from its rows are.
func TestFollowerReusesTheAppliedParse(t *testing.T) {
	t.Parallel()
	pool, dir := setup(t)
	ctx := context.Background()
	cfg := load(t, dir)
	byName := map[string]*config.Source{}
	for _, s := range cfg.Sources {
		byName[s.Name] = s
	}
	_, applied, err := definitions.ApplyKept(ctx, pool, cfg, definitions.ApplyOptions{})
	if err != nil || applied == nil {
		t.Fatalf("ApplyKept = %v, %v", applied, err)
	}
	if _, err := newStore(t, pool).CreateWatch(ctx, definitions.Actor{Owner: "alice"}, "blog", []byte(`{"name": "alices", "when": "record.title != \"\""}`)); err != nil {
		t.Fatal(err)
	}
	first := func(reuse *definitions.Applied) map[string]*definitions.SourceDef {
		t.Helper()
		out := map[string]*definitions.SourceDef{}
		f := definitions.NewFollower(pool, &cfg.Global, func(_ context.Context, d *definitions.Delta) error {
			for _, s := range d.Sources {
				out[s.Row.Name] = s
			}
			if len(d.Invalid) > 0 {
				t.Errorf("invalid: %v", d.Invalid)
			}
			return nil
		}).Reuse(reuse)
		if _, err := f.CatchUp(ctx); err != nil {
			t.Fatal(err)
		}
		return out
	}
	got, want := first(applied), first(nil)
	if a := got["acme"]; a == nil || a.Config != byName["acme"] {
		t.Errorf("acme's first load is not the directory's parse (%p, want %p)", a.Config, byName["acme"])
	}
	if b := got["blog"]; b == nil || b.Config == byName["blog"] || len(b.Config.Watches) != 2 {
		t.Errorf("blog (a user's watch added since the apply) = %+v, want parsed from its rows with 2 watches", b)
	}
	for _, w := range got["acme"].Watches {
		if w.Definition != nil {
			t.Errorf("acme's watch %s was read back with its definition (%d bytes) though the directory's parse was taken", w.Name, len(w.Definition))
		}
	}
	for _, w := range got["blog"].Watches {
		if len(w.Definition) == 0 {
			t.Errorf("blog's watch %s has no definition, though blog was parsed from its rows", w.Name)
		}
	}
	for _, name := range []string{"acme", "blog"} {
		g, w := got[name], want[name]
		if g == nil || w == nil {
			t.Fatalf("%s missing from a first load: %v, %v", name, g, w)
		}
		for i := range g.Watches {
			if g.Watches[i].Name != g.Config.Watches[i].Name {
				t.Errorf("%s watch %d: row %q, parsed %q (not index-aligned)", name, i, g.Watches[i].Name, g.Config.Watches[i].Name)
			}
		}
		if !reflect.DeepEqual(g.Config.Watches, w.Config.Watches) || g.Config.Every != w.Config.Every || g.Config.Connector != w.Config.Connector ||
			g.Config.Path != w.Config.Path || g.Config.Hash != w.Config.Hash || g.Config.Line("watches[0].when") != w.Config.Line("watches[0].when") {
			t.Errorf("%s: the reused parse differs from the rows' parse:\n%+v\n%+v", name, g.Config, w.Config)
		}
	}
}
