package notify

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// The published Standard Webhooks test vector: every library of
// github.com/standard-webhooks/standard-webhooks (libraries/*/…test…)
// signs this message to this signature.
const (
	vectorSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	vectorID        = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	vectorTimestamp = 1614265330
	vectorPayload   = `{"test": 2432232314}`
	vectorSignature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

func TestStandardWebhooksVector(t *testing.T) {
	t.Parallel()
	key, err := WebhookKey(vectorSecret)
	if err != nil {
		t.Fatal(err)
	}
	if got := SignStandard(key, vectorID, time.Unix(vectorTimestamp, 0), []byte(vectorPayload)); got != vectorSignature {
		t.Errorf("SignStandard = %q, want %q", got, vectorSignature)
	}
	// The sink signs the same bytes the same way: webhook-id is the dedupe key.
	var got http.Header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got = r.Header.Clone() }))
	defer srv.Close()
	s, err := NewWebhookSink(WebhookOptions{URL: srv.URL, Secret: vectorSecret, Now: func() time.Time { return time.Unix(vectorTimestamp, 0) }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.client.CloseIdleConnections()
	n := testNotification()
	n.DedupeKey = vectorID
	n.body = []byte(vectorPayload)
	if err := s.Deliver(context.Background(), n); err != nil {
		t.Fatal(err)
	}
	if got.Get(HeaderWebhookSignature) != vectorSignature || got.Get(HeaderWebhookID) != vectorID ||
		got.Get(HeaderWebhookTimestamp) != strconv.Itoa(vectorTimestamp) {
		t.Errorf("headers = %v, want the vector's id, timestamp and signature", got)
	}

	at := time.Unix(vectorTimestamp, 0)
	h := func(id, ts, sig string) http.Header {
		h := http.Header{}
		h.Set(HeaderWebhookID, id)
		h.Set(HeaderWebhookTimestamp, ts)
		h.Set(HeaderWebhookSignature, sig)
		return h
	}
	ts := strconv.Itoa(vectorTimestamp)
	tests := []struct {
		name   string
		secret string
		h      http.Header
		body   string
		at     time.Time
		want   error
	}{
		{name: "vector", secret: vectorSecret, h: h(vectorID, ts, vectorSignature), body: vectorPayload, at: at},
		{name: "one of several", secret: vectorSecret, h: h(vectorID, ts, "v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc= v2,x "+vectorSignature), body: vectorPayload, at: at},
		{name: "unpadded secret", secret: strings.TrimRight(vectorSecret, "="), h: h(vectorID, ts, vectorSignature), body: vectorPayload, at: at},
		{name: "id changed", secret: vectorSecret, h: h(vectorID+"x", ts, vectorSignature), body: vectorPayload, at: at, want: ErrSignatureMismatch},
		{name: "body changed", secret: vectorSecret, h: h(vectorID, ts, vectorSignature), body: `{"test": 2432232315}`, at: at, want: ErrSignatureMismatch},
		{name: "timestamp changed", secret: vectorSecret, h: h(vectorID, strconv.Itoa(vectorTimestamp+1), vectorSignature), body: vectorPayload, at: at, want: ErrSignatureMismatch},
		{name: "secret read as raw bytes", secret: strings.TrimPrefix(vectorSecret, SecretPrefix), h: h(vectorID, ts, vectorSignature), body: vectorPayload, at: at, want: ErrSignatureMismatch},
		{name: "partial signature", secret: vectorSecret, h: h(vectorID, ts, "v1,"), body: vectorPayload, at: at, want: ErrSignatureMismatch},
		{name: "other version", secret: vectorSecret, h: h(vectorID, ts, strings.Replace(vectorSignature, "v1,", "v2,", 1)), body: vectorPayload, at: at, want: ErrSignatureMismatch},
		{name: "replayed later", secret: vectorSecret, h: h(vectorID, ts, vectorSignature), body: vectorPayload, at: at.Add(6 * time.Minute), want: ErrSignatureExpired},
		{name: "from the future", secret: vectorSecret, h: h(vectorID, ts, vectorSignature), body: vectorPayload, at: at.Add(-6 * time.Minute), want: ErrSignatureExpired},
		{name: "no id", secret: vectorSecret, h: h("", ts, vectorSignature), body: vectorPayload, at: at, want: ErrSignatureMissing},
		{name: "no signature", secret: vectorSecret, h: h(vectorID, ts, ""), body: vectorPayload, at: at, want: ErrSignatureMissing},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := verifyWebhookAt(tt.secret, tt.h, []byte(tt.body), 0, tt.at)
			if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Errorf("verify = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestWebhookKey(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		secret  string
		want    string
		wantErr bool
	}{
		{secret: "whsec_aGVsbG8=", want: "hello"},
		{secret: "whsec_aGVsbG8", want: "hello"},
		{secret: "legacy-secret", want: "legacy-secret"},
		{secret: "whsec_", wantErr: true},
		{secret: "whsec_not*base64", wantErr: true},
	} {
		key, err := WebhookKey(tt.secret)
		if (err != nil) != tt.wantErr || string(key) != tt.want {
			t.Errorf("WebhookKey(%q) = %q, %v; want %q (error %v)", tt.secret, key, err, tt.want, tt.wantErr)
		}
	}
	if _, err := NewWebhookSink(WebhookOptions{URL: "http://127.0.0.1:9/", Secret: "whsec_%%%"}); err == nil || strings.Contains(err.Error(), "%%%") {
		t.Errorf("NewWebhookSink with a bad whsec_ secret = %v, want an error that does not quote it", err)
	}
	if _, err := NewWebhookSink(WebhookOptions{URL: "http://127.0.0.1:9/", Signature: "v2"}); err == nil {
		t.Error("NewWebhookSink with signature v2 succeeded")
	}
}

// TestWebhookVerifiesWithTheStandardLibrary delivers one notification twice
// (a retry) with each kind of secret and checks what a receiver using the
// Standard Webhooks Go library sees: a valid signature, and a webhook-id
// that is the dedupe key on both attempts.
func TestWebhookVerifiesWithTheStandardLibrary(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name     string
		secret   string
		verifier func() (*standardwebhooks.Webhook, error)
	}{
		{name: "whsec secret", secret: vectorSecret, verifier: func() (*standardwebhooks.Webhook, error) { return standardwebhooks.NewWebhook(vectorSecret) }},
		{name: "raw secret", secret: "s3cret from before", verifier: func() (*standardwebhooks.Webhook, error) {
			return standardwebhooks.NewWebhookRaw([]byte("s3cret from before"))
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			wh, err := tt.verifier()
			if err != nil {
				t.Fatal(err)
			}
			var ids, problems []string
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body, _ := io.ReadAll(r.Body)
				if err := wh.Verify(body, r.Header); err != nil {
					problems = append(problems, err.Error())
				}
				// The signature covers the id: a receiver cannot be fed another one.
				forged := r.Header.Clone()
				forged.Set(HeaderWebhookID, "src/r2/w/v1-abc")
				if wh.Verify(body, forged) == nil {
					problems = append(problems, "a changed webhook-id still verified")
				}
				if err := VerifyWebhook(tt.secret, r.Header, body, 0); err != nil {
					problems = append(problems, "VerifyWebhook: "+err.Error())
				}
				if r.Header.Get(HeaderSignature) != "" || r.Header.Get(HeaderIdempotencyKey) != "" {
					problems = append(problems, "legacy headers sent by a standard sink")
				}
				ids = append(ids, r.Header.Get(HeaderWebhookID))
			}))
			defer srv.Close()
			s, err := NewWebhookSink(WebhookOptions{URL: srv.URL, Secret: tt.secret})
			if err != nil {
				t.Fatal(err)
			}
			defer s.client.CloseIdleConnections()
			n := testNotification()
			for attempt := 1; attempt <= 2; attempt++ {
				n.Attempt, n.DeliveryID = attempt, newDeliveryID(n.ID, attempt)
				if err := s.Deliver(context.Background(), n); err != nil {
					t.Fatal(err)
				}
			}
			if len(problems) > 0 {
				t.Errorf("receiver: %v", problems)
			}
			if len(ids) != 2 || ids[0] != n.DedupeKey || ids[1] != n.DedupeKey {
				t.Errorf("webhook-id per attempt = %q, want the dedupe key %q twice", ids, n.DedupeKey)
			}
		})
	}
}

