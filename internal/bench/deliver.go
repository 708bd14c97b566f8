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
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/notify"
	_ "github.com/lookout-dev/lookout/internal/notify/all" // the sink types the measurements configure
	"github.com/lookout-dev/lookout/internal/outbox"
	"github.com/lookout-dev/lookout/internal/signature"
)

// benchSecret signs the benchmark's webhooks (Standard Webhooks).
const benchSecret = "whsec_bG9va291dCBiZW5jaG1hcmsgc2VjcmV0LCAzMiBiISE="

// deliveryConcurrency is the benchmark sink's concurrency, and the number
// of goroutines of the bare POST loop measured against it.
const deliveryConcurrency = 8

// Receiver is a local webhook receiver that verifies every Standard
// Webhooks signature (and that the webhook-id is the body's dedupe key),
// counting what it accepted and rejected.
type Receiver struct {
	// URL is where to POST.
	URL      string
	srv      *httptest.Server
	got, bad atomic.Int64
}

// NewReceiver starts a receiver; Close stops it.
func NewReceiver() *Receiver {
	r := &Receiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, err := notify.VerifyRequest(req, benchSecret, 5*time.Minute)
		// A webhook sink sends the stored jsonb's text ("key": "value"),
		// the bare loop encoding/json's ("key":"value"): one scan for both.
		id := req.Header.Get(notify.HeaderWebhookID)
		_, after, found := strings.Cut(string(body), `"dedupe_key":`)
		if err == nil && (!found || !strings.HasPrefix(strings.TrimPrefix(after, " "), `"`+id+`"`)) {
			err = fmt.Errorf("webhook-id %q is not the body's dedupe key", req.Header.Get(notify.HeaderWebhookID))
		}
		if err != nil {
			r.bad.Add(1)
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		r.got.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	r.URL = r.srv.URL + "/hook"
	return r
}

// Close stops the receiver.
func (r *Receiver) Close() { r.srv.Close() }

// counts returns what was accepted and rejected since the last call, and
// starts counting again.
func (r *Receiver) counts() (got, bad int64) { return r.got.Swap(0), r.bad.Swap(0) }

// benchPayload is the payload of the benchmark's notification i (run
// names the keys, so that runs in one schema do not collide).
func benchPayload(run string, i int, now time.Time) (string, notify.Payload) {
	key := fmt.Sprintf("bench/%sr%d/w/v1", run, i)
	return key, notify.Payload{DedupeKey: key, Kind: notify.KindSingle, Watch: "w", Source: "bench",
		Title: fmt.Sprintf("Record %d", i), Record: notify.PayloadRecord{ID: fmt.Sprint(i), URL: "https://example.com/" + fmt.Sprint(i)},
		Change:  notify.PayloadChange{ID: int64(i), Kind: "created", Version: 1, ChangedFields: []string{"title"}},
		Urgency: "medium", Reason: "benchmark", CreatedAt: now}
}

// RunDeliveries puts n pending notifications in the outbox and measures
// how long one deliverer takes to send them all to a local webhook
// receiver that verifies every Standard Webhooks signature (and that the
// webhook-id is the dedupe key), as configured sinks are built.
func RunDeliveries(ctx context.Context, pool *pgxpool.Pool, n int) (time.Duration, error) {
	r := NewReceiver()
	defer r.Close()
	return DeliverTo(ctx, pool, r, "", n)
}

// deliveryPairs is how many runs of each side (5) alternates: five (each
// a few tenths of a second), so that a slower moment of the host during
// two of them moves neither median.
const deliveryPairs = 5

// DeliveriesAgainstBare measures (5): n deliveries through the outbox and,
// as its baseline, n bare signed POSTs to the same receiver (BarePosts),
// alternated deliveryPairs times; it returns the median time of each.
func DeliveriesAgainstBare(ctx context.Context, pool *pgxpool.Pool, n int) (outboxTime, bareTime time.Duration, err error) {
	r := NewReceiver()
	defer r.Close()
	var viaOutbox, bare []time.Duration
	for i := range deliveryPairs {
		took, err := DeliverTo(ctx, pool, r, fmt.Sprintf("p%d", i), n)
		if err != nil {
			return 0, 0, fmt.Errorf("deliveries, run %d: %w", i+1, err)
		}
		viaOutbox = append(viaOutbox, took)
		if took, err = BarePosts(ctx, r, n); err != nil {
			return 0, 0, fmt.Errorf("bare POSTs, run %d: %w", i+1, err)
		}
		bare = append(bare, took)
	}
	slices.Sort(viaOutbox)
	slices.Sort(bare)
	return viaOutbox[len(viaOutbox)/2], bare[len(bare)/2], nil
}

// BarePosts is the baseline of (5): n signed POSTs of the same payloads,
// from as many goroutines as the sink's concurrency, over one keep-alive
// client, to r — what a deliverer costs without the outbox.
func BarePosts(ctx context.Context, r *Receiver, n int) (time.Duration, error) {
	key, err := notify.WebhookKey(benchSecret)
	if err != nil {
		return 0, err
	}
	signer := signature.NewSigner(key) // as the webhook sink signs
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = deliveryConcurrency
	client := &http.Client{Transport: t}
	defer t.CloseIdleConnections()
	now := time.Now().UTC()
	var next atomic.Int64
	errs := make(chan error, deliveryConcurrency)
	start := time.Now()
	var wg sync.WaitGroup
	for range deliveryConcurrency {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n || ctx.Err() != nil {
					return
				}
				id, p := benchPayload("bare", i, now)
				body := p.Marshal()
				req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.URL, bytes.NewReader(body))
				if err != nil {
					errs <- err
					return
				}
				ts := time.Now()
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set(notify.HeaderWebhookID, id)
				req.Header.Set(notify.HeaderWebhookTimestamp, strconv.FormatInt(ts.Unix(), 10))
				req.Header.Set(notify.HeaderWebhookSignature, signer.SignStandard(id, ts, body))
				resp, err := client.Do(req)
				if err != nil {
					errs <- err
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	close(errs)
	if err := <-errs; err != nil {
		return 0, fmt.Errorf("bare POST: %w", err)
	}
	if got, bad := r.counts(); got != int64(n) || bad != 0 {
		return 0, fmt.Errorf("bare POSTs: receiver accepted %d and rejected %d; want %d", got, bad, n)
	}
	return took, nil
}

// DeliverTo is RunDeliveries to the receiver r, its keys named by run
// (runs in one schema take different names); the outbox must hold no
// other pending rows.
func DeliverTo(ctx context.Context, pool *pgxpool.Pool, r *Receiver, run string, n int) (time.Duration, error) {
	return deliverTo(ctx, pool, r, run, n, nil)
}

// deliverTo is DeliverTo; a non-nil span is called as the timed part
// starts and the function it returns as it ends (the CI smoke reads the
// CPU time spent there).
func deliverTo(ctx context.Context, pool *pgxpool.Pool, r *Receiver, run string, n int, span func() func()) (time.Duration, error) {
	secret := benchSecret
	dir, err := os.MkdirTemp("", "lookout-bench-deliver-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	if err := os.MkdirAll(filepath.Join(dir, "sources"), 0o755); err != nil {
		return 0, err
	}
	global := fmt.Sprintf("sinks:\n  hook: {type: webhook, url: %q, secret: %q, concurrency: %d}\n", r.URL, secret, deliveryConcurrency)
	if err := os.WriteFile(filepath.Join(dir, "lookout.yaml"), []byte(global), 0o644); err != nil {
		return 0, err
	}
	cfg, err := config.Load(dir)
	if err != nil {
		return 0, err
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	sinks, err := notify.BuildSinks(&cfg.Global, logger)
	if err != nil {
		return 0, err
	}
	now := time.Now().UTC()
	rows := make([]outbox.Notification, n)
	for i := range n {
		key, p := benchPayload(run, i, now)
		rows[i] = outbox.Notification{DedupeKey: key, Sink: "hook", Source: "bench", RecordID: fmt.Sprint(i + 1), Watch: "w",
			Title: fmt.Sprintf("Record %d", i+1), Urgency: "medium", Reason: "benchmark", Payload: p.Marshal()}
	}
	if _, err := outbox.Enqueue(ctx, pool, rows); err != nil {
		return 0, fmt.Errorf("fill the outbox: %w", err)
	}
	// Statistics as autovacuum keeps them in use: without them the planner
	// takes the partition filled just now for an empty one, and sorts all
	// its pending rows at every claim rather than reading the due index.
	if _, err := pool.Exec(ctx, `ANALYZE notifications`); err != nil {
		return 0, fmt.Errorf("analyze the outbox: %w", err)
	}
	dconf := notify.DelivererConfigFrom(&cfg.Global)
	dconf.Owner = "bench"
	d := notify.NewDeliverer(pool, sinks, dconf, logger)
	var end func()
	if span != nil {
		end = span()
	}
	start := time.Now()
	_, err = d.DeliverDue(ctx)
	took := time.Since(start)
	if end != nil {
		end()
	}
	if err != nil {
		return 0, err
	}
	var delivered int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM notifications WHERE status = 'delivered' AND dedupe_key LIKE $1`,
		"bench/"+run+"r%").Scan(&delivered); err != nil {
		return 0, err
	}
	if got, bad := r.counts(); delivered != n || got != int64(n) || bad != 0 {
		return 0, fmt.Errorf("delivered %d rows, receiver accepted %d and rejected %d; want %d", delivered, got, bad, n)
	}
	return took, nil
}
