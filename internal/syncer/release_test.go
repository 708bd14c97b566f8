package syncer

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/connectors/conntest"
	"github.com/lookout-dev/lookout/internal/definitions"
)

// A source built from the definitions keeps no parsed YAML (its
// connector block), nor its definition's JSON, nor (without task
// watches) its parsed definition: its connector holds its settings, and
// it still runs; a changed definition comes parsed anew.
func TestSourceFromTheDefinitionsKeepsNoYAML(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := context.Background()
	dir := conntest.WriteConfig(t, map[string]string{
		"lookout.yaml":   fastLimits,
		"sources/a.yaml": "name: a\nconnector: file\nevery: 1m\njitter: 0s\nfile:\n  paths: [a.jsonl]\n",
	})
	conntest.WriteFile(t, filepath.Join(dir, "a.jsonl"), `{"id": "1", "title": "one"}`+"\n")
	cfg, err := config.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := definitions.Apply(ctx, h.pool, cfg, definitions.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	conf := FromConfig(cfg)
	conf.Sources = nil
	s := h.syncerOn(h.pool, cfg, conf)
	f := definitions.NewFollower(h.pool, &cfg.Global, s.Apply)
	if _, err := f.CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
	held := func() *config.Source {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.sources["a"].tasks
	}
	if sc := held(); sc != nil {
		t.Errorf("source a, without task watches, holds its parsed definition (connector block %v, definition %d bytes), want none",
			sc.Block != nil, len(sc.Definition))
	}
	h.exec(`UPDATE sources SET next_run_at = $1`, h.clock.Now().Add(-1))
	if n := h.runDue(s); n != 1 || len(h.runs("a")) != 1 {
		t.Fatalf("ran %d sources (runs of a %d), want a once", n, len(h.runs("a")))
	}
}
