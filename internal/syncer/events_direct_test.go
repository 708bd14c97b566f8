package syncer

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/lookout-dev/lookout/internal/connectors"
	"github.com/lookout-dev/lookout/internal/definitions"
	"github.com/lookout-dev/lookout/internal/inbound"
	"github.com/lookout-dev/lookout/internal/ingest"
	"github.com/lookout-dev/lookout/internal/normalize"
	"github.com/lookout-dev/lookout/internal/pgtest"
	"github.com/lookout-dev/lookout/internal/signature"
	"github.com/lookout-dev/lookout/internal/testsignal"
)

// hookWorld is a webhook source of a generic provider (hmac) whose
// connector maps no event itself (the payload's data is the item), the
// api's ingest in front of the test's schema, and the syncer with its
// events processor.
type hookWorld struct {
	*harness
	ingest *httptest.Server
	s      *Syncer
	events *Events
}

func newHookWorld(t *testing.T, conf EventsConfig) *hookWorld {
	t.Helper()
	h := newHarness(t)
	never := func(ctx context.Context, env connectors.Env, cursor json.RawMessage, emit connectors.EmitFunc) (connectors.Result, error) {
		return connectors.Result{Complete: true}, nil
	}
	cfg := loadConfig(t, fastLimits, map[string]string{"hooks": `webhook: {provider: hmac, secret: "` + hookSecret + `", id_header: X-Delivery}
`}, map[string]fetchFunc{"hooks": never})
	if _, err := definitions.Apply(context.Background(), h.pool, cfg, definitions.ApplyOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(ingest.Pattern, ingest.New(h.pool, ingest.Config{}, slog.New(slog.DiscardHandler)).Handler())
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	s := h.syncer(cfg, Config{})
	return &hookWorld{harness: h, ingest: srv, s: s, events: s.Events(conf)}
}

// deliver POSTs a signed item.updated delivery of item, with delivery id id.
func (w *hookWorld) deliver(id string, item map[string]any) {
	w.t.Helper()
	body, err := json.Marshal(map[string]any{"type": "item.updated", "timestamp": "2026-02-01T12:00:00Z", "data": item})
	if err != nil {
		w.t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, w.ingest.URL+"/ingest/hooks", bytes.NewReader(body))
	if err != nil {
		w.t.Fatal(err)
	}
	req.Header.Set("X-Delivery", id)
	req.Header.Set("X-Signature-256", signature.SignHex([]byte(hookSecret), body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		w.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusAccepted {
		w.t.Fatalf("delivery %s answered %d: %s", id, resp.StatusCode, data)
	}
}

func (w *hookWorld) event(id string) *inbound.Event {
	w.t.Helper()
	e, err := inbound.Get(context.Background(), w.pool, "hooks", id)
	if err != nil || e == nil {
		w.t.Fatalf("event %s: %v, %v", id, e, err)
	}
	return e
}

func (w *hookWorld) title(id string) string {
	w.t.Helper()
	var title string
	if err := w.pool.QueryRow(context.Background(), `SELECT coalesce(title, '') FROM records WHERE source = 'hooks' AND record_id = $1`,
		id).Scan(&title); err != nil {
		w.t.Fatalf("record %s: %v", id, err)
	}
	return title
}

func (w *hookWorld) drain() int {
	w.t.Helper()
	n, err := w.events.Drain(context.Background())
	if err != nil {
		w.t.Fatalf("drain events: %v", err)
	}
	return n
}

func item(id, title string, updated time.Time) map[string]any {
	return map[string]any{"id": id, "title": title, "updated_at": updated.UTC().Format(time.RFC3339)}
}

// Events whose payload is the item are claimed by their row locks in the
// transaction that writes them: mirrored with the outcomes of the leased
// path, and no lease (no attempt) written for them.
func TestWebhookEventsWithoutUpstreamRequestNeedNoLease(t *testing.T) {
	t.Parallel()
	w := newHookWorld(t, EventsConfig{})
	t0 := time.Date(2026, 2, 1, 12, 0, 0, 0, time.UTC)
	w.deliver("d1", item("a1", "first", t0))
	w.deliver("d2", item("a2", "second", t0))
	w.deliver("d3", item("a1", "first, edited", t0.Add(time.Minute)))
	w.deliver("d4", map[string]any{"title": "no id"})
	if n := w.drain(); n != 4 {
		t.Errorf("drain finished %d events, want 4", n)
	}
	want := map[string]string{"d1": inbound.OutcomeStale, "d2": inbound.OutcomeCreated, "d3": inbound.OutcomeCreated, "d4": inbound.OutcomeFailed}
	for id, outcome := range want {
		e := w.event(id)
		if e.Outcome != outcome || e.ProcessedAt == nil {
			t.Errorf("event %s: outcome %q (processed %v), want %q", id, e.Outcome, e.ProcessedAt, outcome)
		}
		if e.Attempts != 0 {
			t.Errorf("event %s: %d attempts: it was leased", id, e.Attempts)
		}
	}
	if got := w.title("a1"); got != "first, edited" {
		t.Errorf("record a1: %q, want the newer event's title", got)
	}
	if e := w.event("d4"); !strings.Contains(e.Detail, "id") {
		t.Errorf("the refused event says %q, not why", e.Detail)
	}
	w.deliver("d5", item("a2", "second, edited", t0.Add(time.Minute)))
	w.drain()
	if e := w.event("d5"); e.Outcome != inbound.OutcomeUpdated || e.Attempts != 0 {
		t.Errorf("event d5: %q, %d attempts", e.Outcome, e.Attempts)
	}
	if n := w.count(`SELECT count(*) FROM changes WHERE source = 'hooks'`); n != 3 {
		t.Errorf("%d changes, want 3 (a1 created, a2 created and updated)", n)
	}
	if n, err := inbound.Pending(context.Background(), w.pool, "hooks"); err != nil || n != 0 {
		t.Errorf("%d events pending (%v)", n, err)
	}
}

// The processor mirrors an event on the ingest's NOTIFY, not on its
// catch-up tick (an hour here).
func TestWebhookEventMirroredOnItsNotify(t *testing.T) {
	t.Parallel()
	w := newHookWorld(t, EventsConfig{CatchUp: time.Hour})
	if err := w.events.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.events.Stop() })
	testsignal.Eventually(t, "the events processor listening", w.events.Listening)
	// The first wake-up (LISTEN) found nothing; this delivery's NOTIFY is
	// the only one left.
	w.deliver("d1", item("a1", "live", time.Now()))
	testsignal.Eventually(t, "the event mirrored", func() bool { return w.event("d1").ProcessedAt != nil })
	if got := w.title("a1"); got != "live" {
		t.Errorf("record a1: %q", got)
	}
	if err := w.events.Stop(); err != nil {
		t.Fatal(err)
	}
}

// When the transaction that claims and writes events fails, the events
// take the leased path: an attempt counted, the error kept, a retry with
// backoff; once the cause is gone they are mirrored.
func TestWebhookEventsFailedTransactionRetriesWithLease(t *testing.T) {
	t.Parallel()
	w := newHookWorld(t, EventsConfig{})
	pgtest.SkipOnCitus(t, w.pool, "the test makes a batch fail with a trigger on records, and Citus refuses triggers on distributed tables")
	w.exec(`CREATE FUNCTION refuse_bad() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN IF NEW.record_id = 'bad' THEN RAISE EXCEPTION 'record bad refused by the test'; END IF; RETURN NEW; END $$`)
	w.exec(`CREATE TRIGGER refuse_bad BEFORE INSERT ON records FOR EACH ROW EXECUTE FUNCTION refuse_bad()`)
	w.deliver("d1", item("bad", "refused", time.Now()))
	if n := w.drain(); n != 0 {
		t.Errorf("drain finished %d events, want 0", n)
	}
	e := w.event("d1")
	if e.ProcessedAt != nil || e.Attempts != 1 || !strings.Contains(e.Detail, "refused by the test") {
		t.Fatalf("event after a failed write: processed %v, %d attempts, detail %q; want pending, 1 attempt, the error", e.ProcessedAt, e.Attempts, e.Detail)
	}
	if n := w.count(`SELECT count(*) FROM inbound_events WHERE delivery_id = 'd1' AND claim_expires_at > now()`); n != 1 {
		t.Errorf("the event is not held back for its retry")
	}
	if !strings.Contains(w.logs.String(), "retrying them with a lease") {
		t.Errorf("no warning of the fallback in the log:\n%s", w.logs.String())
	}
	if n := w.drain(); n != 0 {
		t.Errorf("a drain before the retry time finished %d events", n)
	}

	w.exec(`DROP TRIGGER refuse_bad ON records`)
	w.exec(`UPDATE inbound_events SET claim_expires_at = now() - interval '1 second' WHERE delivery_id = 'd1'`)
	if n := w.drain(); n != 1 {
		t.Errorf("drain after the fix finished %d events, want 1", n)
	}
	if e := w.event("d1"); e.Outcome != inbound.OutcomeCreated {
		t.Errorf("event after the fix: %q %q", e.Outcome, e.Detail)
	}
}

func (w *hookWorld) count(sql string) int {
	w.t.Helper()
	var n int
	if err := w.pool.QueryRow(context.Background(), sql).Scan(&n); err != nil {
		w.t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// panickyMapper is the hooks source's connector made an EventMapper that
// panics on the item whose id is "boom", as a connector's bug would.
type panickyMapper struct{ connectors.Connector }

func (panickyMapper) FetchKey(connectors.Event) string { return "" }

func (panickyMapper) MapEvent(_ context.Context, ev connectors.Event) (connectors.EventResult, error) {
	data, _ := ev.Payload["data"].(map[string]any)
	if data["id"] == "boom" {
		var seen map[string]bool
		seen["boom"] = true // a write to a nil map
	}
	return connectors.EventResult{Items: []connectors.Item{{Value: data, Raw: normalize.Canonical(data), Loc: "event " + ev.DeliveryID}}}, nil
}

// An event whose mapping panics fails, with the panic in its detail and
// in the log with its stack; the events beside it are mirrored and the
// processor goes on. Before, the panic stopped the syncer, which claimed
// the event again at its next start.
func TestWebhookEventWhoseMappingPanicsFails(t *testing.T) {
	t.Parallel()
	w := newHookWorld(t, EventsConfig{})
	src := w.s.source("hooks")
	src.conn = panickyMapper{src.conn}
	t0 := time.Date(2026, 2, 1, 12, 0, 0, 0, time.UTC)
	w.deliver("d1", item("boom", "panics", t0))
	w.deliver("d2", item("a2", "fine", t0))
	if n := w.drain(); n != 2 {
		t.Errorf("drain finished %d events, want 2", n)
	}
	if e := w.event("d1"); e.Outcome != inbound.OutcomeFailed || !strings.Contains(e.Detail, "the connector panicked") {
		t.Errorf("event d1: %q %q, want failed with the panic", e.Outcome, e.Detail)
	}
	if e := w.event("d2"); e.Outcome != inbound.OutcomeCreated {
		t.Errorf("event d2: %q %q, want created", e.Outcome, e.Detail)
	}
	if got := w.title("a2"); got != "fine" {
		t.Errorf("record a2: %q", got)
	}
}
