package notify

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"go.uber.org/goleak"

	"github.com/lookout-dev/lookout/internal/config"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(runChildDeliverer())
	}
	goleak.VerifyTestMain(m,
		// pgx pools close their health-check goroutine asynchronously.
		goleak.IgnoreAnyFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"),
		goleak.IgnoreAnyFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).triggerHealthCheck.func1"),
	)
}

// testLogger logs to the test output at warn level (debug with -v is noisy).
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(string(p))
	return len(p), nil
}

// sinkConf is a sink configuration with the defaults config.Load applies.
func sinkConf(typ string, timeout time.Duration, maxAttempts, concurrency int) *config.Sink {
	return &config.Sink{Type: typ, Timeout: timeout, MaxAttempts: maxAttempts, Concurrency: concurrency}
}

// newDeliverer returns a deliverer with quick retries for tests.
func newDeliverer(t testing.TB, pool *pgxpool.Pool, sinks map[string]Sink, cfgs map[string]*config.Sink, conf DelivererConfig) *Deliverer {
	t.Helper()
	if conf.Owner == "" {
		conf.Owner = "test-" + t.Name()
	}
	conf.RetryMin = cmpOr(conf.RetryMin, 10*time.Millisecond)
	conf.RetryMax = cmpOr(conf.RetryMax, 50*time.Millisecond)
	conf.PollInterval = cmpOr(conf.PollInterval, 20*time.Millisecond)
	conf.Lease = cmpOr(conf.Lease, 30*time.Second)
	conf.BatchSize = cmpOr(conf.BatchSize, config.DeliveryBatchDefault)
	conf.Sinks = cfgs
	return NewDeliverer(pool, sinks, conf, testLogger(t))
}

func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// insertNotifications writes n pending notifications of source src for
// sink, with dedupe keys <prefix>/r<i>, and returns the keys.
func insertNotifications(t testing.TB, pool *pgxpool.Pool, sink, prefix string, n int) []string {
	t.Helper()
	return insertNotificationsOf(t, pool, "src", sink, prefix, n)
}

// insertNotificationsOf is insertNotifications for source (a row's source
// is its distribution key on Citus, which an UPDATE cannot change).
func insertNotificationsOf(t testing.TB, pool *pgxpool.Pool, source, sink, prefix string, n int) []string {
	t.Helper()
	keys := make([]string, n)
	payloads := make([]string, n)
	records := make([]string, n)
	titles := make([]string, n)
	for i := range n {
		keys[i] = fmt.Sprintf("%s/r%d", prefix, i)
		records[i] = fmt.Sprintf("r%d", i)
		titles[i] = fmt.Sprintf("Record %d", i)
		p := Payload{DedupeKey: keys[i], Kind: KindSingle, Watch: "w", Source: source, Title: titles[i], Body: "body",
			Record:  PayloadRecord{ID: records[i], Title: titles[i], URL: "https://example.com/" + records[i]},
			Change:  PayloadChange{ID: int64(i), Kind: "created", Version: 1, ChangedFields: []string{}},
			Urgency: "medium", Reason: "test", CreatedAt: time.Now().UTC()}
		payloads[i] = string(p.Marshal())
	}
	_, err := pool.Exec(context.Background(), `
		INSERT INTO notifications (dedupe_key, sink, source, record_id, watch, title, body, urgency, reason, payload)
		SELECT u.key, $1, $6, u.rec, 'w', u.title, 'body', 'medium', 'test', u.payload::jsonb
		FROM unnest($2::text[], $3::text[], $4::text[], $5::text[]) AS u(key, rec, title, payload)`,
		sink, keys, records, titles, payloads, source)
	if err != nil {
		t.Fatalf("insert notifications: %v", err)
	}
	return keys
}

