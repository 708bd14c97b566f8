package reload

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/definitions"
	"github.com/lookout-dev/lookout/internal/testsignal"
)

// volume lays out a configuration directory the way the kubelet mounts a
// ConfigMap: the files live in a timestamped folder, ..data points at it,
// and lookout.yaml and sources are symlinks through ..data. Each update
// writes a new folder, swaps ..data atomically and removes the old one.
type volume struct {
	t   *testing.T
	dir string
	n   int
	cur string
}

func (v *volume) update(watches int) {
	v.t.Helper()
	v.n++
	ts := fmt.Sprintf("..2026_11_30_%02d", v.n)
	var src strings.Builder
	src.WriteString("name: tasks\nconnector: file\nfile: {paths: [tasks.jsonl]}\nwatches:\n")
	for i := range watches {
		fmt.Fprintf(&src, "  - name: w%d\n    when: record.title != \"\"\n", i)
	}
	files := map[string]string{
		config.GlobalFile: "sinks:\n  log: {type: log}\n",
		filepath.Join(config.SourcesDir, "tasks.yaml"): src.String(),
	}
	for name, data := range files {
		p := filepath.Join(v.dir, ts, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			v.t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			v.t.Fatal(err)
		}
	}
	tmp := filepath.Join(v.dir, "..data_tmp")
	if err := os.Symlink(ts, tmp); err != nil {
		v.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(v.dir, "..data")); err != nil {
		v.t.Fatal(err)
	}
	for _, name := range []string{config.GlobalFile, config.SourcesDir} {
		if _, err := os.Lstat(filepath.Join(v.dir, name)); err != nil {
			if err := os.Symlink(filepath.Join("..data", name), filepath.Join(v.dir, name)); err != nil {
				v.t.Fatal(err)
			}
		}
	}
	if v.cur != "" {
		if err := os.RemoveAll(filepath.Join(v.dir, v.cur)); err != nil {
			v.t.Fatal(err)
		}
	}
	v.cur = ts
}

// TestConfigMapUpdatesAreFollowed swaps a ConfigMap volume twice while the
// reloader runs: both updates are loaded (the first swap deletes the
// folder the sources/ watch was on, so a reloader that does not follow
// ..data and watch sources/ again misses every later update).
func TestConfigMapUpdatesAreFollowed(t *testing.T) {
	t.Parallel()
	v := &volume{t: t, dir: t.TempDir()}
	v.update(1)
	loaded := make(chan int, 16)
	r := New(Config{
		Dir:      v.dir,
		Debounce: 1,
		Load:     func() (*config.Config, error) { return config.Load(v.dir) },
		Apply: func(_ context.Context, cfg *config.Config, _ definitions.ApplyOptions) (definitions.Diff, error) {
			loaded <- len(cfg.Sources[0].Watches)
			return definitions.Diff{Changed: []string{"tasks"}}, nil
		},
	}, slog.New(slog.DiscardHandler))
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.Stop(); err != nil {
			t.Error(err)
		}
	})
	for _, want := range []int{2, 3} {
		v.update(want)
		for got := -1; got != want; {
			got = testsignal.Receive(t, loaded, fmt.Sprintf("a reload seeing %d watches", want))
		}
	}
}
