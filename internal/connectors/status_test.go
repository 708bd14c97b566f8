package connectors_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lookout-dev/lookout/internal/connectors"
	"github.com/lookout-dev/lookout/internal/testsignal"
)

func response(status int, headers map[string]string, body string) *http.Response {
	h := http.Header{}
	for k, v := range headers {
		h.Set(k, v)
	}
	return &http.Response{StatusCode: status, Status: fmt.Sprintf("%d %s", status, http.StatusText(status)), Header: h, Body: io.NopCloser(strings.NewReader(body))}
}

func TestCheckStatus(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	date := now.Add(3 * time.Hour)
	reset := now.Add(17 * time.Minute)
	cases := []struct {
		name    string
		resp    *http.Response
		retryAt time.Time // zero: not a RetryLaterError
		is      error
		text    string
	}{
		{"200", response(200, nil, ""), time.Time{}, nil, ""},
		{"304", response(304, nil, ""), time.Time{}, connectors.ErrNotModified, ""},
		{"401", response(401, nil, `{"message":"Bad credentials"}`), time.Time{}, connectors.ErrUnauthorized, "401 Unauthorized: {\"message\":\"Bad credentials\"}"},
		{"403 refused", response(403, map[string]string{"X-RateLimit-Remaining": "4999"}, "Resource not accessible by integration"), time.Time{}, connectors.ErrUnauthorized, "403 Forbidden"},
		{"429 Retry-After seconds", response(429, map[string]string{"Retry-After": "120"}, ""), now.Add(120 * time.Second), nil, ""},
		{"503 Retry-After date", response(503, map[string]string{"Retry-After": date.Format(http.TimeFormat)}, ""), date, nil, ""},
		{"429 without Retry-After waits a minute", response(429, nil, ""), now.Add(time.Minute), nil, ""},
		{"429 X-RateLimit-Reset epoch", response(429, map[string]string{"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": fmt.Sprint(reset.Unix())}, ""), reset, nil, ""},
		{"429 X-RateLimit-Reset delta", response(429, map[string]string{"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "42"}, ""), now.Add(42 * time.Second), nil, ""},
		{"403 GitHub primary rate limit", response(403, map[string]string{"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": fmt.Sprint(reset.Unix())}, `{"message":"API rate limit exceeded"}`), reset, nil, ""},
		{"403 GitHub secondary rate limit", response(403, map[string]string{"Retry-After": "60"}, `{"message":"You have exceeded a secondary rate limit"}`), now.Add(time.Minute), nil, ""},
		{"500", response(500, nil, "boom\nstack"), time.Time{}, nil, "unexpected status 500 Internal Server Error: boom stack"},
		{"404 empty", response(404, nil, ""), time.Time{}, nil, "unexpected status 404 Not Found: (empty body)"},
	}
	for _, tc := range cases {
		err := connectors.CheckStatusAt(tc.resp, now)
		var retry *connectors.RetryLaterError
		switch {
		case !tc.retryAt.IsZero():
			if !errors.As(err, &retry) || !retry.RetryAt.Equal(tc.retryAt) {
				t.Errorf("%s: err = %v, want RetryLaterError at %s", tc.name, err, tc.retryAt)
			}
			if errors.Is(err, connectors.ErrUnauthorized) {
				t.Errorf("%s: a rate limit is not a refusal", tc.name)
			}
		case tc.is != nil:
			if !errors.Is(err, tc.is) {
				t.Errorf("%s: err = %v, want %v", tc.name, err, tc.is)
			}
		case tc.text == "" && err != nil:
			t.Errorf("%s: err = %v, want nil", tc.name, err)
		}
		if tc.text != "" && (err == nil || !strings.Contains(err.Error(), tc.text)) {
			t.Errorf("%s: err = %v, want it to contain %q", tc.name, err, tc.text)
		}
	}
}

func TestGetTimesOutOnSlowHeadersAndSlowBodies(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/body" {
			w.Header().Set("Content-Length", "100")
			w.WriteHeader(200)
			fmt.Fprint(w, `{"partial":`)
			w.(http.Flusher).Flush()
		}
		select {
		case <-r.Context().Done():
		case <-release:
		case <-time.After(testsignal.Timeout()): // a connector without a timeout fails the test, not the suite
		}
	}))
	t.Cleanup(func() { close(release); srv.Close() })
	for _, path := range []string{"/headers", "/body"} {
		start := time.Now()
		_, err := connectors.Get(context.Background(), srv.Client(), connectors.Request{URL: srv.URL + path + "?api_key=s3cret", Timeout: 150 * time.Millisecond})
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "no complete response within 150ms") {
			t.Errorf("%s: err = %v, want a timeout after 150ms", path, err)
		}
		if err != nil && (!strings.Contains(err.Error(), path) || strings.Contains(err.Error(), "s3cret")) {
			t.Errorf("%s: err = %v, want the URL named with its key redacted", path, err)
		}
		if d := time.Since(start); d >= testsignal.Timeout() {
			t.Errorf("%s: took %s, as long as the server's hang", path, d)
		}
	}
}

