// Package signature signs and verifies webhook requests: the Standard
// Webhooks scheme (https://www.standardwebhooks.com: webhook-id,
// webhook-timestamp, webhook-signature "v1,<base64 HMAC-SHA256 of
// id.timestamp.body>", whsec_ secrets, a timestamp tolerance) and plain
// HMAC-SHA256 headers of the raw body in hex ("sha256=<hex>", GitHub's
// X-Hub-Signature-256). Comparisons are constant time.
//
// It is plumbing shared by the webhook sink (internal/notify signs what
// lookout sends) and the webhook ingest (internal/ingest verifies what
// providers send): one implementation of the scheme.
package signature

import (
	"bytes"
	"cmp"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Standard Webhooks headers.
const (
	// HeaderID is the message id: the receiver's idempotency key.
	HeaderID = "webhook-id"
	// HeaderTimestamp is the signing time in Unix seconds.
	HeaderTimestamp = "webhook-timestamp"
	// HeaderSignature is a space-separated list of "v1,<base64 signature>".
	HeaderSignature = "webhook-signature"
)

// SecretPrefix marks a Standard Webhooks secret: "whsec_" followed by the
// base64 of the HMAC key.
const SecretPrefix = "whsec_"

// Tolerance is the default age beyond which a verifier rejects a
// timestamp.
const Tolerance = 5 * time.Minute

// Verification errors.
var (
	ErrMissing  = errors.New("signature, id or timestamp header missing")
	ErrMismatch = errors.New("signature does not match the body")
	ErrExpired  = errors.New("timestamp outside the tolerance (a replay, or clocks apart)")
)

// Key returns the HMAC key of a Standard Webhooks signature: the
// base64-decoded part of a "whsec_<base64>" secret, or the bytes of a
// secret without the prefix (accepted as is, for secrets from before the
// standard; the libraries' raw-secret constructors take the same bytes).
func Key(secret string) ([]byte, error) {
	enc, ok := strings.CutPrefix(secret, SecretPrefix)
	if !ok {
		return []byte(secret), nil
	}
	key, err := base64.RawStdEncoding.DecodeString(strings.TrimRight(enc, "="))
	if err != nil {
		return nil, fmt.Errorf("a %s secret must be standard base64 (padded or not) after the prefix: %w", SecretPrefix, err)
	}
	if len(key) == 0 {
		return nil, fmt.Errorf("a %s secret needs a key after the prefix", SecretPrefix)
	}
	return key, nil
}

// MAC is the HMAC-SHA256 of the concatenation of parts, keyed with key.
func MAC(key []byte, parts ...[]byte) []byte {
	m := hmac.New(sha256.New, key)
	for _, p := range parts {
		m.Write(p)
	}
	return m.Sum(nil)
}

var dot = []byte{'.'}

func standardMAC(key []byte, id, ts string, body []byte) []byte {
	return MAC(key, []byte(id), dot, []byte(ts), dot, body)
}

// SignStandard returns the webhook-signature value for a message id, a
// timestamp and a body, keyed with key (see Key).
func SignStandard(key []byte, id string, ts time.Time, body []byte) string {
	return "v1," + base64.StdEncoding.EncodeToString(standardMAC(key, id, strconv.FormatInt(ts.Unix(), 10), body))
}

// VerifyStandard checks a Standard Webhooks request at now: h holds its
// webhook-id, webhook-timestamp and webhook-signature headers and body is
// the raw request body. It rejects a timestamp further than tolerance
// from now (replay protection; tolerance <= 0 means Tolerance) and
// compares in constant time. The signature header may list several
// space-separated signatures (any v1 match passes), which lets a sender
// sign with the old and the new secret during a rotation.
func VerifyStandard(secret string, h http.Header, body []byte, tolerance time.Duration, now time.Time) error {
	id, ts, header := h.Get(HeaderID), h.Get(HeaderTimestamp), h.Get(HeaderSignature)
	if id == "" || ts == "" || header == "" {
		return ErrMissing
	}
	if err := CheckTimestamp(ts, tolerance, now); err != nil {
		return err
	}
	key, err := Key(secret)
	if err != nil {
		return err
	}
	want := standardMAC(key, id, ts, body)
	for _, part := range strings.Fields(header) {
		b64, ok := strings.CutPrefix(part, "v1,")
		if !ok {
			continue
		}
		got, err := base64.StdEncoding.DecodeString(b64)
		if err == nil && hmac.Equal(got, want) {
			return nil
		}
	}
	return ErrMismatch
}

// CheckTimestamp parses a Unix-seconds timestamp header and rejects one
// further than tolerance (<= 0: Tolerance) from now.
func CheckTimestamp(ts string, tolerance time.Duration, now time.Time) error {
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("timestamp %q is not Unix seconds: %w", ts, ErrMismatch)
	}
	tolerance = cmp.Or(tolerance, Tolerance)
	if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return ErrExpired
	}
	return nil
}

