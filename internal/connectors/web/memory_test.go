package web_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lookout-dev/lookout/internal/connectors/web"
	"github.com/lookout-dev/lookout/internal/testsignal"
)

// hogPage's script allocates without bound: 8 MB arrays of doubles, all
// kept, until V8's heap limit (256 MB, --max-old-space-size) ends the
// renderer. The renderer holds at most about that much.
const hogPage = `<html><body><p>hog</p><script>
const kept = [];
for (;;) { kept.push(new Array(1 << 20).fill(1.5)); }
</script></body></html>`

// A page whose scripts exceed the browser's 256 MB of JavaScript heap
// fails its run with an error naming the page and the crash, when the
// renderer dies (its web.wait.timeout of 10m is never reached: the run
// is bounded by 5 minutes); the tab is closed, and the shared browser
// renders the next page.
func TestBrowserPageOutOfMemory(t *testing.T) {
	needChromium(t)
	t.Cleanup(web.CloseBrowser)
	s := newSite(t)
	s.set("/hog", []byte(hogPage), html)
	s.set("/fine", []byte(`<html><body><p id="ok">fine</p></body></html>`), html)

	hog, err := web.New(nil, options(t, s.srv.URL+"/hog", "render: browser", "wait:", "  idle: 100ms", "  timeout: 10m"))
	if err != nil {
		t.Fatal(err)
	}
	r := fetchWithin(hog, 5*time.Minute)
	want := fmt.Sprintf("page %s/hog: browser: the page's renderer crashed (out of memory? its scripts get 256 MB of JavaScript heap)", s.srv.URL)
	if r.Err == nil || r.Err.Error() != want {
		t.Fatalf("err %v, want %q", r.Err, want)
	}
	// The crashed tab is closed with its run, no target of it left.
	testsignal.Eventually(t, "the crashed tab closed", func() bool {
		pages, err := web.BrowserPages()
		if err != nil {
			t.Fatalf("list the browser's tabs: %v", err)
		}
		return !slices.ContainsFunc(pages, func(u string) bool { return strings.HasSuffix(u, "/hog") })
	})

	fine, err := web.New(nil, options(t, s.srv.URL+"/fine", "render: browser", "wait:", "  selector: p#ok", "  timeout: 1m"))
	if err != nil {
		t.Fatal(err)
	}
	r = fetchWithin(fine, 3*time.Minute)
	if r.Err != nil {
		t.Fatalf("the render after the crash: %v", r.Err)
	}
	if body, _ := r.Items()[0]["body"].(string); !strings.Contains(body, "fine") {
		t.Errorf("body %q, want the page after the crash rendered", body)
	}
}
