package connectors

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// StatusError is an unexpected (non-2xx, non-sentinel) HTTP status.
type StatusError struct {
	// Code is the status code, Status the status line ("500 Internal Server Error").
	Code   int
	Status string
	// Snippet is the start of the body, for the error message.
	Snippet string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("unexpected status %s: %s", e.Status, e.Snippet)
}

// CheckStatus maps an HTTP response status to the connector sentinels:
// 304 is ErrNotModified, 401/403 ErrUnauthorized, 429/503 a
// *RetryLaterError (Retry-After, else X-RateLimit-Reset, else one minute),
// any other non-2xx a *StatusError with the status and the start of the
// body. A 403 that carries X-RateLimit-Remaining: 0 or Retry-After is a rate
// limit, not a refusal (GitHub answers its primary and secondary rate limits
// that way), and is a *RetryLaterError too.
func CheckStatus(resp *http.Response) error {
	return CheckStatusAt(resp, time.Now())
}

// CheckStatusAt is CheckStatus with the clock reading for relative
// Retry-After values.
func CheckStatusAt(resp *http.Response, now time.Time) error {
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return nil
	case resp.StatusCode == http.StatusNotModified:
		return ErrNotModified
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		if resp.StatusCode == http.StatusForbidden &&
			(resp.Header.Get("X-RateLimit-Remaining") == "0" || resp.Header.Get("Retry-After") != "") {
			break // GitHub answers 403 when a rate limit is exhausted
		}
		return fmt.Errorf("%s: %s: %w", resp.Status, snippet(resp), ErrUnauthorized)
	case resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode != http.StatusServiceUnavailable:
		return &StatusError{Code: resp.StatusCode, Status: resp.Status, Snippet: snippet(resp)}
	}
	at, ok := RetryAt(resp.Header, now)
	if !ok {
		at = now.Add(time.Minute)
	}
	return &RetryLaterError{RetryAt: at, Reason: resp.Status, Status: resp.StatusCode}
}

// RetryAt reads Retry-After (seconds or an HTTP date) or, when the
// remaining budget is 0, X-RateLimit-Reset: Unix seconds, or seconds from
// now when the value is too small to be a Unix time (some APIs send a delta).
func RetryAt(h http.Header, now time.Time) (time.Time, bool) {
	if ra := strings.TrimSpace(h.Get("Retry-After")); ra != "" {
		if secs, err := strconv.Atoi(ra); err == nil && secs >= 0 {
			return now.Add(time.Duration(secs) * time.Second), true
		}
		if t, err := http.ParseTime(ra); err == nil {
			return t, true
		}
	}
	return RateLimitReset(h, now)
}

// RateLimitReset returns X-RateLimit-Reset when X-RateLimit-Remaining is 0:
// the budget is spent and no request may be made before that time. It is
// also what a connector checks after a successful response, so that it
// pauses before the request that would be refused.
func RateLimitReset(h http.Header, now time.Time) (time.Time, bool) {
	if strings.TrimSpace(h.Get("X-RateLimit-Remaining")) != "0" {
		return time.Time{}, false
	}
	reset, err := strconv.ParseInt(strings.TrimSpace(h.Get("X-RateLimit-Reset")), 10, 64)
	if err != nil || reset < 0 {
		return time.Time{}, false
	}
	if reset < 1_000_000_000 { // before 2001-09-09: a delta in seconds
		return now.Add(time.Duration(reset) * time.Second), true
	}
	return time.Unix(reset, 0), true
}

func snippet(resp *http.Response) string {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 200))
	s := strings.TrimSpace(string(b))
	if s == "" {
		return "(empty body)"
	}
	return strings.ReplaceAll(s, "\n", " ")
}
