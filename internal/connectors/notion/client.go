package notion

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/lookout-dev/lookout/internal/connectors"
	"github.com/lookout-dev/lookout/internal/normalize"
)

// RetryDefault is the wait after a 429, 529 or 5xx that names no
// Retry-After.
const RetryDefault = 30 * time.Second

// maxBody bounds one response body.
const maxBody = 32 << 20

// APIError is an error object of the Notion API:
// {"object": "error", "status": 400, "code": "validation_error", "message": ...}.
type APIError struct {
	Status  int
	Code    string
	Message string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Message)
}

// client sends requests to the API with the token and the version.
type client struct {
	http    *http.Client
	base    string
	token   string
	version string
	timeout time.Duration
	now     func() time.Time
}

// do sends method path with body (JSON, nil for none) and returns the
// decoded response (normalize.Decode). Status mapping: 401/403 wrap
// connectors.ErrUnauthorized; 429, 529 and 5xx are a
// *connectors.RetryLaterError at Retry-After (RetryDefault when absent);
// 404 wraps connectors.ErrNotFound; every other error status is an
// *APIError with Notion's code and message.
func (c *client) do(ctx context.Context, method, path string, body any) (any, error) {
	what := method + " " + path
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("%s: encode body: %w", what, err)
		}
		rd = bytes.NewReader(b)
	}
	parent := ctx
	if te, ok := c.http.Transport.(connectors.TimeoutEnforcer); !(ok && te.EnforcesTimeout()) && c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, fmt.Errorf("%s: build request: %w", what, err)
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Notion-Version", c.version)
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "lookout")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // its message repeats the URL
		}
		var ne net.Error
		if parent.Err() == nil && (errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())) {
			return nil, fmt.Errorf("%s: no response within %s: %w", what, c.timeout, err)
		}
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		return nil, fmt.Errorf("%s: read body: %w", what, err)
	}
	if len(data) > maxBody {
		return nil, fmt.Errorf("%s: body larger than %d bytes", what, maxBody)
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		v, err := normalize.Decode(data)
		if err != nil {
			return nil, fmt.Errorf("%s: malformed JSON body: %w", what, err)
		}
		return v, nil
	}
	ae := &APIError{Status: resp.StatusCode, Code: "unknown", Message: snippet(data)}
	var obj struct {
		Object, Code, Message string
	}
	if json.Unmarshal(data, &obj) == nil && obj.Object == "error" {
		ae.Code, ae.Message = obj.Code, obj.Message
	}
	switch code := resp.StatusCode; {
	case code == http.StatusUnauthorized || code == http.StatusForbidden:
		return nil, fmt.Errorf("%s: %w: %w", what, ae, connectors.ErrUnauthorized)
	case code == http.StatusTooManyRequests || code >= 500:
		now := c.now()
		at, ok := connectors.RetryAt(resp.Header, now)
		if !ok {
			at = now.Add(RetryDefault)
		}
		return nil, &connectors.RetryLaterError{RetryAt: at, Reason: fmt.Sprintf("%s: %s", what, ae), Status: code}
	case code == http.StatusNotFound:
		return nil, fmt.Errorf("%s: %w: %w", what, ae, connectors.ErrNotFound)
	}
	return nil, fmt.Errorf("%s: %w", what, ae)
}

func snippet(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 200 {
		s = s[:200]
	}
	if s == "" {
		return "(empty body)"
	}
	return strings.ReplaceAll(s, "\n", " ")
}

// compactID returns a Notion id without dashes.
func compactID(id string) string { return strings.ReplaceAll(id, "-", "") }
