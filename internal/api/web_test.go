package api

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/lookout-dev/lookout/internal/control"
)

// A web source can be created through the API, its URL checked by the
// untrusted egress policy and its selectors by the connector's decoder;
// render: browser is refused (the operator's files only).
func TestCreateWebSource(t *testing.T) {
	f := setup(t)
	f.svc.SetResolver(resolver{"shop.example": {netip.MustParseAddr("93.184.216.34")}, "db.internal": {netip.MustParseAddr("169.254.169.254")}})
	resp := f.do(http.MethodPost, "/v1/sources", "alice", body(`{"name":"alice-slots","connector":"web","every":"30m",
		"web":{"url":"https://shop.example/slots","items":"table.slots tr.slot","id":"@data-slot-id","fields":{"title":"td.when","link":"a@href"}},
		"watches":[{"name":"bookable","when":"record.body contains \"Book\""}]}`), nil)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("create a web source: status %d, want 201", resp.StatusCode)
	}
	for _, tc := range []struct {
		name, web string
		pointer   string
		detail    string
	}{
		{"browser render", `{"url":"https://shop.example/app","render":"browser"}`, "/web/render", "render: browser is for sources the operator declares"},
		{"metadata address", `{"url":"http://db.internal/latest/meta-data/"}`, "/web/url", "cloud metadata"},
		{"file URL", `{"url":"file:///etc/passwd"}`, "/web/url", "must be an absolute http or https URL"},
		{"bad selector", `{"url":"https://shop.example/slots","items":"tr["}`, "/web/items", `web.items: "tr[" is not a valid CSS selector`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := f.problem(http.MethodPost, "/v1/sources", "alice", body(`{"name":"bad-web","connector":"web","every":"1h","web":`+tc.web+`}`), http.StatusUnprocessableEntity)
			for _, e := range p.Errors {
				if e.Pointer == tc.pointer && strings.Contains(e.Detail, tc.detail) {
					return
				}
			}
			t.Errorf("no error at %s with %q: %+v", tc.pointer, tc.detail, p.Errors)
		})
	}
}

// bookingPage is a booking table shaped like a real one: two slots with
// ids, a relative booking link on the free one.
const bookingPage = `<!doctype html><html><head><title>Slots</title></head><body>
<table class="slots">
<tr class="slot" data-slot-id="s-0900"><td class="when">Mon 09:00</td><td class="places">0 places</td><td>Full</td></tr>
<tr class="slot" data-slot-id="s-1100"><td class="when">Mon 11:00</td><td class="places">3 places</td><td><a class="book" href="/book/s-1100">Book</a></td></tr>
</table></body></html>`

func previewSite(t *testing.T) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("/slots", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = io.WriteString(w, bookingPage)
	})
	mux.HandleFunc("/to-metadata", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://169.254.169.254/latest/meta-data/", http.StatusFound)
	})
	site := httptest.NewServer(mux) // robots.txt: 404, everything allowed
	t.Cleanup(site.Close)
	return site
}

