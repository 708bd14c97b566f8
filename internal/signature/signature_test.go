package signature

import (
	"net/http"
	"strconv"
	"testing"
	"time"
)

var (
	testKey  = []byte("0123456789abcdef0123456789abcdef")
	testBody = []byte(`{"id":42,"dedupe_key":"src/rec/watch/1","record":{"id":"T-1","title":"database down"}}`)
	testID   = "src:rec:watch:v1"
	testTS   = time.Unix(1_780_000_000, 0)
)

// TestSignerMatchesSignStandard: the Signer gives the signature
// SignStandard gives, and VerifyStandard accepts it.
func TestSignerMatchesSignStandard(t *testing.T) {
	s := NewSigner(testKey)
	for i := range 3 { // the pooled state reused gives the same answer
		got := string(s.AppendStandard(nil, testID, testTS.Unix(), testBody))
		if want := SignStandard(testKey, testID, testTS, testBody); got != want {
			t.Fatalf("try %d: Signer signed %q, SignStandard %q", i, got, want)
		}
	}
	other := string(s.AppendStandard([]byte("prefix "), "other-id", testTS.Unix(), []byte("{}")))
	if want := "prefix " + SignStandard(testKey, "other-id", testTS, []byte("{}")); other != want {
		t.Fatalf("appended %q, want %q", other, want)
	}
	h := http.Header{}
	h.Set(HeaderID, testID)
	h.Set(HeaderTimestamp, strconv.FormatInt(testTS.Unix(), 10))
	h.Set(HeaderSignature, string(s.AppendStandard(nil, testID, testTS.Unix(), testBody)))
	if err := VerifyStandard("whsec_MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY", h, testBody, 0, testTS); err != nil {
		t.Fatalf("verify: %v", err)
	}
	if a, b := string(NewSigner([]byte("k2")).AppendStandard(nil, testID, testTS.Unix(), testBody)), string(s.AppendStandard(nil, testID, testTS.Unix(), testBody)); a == b {
		t.Fatal("signers of different keys sign alike")
	}
}

// TestSignerDoesNotAllocate: signing a delivery into a reused buffer
// allocates nothing (the HMAC state, its scratch and the sum are reused);
// the deliverer signs every delivery.
func TestSignerDoesNotAllocate(t *testing.T) {
	s := NewSigner(testKey)
	buf := make([]byte, 0, 64)
	allocs := testing.AllocsPerRun(1000, func() {
		buf = s.AppendStandard(buf[:0], testID, testTS.Unix(), testBody)
	})
	if allocs != 0 {
		t.Errorf("signing a message allocates %.0f times, want 0", allocs)
	}
}

// BenchmarkSignStandard signs one delivery's body with a fresh HMAC per
// call (the package function, as the deliverer did before the Signer).
func BenchmarkSignStandard(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_ = SignStandard(testKey, testID, testTS, testBody)
	}
}

// BenchmarkSigner signs one delivery's body with a Signer into a reused
// buffer.
func BenchmarkSigner(b *testing.B) {
	b.ReportAllocs()
	s := NewSigner(testKey)
	buf := make([]byte, 0, 64)
	for b.Loop() {
		buf = s.AppendStandard(buf[:0], testID, testTS.Unix(), testBody)
	}
}

// TestSignerSignStandardAllocatesTheHeaderOnly: the string form allocates
// the header value and nothing else.
func TestSignerSignStandardAllocatesTheHeaderOnly(t *testing.T) {
	s := NewSigner(testKey)
	if got, want := s.SignStandard(testID, testTS, testBody), SignStandard(testKey, testID, testTS, testBody); got != want {
		t.Fatalf("Signer.SignStandard %q, SignStandard %q", got, want)
	}
	if allocs := testing.AllocsPerRun(1000, func() { _ = s.SignStandard(testID, testTS, testBody) }); allocs > 1 {
		t.Errorf("Signer.SignStandard allocates %.0f times, want 1 (the string)", allocs)
	}
}
