package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Outcomes of lookout_webhook_deliveries_total.
const (
	DeliveryStored        = "stored"         // a new event to process
	DeliveryIgnored       = "ignored"        // stored as ignored (ping, a type the source does not map)
	DeliveryDuplicate     = "duplicate"      // a delivery id already stored: nothing new
	DeliveryRejected      = "rejected"       // bad or missing signature (401), stored without payload
	DeliveryMalformed     = "malformed"      // signed, but not a JSON object, or headers missing (400)
	DeliveryTooLarge      = "too_large"      // body over webhook.max_body (413)
	DeliveryUnknownSource = "unknown_source" // no such source, or no webhook block (404)
	DeliveryError         = "error"          // the event could not be stored (503)
)

// webhooks are the instruments of the webhook ingest and its processing.
type webhooks struct {
	deliveries *prometheus.CounterVec
	ingestTime prometheus.Histogram
	processed  *prometheus.CounterVec
	repaired   prometheus.Counter
}

func (m *Metrics) initWebhooks(counter func(name, help string, labels ...string) *prometheus.CounterVec) {
	m.hooks.deliveries = counter("lookout_webhook_deliveries_total",
		"Webhook deliveries to /ingest/{source}, by outcome: stored, ignored, duplicate, rejected, malformed, too_large, unknown_source, error.", "outcome")
	m.hooks.ingestTime = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "lookout_webhook_ingest_duration_seconds",
		Help: "Time from a delivery's arrival to its answer (the event committed).", Buckets: deliverBuckets})
	m.reg.MustRegister(m.hooks.ingestTime)
	m.hooks.processed = counter("lookout_webhook_events_processed_total",
		"Stored webhook events the syncer processed, by outcome: created, updated, unchanged, deleted, stale, ignored, failed.", "outcome")
	m.hooks.repaired = prometheus.NewCounter(prometheus.CounterOpts{Name: "lookout_webhook_repaired_total",
		Help: "Changes reconciliation polls of webhook sources wrote: what no event brought."})
	m.reg.MustRegister(m.hooks.repaired)
}

// WebhookDelivery counts a delivery answered by the ingest and observes
// how long it took (which source: inbound_events, report_webhook_health).
func (m *Metrics) WebhookDelivery(outcome string, d time.Duration) {
	if m == nil {
		return
	}
	m.hooks.deliveries.WithLabelValues(outcome).Inc()
	m.hooks.ingestTime.Observe(d.Seconds())
}

// WebhookProcessed counts events the syncer finished, by outcome.
func (m *Metrics) WebhookProcessed(outcome string, n int) {
	if m == nil || n == 0 {
		return
	}
	m.hooks.processed.WithLabelValues(outcome).Add(float64(n))
}

// WebhookRepaired counts changes a reconciliation poll wrote (per source:
// sync_runs.repaired, report_webhook_health).
func (m *Metrics) WebhookRepaired(n int) {
	if m == nil || n == 0 {
		return
	}
	m.hooks.repaired.Add(float64(n))
}
