package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lookout-dev/lookout/internal/definitions"
	"github.com/lookout-dev/lookout/internal/evaluator"
	"github.com/lookout-dev/lookout/internal/watchspec"
)

// ManyWatchesResult is measurement (12): the evaluator's commit-to-decision
// latency with many watches loaded, beside the same measurement with only
// the measured source's watches (measurement (3)'s notify path), in the
// same run and schema, alternated (few, many, few, many) so that a change
// of the machine's load during the run falls on both.
type ManyWatchesResult struct {
	Rate             int
	Watches, Sources int
	// Load is how long creating the watches through the definitions store
	// took; Apply how long the evaluator took to load them all.
	Load, Apply time.Duration
	// HeapMB is the Go heap in use after the evaluator loaded them.
	HeapMB float64
	// Phases are the four measurements in the order they ran.
	Phases []ManyWatchesPhase
	// Baseline pools the phases with only source gen's two watches
	// loaded; Loaded those with the same two plus Watches others over
	// Sources other sources.
	Baseline, Loaded Latency
}

// ManyWatchesPhase is one measurement of (12).
type ManyWatchesPhase struct {
	// Watches is how many watches the evaluator had loaded.
	Watches int
	Latency Latency
}

// RunManyWatches measures commit-to-decision latency at rate changes/s
// for dur on source gen (measurement (3)'s two deterministic watches),
// first with only those watches in the definitions; then it creates
// watches more through the definitions store (definitions.Store.
// CreateSource, as the API's create_source does: a source with its
// watches per call) spread over sources other sources, and measures with
// all of them loaded, with gen's only, and with all again. Each time a
// new evaluator follows the definitions as `evaluator run` does (Load,
// Apply; for gen's only, the snapshot's source gen).
func RunManyWatches(ctx context.Context, pool *pgxpool.Pool, rate int, dur time.Duration, watches, sources int) (*ManyWatchesResult, error) {
	cfg, cleanup, err := evalConfig()
	if err != nil {
		return nil, err
	}
	defer cleanup()
	logger := slog.New(slog.DiscardHandler)
	res := &ManyWatchesResult{Rate: rate, Watches: watches, Sources: sources}
	const perTx = 10
	if _, err := definitions.Apply(ctx, pool, cfg, definitions.ApplyOptions{Force: true, By: "lookout-bench"}); err != nil {
		return nil, err
	}
	var few, many []time.Duration
	next := 0
	measure := func(all bool) error {
		econf := evaluator.FromConfig(cfg)
		econf.Sources, econf.Owner = nil, fmt.Sprintf("bench-many-%d", len(res.Phases))
		econf.CatchUpInterval = time.Hour
		ev, err := evaluator.New(pool, econf, logger)
		if err != nil {
			return err
		}
		start := time.Now()
		snap, err := definitions.Load(ctx, pool, &cfg.Global)
		if err != nil {
			return err
		}
		if len(snap.Invalid) > 0 {
			return fmt.Errorf("%d definitions do not parse, e.g. %w", len(snap.Invalid), snap.Invalid[0])
		}
		d := snap.Delta()
		if !all {
			d.Sources = slices.DeleteFunc(slices.Clone(d.Sources), func(def *definitions.SourceDef) bool { return def.Row.Name != "gen" })
		}
		loaded := 0
		for _, def := range d.Sources {
			loaded += len(def.Config.Watches)
		}
		if err := ev.Apply(ctx, d); err != nil {
			return err
		}
		if all && res.Apply == 0 {
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
		lat, id, err := measureSamples(ctx, pool, ev, run, rate, perTx, dur, next)
		if err != nil {
			return fmt.Errorf("latency with %d watches loaded: %w", loaded, err)
		}
		next = id
		if all {
			many = append(many, lat...)
		} else {
			few = append(few, lat...)
		}
		res.Phases = append(res.Phases, ManyWatchesPhase{Watches: loaded, Latency: percentiles(lat)})
		return nil
	}
	if err := measure(false); err != nil {
		return nil, err
	}

	store := definitions.NewStore(pool, &definitions.Validator{Global: &cfg.Global, Checks: []definitions.Check{watchspec.Check}})
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
	for _, all := range []bool{true, false, true} {
		if err := measure(all); err != nil {
			return nil, err
		}
	}
	res.Baseline, res.Loaded = percentiles(few), percentiles(many)
	return res, nil
}
