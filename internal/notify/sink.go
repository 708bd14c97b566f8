package notify

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Notification is a claimed outbox row, as a sink sees it.
type Notification struct {
	ID        int64
	DedupeKey string
	Sink      string
	Source    string
	RecordID  string
	Watch     string
	// Kind is "single", "digest" or "alert".
	Kind string
	// Title and Body were rendered from the templates when the row was
	// created: they are what the channel shows.
	Title   string
	Body    string
	Urgency string
	Reason  string
	// Payload is the stored payload with NotificationID filled in. It is
	// left zero for the sinks that send only its bytes (JSON), the webhook
	// sinks, when their lane can send the stored text (storedBody).
	Payload Payload
	// Attempt is 1 on the first delivery attempt.
	Attempt int
	// CreatedAt is when the row was made, the rest of its key in the
	// outbox (recording an outcome finds the row by ID and CreatedAt).
	CreatedAt time.Time
	// DeliveryID is unique per attempt (X-Lookout-Delivery); the dedupe key
	// is the same for every attempt.
	DeliveryID string

	body []byte // the payload as sent: the stored text (storedBody) or Payload encoded once

	// status and response are the receiver's answer to this attempt
	// (Answered).
	status   int
	response string
}

// Answered records the receiver's answer to this attempt: its HTTP status
// and the start of its body, kept in the attempt's delivery_attempts row
// (bounded there to outbox.ResponseExcerpt bytes, redacted as errors
// are). A sink that speaks HTTP calls it for every answer it reads; the
// last one counts (a channel that makes several calls). The body must
// hold no secret the sink's redaction would not hide.
func (n *Notification) Answered(status int, body []byte) {
	n.status = status
	n.response = strings.TrimSpace(string(body[:min(len(body), 2*responseExcerpt)]))
}

// Answer is what Answered recorded (0 and "": no HTTP answer).
func (n *Notification) Answer() (status int, response string) { return n.status, n.response }

// responseExcerpt is how much of an answer's body Answered keeps: what
// the attempt's row stores, outbox.ResponseExcerpt, before it cuts at a
// rune boundary.
const responseExcerpt = 512

// JSON is the payload as sent: the same bytes on every attempt of one
// notification, so that a signature and an idempotency key stay stable.
// A claimed row's is the stored payload's text as PostgreSQL writes a
// jsonb (keys shortest first, `": "` and `", "` between them) with
// notification_id set (storedBody), or, for a stored payload not in that
// shape, Payload encoded (encoding/json, keys in the struct's order). The
// keys' order is no contract: receivers parse the body.
func (n *Notification) JSON() []byte {
	if n.body == nil {
		n.body = n.Payload.Marshal()
	}
	return n.body
}

// bodyOnlySink is a sink that reads of a notification's payload only the
// bytes it sends (Notification.JSON), never the decoded Payload: its lane
// does not decode the stored payload at the claim when it can send its
// text as it is (storedBody).
type bodyOnlySink interface {
	Sink
	sendsStoredBody()
}

// Sink delivers notifications to one channel.
//
// Deliver is called with a context bounded by the sink's timeout. It returns
// nil when the channel accepted the notification. A *PermanentError means
// retrying cannot help (a 4xx answer, a rejected address): the row becomes
// dead at once. A *RetryAfterError asks for no retry before its time. Any
// other error is retried with exponential backoff until the sink's
// max_attempts, then the row is dead. Deliver may see the same notification
// more than once (a crash after sending, before recording): every channel
// receives the dedupe key to recognise repeats.
type Sink interface {
	Deliver(ctx context.Context, n *Notification) error
}

// PermanentError is a delivery failure that retrying cannot fix.
type PermanentError struct{ Err error }

func (e *PermanentError) Error() string { return "permanent: " + e.Err.Error() }
func (e *PermanentError) Unwrap() error { return e.Err }

// RetryAfterError is a failure whose receiver named when to retry.
type RetryAfterError struct {
	At  time.Time
	Err error
}

func (e *RetryAfterError) Error() string {
	return fmt.Sprintf("%v (retry after %s)", e.Err, e.At.UTC().Format(time.RFC3339))
}
func (e *RetryAfterError) Unwrap() error { return e.Err }

// storedBody is the body of a notification as stored: raw, PostgreSQL's
// text of the notifications.payload jsonb, with its notification_id set to
// id, without decoding it (a decode and an encode cost about 9 µs a
// delivery). ok is false when raw is not in the shape this expects, and
// the caller then decodes it (decodePayload) and sends Payload.Marshal's
// bytes, as before: jsonb writes an object's keys shortest first (equal
// lengths in byte order) as `{"k": v, "k2": v2}`, so the top level's
// notification_id, the longest of a payload's keys, is the last and kind
// the first or the second, after body; and the kind must not be empty
// (decodePayload makes an empty one single).
//
// The suffix check is sound for any JSON text: in `, "notification_id":
// <digits>}` at its very end the `"` before notification_id is not escaped
// and is followed by a letter (a string's closing quote is followed by
// `,`, `:`, `}` or `]`), so it opens a key, and the final `}` closes the
// top-level object: that key is its last member.
func storedBody(id int64, raw []byte) (body []byte, ok bool) {
	const idKey = `, "notification_id": `
	end := len(raw) - 1
	if end < 0 || raw[end] != '}' {
		return nil, false
	}
	digits := end
	for digits > 0 && raw[digits-1] >= '0' && raw[digits-1] <= '9' {
		digits--
	}
	if digits == end || !bytes.HasSuffix(raw[:digits], []byte(idKey)) {
		return nil, false
	}
	rest, found := bytes.CutPrefix(raw, []byte(`{"body": "`))
	if found {
		// Skip the body string: up to its first quote not escaped.
		i := 0
		for ; i < len(rest) && rest[i] != '"'; i++ {
			if rest[i] == '\\' {
				i++
			}
		}
		if i >= len(rest) {
			return nil, false
		}
		rest, found = bytes.CutPrefix(rest[i+1:], []byte(`, "kind": "`))
	} else {
		rest, found = bytes.CutPrefix(raw, []byte(`{"kind": "`))
	}
	if !found || len(rest) == 0 || rest[0] == '"' {
		return nil, false
	}
	body = make([]byte, 0, digits+21)
	body = append(body, raw[:digits]...)
	body = strconv.AppendInt(body, id, 10)
	return append(body, '}'), true
}

func decodePayload(id int64, raw []byte) (Payload, error) {
	var p Payload
	if err := json.Unmarshal(raw, &p); err != nil {
		return p, fmt.Errorf("notification %d payload: %w", id, err)
	}
	p.NotificationID = id
	if p.Kind == "" {
		p.Kind = KindSingle
	}
	return p, nil
}

// Notification kinds (notifications.kind, payload "kind").
const (
	KindSingle = "single"
	KindDigest = "digest"
	KindAlert  = "alert"
)

// newDeliveryID returns the id of one delivery attempt:
// "<notification id>-<attempt>-<random>".
func newDeliveryID(id int64, attempt int) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	out := make([]byte, 0, 48)
	out = strconv.AppendInt(out, id, 10)
	out = append(out, '-')
	out = strconv.AppendInt(out, int64(attempt), 10)
	out = append(out, '-')
	return string(hex.AppendEncode(out, b[:]))
}

// Snippet shortens s to at most n bytes plus "…" for an error message,
// never cutting a UTF-8 sequence in two (the result is stored in text
// columns, which refuse invalid UTF-8). Sink types use it for what a
// channel answered.
func Snippet(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
