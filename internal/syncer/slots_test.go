package syncer

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lookout-dev/lookout/internal/connectors"
)

// TestSlowSourceDoesNotBlockOthers runs the daemon with a source whose run
// blocks until the test releases it: meanwhile a fast source keeps being
// run in the free slots.
func TestSlowSourceDoesNotBlockOthers(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	release := make(chan struct{})
	var slowStarted atomic.Bool
	var fastRuns atomic.Int64
	cfg := loadConfig(t, fastLimits+"syncer: {concurrency: 2, poll_interval: 10ms}\n", map[string]string{
		"slow": "every: 1h\njitter: 0s\n",
		"fast": "every: 20ms\njitter: 0s\n",
	}, map[string]fetchFunc{
		"slow": func(ctx context.Context, _ connectors.Env, _ json.RawMessage, _ connectors.EmitFunc) (connectors.Result, error) {
			slowStarted.Store(true)
			select {
			case <-release:
			case <-ctx.Done():
			}
			return connectors.Result{}, nil
		},
		"fast": func(context.Context, connectors.Env, json.RawMessage, connectors.EmitFunc) (connectors.Result, error) {
			fastRuns.Add(1)
			return connectors.Result{}, nil
		},
	})
	s := h.syncer(cfg, Config{Now: time.Now})
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer func() {
		close(release)
		if err := s.Stop(); err != nil {
			t.Error(err)
		}
	}()
	deadline := time.Now().Add(20 * time.Second)
	for !(slowStarted.Load() && fastRuns.Load() >= 5) {
		if time.Now().After(deadline) {
			t.Fatalf("fast source ran %d times while the slow one (started %t) held its slot; want 5", fastRuns.Load(), slowStarted.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
}