// HexPrefix starts the hex signatures VerifyHex reads.
const HexPrefix = "sha256="

// SignHex returns "sha256=<hex HMAC-SHA256 of the concatenation of
// parts>", keyed with key: GitHub's X-Hub-Signature-256 of a body.
func SignHex(key []byte, parts ...[]byte) string {
	return HexPrefix + hex.EncodeToString(MAC(key, parts...))
}

// VerifyHex checks header, a list of "sha256=<hex>" signatures separated
// by sep (a bare hex value is accepted too), against the HMAC-SHA256 of
// the concatenation of parts keyed with key, in constant time. An empty
// header is ErrMissing; no match is ErrMismatch.
func VerifyHex(key []byte, header, sep string, parts ...[]byte) error {
	if strings.TrimSpace(header) == "" {
		return ErrMissing
	}
	want := MAC(key, parts...)
	for _, part := range strings.Split(header, sep) {
		part = strings.TrimSpace(part)
		if len(part) > len(HexPrefix) && strings.EqualFold(part[:len(HexPrefix)], HexPrefix) {
			part = part[len(HexPrefix):]
		}
		got, err := hex.DecodeString(part)
		if err == nil && hmac.Equal(got, want) {
			return nil
		}
	}
	return ErrMismatch
}

// Signer signs Standard Webhooks messages with one key without
// allocating: the keyed HMAC state, a scratch buffer for the signed
// "id.timestamp." prefix and the sum are pooled and reused (hmac's Reset
// restores the keyed state). A deliverer signs every delivery; one Signer
// per sink serves all of its lanes at once.
type Signer struct {
	pool sync.Pool // of *signerState
}

// signerState is one signing's reusable state.
type signerState struct {
	mac     hash.Hash
	scratch []byte
	sum     [sha256.Size]byte
}

// NewSigner returns a Signer for key (see Key); it keeps a copy of key.
func NewSigner(key []byte) *Signer {
	key = bytes.Clone(key)
	s := &Signer{}
	s.pool.New = func() any {
		return &signerState{mac: hmac.New(sha256.New, key), scratch: make([]byte, 0, 96)}
	}
	return s
}

// AppendStandard appends the webhook-signature value ("v1,<base64>") of a
// message id, a timestamp in Unix seconds and a body to dst: the value
// SignStandard returns. It allocates only when dst must grow.
func (s *Signer) AppendStandard(dst []byte, id string, unix int64, body []byte) []byte {
	st := s.pool.Get().(*signerState)
	st.mac.Reset()
	st.scratch = append(st.scratch[:0], id...)
	st.scratch = append(st.scratch, '.')
	st.scratch = strconv.AppendInt(st.scratch, unix, 10)
	st.scratch = append(st.scratch, '.')
	st.mac.Write(st.scratch)
	st.mac.Write(body)
	sum := st.mac.Sum(st.sum[:0])
	dst = append(dst, "v1,"...)
	dst = base64.StdEncoding.AppendEncode(dst, sum)
	s.pool.Put(st)
	return dst
}

// SignStandard returns the webhook-signature value for a message id, a
// timestamp and a body: AppendStandard's, as the header's string (its
// one allocation).
func (s *Signer) SignStandard(id string, ts time.Time, body []byte) string {
	var buf [64]byte // "v1," and 44 characters of base64
	return string(s.AppendStandard(buf[:0], id, ts.Unix(), body))
}
