package notify

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestVerifyLegacySignature(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_800_000_000, 0)
	body := []byte(`{"dedupe_key":"a/b/c"}`)
	sig := SignLegacy("k", now, body)
	ts := strconv.FormatInt(now.Unix(), 10)
	if !strings.HasPrefix(sig, "sha256=") || len(sig) != len("sha256=")+64 {
		t.Fatalf("SignLegacy = %q, want sha256=<64 hex>", sig)
	}
	tests := []struct {
		name         string
		secret, sig  string
		ts           string
		body         []byte
		at           time.Time
		want         error
		wantAnyError bool
	}{
		{name: "valid", secret: "k", sig: sig, ts: ts, body: body, at: now},
		{name: "valid within tolerance", secret: "k", sig: sig, ts: ts, body: body, at: now.Add(4 * time.Minute)},
		{name: "one of several", secret: "k", sig: "sha256=00, " + sig, ts: ts, body: body, at: now},
		{name: "tampered body", secret: "k", sig: sig, ts: ts, body: []byte(`{"dedupe_key":"a/b/d"}`), at: now, want: ErrSignatureMismatch},
		{name: "wrong secret", secret: "other", sig: sig, ts: ts, body: body, at: now, want: ErrSignatureMismatch},
		{name: "timestamp changed", secret: "k", sig: sig, ts: strconv.FormatInt(now.Unix()+1, 10), body: body, at: now, want: ErrSignatureMismatch},
		{name: "replayed later", secret: "k", sig: sig, ts: ts, body: body, at: now.Add(6 * time.Minute), want: ErrSignatureExpired},
		{name: "from the future", secret: "k", sig: sig, ts: ts, body: body, at: now.Add(-6 * time.Minute), want: ErrSignatureExpired},
		{name: "no signature", secret: "k", sig: "", ts: ts, body: body, at: now, want: ErrSignatureMissing},
		{name: "no timestamp", secret: "k", sig: sig, ts: "", body: body, at: now, want: ErrSignatureMissing},
		{name: "garbage timestamp", secret: "k", sig: sig, ts: "yesterday", body: body, at: now, want: ErrSignatureMismatch},
		{name: "wrong scheme", secret: "k", sig: strings.Replace(sig, "sha256", "sha1", 1), ts: ts, body: body, at: now, want: ErrSignatureMismatch},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := verifyLegacyAt(tt.secret, tt.sig, tt.ts, tt.body, 0, tt.at)
			if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Errorf("verify = %v, want %v", err, tt.want)
			}
		})
	}
}

func testNotification() *Notification {
	return &Notification{ID: 7, DedupeKey: "src/r1/w/v2-abc", Sink: "s", Source: "src", RecordID: "r1", Watch: "w",
		Kind: KindSingle, Title: "[w] Disk <full> & failing", Body: "The disk is full.\n\nSecond paragraph.", Urgency: "high",
		Reason: "status changed", Attempt: 1, DeliveryID: "7-1-abc",
		Payload: Payload{NotificationID: 7, DedupeKey: "src/r1/w/v2-abc", Kind: KindSingle, Title: "[w] Disk <full> & failing",
			Record: PayloadRecord{ID: "r1", URL: "https://example.com/r1"}, Urgency: "high", Reason: "status changed"}}
}

func TestWebhookClassifiesAnswers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		code       int
		retryAfter string
		wantPerm   bool
		wantAfter  bool
		wantOK     bool
	}{
		{code: 200, wantOK: true},
		{code: 202, wantOK: true},
		{code: 301, wantPerm: true},
		{code: 400, wantPerm: true},
		{code: 401, wantPerm: true},
		{code: 410, wantPerm: true},
		{code: 408},
		{code: 429},
		{code: 429, retryAfter: "30", wantAfter: true},
		{code: 503, retryAfter: time.Now().Add(time.Hour).UTC().Format(http.TimeFormat), wantAfter: true},
		{code: 500},
		{code: 502, retryAfter: "soon"},
	}
	for _, tt := range tests {
		t.Run(strconv.Itoa(tt.code)+tt.retryAfter, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tt.retryAfter != "" {
					w.Header().Set("Retry-After", tt.retryAfter)
				}
				if tt.code == 301 {
					w.Header().Set("Location", "https://elsewhere.example/")
				}
				w.WriteHeader(tt.code)
				_, _ = io.WriteString(w, "answer body")
			}))
			defer srv.Close()
			s, err := NewWebhookSink(WebhookOptions{URL: srv.URL})
			if err != nil {
				t.Fatal(err)
			}
			defer s.client.CloseIdleConnections()
			err = s.Deliver(context.Background(), testNotification())
			var perm *PermanentError
			var ra *RetryAfterError
			switch {
			case tt.wantOK:
				if err != nil {
					t.Errorf("Deliver = %v, want success", err)
				}
			case tt.wantPerm:
				if !errors.As(err, &perm) {
					t.Errorf("Deliver = %v, want a permanent error", err)
				}
			case tt.wantAfter:
				if !errors.As(err, &ra) || ra.At.Before(time.Now().Add(20*time.Second)) {
					t.Errorf("Deliver = %v, want a retry-after error", err)
				}
			default:
				if err == nil || errors.As(err, &perm) || errors.As(err, &ra) {
					t.Errorf("Deliver = %v, want a plain retryable error", err)
				}
			}
			if err != nil && !tt.wantOK && !strings.Contains(err.Error(), strconv.Itoa(tt.code)) {
				t.Errorf("error %q does not name the status", err)
			}
		})
	}
}

