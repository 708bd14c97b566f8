package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"runtime"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lookout-dev/lookout/internal/definitions"
	"github.com/lookout-dev/lookout/internal/evaluator"
)

// ManyWatchesResult is measurement (12): the evaluator's commit-to-decision
// latency with many watches loaded, beside the same measurement with only
// the measured source's watches (measurement (3)'s notify path), in the
// same run and schema.
type ManyWatchesResult struct {
	Rate             int
	Watches, Sources int
	// Load is how long creating the watches through the definitions store
	// took; Apply how long the evaluator took to load them all.
	Load, Apply time.Duration
	// HeapMB is the Go heap in use after the evaluator loaded them.
	HeapMB float64
	// Baseline: only source gen's two watches loaded; Loaded: the same
	// two plus Watches others, over Sources other sources.
	Baseline, Loaded Latency
}

// RunManyWatches measures commit-to-decision latency at rate changes/s
// for dur on source gen (measurement (3)'s two deterministic watches),
// first with only those watches in the definitions, then with watches
// more created through the definitions store (definitions.Store.
// CreateSource, as the API's create_source does, a source with its
// watches per call) spread over sources other sources; each time the
// evaluator follows the definitions as `evaluator run` does (Load, Apply).
func RunManyWatches(ctx context.Context, pool *pgxpool.Pool, rate int, dur time.Duration, watches, sources int) (*ManyWatchesResult, error) {
	cfg, cleanup, err := evalConfig()
	if err != nil {
		return nil, err
	}
	defer cleanup()
	logger := slog.New(slog.DiscardHandler)
	res := &ManyWatchesResult{Rate: rate, Watches: watches, Sources: sources}
	const perTx = 10
	if _, err := definitions.Apply(ctx, pool, cfg); err != nil {
		return nil, err
	}
	measure := func(owner string, firstID int) (Latency, int, error) {
		econf := evaluator.FromConfig(cfg)
		econf.Sources, econf.Owner = nil, owner
		econf.CatchUpInterval = time.Hour
		ev, err := evaluator.New(pool, econf, logger)
		if err != nil {
			return Latency{}, 0, err
		}
		start := time.Now()
		snap, err := definitions.Load(ctx, pool, &cfg.Global)
		if err != nil {
			return Latency{}, 0, err
		}
		if len(snap.Invalid) > 0 {
			return Latency{}, 0, fmt.Errorf("%d definitions do not parse, e.g. %w", len(snap.Invalid), snap.Invalid[0])
		}
		if err := ev.Apply(ctx, snap.Delta()); err != nil {
			return Latency{}, 0, err
		}
		if owner == "bench-many" {
			res.Apply = time.Since(start)
			runtime.GC()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			res.HeapMB = float64(ms.HeapInuse) / 1e6
		}
		run := func(ctx context.Context) func() {
			if err := ev.Start(ctx); err != nil {
				panic(err)
			}
			for !ev.Listening() {
				time.Sleep(time.Millisecond)
			}
			return func() { _ = ev.Stop() }
		}
		return measureLatency(ctx, pool, ev, run, rate, perTx, dur, firstID)
	}
	var next int
	if res.Baseline, next, err = measure("bench-few", 0); err != nil {
		return nil, fmt.Errorf("latency with gen's watches only: %w", err)
	}

	store := definitions.NewStore(pool, &definitions.Validator{Global: &cfg.Global, Checks: []definitions.Check{evaluator.Build}})
	admin := definitions.Actor{Admin: true}
	per := (watches + sources - 1) / sources
	start := time.Now()
	made := 0
	for i := 0; i < sources && made < watches; i++ {
		ws := make([]map[string]any, 0, per)
		for j := 0; j < per && made < watches; j++ {
			ws = append(ws, map[string]any{
				"name":   fmt.Sprintf("w-%03d", j),
				"when":   fmt.Sprintf(`record.status == "open" && "label-%d" in record.labels`, made),
				"notify": []string{"log"},
			})
			made++
		}
		def, _ := json.Marshal(map[string]any{"name": fmt.Sprintf("many-%05d", i), "connector": "file", "every": "1h",
			"file": map[string]any{"paths": []string{"none.jsonl"}}, "watches": ws})
		if _, _, err := store.CreateSource(ctx, admin, def); err != nil {
			return nil, fmt.Errorf("create source %d of %d: %w", i, sources, err)
		}
	}
	res.Load = time.Since(start)
	if res.Loaded, _, err = measure("bench-many", next); err != nil {
		return nil, fmt.Errorf("latency with %d watches loaded: %w", watches, err)
	}
	return res, nil
}
