package syncer

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/connectors"
	"github.com/lookout-dev/lookout/internal/testsignal"
)

// TestClaimBatch: the daemon takes due sources in claim batches. A quiet
// run completes in its batch without a lease ever being written (the
// source's run_id stays the last leased run's); a run still going when
// the batch's hold is over holds a lease from then (lease_owner, a new
// run_id) and is completed by the completer; a run that writes records
// leases its source before it writes and keeps its sync_runs row.
func TestClaimBatch(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	release := make(chan struct{})
	var slowStarted atomic.Bool
	var quietRuns atomic.Int64
	var n atomic.Int64
	cfg := loadConfig(t, fastLimits+"syncer: {poll_interval: 10ms}\n", map[string]string{
		// At most three batches are ever open (one per source), fewer than
		// maxOpenBatches: no claim falls back to a lease.
		"quiet":   "every: 100ms\njitter: 0s\n",
		"slow":    "every: 1h\njitter: 0s\n",
		"changes": "every: 1h\njitter: 0s\n",
	}, map[string]fetchFunc{
		"quiet": func(context.Context, connectors.Env, json.RawMessage, connectors.EmitFunc) (connectors.Result, error) {
			quietRuns.Add(1)
			return connectors.Result{}, connectors.ErrNotModified
		},
		"slow": func(ctx context.Context, _ connectors.Env, _ json.RawMessage, _ connectors.EmitFunc) (connectors.Result, error) {
			slowStarted.Store(true)
			select {
			case <-release:
			case <-ctx.Done():
				return connectors.Result{}, ctx.Err()
			}
			return connectors.Result{}, connectors.ErrNotModified
		},
		"changes": func(ctx context.Context, _ connectors.Env, _ json.RawMessage, emit connectors.EmitFunc) (connectors.Result, error) {
			err := emit(ctx, connectors.Page{Items: []connectors.Item{{Value: map[string]any{"id": "a", "n": int(n.Add(1))}, Loc: "x"}}})
			return connectors.Result{}, err
		},
	})
	s := h.batchSyncer(cfg, "")
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
		if err := s.Stop(); err != nil {
			t.Error(err)
		}
	}()
	type state struct {
		owner string
		runID *int64
	}
	read := func(name string) state {
		var st state
		if err := h.pool.QueryRow(context.Background(), `SELECT coalesce(lease_owner, ''), run_id FROM sources WHERE name = $1`, name).Scan(&st.owner, &st.runID); err != nil {
			t.Fatal(err)
		}
		return st
	}
	testsignal.Eventually(t, "the quiet source to run 5 times, the slow one to outlast its batch and hold a lease", func() bool {
		return quietRuns.Load() >= 5 && slowStarted.Load() && read("slow").owner == "test"
	})
	if st := read("quiet"); st.runID != nil {
		t.Errorf("quiet source: run_id %v, want none (its runs completed in their batches, never leased)", *st.runID)
	}
	var hours int
	if err := h.pool.QueryRow(context.Background(), `SELECT coalesce(sum(runs), 0) FROM sync_run_hours WHERE source = 'quiet'`).Scan(&hours); err != nil || hours < 4 {
		t.Errorf("sync_run_hours counts %d quiet runs (%v), want at least 4", hours, err)
	}
	if runs := h.runs("changes"); len(runs) != 1 || runs[0].Status != "succeeded" || runs[0].Created != 1 {
		t.Errorf("the run that wrote records: %+v", runs)
	}
	close(release)
	testsignal.Eventually(t, "the slow run to complete", func() bool { return read("slow").owner == "" })
	if st := read("slow"); st.runID == nil {
		t.Error("the slow run's lease left no run_id")
	}
	if runs := h.runs("slow"); len(runs) != 0 {
		t.Errorf("the slow run (quiet, shorter than a third of the lease) wrote a sync_runs row: %+v", runs)
	}
}

// TestFailedClaimBatchStopsItsRuns: when a claim batch cannot be
// committed (its connection was killed), the runs still fetching hold
// neither the row lock nor a lease: another replica may claim their
// sources, so they stop at once instead of fetching on beside it.
func TestFailedClaimBatchStopsItsRuns(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	started, stopped := make(chan struct{}), make(chan struct{})
	release := make(chan struct{})
	defer close(release)
	cfg := loadConfig(t, fastLimits+"syncer: {poll_interval: 10ms}\n", map[string]string{
		"slow": "every: 1h\njitter: 0s\n",
	}, map[string]fetchFunc{
		"slow": func(ctx context.Context, _ connectors.Env, _ json.RawMessage, _ connectors.EmitFunc) (connectors.Result, error) {
			select {
			case <-started:
				<-release // a later run: not this test's
				return connectors.Result{}, connectors.ErrNotModified
			default:
			}
			close(started)
			select {
			case <-ctx.Done():
				close(stopped)
				return connectors.Result{}, ctx.Err()
			case <-release:
				return connectors.Result{}, connectors.ErrNotModified
			}
		},
	})
	app := "batchfail" + strings.ReplaceAll(t.Name(), "/", "")
	s := h.batchSyncer(cfg, app)
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Error(err)
		}
	})
	<-started
	// The run fetches inside its claim batch, whose transaction is open
	// and idle: kill its connection, so that the batch cannot commit.
	var killed int
	testsignal.Eventually(t, "the claim batch's connection to be killed", func() bool {
		err := h.pool.QueryRow(context.Background(), `
			SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE application_name = $1 AND state = 'idle in transaction'`, app).Scan(&killed)
		if err != nil {
			t.Fatal(err)
		}
		return killed > 0
	})
	select {
	case <-stopped:
	case <-time.After(time.Minute):
		t.Fatal("the run went on fetching after its claim batch failed")
	}
}

// batchSyncer is a syncer on a pool large enough for claim batches (a test
// pool has 4 connections), its connections named app when app is set.
func (h *harness) batchSyncer(cfg *config.Config, app string) *Syncer {
	h.t.Helper()
	url := h.url + "&pool_max_conns=12"
	if app != "" {
		url += "&application_name=" + app
	}
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(pool.Close)
	s := h.syncerOn(pool, cfg, Config{Now: time.Now})
	if s.maxBatches < 1 {
		h.t.Fatalf("no claim batches with %d connections", pool.Config().MaxConns)
	}
	return s
}