func TestWebhookSendsConfiguredHeadersAndUnsignedWithoutSecret(t *testing.T) {
	t.Parallel()
	var got http.Header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got = r.Header.Clone() }))
	defer srv.Close()
	s, err := NewWebhookSink(WebhookOptions{URL: srv.URL, Headers: map[string]string{"Authorization": "Bearer t"}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.client.CloseIdleConnections()
	if err := s.Deliver(context.Background(), testNotification()); err != nil {
		t.Fatal(err)
	}
	if got.Get("Authorization") != "Bearer t" || got.Get(HeaderWebhookSignature) != "" || got.Get(HeaderWebhookTimestamp) == "" ||
		got.Get(HeaderWebhookID) != "src/r1/w/v2-abc" || got.Get(HeaderAttempt) != "1" || got.Get(HeaderNotification) != "7" {
		t.Errorf("headers = %v", got)
	}
}

func TestSlackMessage(t *testing.T) {
	t.Parallel()
	var msg SlackMessage
	var calls int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls++
		if calls == 2 { // Slack's answer for a deleted hook
			http.Error(w, "no_service", http.StatusNotFound)
			return
		}
		if r.Header.Get("Content-Type") != "application/json" {
			http.Error(w, "invalid_payload", http.StatusBadRequest)
			return
		}
		if err := json.NewDecoder(r.Body).Decode(&msg); err != nil {
			http.Error(w, "invalid_payload", http.StatusBadRequest)
			return
		}
		_, _ = io.WriteString(w, "ok")
	}))
	defer srv.Close()
	s, err := NewSlackSink(SlackOptions{URL: srv.URL + "/services/T/B/X"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.client.CloseIdleConnections()
	if err := s.Deliver(context.Background(), testNotification()); err != nil {
		t.Fatal(err)
	}
	if msg.Text != "[high] [w] Disk &lt;full&gt; &amp; failing" || len(msg.Blocks) != 3 {
		t.Fatalf("message = %+v", msg)
	}
	if got := msg.Blocks[0].Text.Text; got != "*<https://example.com/r1|[w] Disk &lt;full&gt; &amp; failing>*" {
		t.Errorf("title block = %q", got)
	}
	if got := msg.Blocks[1].Text.Text; !strings.Contains(got, "The disk is full.") {
		t.Errorf("body block = %q", got)
	}
	ctxLine := msg.Blocks[2].Elements[0].Text
	for _, want := range []string{"urgency *high*", "status changed", "src/w", "src/r1/w/v2-abc"} {
		if !strings.Contains(ctxLine, want) {
			t.Errorf("context line %q lacks %q", ctxLine, want)
		}
	}
	var perm *PermanentError
	if err := s.Deliver(context.Background(), testNotification()); !errors.As(err, &perm) {
		t.Errorf("a 404 no_service = %v, want permanent", err)
	}
}

// TestWebhookErrorHidesURL: a webhook or Slack URL is a credential; a
// transport error must not quote it (it ends up in logs and last_error).
func TestWebhookErrorHidesURL(t *testing.T) {
	t.Parallel()
	s, err := NewWebhookSink(WebhookOptions{URL: "http://127.0.0.1:1/services/T000/B000/SECRETTOKEN"})
	if err != nil {
		t.Fatal(err)
	}
	err = s.Deliver(context.Background(), &Notification{ID: 1, DedupeKey: "k", Sink: "hook", Attempt: 1,
		Payload: Payload{DedupeKey: "k", Kind: KindSingle}})
	if err == nil {
		t.Fatal("delivery to a closed port succeeded")
	}
	if strings.Contains(err.Error(), "SECRETTOKEN") || strings.Contains(err.Error(), "/services/") {
		t.Errorf("error quotes the secret URL: %v", err)
	}
}
