package apitest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
)

// recorder is a testing.TB that keeps what Transport reports.
type recorder struct {
	testing.TB
	mu   sync.Mutex
	errs []string
}

func (r *recorder) Helper() {}

func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

const problem401 = `{"type":"https://lookout.dev/problems/unauthorized","title":"Unauthorized","status":401,"detail":"no token",` +
	`"errors":[{"header":"Authorization","detail":"no token"}]}`

// whoami is a fake of GET /v1/me answering status and body.
func whoami(t *testing.T, status int, body string) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ct := "application/json"
		if status >= 400 {
			ct = "application/problem+json"
		}
		w.Header().Set("Content-Type", ct)
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	return srv
}

func send(t *testing.T, c *Checker, srv *httptest.Server, method, path, token, body string) []string {
	t.Helper()
	rec := &recorder{}
	var rd *strings.Reader
	req, _ := http.NewRequest(method, srv.URL+path, nil)
	if body != "" {
		rd = strings.NewReader(body)
		req, _ = http.NewRequest(method, srv.URL+path, rd)
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := (&http.Client{Transport: Transport(rec, c, nil)}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	return rec.errs
}

// The transport reports an answer the document does not declare: a
// status code removed from the document (a planted drift), a body that
// does not match its schema, and a request the document refuses that the
// API accepted; the same exchanges pass against docs/openapi.json.
func TestTransportCatchesDrift(t *testing.T) {
	real := Shared(t)
	raw, err := os.ReadFile(Document())
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	delete(doc["paths"].(map[string]any)["/v1/me"].(map[string]any)["get"].(map[string]any)["responses"].(map[string]any), "401")
	planted, _ := json.Marshal(doc)
	drifted, err := NewChecker(planted)
	if err != nil {
		t.Fatal(err)
	}

	unauthorized := whoami(t, http.StatusUnauthorized, problem401)
	if errs := send(t, real, unauthorized, http.MethodGet, "/v1/me", "", ""); len(errs) != 0 {
		t.Errorf("a documented 401 was reported: %v", errs)
	}
	if errs := send(t, drifted, unauthorized, http.MethodGet, "/v1/me", "", ""); len(errs) != 1 ||
		!strings.Contains(errs[0], "GET") || !strings.Contains(errs[0], "/v1/me") || !strings.Contains(errs[0], "401") {
		t.Errorf("a 401 the document lacks: reported %v, want one error naming GET /v1/me and 401", errs)
	}

	ok := whoami(t, http.StatusOK, `{"owner":"alice","scope":"user","limits":{"watches":0,"sources":0,"model_calls_per_day":0}}`)
	if errs := send(t, real, ok, http.MethodGet, "/v1/me", "lk_x", ""); len(errs) != 0 {
		t.Errorf("a documented answer was reported: %v", errs)
	}
	badBody := whoami(t, http.StatusOK, `{"owner":7,"scope":"user","limits":{}}`)
	if errs := send(t, real, badBody, http.MethodGet, "/v1/me", "lk_x", ""); len(errs) != 1 || !strings.Contains(errs[0], "owner") {
		t.Errorf("a body off its schema: reported %v, want one error naming owner", errs)
	}

	// A watch create whose body the document refuses (watch is required),
	// accepted with a 201: reported. The same refused with a 422: fine.
	accepted := whoami(t, http.StatusCreated, `{}`)
	if errs := send(t, real, accepted, http.MethodPost, "/v1/watches", "lk_x", `{"source":"x"}`); len(errs) == 0 ||
		!strings.Contains(strings.Join(errs, " "), "request") {
		t.Errorf("an invalid request accepted: reported %v, want an error about the request", errs)
	}
	refused := whoami(t, http.StatusUnprocessableEntity, `{"type":"https://lookout.dev/problems/validation","title":"Unprocessable Entity","status":422,"detail":"x","errors":[{"pointer":"/watch","detail":"missing"}]}`)
	if errs := send(t, real, refused, http.MethodPost, "/v1/watches", "lk_x", `{"source":"x"}`); len(errs) != 0 {
		t.Errorf("an invalid request refused with a documented 422 was reported: %v", errs)
	}

	// Other paths are not the document's.
	if errs := send(t, drifted, unauthorized, http.MethodGet, "/openapi.json", "", ""); len(errs) != 0 {
		t.Errorf("a path outside /v1 was checked: %v", errs)
	}
}
