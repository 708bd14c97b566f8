package web_test

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/lookout-dev/lookout/internal/connectors"
	"github.com/lookout-dev/lookout/internal/connectors/conntest"
	"github.com/lookout-dev/lookout/internal/connectors/web"
)

const html = "text/html; charset=utf-8"

func TestBookingSlots(t *testing.T) {
	t.Parallel()
	s := newSite(t)
	s.set("/slots/", fixture(t, "slots.html"), html)
	conn := build(t, block(
		"url: "+s.srv.URL+"/slots/",
		`items: "table.slots tr.available"`,
		`id: "@data-slot-id"`,
		"fields:",
		`  title: td.when`,
		`  room: td.room`,
		`  places: td.places`,
		`  link: "a.book@href"`,
		`remove: [.ad-banner]`,
	))
	r := conntest.Fetch(t, conn, nil)
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	if !r.Snapshot || !r.Result.Complete {
		t.Errorf("snapshot %v complete %v, want a complete snapshot", r.Snapshot, r.Result.Complete)
	}
	want := []map[string]any{
		{"id": "2026-12-05T14:00-bouldering", "title": "Sat 5 Dec, 14:00", "room": "Bouldering", "places": "3 of 12",
			"link": s.srv.URL + "/slots/book/2026-12-05T14:00?room=bouldering", "url": s.srv.URL + "/slots/",
			"body": "Sat 5 Dec, 14:00 Bouldering 3 of 12 Book"},
		{"id": "2026-12-06T09:30-lead", "title": "Sun 6 Dec, 09:30", "room": "Lead wall", "places": "1 of 8",
			"link": s.srv.URL + "/slots/book/2026-12-06T09:30?room=lead", "url": s.srv.URL + "/slots/",
			"body": "Sun 6 Dec, 09:30 Lead wall 1 of 8 Book"},
	}
	if got := r.Items(); !reflect.DeepEqual(got, want) {
		t.Errorf("items\n%v\nwant\n%v", got, want)
	}
	// The next run is conditional, and a 304 writes nothing.
	r2 := conntest.Fetch(t, conn, r.Cursor(nil))
	if !errors.Is(r2.Err, connectors.ErrNotModified) {
		t.Errorf("second run: %v, want not modified", r2.Err)
	}
	if got, want := s.requests(), []string{"/robots.txt", "/slots/", "/slots/ (conditional)"}; !reflect.DeepEqual(got, want) {
		t.Errorf("requests %q, want %q (robots.txt read once an hour)", got, want)
	}
}

func TestXPathSelectors(t *testing.T) {
	t.Parallel()
	s := newSite(t)
	s.set("/slots", fixture(t, "slots.html"), html)
	conn := build(t, block(
		"url: "+s.srv.URL+"/slots",
		`items: "xpath://table[@class='slots']//tr[contains(@class, 'available')]"`,
		`id: "xpath:./@data-slot-id"`,
		"fields:",
		`  link: "xpath:.//a/@href"`,
		`  room: "xpath:./td[2]"`,
	))
	r := conntest.Fetch(t, conn, nil)
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	items := r.Items()
	if len(items) != 2 {
		t.Fatalf("%d items, want 2", len(items))
	}
	if items[1]["id"] != "2026-12-06T09:30-lead" || items[1]["room"] != "Lead wall" || items[0]["link"] != s.srv.URL+"/book/2026-12-05T14:00?room=bouldering" {
		t.Errorf("items %v", items)
	}
}

func TestSupplierPortalDocuments(t *testing.T) {
	t.Parallel()
	s := newSite(t)
	s.set("/portal/documents", fixture(t, "portal.html"), html)
	conn := build(t, block(
		"url: "+s.srv.URL+"/portal/documents",
		`items: "ul.documents li.doc"`,
		"fields:",
		`  title: a`,
		`  link: "a@href"`,
		`  date: .date`,
	))
	r := conntest.Fetch(t, conn, nil)
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	items := r.Items()
	if len(items) != 3 {
		t.Fatalf("%d items, want 3 (the unclosed <li> and <b> tolerated): %v", len(items), items)
	}
	last := items[2]
	if last["title"] != "Safety data sheet SDS-77" || last["date"] != "2026-11-20" ||
		last["link"] != "https://files.supplier.example/portal/download/1240/safety-data-sheet.pdf" {
		t.Errorf("third document %v (link resolved against <base href>)", last)
	}
	id, _ := items[0]["id"].(string)
	if !strings.HasPrefix(id, "sha256:") {
		t.Errorf("default id %q, want a hash of the item's text", id)
	}
	// The same page read again gives the same ids (a fresh connector, no
	// validators: a full read).
	r2 := conntest.Fetch(t, build(t, block("url: "+s.srv.URL+"/portal/documents", `items: "ul.documents li.doc"`)), nil)
	if r2.Err != nil || r2.IDs()[0] != id {
		t.Errorf("ids %v err %v, want %s first", r2.IDs(), r2.Err, id)
	}
}