func TestGetConditionalAndCanceled(t *testing.T) {
	t.Parallel()
	var got http.Header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Clone()
		w.WriteHeader(http.StatusNotModified)
	}))
	t.Cleanup(srv.Close)
	_, err := connectors.Get(context.Background(), srv.Client(), connectors.Request{URL: srv.URL, ETag: `"v1"`, LastModified: "Mon, 02 Mar 2026 10:00:00 GMT", Header: http.Header{"Accept": {"application/json"}}})
	if !errors.Is(err, connectors.ErrNotModified) {
		t.Errorf("err = %v, want ErrNotModified", err)
	}
	if got.Get("If-None-Match") != `"v1"` || got.Get("If-Modified-Since") != "Mon, 02 Mar 2026 10:00:00 GMT" || got.Get("Accept") != "application/json" {
		t.Errorf("request headers = %v", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = connectors.Get(ctx, srv.Client(), connectors.Request{URL: srv.URL, Timeout: time.Second})
	if !errors.Is(err, context.Canceled) || strings.Contains(err.Error(), "no complete response") {
		t.Errorf("err = %v, want context.Canceled (a shutdown is not a timeout)", err)
	}
}

func TestGetBoundsTheBody(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, strings.Repeat("x", 2048))
	}))
	t.Cleanup(srv.Close)
	_, err := connectors.Get(context.Background(), srv.Client(), connectors.Request{URL: srv.URL, MaxBody: 1024})
	if err == nil || !strings.Contains(err.Error(), "body larger than 1024 bytes") {
		t.Errorf("err = %v", err)
	}
}

// TestGetReadsTheWholeBody reads bodies of several sizes, with their
// Content-Length announced and streamed without one.
func TestGetReadsTheWholeBody(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		body := bytes.Repeat([]byte("0123456789"), n/10+1)[:n]
		if r.URL.Query().Get("chunked") == "" {
			w.Header().Set("Content-Length", strconv.Itoa(n))
			w.Write(body)
			return
		}
		for len(body) > 0 { // no Content-Length: flushed in pieces
			k := min(len(body), 700)
			w.Write(body[:k])
			w.(http.Flusher).Flush()
			body = body[k:]
		}
	}))
	t.Cleanup(srv.Close)
	for _, n := range []int{0, 1, 511, 512, 513, 4096, 100_000} {
		for _, chunked := range []string{"", "1"} {
			u := fmt.Sprintf("%s/?n=%d&chunked=%s", srv.URL, n, chunked)
			resp, err := connectors.Get(context.Background(), srv.Client(), connectors.Request{URL: u})
			if err != nil {
				t.Fatalf("GET %s: %v", u, err)
			}
			want := bytes.Repeat([]byte("0123456789"), n/10+1)[:n]
			if !bytes.Equal(resp.Body, want) {
				t.Errorf("GET %s: body of %d bytes, want the %d sent", u, len(resp.Body), n)
			}
		}
	}
	u := srv.URL + "/?n=2048"
	if _, err := connectors.Get(context.Background(), srv.Client(), connectors.Request{URL: u, MaxBody: 2047}); err == nil || !strings.Contains(err.Error(), "body larger than 2047 bytes") {
		t.Errorf("GET %s with a limit of 2047 bytes: err = %v", u, err)
	}
}

func TestRedact(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		"https://api.test/items?page=2":                        "https://api.test/items?page=2",
		"https://api.test/items?api_key=abc&page=2":            "https://api.test/items?api_key=xxx&page=2",
		"https://api.test/items?access_token=abc":              "https://api.test/items?access_token=xxx",
		"https://user:hunter2@api.test/items":                  "https://user:xxx@api.test/items",
		"https://api.test/x?X-Amz-Signature=abc&X-Amz-Date=20": "https://api.test/x?X-Amz-Date=20&X-Amz-Signature=xxx",
	}
	for in, want := range cases {
		if got := connectors.Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
}
