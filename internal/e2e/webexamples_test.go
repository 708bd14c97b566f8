package e2e

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
)

// webSite serves the pages of examples/web from the web connector's
// fixtures, one version at a time.
type webSite struct {
	mu      sync.Mutex
	pages   map[string]string
	cookies []string
}

func (w *webSite) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	w.mu.Lock()
	body, ok := w.pages[r.URL.Path]
	if r.URL.Path == "/portal/documents" {
		w.cookies = append(w.cookies, r.Header.Get("Cookie"))
	}
	w.mu.Unlock()
	if !ok {
		http.NotFound(rw, r) // robots.txt included
		return
	}
	rw.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = rw.Write([]byte(body))
}

func (w *webSite) set(path, body string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pages[path] = body
}

func webFixture(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("../connectors/web/testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The backtest of examples/web: its three sources, as written but for the
// URLs, read two versions of pages shaped like real ones, and its watches
// notify exactly what they promise: a slot that becomes bookable, a new
// document (and the price list among them), a price that falls below the
// threshold while in stock, a restock.
func TestWebExamplesBacktest(t *testing.T) {
	t.Setenv("SUPPLIER_PORTAL_COOKIE", "portal_session=abc")
	site := &webSite{pages: map[string]string{}}
	srv := httptest.NewServer(site)
	t.Cleanup(srv.Close)
	e := newEnv(t)
	for _, f := range []string{"lookout.yaml", "sources/booking.yaml", "sources/supplier-documents.yaml", "sources/price.yaml"} {
		b, err := os.ReadFile("../../examples/web/" + f)
		if err != nil {
			t.Fatal(err)
		}
		e.write(f, strings.NewReplacer(
			"https://booking.example.com", srv.URL,
			"https://files.supplier.example", srv.URL,
			"https://shop.example.com", srv.URL).Replace(string(b)))
	}
	slots := webFixture(t, "slots.html")
	portal := strings.ReplaceAll(webFixture(t, "portal.html"), "https://files.supplier.example", srv.URL)
	product := webFixture(t, "product-jsonld.html")
	site.set("/slots/", slots)
	site.set("/portal/documents", portal)
	site.set("/p/trail-runner-gtx", product)

	ctx := context.Background()
	ev := e.evaluator("ev-1", nil)
	notified := func() map[string]int {
		t.Helper()
		if _, err := ev.Drain(ctx); err != nil {
			t.Fatal(err)
		}
		rows, err := e.pool.Query(ctx, `SELECT watch || ' ' || record_id FROM notifications`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		out := map[string]int{}
		for rows.Next() {
			var k string
			if err := rows.Scan(&k); err != nil {
				t.Fatal(err)
			}
			out[k]++
		}
		return out
	}
	e.syncer("register") // the sources exist, so that sync makes them due (the example keeps the default jitter)
	e.sync()
	if n := e.count(`SELECT count(*) FROM sync_runs WHERE status = 'succeeded'`); n != 3 {
		var errs []string
		rows, _ := e.pool.Query(ctx, `SELECT source || ': ' || status || ' ' || coalesce(error, '') FROM sync_runs`)
		for rows.Next() {
			var s string
			_ = rows.Scan(&s)
			errs = append(errs, s)
		}
		rows.Close()
		t.Fatalf("%d succeeded runs, want 3: %q", n, errs)
	}
	first := notified()
	want := map[string]int{
		// The first run sees two bookable slots and three listed documents.
		"slot-available 2026-12-05T14:00-bouldering": 1, "slot-available 2026-12-06T09:30-lead": 1,
		"new-document " + srv.URL + "/portal/download/1187/price-list-2026.pdf":         1,
		"new-document " + srv.URL + "/portal/download/1203/delivery-terms.pdf":          1,
		"new-document " + srv.URL + "/portal/download/1240/safety-data-sheet.pdf":       1,
		"price-list-published " + srv.URL + "/portal/download/1187/price-list-2026.pdf": 1,
	}
	if !equalCounts(first, want) {
		t.Errorf("first run notified %v\nwant %v", first, want)
	}

	// A quiet run: volatile parts changed only (removed by the sources).
	site.set("/slots/", strings.Replace(slots, "14:03:22 — 37 people", "14:13:40 — 12 people", 1))
	site.set("/portal/documents", strings.Replace(portal, "29 min", "28 min", 1))
	site.set("/p/trail-runner-gtx", strings.Replace(product, "4 products", "5 products", 1))
	e.syncer("register") // the sources exist, so that sync makes them due (the example keeps the default jitter)
	e.sync()
	if n := e.count(`SELECT count(*) FROM changes WHERE kind <> 'created'`); n != 0 {
		t.Errorf("%d changes after a quiet run, want 0", n)
	}

	// The 10:00 slot becomes bookable, the price list for 2027 appears,
	// the shoe drops to 89.00 and is back in stock.
	site.set("/slots/", strings.Replace(slots, `<span class="status">Fully booked</span>`, `<a class="book" href="book/2026-12-05T10:00">Book</a>`, 1))
	site.set("/portal/documents", strings.Replace(portal, "</ul>",
		`<li class="doc" id="doc-1300"><a href="download/1300/price-list-2027.pdf">Price list 2027</a> <span class="date">2026-12-01</span></li></ul>`, 1))
	site.set("/p/trail-runner-gtx", strings.Replace(strings.Replace(product, `"129.95"`, `"89.00"`, 1), "schema.org/OutOfStock", "schema.org/InStock", 1))
	e.sync()
	second := notified()
	for k, v := range map[string]int{
		"slot-available 2026-12-05T10:00-bouldering":                                    1,
		"new-document " + srv.URL + "/portal/download/1300/price-list-2027.pdf":         1,
		"price-list-published " + srv.URL + "/portal/download/1300/price-list-2027.pdf": 1,
		"price-below-100 " + srv.URL + "/p/trail-runner-gtx":                            1,
		"back-in-stock " + srv.URL + "/p/trail-runner-gtx":                              1,
	} {
		want[k] = v
	}
	if !equalCounts(second, want) {
		t.Errorf("second version notified %v\nwant %v", second, want)
	}
	site.mu.Lock()
	defer site.mu.Unlock()
	for _, c := range site.cookies {
		if c != "portal_session=abc" {
			t.Errorf("portal request with Cookie %q, want the configured one", c)
		}
	}
}

func equalCounts(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
