package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lookout-dev/lookout/internal/config"
	_ "github.com/lookout-dev/lookout/internal/connectors/httpjson" // the http connector of the webhook source
	"github.com/lookout-dev/lookout/internal/definitions"
	"github.com/lookout-dev/lookout/internal/evaluator"
	"github.com/lookout-dev/lookout/internal/ingest"
	"github.com/lookout-dev/lookout/internal/signature"
	"github.com/lookout-dev/lookout/internal/syncer"
)

const hookSecret = "bench-webhook-secret"

// WebhookResult holds the figures of the webhook ingest (8).
type WebhookResult struct {
	// Rate and Latency: a delivery's POST to its decision
	// (evaluations.created_at), ingest, syncer events processor and
	// evaluator in this process, at Rate deliveries/s.
	Rate    int
	Latency Latency
	// Stages split Latency at the stored timestamps of each delivery:
	// POST → stored (inbound_events.received_at), stored → the events
	// processor's transaction began (processed_at), that → decision.
	Stages [3]Latency
	// Stored deliveries in StoreTime by one ingest with GOMAXPROCS 2
	// (the load generator in the same process).
	Stored    int
	StoreTime time.Duration
	// Saved compares upstream requests of webhooks plus a 6h
	// reconciliation poll with polling every minute, per day, for
	// activity levels (computed from the github connector's rules).
	Saved []RequestsSaved
}

// RequestsSaved is one activity level of the requests comparison.
type RequestsSaved struct {
	EventsPerHour         float64
	Polling, Webhook      float64 // requests per day
	PollingFree, Webhooks float64 // of which: polls answered 304 (GitHub does not count them); deliveries received
}

// webhookConfig writes a configuration with one webhook source, "hooks"
// (hmac provider, the http connector for its reconciliation poll, never
// due during the measurement), and a deterministic watch.
func webhookConfig() (*config.Config, func(), error) {
	dir, err := os.MkdirTemp("", "lookout-bench-hooks-")
	if err != nil {
		return nil, nil, err
	}
	cleanup := func() { os.RemoveAll(dir) }
	files := map[string]string{
		"lookout.yaml": "sinks: {log: {type: log}}\nevaluator: {batch_size: 2000}\n",
		"sources/hooks.yaml": `name: hooks
connector: http
http: {url: "http://127.0.0.1:9/items", items: body.data}
webhook: {provider: hmac, secret: "` + hookSecret + `", header: X-Signature, id_header: X-Delivery, reconcile_every: 24h}
watches:
  - name: urgent
    when: record.status == "open" && "urgent" in record.labels
  - name: any
    when: "true"
`,
	}
	if err := os.MkdirAll(filepath.Join(dir, "sources"), 0o755); err != nil {
		cleanup()
		return nil, nil, err
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			cleanup()
			return nil, nil, err
		}
	}
	cfg, err := config.Load(dir)
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	return cfg, cleanup, nil
}

// delivery renders delivery i: an item.updated event of object i.
func delivery(i int) (body []byte, id string) {
	labels := `["ops"]`
	if i%10 == 0 {
		labels = `["ops","urgent"]`
	}
	body = fmt.Appendf(nil, `{"type":"item.updated","timestamp":"2026-02-01T12:00:00Z","data":{"id":"w-%d","title":"Ticket %d: printer jammed","status":"open","labels":%s,"updated_at":"2026-02-01T12:00:00Z","priority":%d}}`,
		i, i, labels, i%4)
	return body, fmt.Sprintf("bench-%d", i)
}

func post(client *http.Client, url string, i int) error {
	body, id := delivery(i)
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Delivery", id)
	req.Header.Set("X-Signature", signature.SignHex([]byte(hookSecret), body))
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusAccepted {
		return fmt.Errorf("delivery %s answered %s", id, resp.Status)
	}
	return nil
}

