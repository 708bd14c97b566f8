package syncer

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lookout-dev/lookout/internal/connectors"
)

// TestLateRunsKeepTheCadence: a run that starts late does not push the
// source's next run back by its lateness. The next run is due one
// interval after this one was due, on both ways a run ends: the quiet run
// (nothing changed, no sync_runs row) and the run that wrote changes.
func TestLateRunsKeepTheCadence(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	var n atomic.Int64
	sources := map[string]string{"quiet": "every: 1m\njitter: 0s\n", "busy": "every: 1m\njitter: 0s\n"}
	fetch := map[string]fetchFunc{
		"quiet": func(context.Context, connectors.Env, json.RawMessage, connectors.EmitFunc) (connectors.Result, error) {
			return connectors.Result{}, connectors.ErrNotModified
		},
		"busy": func(ctx context.Context, _ connectors.Env, _ json.RawMessage, emit connectors.EmitFunc) (connectors.Result, error) {
			// A new version of the record every run: every run writes.
			err := emit(ctx, connectors.Page{Items: []connectors.Item{{Value: map[string]any{"id": "r", "n": int(n.Add(1))}, Loc: "x"}}})
			return connectors.Result{}, err
		},
	}
	cfg := loadConfig(t, fastLimits, sources, fetch)
	s := h.syncer(cfg, Config{})
	for _, name := range []string{"quiet", "busy"} {
		h.runAt(s, name) // the first run
		for i := range 3 {
			due := h.source(name).NextRunAt
			h.clock.Set(due.Add(20 * time.Second)) // 20s late
			if ran := h.runDue(s); ran < 1 {
				t.Fatalf("%s: run %d did not run", name, i)
			}
			if got, want := h.source(name).NextRunAt, due.Add(time.Minute); !got.Equal(want) {
				t.Errorf("%s: run %d due %s ran 20s late: next run at due+%s, want due+1m",
					name, i, due.Format(time.TimeOnly), got.Sub(due))
			}
		}
	}
	// Both ways of ending were taken: every run of busy wrote a sync_runs
	// row, none of quiet did.
	if busy, quiet := len(h.runs("busy")), len(h.runs("quiet")); busy < 4 || quiet != 0 {
		t.Errorf("sync_runs rows: busy %d (want at least 4), quiet %d (want 0)", busy, quiet)
	}
}
