package syncer

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lookout-dev/lookout/internal/connectors"
	"github.com/lookout-dev/lookout/internal/testsignal"
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
	testsignal.Eventually(t, "the fast source to run 5 times while the slow one holds its slot", func() bool {
		return slowStarted.Load() && fastRuns.Load() >= 5
	})
}

// TestShutdownIsNotAFailure: a run cut off by Stop (a deploy, a CronJob
// deadline) is recorded as abandoned, due again at once, and does not count
// towards backoff or max_failures.
func TestShutdownIsNotAFailure(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	started := make(chan struct{})
	cfg := loadConfig(t, fastLimits+"syncer: {poll_interval: 10ms}\n", map[string]string{
		"long": "every: 1h\njitter: 0s\n",
	}, map[string]fetchFunc{
		"long": func(ctx context.Context, _ connectors.Env, _ json.RawMessage, _ connectors.EmitFunc) (connectors.Result, error) {
			close(started)
			<-ctx.Done()
			return connectors.Result{}, ctx.Err()
		},
	})
	s := h.syncer(cfg, Config{Now: time.Now})
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case <-time.After(20 * time.Second):
		t.Fatal("the source never started")
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	r := h.source("long")
	if r.Failures != 0 || r.NextRunAt.After(time.Now()) {
		t.Errorf("after a shutdown: failure_count %d, next_run_at %s; want 0 and now", r.Failures, r.NextRunAt)
	}
	if runs := h.runs("long"); len(runs) != 1 || runs[0].Status != "abandoned" {
		t.Errorf("runs = %+v, want one abandoned run", runs)
	}
}
