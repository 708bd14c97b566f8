package notify

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/outbox"
	"github.com/lookout-dev/lookout/internal/pgtest"
)

func TestStoredBody(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, raw, want string // want "" means not in the expected shape
	}{
		{"kind first", `{"kind": "single", "title": "t", "notification_id": 0}`, `{"kind": "single", "title": "t", "notification_id": 42}`},
		{"body first", `{"body": "say \"hi\" \\", "kind": "digest", "notification_id": 0}`, `{"body": "say \"hi\" \\", "kind": "digest", "notification_id": 42}`},
		{"an id already set", `{"kind": "alert", "notification_id": 7}`, `{"kind": "alert", "notification_id": 42}`},
		{"empty kind", `{"kind": "", "notification_id": 0}`, ""},
		{"no kind", `{"title": "t", "notification_id": 0}`, ""},
		{"kind not a string", `{"kind": null, "notification_id": 0}`, ""},
		{"a key before kind", `{"ab": 1, "kind": "single", "notification_id": 0}`, ""},
		{"body never closed", `{"body": "x\", "notification_id": 0}`, ""},
		{"no notification_id", `{"kind": "single", "title": "t"}`, ""},
		{"a nested notification_id last", `{"kind": "single", "x": {"notification_id": 0}}`, ""},
		{"a key after notification_id", `{"kind": "single", "notification_id": 0, "notification_idx": 1}`, ""},
		{"notification_id not a number", `{"kind": "single", "notification_id": "0"}`, ""},
		{"empty", ``, ""},
	}
	for _, tt := range tests {
		got, ok := storedBody(42, []byte(tt.raw))
		if string(got) != tt.want || ok != (tt.want != "") {
			t.Errorf("%s: storedBody(%s) = %s, %v; want %s", tt.name, tt.raw, got, ok, tt.want)
		}
	}
}

