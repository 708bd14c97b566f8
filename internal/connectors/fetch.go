package connectors

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// MaxBody is the default bound on one response body.
const MaxBody = 64 << 20

// Request is one GET made by a connector.
type Request struct {
	// URL is the absolute URL to get.
	URL string
	// Header holds the request headers (Accept, Authorization, ...).
	Header http.Header
	// ETag and LastModified are validators from an earlier response of the
	// same URL; when set the request is conditional (If-None-Match,
	// If-Modified-Since) and a 304 answer is ErrNotModified.
	ETag, LastModified string
	// Timeout bounds the request including reading the body; 0 leaves only
	// ctx and the client's own timeout.
	Timeout time.Duration
	// MaxBody bounds the body. Defaults to MaxBody.
	MaxBody int64
	// Now is the clock for relative Retry-After values. Defaults to time.Now.
	Now func() time.Time
}

// Response is a 2xx response with its body read.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// TimeoutEnforcer is implemented by transports that apply the request
// timeout themselves, after their rate-limit waits (the syncer's): Get then
// leaves the timeout to them, so that waiting for a budget never eats into
// the time the upstream has to answer.
type TimeoutEnforcer interface {
	EnforcesTimeout() bool
}

// TimeoutError is a request that got no (complete) response within its
// timeout. It wraps context.DeadlineExceeded. A TimeoutEnforcer returns
// one from RoundTrip, and Get then names the URL before it and adds
// nothing: the message says what ran out once.
type TimeoutError struct {
	// Msg says what ran out: "no response from api.example.com within
	// the source's timeout 30s".
	Msg string
	// Err is the underlying error; it wraps context.DeadlineExceeded.
	Err error
}

func (e *TimeoutError) Error() string { return e.Msg }
func (e *TimeoutError) Unwrap() error { return e.Err }

// Timeout reports true, as net.Error does for timeouts.
func (e *TimeoutError) Timeout() bool { return true }

func enforcesTimeout(client *http.Client) bool {
	te, ok := client.Transport.(TimeoutEnforcer)
	return ok && te.EnforcesTimeout()
}

// Get sends req with client and reads the body. Every error names the
// (redacted) URL; the status is mapped by CheckStatusAt, so callers test the
// result with errors.Is / errors.As against the sentinels. A request that
// runs past req.Timeout fails with an error that says so and wraps
// context.DeadlineExceeded.
func Get(ctx context.Context, client *http.Client, req Request) (*Response, error) {
	shown := Redact(req.URL)
	now := time.Now
	if req.Now != nil {
		now = req.Now
	}
	limit := req.MaxBody
	if limit <= 0 {
		limit = MaxBody
	}
	parent := ctx
	if req.Timeout > 0 && !enforcesTimeout(client) {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, req.Timeout)
		defer cancel()
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodGet, req.URL, nil)
	if err != nil {
		return nil, fmt.Errorf("build request for %s: %w", shown, err)
	}
	for k, vs := range req.Header {
		hreq.Header[k] = vs
	}
	if req.ETag != "" {
		hreq.Header.Set("If-None-Match", req.ETag)
	}
	if req.LastModified != "" {
		hreq.Header.Set("If-Modified-Since", req.LastModified)
	}
	timedOut := func(err error) error {
		err = stripURL(err)
		if parent.Err() != nil {
			return fmt.Errorf("GET %s: %w", shown, parent.Err())
		}
		if te := (*TimeoutError)(nil); errors.As(err, &te) {
			return fmt.Errorf("GET %s: %w", shown, te)
		}
		var ne net.Error
		if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
			limit := req.Timeout
			if limit <= 0 || (client.Timeout > 0 && client.Timeout < limit) {
				limit = client.Timeout
			}
			if !errors.Is(err, context.DeadlineExceeded) {
				err = fmt.Errorf("%w: %w", context.DeadlineExceeded, err)
			}
			return fmt.Errorf("GET %s: %w", shown, &TimeoutError{Msg: fmt.Sprintf("no complete response within %s", limit), Err: err})
		}
		return nil
	}
	resp, err := client.Do(hreq)
	if err != nil {
		if terr := timedOut(err); terr != nil {
			return nil, terr
		}
		return nil, fmt.Errorf("GET %s: %w", shown, stripURL(err))
	}
	defer resp.Body.Close()
	if err := CheckStatusAt(resp, now()); err != nil {
		return nil, fmt.Errorf("GET %s: %w", shown, err)
	}
	var size int64 // what the response announced, if it fits
	if resp.ContentLength > 0 && resp.ContentLength <= limit {
		size = resp.ContentLength
	}
	body, err := readAll(io.LimitReader(resp.Body, limit+1), size)
	if err != nil {
		if terr := timedOut(err); terr != nil {
			return nil, terr
		}
		return nil, fmt.Errorf("GET %s: read body: %w", shown, err)
	}
	if int64(len(body)) > limit {
		return nil, fmt.Errorf("GET %s: body larger than %d bytes", shown, limit)
	}
	return &Response{Status: resp.StatusCode, Header: resp.Header, Body: body}, nil
}

// stripURL drops the *url.Error wrapper, whose message repeats the
// unredacted URL.
func stripURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// secretParams are query parameters whose values Redact hides.
var secretParams = []string{"key", "token", "secret", "password", "passwd", "signature", "sig", "auth", "credential", "session"}

// Redact returns u with the values of query parameters that look like
// credentials (api_key, access_token, sig, ...) and any userinfo password
// replaced by "xxx", for error messages and logs.
func Redact(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return u
	}
	changed := false
	if _, ok := p.User.Password(); ok {
		p.User = url.UserPassword(p.User.Username(), "xxx")
		changed = true
	}
	q := p.Query()
	for k := range q {
		lk := strings.ToLower(k)
		for _, s := range secretParams {
			if strings.Contains(lk, s) {
				q.Set(k, "xxx")
				changed = true
				break
			}
		}
	}
	if !changed {
		return u
	}
	p.RawQuery = q.Encode()
	return p.String()
}

// readAll is io.ReadAll into a buffer of the announced size (plus the byte
// the read that meets the end needs), so that a page of a JSON API is read
// without growing a buffer from 512 bytes up. size 0 means unknown.
func readAll(r io.Reader, size int64) ([]byte, error) {
	if size <= 0 {
		return io.ReadAll(r)
	}
	b := make([]byte, 0, size+1)
	for {
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)] // the announced size was short
		}
	}
}
