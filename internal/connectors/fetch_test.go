package connectors_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lookout-dev/lookout/internal/connectors"
)

// waitingTransport stands for the syncer's: it spends time on a rate-limit
// wait before sending, and enforces the timeout itself.
type waitingTransport struct{ wait time.Duration }

func (w waitingTransport) EnforcesTimeout() bool { return true }

func (w waitingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	select {
	case <-time.After(w.wait): // the budget wait
	case <-req.Context().Done():
		return nil, req.Context().Err()
	}
	return &http.Response{StatusCode: 200, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(`[]`)), Request: req}, nil
}

func TestGetLeavesTimeoutToEnforcingTransport(t *testing.T) {
	t.Parallel()
	client := &http.Client{Transport: waitingTransport{wait: 100 * time.Millisecond}}
	_, err := connectors.Get(context.Background(), client, connectors.Request{URL: "http://api.test/items", Timeout: 20 * time.Millisecond})
	if err != nil {
		t.Fatalf("a rate-limit wait longer than the request timeout failed the request: %v", err)
	}
}