func TestItemsMatchingNothingFailTheRun(t *testing.T) {
	t.Parallel()
	s := newSite(t)
	s.set("/slots", fixture(t, "slots.html"), html)
	conn := build(t, block("url: "+s.srv.URL+"/slots", `items: "table.sessions tr"`))
	r := conntest.Fetch(t, conn, nil)
	if !errors.Is(r.Err, web.ErrNoMatch) || len(r.Pages) != 0 {
		t.Fatalf("err %v, %d pages; want ErrNoMatch and nothing emitted", r.Err, len(r.Pages))
	}
	if want := `web.items "table.sessions tr": items selector matched nothing`; !strings.Contains(r.Err.Error(), want) {
		t.Errorf("error %q does not say %q", r.Err, want)
	}
	// allow_empty: an empty snapshot, which the deletion guard then judges.
	empty := build(t, block("url: "+s.srv.URL+"/slots", `items: "table.sessions tr"`, "allow_empty: true"))
	r = conntest.Fetch(t, empty, nil)
	if r.Err != nil || !r.Result.Complete || len(r.Items()) != 0 {
		t.Errorf("allow_empty: err %v complete %v items %d, want a complete empty run", r.Err, r.Result.Complete, len(r.Items()))
	}
}

func TestWholePageTextAndDiff(t *testing.T) {
	t.Parallel()
	s := newSite(t)
	page := func(slots, clock string) []byte {
		return []byte("<html><head><title>Slots</title><style>p{}</style></head><body><h1>Sessions</h1>" +
			"<p class=clock>Rendered at " + clock + "</p><ul><li>Mon 10:00 <b>full</b></li><li>Tue   10:00 " + slots + "</li></ul>" +
			"<script>var x = 1;</script><p>Visitors today: 1234</p></body></html>")
	}
	s.set("/", page("full", "10:00:01"), html)
	conn := build(t, block("url: "+s.srv.URL+"/", "remove: [p.clock]", `ignore_regex: ['Visitors today: \d+']`))
	r1 := conntest.Fetch(t, conn, nil)
	if r1.Err != nil {
		t.Fatal(r1.Err)
	}
	first := r1.Items()[0]
	if first["body"] != "Sessions\nMon 10:00 full\nTue 10:00 full" || first["title"] != "Slots" || first["diff"] != "" {
		t.Errorf("first version %q", first)
	}
	// Only the clock and the counter changed: the same record.
	s.set("/", page("full", "10:05:09"), html)
	cur := r1.Cursor(nil)
	r2 := conntest.Fetch(t, conn, cur)
	if r2.Err != nil || !reflect.DeepEqual(r2.Items()[0], first) {
		t.Errorf("quiet change: err %v item %v, want the first version unchanged", r2.Err, r2.Items())
	}
	s.set("/", page("2 places", "10:10:00"), html)
	cur = r2.Cursor(cur)
	r3 := conntest.Fetch(t, conn, cur)
	if r3.Err != nil {
		t.Fatal(r3.Err)
	}
	third := r3.Items()[0]
	wantDiff := "--- before\n+++ after\n@@ -2,2 +2,2 @@\n Mon 10:00 full\n-Tue 10:00 full\n+Tue 10:00 2 places\n"
	if third["diff"] != wantDiff || !reflect.DeepEqual(third["added"], []any{"Tue 10:00 2 places"}) || !reflect.DeepEqual(third["removed"], []any{"Tue 10:00 full"}) {
		t.Errorf("diff %q added %v removed %v, want\n%s", third["diff"], third["added"], third["removed"], wantDiff)
	}
	// Read again with new validators but the same text: the same diff,
	// so the record does not change.
	s.set("/", page("2 places", "10:15:00"), html)
	r4 := conntest.Fetch(t, conn, r3.Cursor(cur))
	if r4.Err != nil || !reflect.DeepEqual(r4.Items()[0], third) {
		t.Errorf("same text again: %v %v", r4.Err, r4.Items())
	}
}