// RunWebhooks measures (8): webhook received → decision at rate
// deliveries/s for dur (the ingest, the syncer's events processor and
// the evaluator in this process, each woken by NOTIFY), then how many
// deliveries one ingest stores per second on 2 cores (n of them), and
// computes the requests a webhook source saves against polling every
// minute.
func RunWebhooks(ctx context.Context, pool *pgxpool.Pool, rate int, dur time.Duration, n int) (*WebhookResult, error) {
	url, stop, err := startWebhookPipeline(ctx, pool)
	if err != nil {
		return nil, err
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	res := &WebhookResult{Rate: rate}

	// Received → decision.
	sent, err := postSteadily(client, url, rate, dur)
	if err == nil {
		err = waitDecided(ctx, pool, len(sent))
	}
	stop.pipeline()
	if err != nil {
		stop.server()
		return nil, err
	}
	defer stop.server()
	lat, stages, err := webhookLatencies(ctx, pool, sent)
	if err != nil {
		return nil, err
	}
	res.Latency = percentiles(lat)
	for k := range stages {
		res.Stages[k] = percentiles(stages[k])
	}

	// Stored per second by one ingest on 2 cores (nothing processes them).
	if n > 0 {
		if res.StoreTime, err = postStored(client, url, n); err != nil {
			return nil, err
		}
		res.Stored = n
	}
	res.Saved = requestsSaved()
	return res, nil
}

// webhookStops ends what startWebhookPipeline started: the syncer's
// events processor and the evaluator (pipeline), then the ingest server
// and the configuration's files (server).
type webhookStops struct{ pipeline, server func() }

// startWebhookPipeline applies the benchmark's webhook source and starts
// an ingest server, the syncer's events processor and an evaluator on
// pool, each woken by NOTIFY; it returns the ingest URL once both
// listen.
func startWebhookPipeline(ctx context.Context, pool *pgxpool.Pool) (string, webhookStops, error) {
	var stop webhookStops
	cfg, cleanup, err := webhookConfig()
	if err != nil {
		return "", stop, err
	}
	if _, err := definitions.Apply(ctx, pool, cfg, definitions.ApplyOptions{Force: true, By: "lookout-bench"}); err != nil {
		cleanup()
		return "", stop, err
	}
	logger := slog.New(slog.DiscardHandler)
	mux := http.NewServeMux()
	mux.Handle(ingest.Pattern, ingest.New(pool, ingest.Config{}, logger).Handler())
	srv := httptest.NewServer(mux)
	stop.server = func() { srv.Close(); cleanup() }
	fail := func(err error) (string, webhookStops, error) { stop.server(); return "", stop, err }

	sconf := syncer.FromConfig(cfg)
	sconf.Owner = "bench-syncer"
	s, err := syncer.New(pool, sconf, logger)
	if err != nil {
		return fail(err)
	}
	if err := s.Register(ctx); err != nil {
		return fail(err)
	}
	events := s.Events(syncer.EventsConfig{})
	if err := events.Start(ctx); err != nil {
		return fail(err)
	}
	econf := evaluator.FromConfig(cfg)
	econf.Owner = "bench-evaluator"
	ev, err := evaluator.New(pool, econf, logger)
	if err != nil {
		_ = events.Stop()
		return fail(err)
	}
	if err := ev.Start(ctx); err != nil {
		_ = events.Stop()
		return fail(err)
	}
	stop.pipeline = func() { _ = ev.Stop(); _ = events.Stop() }
	for !ev.Listening() || !events.Listening() {
		time.Sleep(time.Millisecond)
	}
	return srv.URL + "/ingest/hooks", stop, nil
}

// postSteadily POSTs signed deliveries w-0, w-1, … to url at rate a
// second for dur, each from its own goroutine, and returns when each was
// sent.
func postSteadily(client *http.Client, url string, rate int, dur time.Duration) ([]time.Time, error) {
	sent := make([]time.Time, 0, int(float64(rate)*dur.Seconds())+1)
	var wg sync.WaitGroup
	var failed atomic.Value
	tick := time.NewTicker(time.Second / time.Duration(rate))
	end := time.Now().Add(dur)
	for i := 0; time.Now().Before(end); i++ {
		<-tick.C
		sent = append(sent, time.Now())
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := post(client, url, i); err != nil {
				failed.Store(err)
			}
		}()
	}
	tick.Stop()
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		return nil, err
	}
	return sent, nil
}

