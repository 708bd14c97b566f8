package web_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lookout-dev/lookout/internal/connectors/conntest"
	"github.com/lookout-dev/lookout/internal/connectors/web"
	"github.com/lookout-dev/lookout/internal/testsignal"
)

// needChromium skips without a browser (outside CI; scripts/test.sh
// installs Debian's chromium package).
func needChromium(t *testing.T) {
	t.Helper()
	for _, name := range []string{os.Getenv("LOOKOUT_CHROMIUM"), "chromium", "chromium-browser", "google-chrome"} {
		if name == "" {
			continue
		}
		if _, err := exec.LookPath(name); err == nil {
			return
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("no chromium on PATH in CI")
	}
	t.Skip("no chromium on PATH: the browser render test skips")
}

// policy is the connector's HTTP client's transport: it sees every request
// and refuses the cloud metadata address, as the egress policy does.
type policy struct {
	mu   sync.Mutex
	seen []string
}

func (p *policy) RoundTrip(r *http.Request) (*http.Response, error) {
	p.mu.Lock()
	p.seen = append(p.seen, r.URL.Path)
	p.mu.Unlock()
	if r.URL.Hostname() == "169.254.169.254" {
		return nil, errors.New("egress policy refuses connections to 169.254.169.254:80 (a cloud metadata address)")
	}
	return http.DefaultTransport.RoundTrip(r)
}

func (p *policy) paths() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.seen)
}

// jsPage has no slot in its HTML: a script fetches them and builds the list.
const jsPage = `<!DOCTYPE html><html><head><title>Slots</title>
<link rel="stylesheet" href="/style.css"></head><body>
<ul id="slots"></ul><p id="probe">pending</p>
<script>
setTimeout(() => fetch('/api/slots.json').then(r => r.json()).then(d => {
  for (const s of d) {
    const li = document.createElement('li');
    li.className = 'slot'; li.dataset.id = s.id; li.textContent = s.when;
    document.getElementById('slots').appendChild(li);
  }
}), 100);
fetch('http://169.254.169.254/latest/meta-data/').then(
  () => { document.getElementById('probe').textContent = 'metadata reached'; },
  () => { document.getElementById('probe').textContent = 'metadata refused'; });
</script></body></html>`

func TestBrowserRendersAJavaScriptPage(t *testing.T) {
	needChromium(t)
	t.Cleanup(web.CloseBrowser)
	s := newSite(t)
	s.set("/slots", []byte(jsPage), html)
	s.set("/api/slots.json", []byte(`[{"id": "sat-10", "when": "Sat 10:00"}, {"id": "sun-09", "when": "Sun 09:30"}]`), "application/json")
	s.set("/style.css", []byte("li { color: red }"), "text/css")
	p := &policy{}
	conn, err := web.New(&http.Client{Transport: p}, options(t, s.srv.URL+"/slots",
		"items: li.slot", `id: "@data-id"`, "render: browser", "wait:", "  selector: li.slot", "  timeout: 20s"))
	if err != nil {
		t.Fatal(err)
	}
	r := fetchWithin(conn, 3*time.Minute)
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	if got := r.IDs(); !slices.Equal(got, []string{"sat-10", "sun-09"}) {
		t.Errorf("ids %v, want the slots the script added", got)
	}
	// Every request of the page went through the connector's client (the
	// stylesheet is not loaded), the metadata address included, refused.
	seen := p.paths()
	for _, want := range []string{"/robots.txt", "/slots", "/api/slots.json", "/latest/meta-data/"} {
		if !slices.Contains(seen, want) {
			t.Errorf("client saw %q, want %s among them", seen, want)
		}
	}
	if slices.Contains(seen, "/style.css") {
		t.Errorf("client saw %q: stylesheets are not loaded", seen)
	}
	whole, err := web.New(&http.Client{Transport: p}, options(t, s.srv.URL+"/slots",
		"render: browser", "wait:", `  selector: "xpath://p[@id='probe'][not(text()='pending')]"`))
	if err != nil {
		t.Fatal(err)
	}
	r = fetchWithin(whole, 3*time.Minute)
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	if body, _ := r.Items()[0]["body"].(string); !strings.Contains(body, "metadata refused") || !strings.Contains(body, "Sun 09:30") {
		t.Errorf("rendered body %q, want the refused probe and the slots", body)
	}
}

// A render whose wait never succeeds ends at web.wait.timeout with an
// error naming the timeout and the condition, and cancels what the page
// still has in flight: the site sees the page's pending request end.
// The timeout is long enough for a loaded machine to open the tab and
// load the page (it bounds the whole render, navigation included).
// (Had the render ignored the timeout, fetchWithin's 3 minutes would end
// it, with the run's context error and no mention of web.wait.timeout.)
func TestBrowserWaitTimesOut(t *testing.T) {
	needChromium(t)
	t.Cleanup(web.CloseBrowser)
	s := newSite(t)
	s.set("/never", []byte(`<html><body><p>loading…</p><script>fetch('/pending')</script></body></html>`), html)
	started, ended := make(chan struct{}, 1), make(chan struct{}, 1)
	s.mu.Lock()
	s.intercept = func(w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path != "/pending" {
			return false
		}
		started <- struct{}{}
		<-r.Context().Done() // answers only when the client goes away
		ended <- struct{}{}
		return true
	}
	s.mu.Unlock()
	conn, err := web.New(nil, options(t, s.srv.URL+"/never", "render: browser", "wait:", "  selector: table.ready", "  timeout: 20s", "  idle: 100ms"))
	if err != nil {
		t.Fatal(err)
	}
	r := fetchWithin(conn, 3*time.Minute)
	if r.Err == nil || !strings.Contains(r.Err.Error(), `no page within web.wait.timeout 20s waiting for web.wait.selector "table.ready"`) || !errors.Is(r.Err, context.DeadlineExceeded) {
		t.Errorf("err %v, want the wait's timeout", r.Err)
	}
	testsignal.Receive(t, started, "the page's request for /pending")
	testsignal.Receive(t, ended, "the page's pending request to end with the render")
}

// options decodes a web: block into the typed options.
func options(t *testing.T, url string, lines ...string) web.Options {
	t.Helper()
	cfg, err := conntest.LoadSource(t, fmt.Sprintf("name: s\nconnector: web\nweb:\n  url: %s\n%s", url, block(lines...)))
	if err != nil {
		t.Fatal(err)
	}
	o, err := web.Decode(cfg.Sources[0])
	if err != nil {
		t.Fatal(err)
	}
	return *o
}

// max_bytes bounds everything a rendered page loads together: a page of
// 1 KB whose script fetches 64 KB fails the run under max_bytes 16384.
func TestBrowserBoundsBytes(t *testing.T) {
	needChromium(t)
	t.Cleanup(web.CloseBrowser)
	s := newSite(t)
	s.set("/app", []byte(`<html><body><p id="n">0</p><script>
fetch('/big.json').then(r => r.text()).then(t => { document.getElementById('n').textContent = t.length; });
</script></body></html>`), html)
	s.set("/big.json", []byte(`"`+strings.Repeat("x", 64<<10)+`"`), "application/json")
	conn, err := web.New(nil, options(t, s.srv.URL+"/app", "render: browser", "max_bytes: 16384", "wait:", "  idle: 100ms", "  timeout: 1m"))
	if err != nil {
		t.Fatal(err)
	}
	r := fetchWithin(conn, 3*time.Minute)
	if r.Err == nil || !strings.Contains(r.Err.Error(), "the page and what it loads are larger than web.max_bytes 16384") {
		t.Errorf("err %v, want the bound on bytes", r.Err)
	}
}