// preview reads a page with a web block's selectors and answers the
// records a source would produce, saving nothing; a selector that
// matches nothing says so; the URL goes through the untrusted checks.
func TestPreview(t *testing.T) {
	f := setup(t)
	f.svc.SetResolver(resolver{"db.internal": {netip.MustParseAddr("169.254.169.254")}})
	site := previewSite(t)

	var rep control.PreviewReport
	resp := f.do(http.MethodPost, "/v1/preview", "alice", body(`{"url":"`+site.URL+`/slots","web":{"items":"table.slots tr.slot","id":"@data-slot-id",
		"fields":{"title":"td.when","places":"td.places","link":"a.book@href","price":".price"}}}`), &rep)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("preview: status %d", resp.StatusCode)
	}
	if rep.Matched != 2 || len(rep.Records) != 2 || rep.Requests != 2 {
		t.Fatalf("preview = %+v", rep)
	}
	free := rep.Records[1]
	extra, _ := free.Record["extra"].(map[string]any)
	if free.ID != "s-1100" || free.Record["title"] != "Mon 11:00" || extra["link"] != site.URL+"/book/s-1100" || extra["places"] != "3 places" ||
		!strings.Contains(free.Record["body"].(string), "Book") || free.Origin == "" {
		t.Errorf("record of the free slot = %+v", free)
	}
	if len(rep.Missing) != 1 || rep.Missing[0] != "price" || !strings.Contains(rep.Summary, `web.fields "price" matched in none of them`) {
		t.Errorf("a field matching nothing: missing %v, summary %q", rep.Missing, rep.Summary)
	}

	// The source's fields mapping applies as in a run.
	resp = f.do(http.MethodPost, "/v1/preview", "alice", body(`{"web":{"url":"`+site.URL+`/slots","items":"tr.slot","id":"@data-slot-id","fields":{"places":"td.places"}},
		"fields":{"status":"item.places"}}`), &rep)
	if resp.StatusCode != http.StatusOK || len(rep.Records) != 2 || rep.Records[0].Record["status"] != "0 places" {
		t.Errorf("preview with fields: %d %+v", resp.StatusCode, rep)
	}

	// An items selector that matches nothing: an answer that says so.
	resp = f.do(http.MethodPost, "/v1/preview", "alice", body(`{"url":"`+site.URL+`/slots","web":{"items":"ul.slots li"}}`), &rep)
	if resp.StatusCode != http.StatusOK || rep.Matched != 0 || len(rep.Records) != 0 ||
		!strings.Contains(rep.Summary, `web.items "ul.slots li" matched nothing on `) {
		t.Errorf("preview of a selector matching nothing: %d %+v", resp.StatusCode, rep)
	}

	for _, tc := range []struct {
		name, body string
		pointer    string
		detail     string
	}{
		{"no url", `{"web":{"items":"tr"}}`, "/url", "is required"},
		{"two urls", `{"url":"` + site.URL + `/a","web":{"url":"` + site.URL + `/b"}}`, "/url", "differs from web.url"},
		{"bad selector", `{"url":"` + site.URL + `/slots","web":{"items":"tr["}}`, "/web/items", `web.items: "tr[" is not a valid CSS selector`},
		{"browser render", `{"url":"` + site.URL + `/slots","web":{"render":"browser"}}`, "/web/render", "render: browser is for sources the operator declares"},
		{"metadata address", `{"url":"http://db.internal/"}`, "/url", "cloud metadata"},
		{"env reference", `{"url":"` + site.URL + `/slots","web":{"headers":{"Cookie":"${HOME}"}}}`, "/web/headers/Cookie", "refers to ${...}"},
		{"upstream 404", `{"web":{"url":"` + site.URL + `/gone"}}`, "/web/url", "the page could not be read, nothing was previewed: GET " + site.URL + "/gone: "},
		{"redirect to metadata", `{"url":"` + site.URL + `/to-metadata"}`, "/url", "egress policy refuses connections to 169.254.169.254:80"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := f.problem(http.MethodPost, "/v1/preview", "alice", body(tc.body), http.StatusUnprocessableEntity)
			for _, e := range p.Errors {
				if e.Pointer == tc.pointer && strings.Contains(e.Detail, tc.detail) {
					return
				}
			}
			t.Errorf("no error at %s with %q: %+v", tc.pointer, tc.detail, p.Errors)
		})
	}

	var n int
	if err := f.pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM source_definitions) + (SELECT count(*) FROM audit_log) + (SELECT count(*) FROM sources)`).Scan(&n); err != nil || n != 0 {
		t.Errorf("preview saved %d rows (%v)", n, err)
	}
}

// changingPage serves a booking table whose rows the test sets.
type changingPage struct {
	mu   sync.Mutex
	rows string
}

func (p *changingPage) set(rows string) {
	p.mu.Lock()
	p.rows = rows
	p.mu.Unlock()
}

func (p *changingPage) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/slots" {
		http.NotFound(w, r) // robots.txt too: everything allowed
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = io.WriteString(w, `<!doctype html><html><head><title>Slots</title></head><body><table class="slots">`+p.rows+`</table></body></html>`)
}

// describe_source and dry_run over HTTP on a web source alice created:
// after two runs of the real syncer (a slot becomes bookable), its
// fields are described with examples for web pages, and dry_run of the
// "trigger on text" watch of docs/web.md matches the slot that became
// bookable, and only it.
func TestDescribeAndDryRunWebSource(t *testing.T) {
	t.Parallel()
	keys := ring(t, newKey(t, "k1"))
	s := setupSealed(t, keys, true) // the page is on loopback
	page := &changingPage{}
	site := httptest.NewServer(page)
	t.Cleanup(site.Close)
	const (
		full = `<tr class="slot" data-slot-id="s-0900"><td class="when">Mon 09:00</td><td class="places">0 places</td><td>Full</td></tr>`
		free = `<tr class="slot" data-slot-id="s-0900"><td class="when">Mon 09:00</td><td class="places">2 places</td><td><a href="/book/s-0900">Book</a></td></tr>`
		late = `<tr class="slot" data-slot-id="s-1700"><td class="when">Mon 17:00</td><td class="places">0 places</td><td>Full</td></tr>`
	)
	if code, got, _ := s.raw(http.MethodPost, "/v1/sources", "alice", `{"name":"alice-slots","connector":"web","every":"1h","jitter":"0s",
		"web":{"url":"`+site.URL+`/slots","items":"table.slots tr.slot","id":"@data-slot-id","fields":{"title":"td.when","places":"td.places","link":"a@href"}}}`); code != http.StatusCreated {
		t.Fatalf("create the web source: %d %s", code, got)
	}
	page.set(full + late)
	s.sync(keys)
	page.set(free + late)
	s.sync(keys)

	var d control.SourceDescription
	if resp := s.do(http.MethodGet, "/v1/sources/alice-slots/fields", "alice", nil, &d); resp.StatusCode != http.StatusOK {
		t.Fatalf("describe: %d", resp.StatusCode)
	}
	fields := map[string]control.FieldInfo{}
	for _, fi := range d.Fields {
		fields[fi.Path] = fi
	}
	if d.Connector != "web" || d.Sampled != 2 || !slices.Contains(fields["record.extra.link"].Examples, any(site.URL+"/book/s-0900")) ||
		!slices.Contains(fields["record.extra.places"].Examples, any("2 places")) {
		t.Errorf("describe_source = %+v", d)
	}
	const trigger = `record.body contains "Book" && !((previous?.body ?? "") contains "Book")`
	if !slices.Contains(d.Examples, trigger) || slices.Contains(d.Examples, `record.title contains "release"`) {
		t.Errorf("describe_source examples for a web source: %q", d.Examples)
	}
	var byKind control.SourceDescription
	if resp := s.do(http.MethodGet, "/v1/connectors/web/fields", "alice", nil, &byKind); resp.StatusCode != http.StatusOK || !slices.Equal(byKind.Sources, []string{"alice-slots"}) {
		t.Errorf("describe_connector web: %d %+v", resp.StatusCode, byKind)
	}

	var rep control.DryRunReport
	if resp := s.do(http.MethodPost, "/v1/dry_run", "alice", body(`{"source":"alice-slots","since":"1h","watch":{"name":"bookable","when":`+strconv.Quote(trigger)+`}}`), &rep); resp.StatusCode != http.StatusOK {
		t.Fatalf("dry_run: %d", resp.StatusCode)
	}
	if rep.Changes != 3 || rep.WouldNotify != 1 || len(rep.Matches) != 1 || rep.Matches[0].RecordID != "s-0900" {
		t.Errorf("dry_run of %s = %+v", trigger, rep)
	}
}