// waitDecided waits until n records of the webhook source have an
// evaluation, for at most a minute.
func waitDecided(ctx context.Context, pool *pgxpool.Pool, n int) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		var decided int
		if err := pool.QueryRow(ctx, `SELECT count(DISTINCT record_id) FROM evaluations WHERE source = 'hooks'`).Scan(&decided); err != nil {
			return err
		}
		if decided == n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d deliveries decided 60s after the load stopped", decided, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// webhookLatencies reads each delivery's first decision and its inbound
// event, and returns sent → decided and its three stages (POST → stored,
// stored → mirroring began, mirroring began → decided).
func webhookLatencies(ctx context.Context, pool *pgxpool.Pool, sent []time.Time) ([]time.Duration, [3][]time.Duration, error) {
	var lat []time.Duration
	var stages [3][]time.Duration
	rows, err := pool.Query(ctx, `
		SELECT ev.record_id, ev.decided, ie.received_at, ie.processed_at
		FROM (SELECT record_id, min(created_at) AS decided FROM evaluations WHERE source = 'hooks' GROUP BY record_id) ev
		JOIN inbound_events ie ON ie.source = 'hooks' AND ie.object_id = ev.record_id AND ie.signature_valid`)
	if err != nil {
		return nil, stages, err
	}
	defer rows.Close()
	for rows.Next() {
		var rid string
		var at, received, processed time.Time
		if err := rows.Scan(&rid, &at, &received, &processed); err != nil {
			return nil, stages, err
		}
		var i int
		if _, err := fmt.Sscanf(rid, "w-%d", &i); err != nil || i >= len(sent) {
			return nil, stages, fmt.Errorf("unexpected record %q", rid)
		}
		lat = append(lat, max(at.Sub(sent[i]), 0))
		stages[0] = append(stages[0], max(received.Sub(sent[i]), 0))
		stages[1] = append(stages[1], max(processed.Sub(received), 0))
		stages[2] = append(stages[2], max(at.Sub(processed), 0))
	}
	if err := rows.Err(); err != nil {
		return nil, stages, err
	}
	if len(lat) != len(sent) {
		return nil, stages, fmt.Errorf("%d of %d deliveries found with their decision", len(lat), len(sent))
	}
	return lat, stages, nil
}

// postStored POSTs n deliveries from 32 workers with GOMAXPROCS 2 (one
// ingest on 2 cores; nothing processes them) and returns how long they
// took.
func postStored(client *http.Client, url string, n int) (time.Duration, error) {
	prev := runtime.GOMAXPROCS(2)
	defer runtime.GOMAXPROCS(prev)
	const workers = 32
	var wg sync.WaitGroup
	var failed atomic.Value
	jobs := make(chan int)
	start := time.Now()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				if err := post(client, url, i); err != nil {
					failed.Store(err)
				}
			}
		}()
	}
	for i := range n {
		jobs <- 1_000_000 + i
	}
	close(jobs)
	wg.Wait()
	took := time.Since(start)
	if err, _ := failed.Load().(error); err != nil {
		return 0, err
	}
	return took, nil
}

// requestsSaved computes a day of upstream requests of one GitHub
// repository, polled every minute (per_page 100, a 304 when nothing
// changed) or webhook-first (issues events need no request;
// pull_request and issue_comment events fetch the issue: with GitHub's
// usual mix, about half the events; plus the 6h reconciliation polls).
func requestsSaved() []RequestsSaved {
	const fetchShare = 0.5
	var out []RequestsSaved
	for _, perHour := range []float64{1, 10, 100, 1000, 200 * 3600} {
		perMinute := perHour / 60
		var polling, free float64
		for range 1440 {
			// The changes of one minute, spread evenly; a minute without
			// any is a 304.
			pages := perMinute / 100
			switch {
			case perMinute < 1:
				polling++
				free += 1 - perMinute // the share of minutes without a change
			default:
				polling += max(1, pages+0.5)
			}
		}
		events := perHour * 24
		webhook := events*fetchShare + 4*max(1, perHour*6/100)
		out = append(out, RequestsSaved{EventsPerHour: perHour, Polling: polling, PollingFree: free, Webhook: webhook, Webhooks: events})
	}
	return out
}
