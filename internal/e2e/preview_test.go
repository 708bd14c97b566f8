package e2e

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/lookout-dev/lookout/internal/clitest"
	"github.com/lookout-dev/lookout/internal/tokens"
)

// previewReport is what preview answers (control.PreviewReport).
type previewReport struct {
	Matched  int      `json:"matched"`
	Requests int      `json:"requests"`
	Missing  []string `json:"missing_fields"`
	Summary  string   `json:"summary"`
	Records  []struct {
		ID     string         `json:"id"`
		Record map[string]any `json:"record"`
	} `json:"records"`
}

// preview through the real api binary: POST /v1/preview and the MCP tool
// read an httptest page with a web block and answer its records (ids,
// fields, links resolved), a selector matching nothing said so, and
// nothing saved.
func TestPreviewThroughAPIBinary(t *testing.T) {
	t.Parallel()
	page := &bookingPage{state: map[string]string{"sat-10": "Fully booked", "sat-14": "Available"}}
	srv := httptest.NewServer(page)
	t.Cleanup(srv.Close)
	e := newEnv(t)
	e.write("lookout.yaml", "sinks:\n  log: {type: log}\napi:\n  allow_private: true # the page is on loopback\n")
	apiBin := clitest.BuildBinary(t, "github.com/lookout-dev/lookout/cmd/api")
	apid := clitest.StartBinary(t, apiBin, e.dir, e.url)
	e.daemons = []*clitest.DaemonTest{apid}
	apid.WaitFor("api readyz", func() bool { code, _ := apid.Get("/readyz"); return code == http.StatusOK })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, secret, err := tokens.Create(ctx, e.pool, tokens.NewToken{Owner: "alice"})
	if err != nil {
		t.Fatal(err)
	}

	web := `{"url": "` + srv.URL + `/slots", "web": {"items": "table.slots tr.slot", "id": "@data-slot-id",
		"fields": {"title": "td.when", "status": "td.state", "price": ".price"}}}`
	alice := &client{t: t, base: "http://" + apid.Addr, token: secret}
	var rep previewReport
	if code := alice.call(http.MethodPost, "/v1/preview", web, &rep); code != http.StatusOK {
		t.Fatalf("POST /v1/preview: %d %+v", code, rep)
	}
	check := func(via string, rep previewReport) {
		t.Helper()
		if rep.Matched != 2 || len(rep.Records) != 2 || rep.Records[0].ID != "sat-10" || rep.Records[1].ID != "sat-14" {
			t.Fatalf("%s: preview = %+v", via, rep)
		}
		if r := rep.Records[1].Record; r["title"] != "sat-14" || r["status"] != "Available" || r["url"] != srv.URL+"/slots" || len(rep.Missing) != 1 || rep.Missing[0] != "price" {
			t.Errorf("%s: the record of sat-14 = %+v, missing %v", via, r, rep.Missing)
		}
	}
	check("HTTP", rep)
	if code := alice.call(http.MethodPost, "/v1/preview", `{"url": "`+srv.URL+`/slots", "web": {"items": "ul.slots li"}}`, &rep); code != http.StatusOK ||
		rep.Matched != 0 || !strings.Contains(rep.Summary, `web.items "ul.slots li" matched nothing`) {
		t.Errorf("preview of a selector matching nothing: %d %+v", code, rep)
	}

	cs, err := mcpsdk.NewClient(&mcpsdk.Implementation{Name: "assistant-of-alice", Version: "1"}, nil).Connect(ctx, &mcpsdk.StreamableClientTransport{
		Endpoint:   "http://" + apid.Addr + "/mcp",
		HTTPClient: &http.Client{Transport: bearerTransport{secret}},
	}, nil)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	var viaMCP previewReport
	if msg := mcpCall(t, cs, "preview", map[string]any{"url": srv.URL + "/slots", "web": map[string]any{"items": "table.slots tr.slot", "id": "@data-slot-id",
		"fields": map[string]any{"title": "td.when", "status": "td.state", "price": ".price"}}}, &viaMCP); msg != "" {
		t.Fatalf("preview tool: %s", msg)
	}
	check("MCP", viaMCP)
	if n := e.count(`SELECT (SELECT count(*) FROM source_definitions) + (SELECT count(*) FROM sources) + (SELECT count(*) FROM records)`); n != 0 {
		t.Errorf("preview saved %d rows", n)
	}
	if n := page.requests(); n != 3 {
		t.Errorf("the page was read %d times, want 3 (two previews over HTTP, one over MCP)", n)
	}
}