// countStatus returns the number of rows of sink in status.
func countStatus(t testing.TB, pool *pgxpool.Pool, sink, status string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM notifications WHERE sink = $1 AND status = $2`, sink, status).Scan(&n); err != nil {
		t.Fatalf("count notifications: %v", err)
	}
	return n
}

// receiver is a webhook endpoint that verifies every request the way a
// real receiver would (signature, timestamp, headers) and records the
// accepted deliveries per idempotency key.
type receiver struct {
	t      testing.TB
	secret string
	wh     *standardwebhooks.Webhook
	srv    *httptest.Server

	// behave, when set, may answer a request itself (return true); n is
	// the number of requests seen for the key, 1 on the first.
	behave func(w http.ResponseWriter, r *http.Request, key string, n int) bool

	mu        sync.Mutex
	requests  map[string]int      // every request per key
	accepted  map[string]int      // 2xx answers per key
	bodies    map[string][32]byte // body hash per key: a repeat must be identical
	deliverys map[string]bool
	problems  []string
	firstAt   map[string]time.Time
	lastAt    map[string]time.Time
	total     atomic.Int64 // accepted deliveries
}

// newReceiver starts a receiver; the sink's secret is "whsec_" and the
// base64 of key, and the receiver verifies every request with the Standard
// Webhooks Go library, as a user's receiver would.
func newReceiver(t testing.TB, key string) *receiver {
	secret := SecretPrefix + base64.StdEncoding.EncodeToString([]byte(key))
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	r := &receiver{t: t, secret: secret, wh: wh, requests: map[string]int{}, accepted: map[string]int{},
		bodies: map[string][32]byte{}, deliverys: map[string]bool{}, firstAt: map[string]time.Time{}, lastAt: map[string]time.Time{}}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

func (rc *receiver) problem(format string, args ...any) {
	rc.mu.Lock()
	rc.problems = append(rc.problems, fmt.Sprintf(format, args...))
	rc.mu.Unlock()
}

func (rc *receiver) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err == nil {
		err = rc.wh.Verify(body, r.Header)
	}
	if err != nil {
		rc.problem("signature: %v", err)
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return
	}
	key := r.Header.Get(HeaderWebhookID)
	var p Payload
	if err := json.Unmarshal(body, &p); err != nil {
		rc.problem("body: %v", err)
		http.Error(w, "bad body", http.StatusBadRequest)
		return
	}
	if key == "" || key != p.DedupeKey || r.Header.Get(HeaderIdempotencyKey) != "" {
		rc.problem("webhook-id %q, payload %q, legacy Idempotency-Key %q", key, p.DedupeKey, r.Header.Get(HeaderIdempotencyKey))
	}
	if r.Header.Get("Content-Type") != "application/json" || r.Method != http.MethodPost {
		rc.problem("%s with content type %q", r.Method, r.Header.Get("Content-Type"))
	}
	sum := sha256.Sum256(body)
	rc.mu.Lock()
	did := r.Header.Get(HeaderDelivery)
	if did == "" || rc.deliverys[did] {
		rc.problems = append(rc.problems, fmt.Sprintf("delivery id %q missing or reused", did))
	}
	rc.deliverys[did] = true
	rc.requests[key]++
	n := rc.requests[key]
	if prev, ok := rc.bodies[key]; ok && prev != sum {
		rc.problems = append(rc.problems, fmt.Sprintf("key %s: a repeat carried a different body", key))
	}
	rc.bodies[key] = sum
	rc.mu.Unlock()
	if rc.behave != nil && rc.behave(w, r, key, n) {
		return
	}
	rc.mu.Lock()
	rc.accepted[key]++
	now := time.Now()
	if _, ok := rc.firstAt[key]; !ok {
		rc.firstAt[key] = now
	}
	rc.lastAt[key] = now
	rc.mu.Unlock()
	rc.total.Add(1)
	w.WriteHeader(http.StatusNoContent)
}

// check fails the test on any protocol problem the receiver noticed.
func (rc *receiver) check() {
	rc.t.Helper()
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for _, p := range rc.problems {
		rc.t.Errorf("receiver: %s", p)
	}
}

// duplicates is the number of accepted deliveries beyond the first per key.
func (rc *receiver) duplicates() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	d := 0
	for _, n := range rc.accepted {
		d += n - 1
	}
	return d
}

// missing returns the keys never accepted.
func (rc *receiver) missing(keys []string) []string {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	var out []string
	for _, k := range keys {
		if rc.accepted[k] == 0 {
			out = append(out, k)
		}
	}
	return out
}

func (rc *receiver) sink(t testing.TB) *WebhookSink {
	t.Helper()
	s, err := NewWebhookSink(WebhookOptions{URL: rc.srv.URL + "/hook", Secret: rc.secret, Concurrency: 16})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.client.CloseIdleConnections)
	return s
}