func TestNormalisesUnicodeAndWhitespace(t *testing.T) {
	t.Parallel()
	s := newSite(t)
	s.set("/p", []byte("<ul><li class=x>Cafe\u0301\u00a0\n\t  Zu\u0308rich <em>New!</em></li></ul>"), html)
	r := conntest.Fetch(t, build(t, block("url: "+s.srv.URL+"/p", "items: li.x", "id: li.x", "ignore_text: [NEW!]")), nil)
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	if got := r.Items()[0]["body"]; got != "Caf\u00e9 Z\u00fcrich" {
		t.Errorf("body %q, want NFC with single spaces, the ignored text (any case) left out", got)
	}
}

func TestStructuredData(t *testing.T) {
	t.Parallel()
	s := newSite(t)
	s.set("/shoe", fixture(t, "product-jsonld.html"), html)
	s.set("/grinder", fixture(t, "product-microdata.html"), html)
	cases := []struct {
		path string
		want map[string]any
	}{
		{"/shoe", map[string]any{"price": 129.95, "currency": "EUR", "availability": "OutOfStock"}},
		{"/grinder", map[string]any{"price": 1299.0, "currency": "USD", "availability": "InStock"}},
	}
	for _, tc := range cases {
		r := conntest.Fetch(t, build(t, block("url: "+s.srv.URL+tc.path)), nil)
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		item := r.Items()[0]
		for k, v := range tc.want {
			if item[k] != v {
				t.Errorf("%s: %s = %v (%T), want %v", tc.path, k, item[k], item[k], v)
			}
		}
	}
	// A price read by a selector is a number too.
	r := conntest.Fetch(t, build(t, block("url: "+s.srv.URL+"/shoe", "fields:", "  price: p.price")), nil)
	if r.Err != nil || r.Items()[0]["price"] != 129.95 {
		t.Errorf("price field: %v %v", r.Err, r.Items())
	}
}

func TestParsePrice(t *testing.T) {
	t.Parallel()
	cases := map[string]float64{"19.99": 19.99, "$1,299.00": 1299, "1.299,00 €": 1299, "12,50": 12.5, "EUR 7": 7, "1,299": 1299, "£ 1 299.50": 1299.5, "9.99 / month": 9.99}
	for in, want := range cases {
		if got, ok := web.ParsePrice(in); !ok || got != want {
			t.Errorf("ParsePrice(%q) = %v, %v; want %v", in, got, ok, want)
		}
	}
	if _, ok := web.ParsePrice("sold out"); ok {
		t.Error("ParsePrice(sold out) read a number")
	}
}

func TestCharsets(t *testing.T) {
	t.Parallel()
	s := newSite(t)
	s.set("/menu", fixture(t, "win1252.html"), "text/html; charset=windows-1252")
	s.set("/fr", fixture(t, "latin1-meta.html"), "text/html")
	r := conntest.Fetch(t, build(t, block("url: "+s.srv.URL+"/menu")), nil)
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	if got := r.Items()[0]; got["body"] != "Tagesmenü\nKräutersuppe € 4,50 – „frisch“" || got["title"] != "Café müller – Tagesmenü" {
		t.Errorf("windows-1252 page read as %q / %q", got["title"], got["body"])
	}
	r = conntest.Fetch(t, build(t, block("url: "+s.srv.URL+"/fr")), nil)
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	if got := r.Items()[0]["body"]; got != "Créneau libre : jeudi à 18h - café offert" {
		t.Errorf("ISO-8859-1 page (meta charset) read as %q", got)
	}
	// A byte order mark wins over the header and <meta>.
	s.set("/bom", []byte("\xEF\xBB\xBF<html><head><meta charset=\"iso-8859-1\"></head><body><p>Kräutersuppe – 4,50 €</p></body></html>"), "text/html; charset=windows-1252")
	r = conntest.Fetch(t, build(t, block("url: "+s.srv.URL+"/bom")), nil)
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	if got := r.Items()[0]["body"]; got != "Kräutersuppe – 4,50 €" {
		t.Errorf("UTF-8 page with a BOM (header and meta say otherwise) read as %q", got)
	}
}

func TestPDF(t *testing.T) {
	t.Parallel()
	s := newSite(t)
	s.set("/notice.pdf", fixture(t, "notice.pdf"), "application/pdf")
	r := conntest.Fetch(t, build(t, block("url: "+s.srv.URL+"/notice.pdf")), nil)
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	if got := r.Items()[0]; got["body"] != "Supplier notice No. 42\nPrice list 2027 is available for download." || got["content_type"] != "pdf" {
		t.Errorf("pdf item %v", got)
	}
	s.set("/broken.pdf", []byte("%PDF-1.4\n1 0 obj <<"), "application/pdf")
	r = conntest.Fetch(t, build(t, block("url: "+s.srv.URL+"/broken.pdf")), nil)
	if r.Err == nil || !strings.Contains(r.Err.Error(), "malformed PDF") {
		t.Errorf("broken pdf: %v", r.Err)
	}
}