// TestWebhookSendsTheStoredPayload checks that a webhook sink sends the
// stored payload's text as PostgreSQL writes the jsonb, notification_id
// set, without decoding and encoding it again at every claim; that a
// payload not in that shape (an empty kind) is sent as before, decoded
// (kind single) and encoded; and that a receiver parses every body to the
// document the decoded payload is.
func TestWebhookSendsTheStoredPayload(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	at := time.Date(2026, 6, 19, 1, 2, 5, 0, time.UTC)
	conf := 0.82
	payloads := map[string]Payload{
		"single": {DedupeKey: "single", Kind: KindSingle, Watch: "w", Source: "src", Title: `Disk <full> & "failing" \ ünïcode`,
			Body: "line\nline \u2028 \\\" end\\", Record: PayloadRecord{ID: "r1", URL: "https://example.com/r1?a=1&b=2",
				Labels: []string{"bug", "p1"}, Extra: map[string]any{"comments": 4, "big": uint64(12345678901234567890)}},
			Change: PayloadChange{ID: 9, Kind: "updated", Version: 3, ChangedFields: []string{"labels"}}, Urgency: "high",
			Reason: "why", Confidence: &conf, CreatedAt: at},
		"no body": {DedupeKey: "no body", Kind: KindSingle, Watch: "w", Source: "src", Title: "t", CreatedAt: at},
		"digest": {DedupeKey: "digest", Kind: KindDigest, Watch: "w", Source: "src", Title: "2 new", Body: "two", CreatedAt: at,
			Digest: &PayloadDigest{Count: 2, DueAt: at, Items: []PayloadDigestItem{{NotificationID: 1, DedupeKey: "a", Title: "a", CreatedAt: at}}}},
		"alert": {DedupeKey: "alert", Kind: KindAlert, Watch: "w", Source: "src", Title: "stale", CreatedAt: at,
			Alert: &PayloadAlert{Type: "stale", Subject: "src", Details: map[string]any{"last_error": "x", "failure_count": 3}}},
		"empty kind": {DedupeKey: "empty kind", Watch: "w", Source: "src", Title: "old row", CreatedAt: at},
	}
	var rows []outbox.Notification
	for key, p := range payloads {
		rows = append(rows, outbox.Notification{DedupeKey: key, Sink: "hook", Source: "src", RecordID: "r1", Watch: "w",
			Title: p.Title, Body: p.Body, Urgency: "high", Reason: "why", Payload: p.Marshal()})
	}
	if _, err := outbox.Enqueue(ctx, pool, rows); err != nil {
		t.Fatal(err)
	}

	secret := SecretPrefix + base64.StdEncoding.EncodeToString([]byte("stored body"))
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	bodies := map[string]string{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err == nil {
			err = wh.Verify(body, r.Header)
		}
		if err != nil {
			t.Errorf("receiver: %v", err)
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		mu.Lock()
		bodies[r.Header.Get(HeaderWebhookID)] = string(body)
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	sink, err := NewWebhookSink(WebhookOptions{URL: srv.URL, Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	defer sink.client.CloseIdleConnections()
	d := newDeliverer(t, pool, map[string]Sink{"hook": sink}, map[string]*config.Sink{"hook": sinkConf("webhook", 5*time.Second, 3, 2)}, DelivererConfig{})
	if n, err := d.DeliverDue(ctx); n != len(payloads) || err != nil {
		t.Fatalf("DeliverDue = %d, %v; want %d, nil", n, err, len(payloads))
	}

	for key := range payloads {
		var id int64
		var stored, text string
		if err := pool.QueryRow(ctx, `SELECT id, payload::text, jsonb_set(payload, '{notification_id}', to_jsonb(id))::text
			FROM notifications WHERE dedupe_key = $1`, key).Scan(&id, &stored, &text); err != nil {
			t.Fatal(err)
		}
		decoded, err := decodePayload(id, []byte(stored))
		if err != nil {
			t.Fatal(err)
		}
		want := text
		if key == "empty kind" {
			want = string(decoded.Marshal())
		}
		got := bodies[key]
		if got != want {
			t.Errorf("%s: body\n%s\nwant\n%s", key, got, want)
		}
		var gotDoc, wantDoc any
		if err := json.Unmarshal([]byte(got), &gotDoc); err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		if err := json.Unmarshal(decoded.Marshal(), &wantDoc); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(gotDoc, wantDoc) {
			t.Errorf("%s: body parses to\n%v\nwant the decoded payload's\n%v", key, gotDoc, wantDoc)
		}
	}
}

// payloadCapture records what each delivery handed it: the body and the
// decoded payload's title.
type payloadCapture struct {
	mu     sync.Mutex
	bodies map[string]string
	titles map[string]string
}

func (c *payloadCapture) Deliver(_ context.Context, n *Notification) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.bodies[n.DedupeKey] = string(n.JSON())
	c.titles[n.DedupeKey] = n.Payload.Title
	return nil
}

// bodyOnlyCapture is a payloadCapture that reads only the body, as the
// webhook sinks do.
type bodyOnlyCapture struct{ payloadCapture }

func (*bodyOnlyCapture) sendsStoredBody() {}

// TestBodyOnlyLanesDoNotDecode checks that a lane whose sink reads only
// the body (the webhook sinks) leaves the payload undecoded, while a sink
// that reads Payload gets it decoded, and that both send the same bytes.
func TestBodyOnlyLanesDoNotDecode(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	insertNotifications(t, pool, "raw", "k", 3)
	insertNotifications(t, pool, "decoded", "k", 3)
	raw := &bodyOnlyCapture{payloadCapture{bodies: map[string]string{}, titles: map[string]string{}}}
	decoded := &payloadCapture{bodies: map[string]string{}, titles: map[string]string{}}
	d := newDeliverer(t, pool, map[string]Sink{"raw": raw, "decoded": decoded},
		map[string]*config.Sink{"raw": sinkConf("webhook", 5*time.Second, 3, 1), "decoded": sinkConf("command", 5*time.Second, 3, 1)},
		DelivererConfig{})
	if n, err := d.DeliverDue(context.Background()); n != 6 || err != nil {
		t.Fatalf("DeliverDue = %d, %v; want 6, nil", n, err)
	}
	for i := range 3 {
		key := "k/r" + strconv.Itoa(i)
		if raw.titles[key] != "" || decoded.titles[key] != "Record "+strconv.Itoa(i) {
			t.Errorf("%s: decoded titles %q (body-only sink) and %q; want none and %q", key, raw.titles[key], decoded.titles[key], "Record "+strconv.Itoa(i))
		}
		// Both send the stored text, each with its own row's id.
		for sink, body := range map[string]string{"raw": raw.bodies[key], "decoded": decoded.bodies[key]} {
			var want string
			if err := pool.QueryRow(context.Background(), `SELECT jsonb_set(payload, '{notification_id}', to_jsonb(id))::text
				FROM notifications WHERE sink = $1 AND dedupe_key = $2`, sink, key).Scan(&want); err != nil {
				t.Fatal(err)
			}
			if body != want {
				t.Errorf("%s of %s: body\n%s\nwant the stored text\n%s", key, sink, body, want)
			}
		}
	}
}
