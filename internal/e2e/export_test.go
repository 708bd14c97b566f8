package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/lookout-dev/lookout/internal/clitest"
	"github.com/lookout-dev/lookout/internal/secrets"
	"github.com/lookout-dev/lookout/internal/tokens"
)

// End to end with the real api binary on two instances (two schemas,
// two keys): alice exports from the first (a source with a credential
// header and a watch, and a feed); importing into the second asks for
// the credential, then creates the same definitions (dry run first);
// a second import changes nothing, and the OPML of the first instance
// imports into the second as the feed it already has.
func TestExportFromOneInstanceImportIntoAnother(t *testing.T) {
	t.Parallel()
	bin := clitest.BuildBinary(t, "github.com/lookout-dev/lookout/cmd/api")
	start := func() (*env, *client) {
		e := newEnv(t)
		e.write("lookout.yaml", "sinks:\n  log: {type: log}\napi:\n  allow_private: true\n")
		key, err := secrets.NewKey("k1")
		if err != nil {
			t.Fatal(err)
		}
		apid := clitest.StartBinaryEnv(t, bin, e.dir, e.url, secrets.KeyEnv+"="+key)
		e.daemons = []*clitest.DaemonTest{apid}
		_, secret, err := tokens.Create(context.Background(), e.pool, tokens.NewToken{Owner: "alice"})
		if err != nil {
			t.Fatal(err)
		}
		return e, &client{t: t, base: "http://" + apid.Addr, token: secret}
	}
	_, one := start()
	two, other := start()

	if code := one.call(http.MethodPost, "/v1/sources", `{"name": "tickets", "connector": "http", "every": "1h",
		"http": {"url": "http://127.0.0.1:9/tickets", "headers": {"Authorization": "Bearer upstream-secret-1"}},
		"fields": {"id": "item.id", "title": "item.title"},
		"watches": [{"name": "new", "when": "change.kind == \"created\"", "notify": ["log"]}]}`, nil); code != http.StatusCreated {
		t.Fatalf("create tickets: %d", code)
	}
	if code := one.call(http.MethodPost, "/v1/sources", `{"name": "feed", "connector": "rss", "every": "2h", "rss": {"url": "http://127.0.0.1:9/feed.xml"}}`, nil); code != http.StatusCreated {
		t.Fatalf("create feed: %d", code)
	}
	var exp struct {
		Format  string            `json:"format"`
		Note    string            `json:"note"`
		Sources []json.RawMessage `json:"sources"`
		Watches []json.RawMessage `json:"watches"`
	}
	if code := one.call(http.MethodGet, "/v1/export", "", &exp); code != http.StatusOK || len(exp.Sources) != 2 {
		t.Fatalf("export: %d %+v", code, exp)
	}
	raw, _ := json.Marshal(exp)
	if strings.Contains(string(raw), "upstream-secret-1") || !strings.Contains(string(raw), `"Authorization":"[redacted]"`) {
		t.Fatalf("the export shows the credential: %s", raw)
	}

	var problem struct {
		Status int
		Errors []struct{ Pointer, Detail string }
	}
	if code := other.call(http.MethodPost, "/v1/import", string(raw), &problem); code != http.StatusUnprocessableEntity ||
		len(problem.Errors) != 1 || problem.Errors[0].Pointer != "/sources/1/http/headers/Authorization" {
		t.Fatalf("import with the credential [redacted]: %d %+v", code, problem)
	}
	withSecret := strings.Replace(string(raw), `"[redacted]"`, `"Bearer upstream-secret-2"`, 1)
	var res struct {
		DryRun    bool `json:"dry_run"`
		Created   int
		Unchanged int
	}
	dry := strings.Replace(withSecret, `{"format"`, `{"dry_run":true,"format"`, 1)
	if code := other.call(http.MethodPost, "/v1/import", dry, &res); code != http.StatusOK || !res.DryRun || res.Created != 3 {
		t.Fatalf("dry run: %d %+v", code, res)
	}
	if n := two.count(`SELECT count(*) FROM source_definitions`); n != 0 {
		t.Fatalf("the dry run saved %d sources", n)
	}
	if code := other.call(http.MethodPost, "/v1/import", withSecret, &res); code != http.StatusOK || res.Created != 3 {
		t.Fatalf("import: %d %+v", code, res)
	}
	if code := other.call(http.MethodPost, "/v1/import", withSecret, &res); code != http.StatusOK || res.Created != 0 || res.Unchanged != 3 {
		t.Fatalf("import again: %d %+v", code, res)
	}
	var exp2 struct {
		Sources []json.RawMessage `json:"sources"`
	}
	other.call(http.MethodGet, "/v1/export", "", &exp2)
	if a, b := fmt.Sprint(jsonStrings(exp.Sources)), fmt.Sprint(jsonStrings(exp2.Sources)); a != b {
		t.Fatalf("the second instance exports\n%s\nnot\n%s", b, a)
	}
	if n := two.count(`SELECT count(*) FROM source_definitions WHERE definition::text LIKE '%upstream-secret%'`); n != 0 {
		t.Fatalf("the imported credential is stored in clear")
	}

	// OPML from the first instance into the second: the feed is there.
	req, _ := http.NewRequest(http.MethodGet, one.base+"/v1/export.opml", nil)
	req.Header.Set("Authorization", "Bearer "+one.token)
	resp, err := one.do(req)
	if err != nil {
		t.Fatal(err)
	}
	opml, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(opml), `xmlUrl="http://127.0.0.1:9/feed.xml"`) {
		t.Fatalf("OPML export:\n%s", opml)
	}
	req, _ = http.NewRequest(http.MethodPost, other.base+"/v1/import/opml", strings.NewReader(string(opml)))
	req.Header.Set("Authorization", "Bearer "+other.token)
	req.Header.Set("Content-Type", "text/x-opml")
	resp, err = other.do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err := json.Unmarshal(b, &res); err != nil || resp.StatusCode != http.StatusOK || res.Created != 0 || res.Unchanged != 1 {
		t.Fatalf("OPML import: %d %s", resp.StatusCode, b)
	}
}

func jsonStrings(rs []json.RawMessage) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = string(r)
	}
	return out
}
