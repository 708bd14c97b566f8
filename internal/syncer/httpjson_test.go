package syncer

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lookout-dev/lookout/internal/config"
	_ "github.com/lookout-dev/lookout/internal/connectors/httpjson"
)

// TestHTTPConnectorIsPolite runs the real http connector through the
// syncer's transport: a 429 defers the run and blocks the host, a 401
// disables the source.
func TestHTTPConnectorIsPolite(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	var limited atomic.Bool
	// Two hosts (host:port): the 429 of one must not defer the other's run.
	denied := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, `{"message":"Bad credentials"}`, http.StatusUnauthorized)
	}))
	t.Cleanup(denied.Close)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/items":
			if !limited.Swap(true) {
				w.Header().Set("Retry-After", "90")
				http.Error(w, "slow down", http.StatusTooManyRequests)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"items": [{"id": "1", "title": "one"}]}`)
		}
	}))
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "sources"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, u := range map[string]string{"denied": denied.URL + "/denied", "items": srv.URL + "/items"} {
		y := fmt.Sprintf("name: %s\nconnector: http\nhttp: {url: %q, items: body.items}\nevery: 1h\njitter: 0s\n", name, u)
		if err := os.WriteFile(filepath.Join(dir, "sources", name+".yaml"), []byte(y), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "lookout.yaml"), []byte(fastLimits), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	s := h.syncer(cfg, Config{})
	if n := h.runDue(s); n != 2 {
		t.Fatalf("ran %d", n)
	}
	if r := h.source("denied"); r.Status != "disabled" || !strings.Contains(r.StatusReason, "authorization refused by upstream") {
		t.Errorf("denied: %s %q", r.Status, r.StatusReason)
	}
	r := h.source("items")
	if r.Status != "active" || r.Failures != 0 || r.NextRunAt.Sub(h.clock.Now()) < 89*time.Second {
		t.Fatalf("items after a 429: %+v", r)
	}
	if runs := h.runs("items"); runs[0].Status != "deferred" {
		t.Fatalf("items run: %+v", runs[0])
	}
	var blocked time.Time
	if err := h.pool.QueryRow(context.Background(), `SELECT blocked_until FROM host_limits WHERE host = $1`, strings.TrimPrefix(srv.URL, "http://")).Scan(&blocked); err != nil || !blocked.Equal(h.clock.Now().Add(90*time.Second)) {
		t.Fatalf("host blocked until %s (%v), want now+90s", blocked, err)
	}
	h.runAt(s, "items")
	if r := h.source("items"); r.Failures != 0 || r.LastError != "" {
		t.Fatalf("items after the block: %+v", r)
	}
	var records int
	if err := h.pool.QueryRow(context.Background(), `SELECT count(*) FROM records WHERE source = 'items'`).Scan(&records); err != nil || records != 1 {
		t.Fatalf("records: %d %v", records, err)
	}
}

// TestHTTPConnectorResumesAfterRetryAfter runs the real http connector
// through the syncer: a 429 half-way defers the run (not a failure), the
// pages before it are committed with their resume cursor, and the next run
// goes on from the page that was refused.
func TestHTTPConnectorResumesAfterRetryAfter(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	const items, perPage = 7, 3
	var refused atomic.Bool
	var pagesAsked []string
	var mu sync.Mutex
	var srv *httptest.Server
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		page := r.URL.Query().Get("page")
		mu.Lock()
		pagesAsked = append(pagesAsked, page)
		mu.Unlock()
		if page == "2" && !refused.Swap(true) {
			w.Header().Set("Retry-After", "30")
			http.Error(w, `{"message":"rate limited"}`, http.StatusTooManyRequests)
			return
		}
		n, _ := strconv.Atoi(cmp.Or(page, "1"))
		var data []string
		for id := (n-1)*perPage + 1; id <= min(n*perPage, items); id++ {
			data = append(data, fmt.Sprintf(`{"id": "%d", "title": "Ticket %d"}`, id, id))
		}
		if n*perPage < items {
			w.Header().Set("Link", fmt.Sprintf(`<%s/tickets?page=%d>; rel="next"`, srv.URL, n+1))
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"data": [%s]}`, strings.Join(data, ","))
	}))
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "sources"), 0o755); err != nil {
		t.Fatal(err)
	}
	y := fmt.Sprintf("name: t\nconnector: http\nhttp: {url: %q, items: body.data, pagination: link}\nevery: 1h\njitter: 0s\n", srv.URL+"/tickets")
	if err := os.WriteFile(filepath.Join(dir, "sources", "t.yaml"), []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "lookout.yaml"), []byte(fastLimits), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	s := h.syncer(cfg, Config{})
	start := h.clock.Now()
	h.runDue(s)
	r := h.source("t")
	if runs := h.runs("t"); runs[0].Status != "deferred" || !strings.Contains(runs[0].Error, "429") {
		t.Fatalf("first run %+v, want deferred by the 429", runs[0])
	}
	if !strings.Contains(r.Cursor, `"resume"`) || !strings.Contains(r.Cursor, "page=2") || r.Failures != 0 {
		t.Errorf("after the 429: cursor %s failures %d, want a resume at page 2 and no failure", r.Cursor, r.Failures)
	}
	if r.NextRunAt.Before(start.Add(30 * time.Second)) {
		t.Errorf("next_run_at %s is before the Retry-After (%s)", r.NextRunAt, start.Add(30*time.Second))
	}
	h.runAt(s, "t")
	if runs := h.runs("t"); runs[1].Status != "succeeded" {
		t.Fatalf("resumed run %+v, want succeeded", runs[1])
	}
	mu.Lock()
	asked := strings.Join(pagesAsked, ",")
	mu.Unlock()
	if asked != ",2,2,3" {
		t.Errorf("pages asked %q, want the first, page 2 refused, then a resume at page 2", asked)
	}
	var count int
	if err := h.pool.QueryRow(context.Background(), `SELECT count(*) FROM records WHERE source = 't'`).Scan(&count); err != nil || count != items {
		t.Errorf("records = %d (%v), want all %d", count, err, items)
	}
}

// TestHTTPConnectorTimeoutMessage: a request that gets no answer within
// the source's timeout fails the run with one sentence that names the URL,
// the host and the timeout once.
func TestHTTPConnectorTimeoutMessage(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select { // hang until the client gives up (or the test ends)
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "sources"), 0o755); err != nil {
		t.Fatal(err)
	}
	y := fmt.Sprintf("name: hang\nconnector: http\nhttp: {url: %q, items: body.items}\nevery: 1h\njitter: 0s\ntimeout: 100ms\n", srv.URL+"/items")
	if err := os.WriteFile(filepath.Join(dir, "sources", "hang.yaml"), []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "lookout.yaml"), []byte(fastLimits), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	s := h.syncer(cfg, Config{Now: time.Now})
	if n := h.runDue(s); n != 1 {
		t.Fatalf("ran %d", n)
	}
	host := strings.TrimPrefix(srv.URL, "http://")
	want := fmt.Sprintf("page 1: GET %s/items: no response from %s within the source's timeout 100ms", srv.URL, host)
	if r := h.source("hang"); r.LastError != want {
		t.Errorf("last_error:\n got: %s\nwant: %s", r.LastError, want)
	}
}
