package syncer

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/connectors/conntest"
	"github.com/lookout-dev/lookout/internal/definitions"
)

// A file source that left the directory while a user watches it is
// orphaned: the syncer following the definitions stops running it (and
// runs the other), and runs it again once a file declares it again.
func TestOrphanedSourceDoesNotRun(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := context.Background()
	src := func(name string) string {
		return "name: " + name + "\nconnector: file\nevery: 1m\njitter: 0s\nfile:\n  paths: [" + name + ".jsonl]\n"
	}
	both := map[string]string{"sources/a.yaml": src("a"), "sources/b.yaml": src("b"), "lookout.yaml": fastLimits}
	dir := conntest.WriteConfig(t, both)
	for _, n := range []string{"a", "b"} {
		conntest.WriteFile(t, filepath.Join(dir, n+".jsonl"), `{"id": "1", "title": "one"}`+"\n")
	}
	cfg, err := config.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := definitions.Apply(ctx, h.pool, cfg, definitions.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	store := definitions.NewStore(h.pool, &definitions.Validator{Global: &cfg.Global})
	if _, err := store.CreateWatch(ctx, definitions.Actor{Owner: "alice"}, "a", []byte("name: mine\n")); err != nil {
		t.Fatal(err)
	}
	conf := FromConfig(cfg)
	conf.Sources = nil
	s := h.syncerOn(h.pool, cfg, conf)
	f := definitions.NewFollower(h.pool, &cfg.Global, s.Apply)
	if _, err := f.CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
	// Each run finds a change (a quiet run is not in sync_runs).
	line := 0
	due := func() {
		line++
		for _, n := range []string{"a", "b"} {
			conntest.WriteFile(t, filepath.Join(dir, n+".jsonl"), fmt.Sprintf(`{"id": "1", "title": "version %d"}`+"\n", line))
		}
		h.exec(`UPDATE sources SET next_run_at = $1`, h.clock.Now().Add(-1))
	}
	runs := func(name string) int { return len(h.runs(name)) }
	due()
	if n := h.runDue(s); n != 2 {
		t.Fatalf("ran %d sources, want a and b", n)
	}

	// a.yaml leaves the directory: a is orphaned, not run.
	if err := os.Remove(filepath.Join(dir, "sources/a.yaml")); err != nil {
		t.Fatal(err)
	}
	cfg2, err := config.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if d, err := definitions.Apply(ctx, h.pool, cfg2, definitions.ApplyOptions{Force: true}); err != nil || len(d.Orphaned) != 1 {
		t.Fatalf("apply without a.yaml = %+v, %v; want a orphaned", d, err)
	}
	if _, err := f.CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
	h.clock.Advance(2 * 60e9)
	due()
	if n := h.runDue(s); n != 1 || runs("a") != 1 || runs("b") != 2 {
		t.Errorf("after a was orphaned: ran %d, runs of a %d (want 1: none since), of b %d (want 2)", n, runs("a"), runs("b"))
	}

	// a.yaml back: adopted, run again.
	conntest.WriteFile(t, filepath.Join(dir, "sources/a.yaml"), src("a"))
	if _, err := definitions.Apply(ctx, h.pool, cfg, definitions.ApplyOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
	h.clock.Advance(2 * 60e9)
	due()
	if n := h.runDue(s); n != 2 || runs("a") != 2 {
		t.Errorf("after a was adopted: ran %d, runs of a %d; want 2 and 2", n, runs("a"))
	}
}
