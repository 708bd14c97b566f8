package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lookout-dev/lookout/internal/api"
	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/control"
	"github.com/lookout-dev/lookout/internal/definitions"
	"github.com/lookout-dev/lookout/internal/syncer"
	"github.com/lookout-dev/lookout/internal/tokens"
)

// FirstRunResult is the create-to-first-run measurement (11).
type FirstRunResult struct {
	Sources int
	// PollInterval is the syncer's poll_interval: long, so that only the
	// definitions' NOTIFY can wake it in time.
	PollInterval time.Duration
	// Latency runs from the moment the client sends create_watch (a new
	// source and its watch) to the claim of that source's first run
	// (sync_runs.started_at, the claim on the syncer's clock; one process,
	// one clock).
	Latency Latency
	// Create is the latency of the create call itself, as the client sees it.
	Create Latency
}

// RunFirstRun creates n sources, each with a watch, through the HTTP API
// (create_watch with new_source on the api package's handler: one
// validation path, audit, NOTIFY of the config channel), one every gap,
// while a syncer runs in the same process as `syncer run` does: its
// sources from the definitions, woken by the definitions Watcher (LISTEN
// on <schema>.config) and not by its poll, which is set to a minute. It
// measures the time from each call to its source's first claim.
func RunFirstRun(ctx context.Context, pool *pgxpool.Pool, n int, gap time.Duration) (*FirstRunResult, error) {
	logger := slog.New(slog.DiscardHandler)
	const poll = time.Minute
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"data":[{"id":1,"title":"first item"},{"id":2,"title":"second item"}]}`)
	}))
	defer upstream.Close()

	dir, err := os.MkdirTemp("", "lookout-bench-firstrun-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if err := os.MkdirAll(filepath.Join(dir, config.SourcesDir), 0o755); err != nil {
		return nil, err
	}
	// The upstream is on loopback: let sources made through the API reach
	// it (api.allow_private), in the API's check and in the syncer's dials.
	global := fmt.Sprintf("sinks: {log: {type: log}}\nsyncer: {poll_interval: %s}\napi: {allow_private: true}\n", poll)
	if err := os.WriteFile(filepath.Join(dir, "lookout.yaml"), []byte(global), 0o644); err != nil {
		return nil, err
	}
	cfg, err := config.Load(dir)
	if err != nil {
		return nil, err
	}

	// The syncer, as `syncer run` wires it.
	sconf := syncer.FromConfig(cfg)
	sconf.Sources, sconf.Owner = nil, "bench-firstrun"
	s, err := syncer.New(pool, sconf, logger)
	if err != nil {
		return nil, err
	}
	follower := definitions.NewFollower(pool, &cfg.Global, s.Apply)
	if _, err := follower.CatchUp(ctx); err != nil {
		return nil, err
	}
	watcher := definitions.NewWatcher(pool, follower, definitions.WatcherConfig{OnWake: s.Wake}, logger)
	if err := s.Start(ctx); err != nil {
		return nil, err
	}
	defer s.Stop()
	if err := watcher.Start(ctx); err != nil {
		return nil, err
	}
	defer watcher.Stop()
	for deadline := time.Now().Add(10 * time.Second); !watcher.Listening(); {
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the definitions watcher is not listening after 10s")
		}
		time.Sleep(time.Millisecond)
	}

	// The api's handler.
	store := definitions.NewStore(pool, control.NewValidator(&cfg.Global))
	svc := control.New(pool, store, nil, control.Config{AllowPrivate: true}, logger)
	a := api.New(svc, logger)
	srv := httptest.NewServer(a.Handler())
	defer srv.Close()
	defer a.Shutdown()
	_, secret, err := tokens.Create(ctx, pool, tokens.NewToken{Owner: "bench"})
	if err != nil {
		return nil, err
	}

	sent := make(map[string]time.Time, n)
	created := make([]time.Duration, 0, n)
	tick := time.NewTicker(gap)
	defer tick.Stop()
	for i := range n {
		<-tick.C
		name := fmt.Sprintf("first-%05d", i)
		body := fmt.Sprintf(`{"new_source": {"name": %q, "connector": "http", "every": "1h", "http": {"url": %q, "items": "body.data"},
			"fields": {"id": "item.id", "title": "item.title"}}, "watch": {"name": "all", "when": "true", "notify": ["log"]}}`, name, upstream.URL+"/items")
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/watches", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+secret)
		req.Header.Set("Content-Type", "application/json")
		t0 := time.Now()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, err
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			return nil, fmt.Errorf("create source %s: %d %s", name, resp.StatusCode, b)
		}
		created = append(created, time.Since(t0))
		sent[name] = t0
	}

	// Wait for every first run; the syncer's poll (a minute) would be far
	// later than the 1 s goal, so a source that waits for it shows.
	names := make([]string, 0, n)
	for name := range sent {
		names = append(names, name)
	}
	deadline := time.Now().Add(2 * poll)
	for {
		var ran int
		if err := pool.QueryRow(ctx, `SELECT count(DISTINCT source) FROM sync_runs WHERE source = ANY($1)`, names).Scan(&ran); err != nil {
			return nil, err
		}
		if ran == n {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%d of %d new sources ran within %s", ran, n, 2*poll)
		}
		time.Sleep(50 * time.Millisecond)
	}
	rows, err := pool.Query(ctx, `SELECT source, min(started_at) FROM sync_runs WHERE source = ANY($1) GROUP BY source`, names)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	lat := make([]time.Duration, 0, n)
	for rows.Next() {
		var name string
		var at time.Time
		if err := rows.Scan(&name, &at); err != nil {
			return nil, err
		}
		lat = append(lat, max(at.Sub(sent[name]), 0))
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return &FirstRunResult{Sources: n, PollInterval: poll, Latency: percentiles(lat), Create: percentiles(created)}, nil
}