func TestRobots(t *testing.T) {
	t.Parallel()
	s := newSite(t)
	s.set("/private/slots", fixture(t, "slots.html"), html)
	s.robots = "User-agent: *\nDisallow: /private/\n"
	r := conntest.Fetch(t, build(t, block("url: "+s.srv.URL+"/private/slots")), nil)
	if !errors.Is(r.Err, web.ErrRobots) {
		t.Fatalf("err %v, want ErrRobots", r.Err)
	}
	if got := s.requests(); !reflect.DeepEqual(got, []string{"/robots.txt"}) {
		t.Errorf("requests %q: the page must not be fetched", got)
	}
	r = conntest.Fetch(t, build(t, block("url: "+s.srv.URL+"/private/slots", "robots: ignore")), nil)
	if r.Err != nil {
		t.Errorf("robots: ignore: %v", r.Err)
	}
	s.mu.Lock()
	s.robotsErr = http.StatusInternalServerError
	s.mu.Unlock()
	r = conntest.Fetch(t, build(t, block("url: "+s.srv.URL+"/private/slots")), nil)
	if r.Err == nil || !strings.Contains(r.Err.Error(), "read robots.txt before the page") {
		t.Errorf("robots.txt 500: %v, want the run to fail", r.Err)
	}
}

func TestUpstreamFailures(t *testing.T) {
	t.Parallel()
	s := newSite(t)
	s.intercept = func(w http.ResponseWriter, r *http.Request) bool {
		switch r.URL.Path {
		case "/busy":
			w.Header().Set("Retry-After", "120")
			http.Error(w, "slow down", http.StatusTooManyRequests)
		case "/loop":
			http.Redirect(w, r, "/loop?n="+r.URL.Query().Get("n")+"x", http.StatusFound)
		case "/never":
			// Headers and a first part, then nothing until the client
			// gives up: a page that never finishes loading.
			w.Header().Set("Content-Type", "text/html")
			_, _ = io.WriteString(w, "<html><body><p>loading")
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		case "/huge":
			w.Header().Set("Content-Type", "text/html")
			chunk := []byte(strings.Repeat("<p>filler text</p>", 4096))
			for written := 0; written < 50<<20; written += len(chunk) {
				if _, err := w.Write(chunk); err != nil {
					return true
				}
			}
		default:
			return false
		}
		return true
	}
	r := conntest.Fetch(t, build(t, block("url: "+s.srv.URL+"/busy")), nil)
	var rl *connectors.RetryLaterError
	if !errors.As(r.Err, &rl) || time.Until(rl.RetryAt) < time.Minute {
		t.Errorf("429: %v, want a RetryLaterError two minutes out", r.Err)
	}
	r = conntest.Fetch(t, build(t, block("url: "+s.srv.URL+"/loop")), nil)
	if r.Err == nil || !strings.Contains(r.Err.Error(), "redirects") {
		t.Errorf("redirect loop: %v", r.Err)
	}
	r = conntest.Fetch(t, build(t, block("url: "+s.srv.URL+"/never")), nil)
	if r.Err == nil || !strings.Contains(r.Err.Error(), "/never: no complete response within 5s") {
		t.Errorf("a page that never finishes: %v, want the source's timeout", r.Err)
	}
	r = conntest.Fetch(t, build(t, block("url: "+s.srv.URL+"/huge")), nil)
	if r.Err == nil || !strings.Contains(r.Err.Error(), "body larger than 5242880 bytes") {
		t.Errorf("50 MB page: %v", r.Err)
	}
}

