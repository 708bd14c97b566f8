package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lookout-dev/lookout/internal/api"
	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/control"
	"github.com/lookout-dev/lookout/internal/definitions"
	"github.com/lookout-dev/lookout/internal/tokens"
	"github.com/lookout-dev/lookout/internal/watchspec"
)

// CreatesResult is the API create measurement.
type CreatesResult struct {
	Watches, Clients int
	Took             time.Duration
	// Latency of one create_watch call as the client sees it.
	Latency Latency
}

// RunCreates creates n watches on a shared source through the HTTP API
// (the api package's handler on a local server: bearer auth, validation
// through the definitions store with the evaluator's build, audit,
// Idempotency-Key, owner limits) from clients concurrent clients, each
// with its own owner's token, and measures creates/s and the latency of
// each call.
func RunCreates(ctx context.Context, pool *pgxpool.Pool, n, clients int) (*CreatesResult, error) {
	global := &config.Global{Sinks: map[string]*config.Sink{"log": {Type: "log"}}}
	logger := slog.New(slog.DiscardHandler)
	store := definitions.NewStore(pool, &definitions.Validator{Global: global, Checks: []definitions.Check{watchspec.Check}})
	// A shared source (owner ""), as an operator's would be.
	if _, _, err := store.CreateSource(ctx, definitions.Actor{Admin: true},
		[]byte(`{"name": "shared", "connector": "http", "every": "1h", "http": {"url": "https://example.com/items"}}`)); err != nil {
		return nil, fmt.Errorf("shared source: %w", err)
	}
	svc := control.New(pool, store, nil, control.Config{}, logger)
	a := api.New(svc, logger)
	srv := httptest.NewServer(a.Handler())
	defer srv.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients}}
	secrets := make([]string, clients)
	for i := range secrets {
		_, s, err := tokens.Create(ctx, pool, tokens.NewToken{Owner: fmt.Sprintf("user-%02d", i)})
		if err != nil {
			return nil, err
		}
		secrets[i] = s
	}
	lat := make([]time.Duration, n)
	errs := make(chan error, clients)
	var wg sync.WaitGroup
	start := time.Now()
	for c := range clients {
		wg.Go(func() {
			for i := c; i < n; i += clients {
				body := fmt.Sprintf(`{"source": "shared", "watch": {"name": "w-%06d", "when": "record.status == \"open\" && \"bug\" in record.labels", "notify": ["log"]}}`, i)
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/watches", strings.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+secrets[c])
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Idempotency-Key", fmt.Sprintf("bench-%d", i))
				t0 := time.Now()
				resp, err := client.Do(req)
				if err != nil {
					errs <- err
					return
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				lat[i] = time.Since(t0)
				if resp.StatusCode != http.StatusCreated {
					errs <- fmt.Errorf("create watch %d: %d %s", i, resp.StatusCode, b)
					return
				}
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	close(errs)
	if err := <-errs; err != nil {
		return nil, err
	}
	var got int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM watches`).Scan(&got); err != nil || got != n {
		return nil, fmt.Errorf("created %d watches, want %d (%v)", got, n, err)
	}
	return &CreatesResult{Watches: n, Clients: clients, Took: took, Latency: percentiles(lat)}, nil
}
