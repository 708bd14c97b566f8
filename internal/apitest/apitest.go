// Package apitest holds the tests' one check that the API answers as
// docs/openapi.json says: an http.RoundTripper that validates every /v1
// request and its response against the checked-in document with an
// independent validator (pb33f/libopenapi-validator, not huma, which
// generates the document), and fails the test on a mismatch. The e2e
// tests' client of the api binary and the api package's handler tests
// send through it, so the document cannot drift from what the API
// answers without a test failing.
package apitest

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/pb33f/libopenapi-validator/config"
	verrors "github.com/pb33f/libopenapi-validator/errors"
	"github.com/pb33f/libopenapi-validator/paths"
	v3 "github.com/pb33f/libopenapi/datamodel/high/v3"
)

// Prefix is the part of the API the document describes; other paths
// (/openapi.json, /mcp, /admin, /ingest) pass unchecked.
const Prefix = "/v1/"

// Document is the path of docs/openapi.json in the source tree.
func Document() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "docs", "openapi.json")
}

// The document is parsed once per test process.
var (
	once     sync.Once
	shared   *Checker
	sharedEr error
)

// Checker validates requests and responses against one OpenAPI document.
type Checker struct {
	mu    sync.Mutex // the validator's caches are not documented as safe for concurrent use
	v     validator.Validator
	model *v3.Document
	opts  *config.ValidationOptions
}

// NewChecker parses an OpenAPI 3.1 document.
func NewChecker(doc []byte) (*Checker, error) {
	d, err := libopenapi.NewDocument(doc)
	if err != nil {
		return nil, fmt.Errorf("parse the OpenAPI document: %w", err)
	}
	v, errs := validator.NewValidator(d)
	if len(errs) > 0 {
		return nil, fmt.Errorf("build the OpenAPI validator: %v", errs)
	}
	m, err := d.BuildV3Model()
	if err != nil {
		return nil, fmt.Errorf("build the OpenAPI model: %w", err)
	}
	if ok, verrs := v.ValidateDocument(); !ok {
		return nil, fmt.Errorf("the OpenAPI document is not valid: %s", describe(verrs))
	}
	return &Checker{v: v, model: &m.Model, opts: config.NewValidationOptions()}, nil
}

// Shared returns the Checker of docs/openapi.json, parsed once per
// process; it fails t when the document cannot be read or is not valid.
func Shared(t testing.TB) *Checker {
	t.Helper()
	once.Do(func() {
		b, err := os.ReadFile(Document())
		if err != nil {
			sharedEr = fmt.Errorf("read the OpenAPI document: %w", err)
			return
		}
		shared, sharedEr = NewChecker(b)
	})
	if sharedEr != nil {
		t.Fatalf("apitest: %v", sharedEr)
	}
	return shared
}

// Client returns an HTTP client whose every /v1 call is checked against
// docs/openapi.json (Transport over http.DefaultTransport).
func Client(t testing.TB) *http.Client {
	t.Helper()
	return &http.Client{Transport: Transport(t, Shared(t), nil)}
}

// Transport sends through base (nil: http.DefaultTransport) and checks
// each /v1 exchange with c, reporting a mismatch with t.Errorf (method,
// path, status and the validator's messages):
//   - the response must be one the document declares for the operation:
//     its status code, content type and body (a Server-Sent Events body
//     is not read: its status and content type are checked);
//   - a request the document refuses must be refused (a 4xx): a 2xx or
//     3xx answer to it means the API accepts more than the document says.
//     Tests send invalid requests on purpose to see the problems, so a
//     refused request that is refused is fine.
func Transport(t testing.TB, c *Checker, base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return &transport{t: t, c: c, base: base}
}

type transport struct {
	t    testing.TB
	c    *Checker
	base http.RoundTripper
}

func (rt *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !strings.HasPrefix(req.URL.Path, Prefix) {
		return rt.base.RoundTrip(req)
	}
	var reqBody []byte
	if req.Body != nil && req.Body != http.NoBody {
		b, err := io.ReadAll(req.Body)
		_ = req.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("apitest: read the request body: %w", err)
		}
		reqBody = b
		req = req.Clone(req.Context())
		req.Body = io.NopCloser(bytes.NewReader(b))
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	}
	resp, err := rt.base.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	stream := strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream")
	var respBody []byte
	if !stream {
		respBody, err = io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		resp.Body = io.NopCloser(bytes.NewReader(respBody))
		if err != nil {
			return resp, nil // the caller sees the short body; nothing to check
		}
	}
	if msg := rt.c.Check(req, reqBody, resp, respBody, stream); msg != "" {
		rt.t.Errorf("openapi: %s %s answered %d, which docs/openapi.json does not allow: %s", req.Method, req.URL.RequestURI(), resp.StatusCode, msg)
	}
	return resp, nil
}

// Check validates one exchange (bodies given as read; stream: the
// response body is a stream, not checked) and returns what is wrong, or
// "".
func (c *Checker) Check(req *http.Request, reqBody []byte, resp *http.Response, respBody []byte, stream bool) string {
	vreq := req.Clone(req.Context())
	vreq.Body = io.NopCloser(bytes.NewReader(reqBody))
	vresp := *resp
	vresp.Request = vreq
	vresp.Body = io.NopCloser(bytes.NewReader(respBody))

	c.mu.Lock()
	defer c.mu.Unlock()
	var problems []string
	if ok, errs := c.v.ValidateHttpRequestSync(vreq); !ok && resp.StatusCode < 400 {
		problems = append(problems, "the request is not one the document accepts, yet the API accepted it: "+describe(errs))
	}
	vreq.Body = io.NopCloser(bytes.NewReader(reqBody))
	if stream {
		vresp.Header = resp.Header.Clone()
		if msg := c.checkStream(vreq, &vresp); msg != "" {
			problems = append(problems, msg)
		}
	} else if ok, errs := c.v.ValidateHttpResponse(vreq, &vresp); !ok {
		problems = append(problems, "the response: "+describe(errs))
	}
	return strings.Join(problems, "; ")
}

// checkStream checks that the operation declares the stream's status
// with the text/event-stream content type.
func (c *Checker) checkStream(req *http.Request, resp *http.Response) string {
	pathItem, errs, _ := paths.FindPath(req, c.model, c.opts)
	if len(errs) > 0 || pathItem == nil {
		return "the path: " + describe(errs)
	}
	op := pathItem.GetOperations().GetOrZero(strings.ToLower(req.Method))
	if op == nil || op.Responses == nil {
		return "no operation " + req.Method + " " + req.URL.Path
	}
	r := op.Responses.Codes.GetOrZero(fmt.Sprint(resp.StatusCode))
	if r == nil {
		return fmt.Sprintf("status %d is not declared", resp.StatusCode)
	}
	if r.Content == nil || r.Content.GetOrZero("text/event-stream") == nil {
		return fmt.Sprintf("status %d is not declared as text/event-stream", resp.StatusCode)
	}
	return ""
}

// describe joins the validator's errors, with each schema failure's
// location and reason.
func describe(errs []*verrors.ValidationError) string {
	var parts []string
	for _, e := range errs {
		s := e.Message
		if e.Reason != "" && e.Reason != e.Message {
			s += " (" + e.Reason + ")"
		}
		for _, f := range e.SchemaValidationErrors {
			loc := f.FieldPath
			if loc == "" {
				loc = strings.Join(f.InstancePath, "/")
			}
			s += fmt.Sprintf(" [%s: %s]", loc, f.Reason)
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}
