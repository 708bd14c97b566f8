package web_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lookout-dev/lookout/internal/connectors"
	"github.com/lookout-dev/lookout/internal/connectors/conntest"
	"github.com/lookout-dev/lookout/internal/connectors/web"
	"github.com/lookout-dev/lookout/internal/testsignal"
)

// heldPages serves pages whose script fetches /hold?page=N, which the
// server answers only when the test releases it: until then the page is
// open (its network is not idle, so its render cannot end). It counts
// the pages open at once.
type heldPages struct {
	mu      sync.Mutex
	open    int
	maxOpen int
	opened  []string
	release map[string]chan struct{}
}

func (h *heldPages) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	page := r.URL.Query().Get("page")
	switch r.URL.Path {
	case "/page":
		h.mu.Lock()
		h.open++
		h.maxOpen = max(h.maxOpen, h.open)
		h.opened = append(h.opened, page)
		h.release[page] = make(chan struct{})
		h.mu.Unlock()
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, `<html><body><p id="state">waiting</p><script>
fetch('/hold?page=%s').then(r => r.text()).then(t => { document.getElementById('state').textContent = t; });
</script></body></html>`, page)
	case "/hold":
		h.mu.Lock()
		ch := h.release[page]
		h.mu.Unlock()
		if ch == nil {
			http.NotFound(w, r)
			return
		}
		select {
		case <-ch:
		case <-r.Context().Done():
			return
		}
		h.mu.Lock()
		h.open--
		h.mu.Unlock()
		_, _ = io.WriteString(w, "released "+page)
	default:
		http.NotFound(w, r)
	}
}

func (h *heldPages) state() (open, maxOpen int, opened []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.open, h.maxOpen, append([]string(nil), h.opened...)
}

func (h *heldPages) free(page string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	close(h.release[page])
}

// With more rendered runs at once than the shared browser's slots, the
// site sees at most BrowserConcurrency pages open at a time: once every
// run is either on a page or waiting for a slot, exactly that many pages
// are open; releasing one lets exactly one more in; every run ends with
// its page read.
func TestBrowserConcurrencyCap(t *testing.T) {
	needChromium(t)
	t.Cleanup(web.CloseBrowser)
	const runs = web.BrowserConcurrency + 3
	h := &heldPages{release: map[string]chan struct{}{}}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)

	type result struct {
		page string
		run  conntest.Run
	}
	done := make(chan result, runs)
	for i := range runs {
		page := fmt.Sprint(i)
		conn, err := web.New(nil, options(t, srv.URL+"/page?page="+page, "render: browser", "robots: ignore",
			"wait:", `  selector: "xpath://p[@id='state'][starts-with(text(), 'released')]"`, "  idle: 50ms", "  timeout: 2m"))
		if err != nil {
			t.Fatal(err)
		}
		// The runs that wait for a slot wait through the others.
		go func() { done <- result{page, fetchWithin(conn, 5*time.Minute)} }()
	}
	settled := func(waiting int) func() bool {
		return func() bool {
			open, _, _ := h.state()
			return open == web.BrowserConcurrency && web.BrowserWaiting() == waiting
		}
	}
	freed := 0
	for waiting := runs - web.BrowserConcurrency; ; waiting-- {
		// Every run still going is on an open page or waiting for a slot.
		testsignal.EventuallyWithin(t, 90*time.Second, fmt.Sprintf("%d pages open and %d runs waiting", web.BrowserConcurrency, waiting), settled(waiting))
		if _, maxOpen, opened := h.state(); maxOpen > web.BrowserConcurrency {
			t.Fatalf("%d pages were open at once (opened %v), the browser has %d slots", maxOpen, opened, web.BrowserConcurrency)
		}
		if waiting == 0 {
			break
		}
		_, _, opened := h.state()
		h.free(opened[freed])
		r := testsignal.Receive(t, done, "a released run's end")
		if r.run.Err != nil || r.page != opened[freed] {
			t.Fatalf("run of page %s ended: %v (released page %s)", r.page, r.run.Err, opened[freed])
		}
		freed++
	}
	_, _, opened := h.state()
	for ; freed < runs; freed++ {
		h.free(opened[freed])
		r := testsignal.Receive(t, done, "a released run's end")
		if r.run.Err != nil {
			t.Fatalf("run of page %s: %v", r.page, r.run.Err)
		}
		if body, _ := r.run.Items()[0]["body"].(string); !strings.Contains(body, "released "+r.page) {
			t.Errorf("page %s read as %q", r.page, body)
		}
	}
	if _, maxOpen, opened := h.state(); maxOpen != web.BrowserConcurrency || len(opened) != runs {
		t.Errorf("at most %d pages open at once, %d opened; want %d and %d", maxOpen, len(opened), web.BrowserConcurrency, runs)
	}
}

// fetchWithin is conntest.Fetch with a longer bound than its 30s: a
// render starts Chromium, opens a browser context and may wait for a
// slot, which a loaded machine makes slow; web.wait.timeout bounds the
// render itself.
func fetchWithin(conn connectors.Connector, within time.Duration) conntest.Run {
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	var r conntest.Run
	r.Result, r.Err = conn.Fetch(ctx, nil, func(_ context.Context, p connectors.Page) error {
		r.Pages = append(r.Pages, p)
		return nil
	})
	return r
}
