package api

import (
	"net/http"
	"net/netip"
	"strings"
	"testing"
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
