package main

import (
	"context"
	"io"
	"runtime/debug"
	"testing"

	"github.com/lookout-dev/lookout/internal/cli"
	"github.com/lookout-dev/lookout/internal/metrics"
	"github.com/lookout-dev/lookout/internal/pgtest"
)

// gcPercent returns the garbage collector's percent.
func gcPercent() int {
	p := debug.SetGCPercent(-1)
	debug.SetGCPercent(p)
	return p
}

// lowerGC lowers the GC percent until its restore, and leaves a lower
// one, or GOGC=off, alone.
func TestLowerGC(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	for _, c := range []struct{ before, during int }{{100, 20}, {200, 20}, {10, 10}, {20, 20}, {-1, -1}} {
		debug.SetGCPercent(c.before)
		restore := lowerGC(20)
		if p := gcPercent(); p != c.during {
			t.Errorf("GC percent %d lowered to 20: %d, want %d", c.before, p, c.during)
		}
		restore()
		if p := gcPercent(); p != c.before {
			t.Errorf("GC percent %d lowered to 20 and restored: %d", c.before, p)
		}
	}
}

// The daemon's start collects at startGCPercent and gives the GC
// percent back once it is set up, or failed to.
func TestSetupRestoresTheGCPercent(t *testing.T) {
	_, url := pgtest.Schema(t)
	t.Setenv("DATABASE_URL", url)
	defer debug.SetGCPercent(debug.SetGCPercent(150))
	ctx := context.Background()
	d, err := setup(ctx, &cli.Env{Name: "syncer", Command: "run", ConfigDir: "../../examples/config", Stdout: io.Discard, Stderr: io.Discard}, metrics.New())
	if err != nil {
		t.Fatal(err)
	}
	d.pool.Close()
	if p := gcPercent(); p != 150 {
		t.Errorf("GC percent after the start: %d, want 150", p)
	}
	bad := writeConfig(t, map[string]string{"lookout.yaml": "sinks: [\n"})
	if _, err := setup(ctx, &cli.Env{Name: "syncer", Command: "run", ConfigDir: bad, Stdout: io.Discard, Stderr: io.Discard}, metrics.New()); err == nil {
		t.Fatal("setup of a malformed lookout.yaml succeeded")
	}
	if p := gcPercent(); p != 150 {
		t.Errorf("GC percent after a start that failed: %d, want 150", p)
	}
}
