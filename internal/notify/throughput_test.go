package notify

import (
	"context"
	"testing"
	"time"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/pgtest"
)

// deliverAll delivers n fresh notifications to a local signed webhook and
// returns the time it took.
func deliverAll(tb testing.TB, n, concurrency int) (time.Duration, *receiver) {
	pool := pgtest.Pool(tb)
	rc := newReceiver(tb, "s3cret")
	insertNotifications(tb, pool, "hook", "k", n)
	d := newDeliverer(tb, pool, map[string]Sink{"hook": rc.sink(tb)},
		map[string]*config.Sink{"hook": sinkConf("webhook", 5*time.Second, 3, concurrency)}, DelivererConfig{BatchSize: 200})
	start := time.Now()
	got, err := d.DeliverDue(context.Background())
	took := time.Since(start)
	if err != nil {
		tb.Fatal(err)
	}
	if got != n || int(rc.total.Load()) != n {
		tb.Fatalf("attempted %d, receiver accepted %d; want %d", got, rc.total.Load(), n)
	}
	if c := countStatus(tb, pool, "hook", "delivered"); c != n {
		tb.Fatalf("%d rows delivered, want %d", c, n)
	}
	return took, rc
}

// TestWebhookThroughput delivers 2,000 notifications to a local webhook
// receiver that verifies every signature, and reports the rate.
func TestWebhookThroughput(t *testing.T) {
	t.Parallel()
	const n = 2000
	took, rc := deliverAll(t, n, 8)
	rc.check()
	t.Logf("webhook throughput: %d deliveries in %s = %.0f deliveries/s (claim batches of 200, 8 concurrent, signed, one UPDATE per outcome batch)",
		n, took.Round(time.Millisecond), float64(n)/took.Seconds())
}

// BenchmarkWebhookDelivery measures deliveries per second to a local
// webhook: go test ./internal/notify -run '^$' -bench WebhookDelivery -benchtime 5000x
func BenchmarkWebhookDelivery(b *testing.B) {
	took, _ := deliverAll(b, b.N, 8)
	b.ReportMetric(float64(b.N)/took.Seconds(), "deliveries/s")
}
