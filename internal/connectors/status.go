package connectors

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// CheckStatus maps an HTTP response status to the connector sentinels:
// 304 is ErrNotModified, 401/403 ErrUnauthorized, 429/503 a
// *RetryLaterError (Retry-After, else X-RateLimit-Reset, else one minute),
// any other non-2xx an error with the status and the start of the body.
func CheckStatus(resp *http.Response) error {
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return nil
	case resp.StatusCode == http.StatusNotModified:
		return ErrNotModified
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		if resp.StatusCode == http.StatusForbidden && resp.Header.Get("X-RateLimit-Remaining") == "0" {
			break // GitHub answers 403 when the rate limit is exhausted
		}
		return fmt.Errorf("%s: %s: %w", resp.Status, snippet(resp), ErrUnauthorized)
	case resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode != http.StatusServiceUnavailable:
		return fmt.Errorf("unexpected status %s: %s", resp.Status, snippet(resp))
	}
	at, ok := RetryAt(resp.Header, time.Now())
	if !ok {
		at = time.Now().Add(time.Minute)
	}
	return &RetryLaterError{RetryAt: at, Reason: resp.Status}
}

// RetryAt reads Retry-After (seconds or an HTTP date) or, when the
// remaining budget is 0, X-RateLimit-Reset (Unix seconds).
func RetryAt(h http.Header, now time.Time) (time.Time, bool) {
	if ra := strings.TrimSpace(h.Get("Retry-After")); ra != "" {
		if secs, err := strconv.Atoi(ra); err == nil && secs >= 0 {
			return now.Add(time.Duration(secs) * time.Second), true
		}
		if t, err := http.ParseTime(ra); err == nil {
			return t, true
		}
	}
	if h.Get("X-RateLimit-Remaining") == "0" {
		if reset, err := strconv.ParseInt(h.Get("X-RateLimit-Reset"), 10, 64); err == nil {
			return time.Unix(reset, 0), true
		}
	}
	return time.Time{}, false
}

func snippet(resp *http.Response) string {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 200))
	s := strings.TrimSpace(string(b))
	if s == "" {
		return "(empty body)"
	}
	return strings.ReplaceAll(s, "\n", " ")
}