func TestWebhookSignatureSchemes(t *testing.T) {
	t.Parallel()
	const secret = "whsec_aGVsbG8gd29ybGQgZnJvbSBsb29rb3V0"
	for _, tt := range []struct {
		scheme           string
		standard, legacy bool
	}{
		{scheme: "", standard: true},
		{scheme: SignatureStandard, standard: true},
		{scheme: SignatureLegacy, legacy: true},
		{scheme: SignatureBoth, standard: true, legacy: true},
	} {
		t.Run(cmpOr(tt.scheme, "default"), func(t *testing.T) {
			t.Parallel()
			var got http.Header
			var body []byte
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				got = r.Header.Clone()
				body, _ = io.ReadAll(r.Body)
			}))
			defer srv.Close()
			s, err := NewWebhookSink(WebhookOptions{URL: srv.URL, Secret: secret, Signature: tt.scheme})
			if err != nil {
				t.Fatal(err)
			}
			defer s.client.CloseIdleConnections()
			n := testNotification()
			if err := s.Deliver(context.Background(), n); err != nil {
				t.Fatal(err)
			}
			stdErr := VerifyWebhook(secret, got, body, 0)
			// The legacy scheme keys its HMAC with the secret as written, as before.
			legErr := VerifyLegacySignature(secret, got.Get(HeaderSignature), got.Get(HeaderTimestamp), body, 0)
			if (stdErr == nil) != tt.standard || (legErr == nil) != tt.legacy {
				t.Errorf("standard verify = %v (want ok: %v), legacy verify = %v (want ok: %v)", stdErr, tt.standard, legErr, tt.legacy)
			}
			if (got.Get(HeaderIdempotencyKey) == n.DedupeKey) != tt.legacy || (got.Get(HeaderDedupeKey) == n.DedupeKey) != tt.legacy {
				t.Errorf("legacy key headers = %q/%q, want them only with the legacy scheme", got.Get(HeaderIdempotencyKey), got.Get(HeaderDedupeKey))
			}
			if (got.Get(HeaderWebhookID) == n.DedupeKey) != tt.standard {
				t.Errorf("webhook-id = %q", got.Get(HeaderWebhookID))
			}
			if got.Get(HeaderDelivery) != n.DeliveryID || got.Get(HeaderAttempt) != "1" || got.Get(HeaderNotification) != "7" {
				t.Errorf("delivery headers = %v", got)
			}
		})
	}
}
