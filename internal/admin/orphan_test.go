package admin_test

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/definitions"
)

// A file source a user still watches, whose file left the directory, is
// shown orphaned on the sources list (its state, its orphaned_at, the
// "orphaned" filter) and on its own page.
func TestOrphanedSourceShown(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.sync(true)
	w.serve()
	store := definitions.NewStore(w.pool, &definitions.Validator{Global: &w.cfg.Global})
	if _, err := store.CreateWatch(w.ctx, definitions.Actor{Owner: "alice"}, "inventory", []byte("name: mine\n")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(w.dir, "sources/inventory.yaml")); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(w.dir)
	if err != nil {
		t.Fatal(err)
	}
	if d, err := definitions.Apply(w.ctx, w.pool, cfg, definitions.ApplyOptions{Force: true}); err != nil || len(d.Orphaned) != 1 {
		t.Fatalf("apply = %+v, %v; want inventory orphaned", d, err)
	}
	c := newClient(w)
	c.login(w.adminTok)
	resp, page := c.do("GET", "/admin/sources?state=orphaned", nil, nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(page, "/admin/sources/inventory") || strings.Contains(page, "/admin/sources/tickets\"") {
		t.Errorf("orphaned sources: %d\n%.4000s", resp.StatusCode, page)
	}
	if !strings.Contains(page, "orphaned_at") || !strings.Contains(page, ">orphaned<") {
		t.Errorf("the list does not show inventory orphaned:\n%.4000s", page)
	}
	if _, page := c.do("GET", "/admin/sources/inventory", nil, nil); !strings.Contains(page, ">orphaned<") {
		t.Errorf("the source page does not show it orphaned:\n%.4000s", page)
	}
}
