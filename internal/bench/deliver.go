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
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/notify"
	"github.com/lookout-dev/lookout/internal/outbox"
)

// RunDeliveries puts n pending notifications in the outbox and measures
// how long one deliverer takes to send them all to a local webhook
// receiver that verifies every Standard Webhooks signature (and that the
// webhook-id is the dedupe key), as configured sinks are built.
func RunDeliveries(ctx context.Context, pool *pgxpool.Pool, n int) (time.Duration, error) {
	const secret = "whsec_bG9va291dCBiZW5jaG1hcmsgc2VjcmV0LCAzMiBiISE="
	var got, bad atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := notify.VerifyRequest(r, secret, 5*time.Minute)
		if err == nil && !strings.Contains(string(body), `"dedupe_key":"`+r.Header.Get(notify.HeaderWebhookID)+`"`) {
			err = fmt.Errorf("webhook-id %q is not the body's dedupe key", r.Header.Get(notify.HeaderWebhookID))
		}
		if err != nil {
			bad.Add(1)
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		got.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()

	dir, err := os.MkdirTemp("", "lookout-bench-deliver-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	if err := os.MkdirAll(filepath.Join(dir, "sources"), 0o755); err != nil {
		return 0, err
	}
	global := fmt.Sprintf("sinks:\n  hook: {type: webhook, url: %q, secret: %q, concurrency: 8}\n", srv.URL+"/hook", secret)
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
		key := fmt.Sprintf("bench/r%d/w/v1", i)
		p := notify.Payload{DedupeKey: key, Kind: notify.KindSingle, Watch: "w", Source: "bench",
			Title: fmt.Sprintf("Record %d", i), Record: notify.PayloadRecord{ID: fmt.Sprint(i), URL: "https://example.com/" + fmt.Sprint(i)},
			Change:  notify.PayloadChange{ID: int64(i), Kind: "created", Version: 1, ChangedFields: []string{"title"}},
			Urgency: "medium", Reason: "benchmark", CreatedAt: now}
		rows[i] = outbox.Notification{DedupeKey: key, Sink: "hook", Source: "bench", RecordID: fmt.Sprint(i + 1), Watch: "w",
			Title: fmt.Sprintf("Record %d", i+1), Urgency: "medium", Reason: "benchmark", Payload: p.Marshal()}
	}
	if _, err := outbox.Enqueue(ctx, pool, rows); err != nil {
		return 0, fmt.Errorf("fill the outbox: %w", err)
	}
	dconf := notify.DelivererConfigFrom(&cfg.Global)
	dconf.Owner = "bench"
	d := notify.NewDeliverer(pool, sinks, dconf, logger)
	start := time.Now()
	if _, err := d.DeliverDue(ctx); err != nil {
		return 0, err
	}
	took := time.Since(start)
	var delivered int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM notifications WHERE status = 'delivered'`).Scan(&delivered); err != nil {
		return 0, err
	}
	if delivered != n || got.Load() != int64(n) || bad.Load() != 0 {
		return 0, fmt.Errorf("delivered %d rows, receiver accepted %d and rejected %d; want %d", delivered, got.Load(), bad.Load(), n)
	}
	return took, nil
}