func TestBlockErrors(t *testing.T) {
	t.Parallel()
	head := "name: s\nconnector: web\nweb:\n  url: https://shop.example/p\n"
	cases := []struct{ src, want string }{
		{"name: s\nconnector: web\nweb:\n  items: li\n", "sources/s.yaml:3: web.url is required"},
		{"name: s\nconnector: web\nweb:\n  url: file:///etc/passwd\n", `sources/s.yaml:4: web.url must start with http:// or https://, not "file:///etc/passwd"`},
		{head + "  items: \"li[\"\n", `sources/s.yaml:5: web.items "li[" is not a valid CSS selector: expected identifier, found EOF instead`},
		{head + "  items: \"xpath://li[\"\n", `sources/s.yaml:5: web.items "xpath://li[" is not a valid XPath expression: expression must evaluate to a node-set`},
		{head + "  items: li\n  fields:\n    price: \".price >\"\n", `sources/s.yaml:7: web.fields.price ".price >" is not a valid CSS selector: expected selector, found EOF instead`},
		{head + "  items: li\n  fields:\n    id: a\n", "sources/s.yaml:7: web.fields.id is the record id: set web.id instead"},
		{head + "  ignore_regex: ['\\d+', '(unclosed']\n", "sources/s.yaml:5: web.ignore_regex[1] \"(unclosed\" is not a valid regular expression: error parsing regexp: missing closing ): `(unclosed`"},
		{head + "  remove: [\"div..x\"]\n", `sources/s.yaml:5: web.remove[0] "div..x" is not a valid CSS selector: expected identifier, found . instead`},
		{head + "  robots: no\n", `sources/s.yaml:5: web.robots must be obey or ignore, not "no"`},
		{head + "  id: \"@data-id\"\n", "sources/s.yaml:5: web.id needs web.items: without it the page is one record, whose id is its URL"},
		{head + "  render: chrome\n", `sources/s.yaml:5: web.render must be static or browser, not "chrome"`},
		{head + "  wait: {selector: li}\n", "sources/s.yaml:5: web.wait needs web.render: browser (a static page is read as served)"},
		{head + "  render: browser\n  wait:\n    selector: \"li[\"\n", `sources/s.yaml:7: web.wait.selector "li[" is not a valid CSS selector: expected identifier, found EOF instead`},
		{head + "  render: browser\n  wait:\n    idle: 40s\n", "sources/s.yaml:7: web.wait.idle (40s) must be shorter than web.wait.timeout (30s)"},
		{head + "  max_bytes: 100\n", "sources/s.yaml:5: web.max_bytes must be between 1024 and 67108864, not 100"},
		{head + "  delay: 5s\n", "sources/s.yaml:5: web.delay is not a known key (known: allow_empty, fields, headers, id, ignore_regex, ignore_text, items, login, max_bytes, remove, render, robots, url, wait)"},
	}
	for _, tc := range cases {
		_, err := conntest.LoadSource(t, tc.src)
		if err == nil || err.Error() != tc.want {
			t.Errorf("source\n%s\nerror = %v\nwant    %s", tc.src, err, tc.want)
		}
	}
}

// The cursor a run stores is JSON the next run reads back.
func TestCursorRoundTrip(t *testing.T) {
	t.Parallel()
	r := conntest.Fetch(t, build(t, block("url: https://x.test/")), json.RawMessage(`[1]`))
	if r.Err == nil || !strings.Contains(r.Err.Error(), "stored cursor is not a cursor of this connector") {
		t.Errorf("bad cursor: %v", r.Err)
	}
}

// A page whose text is too long to keep in the cursor carries a diff that
// says so, not a wrong one.
func TestLongPageHasNoDiff(t *testing.T) {
	t.Parallel()
	s := newSite(t)
	long := func(last string) []byte {
		return []byte("<p>" + strings.Repeat("a line of a long page<br>", web.MaxKeptText/20) + last + "</p>")
	}
	s.set("/long", long("v1"), html)
	conn := build(t, block("url: "+s.srv.URL+"/long"))
	r1 := conntest.Fetch(t, conn, nil)
	if r1.Err != nil {
		t.Fatal(r1.Err)
	}
	s.set("/long", long("v2"), html)
	r2 := conntest.Fetch(t, conn, r1.Cursor(nil))
	if r2.Err != nil {
		t.Fatal(r2.Err)
	}
	if got, want := r2.Items()[0]["diff"], "(the page's text is longer than 131072 bytes: no diff)\n"; got != want {
		t.Errorf("diff %q, want %q", got, want)
	}
	if n := len(r2.Cursor(nil)); n > 4096 {
		t.Errorf("cursor of %d bytes, want the long text left out", n)
	}
}

// A quiet check of a whole page (the text did not change) allocates
// about what parsing the page takes: the text kept in the cursor is not
// compressed again. Not parallel: it reads the process's allocations.
func TestQuietWholePageCheckAllocates(t *testing.T) {
	page := fixture(t, "slots.html")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/slots/" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", html) // no validators: the page is sent again
		_, _ = w.Write(page)
	}))
	t.Cleanup(srv.Close)
	conn := build(t, pageBlock(srv.URL+"/slots/"))
	r := conntest.Fetch(t, conn, nil)
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	cursor := r.Cursor(nil)
	const checks = 5
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range checks {
		if r := conntest.Fetch(t, conn, cursor); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / checks; per > 64<<10 {
		t.Errorf("a quiet whole-page check of a %d-byte page allocates %d bytes, want under 64 KiB (parsing it takes about 40 KB)", len(page), per)
	}
}
