package e2e

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/lookout-dev/lookout/internal/clitest"
	"github.com/lookout-dev/lookout/internal/tokens"
)

// End to end with the real binaries: an operator's http source (file
// config) whose upstream page holds what JSON decoders disagree on — an id
// past 2^53, escapes, a surrogate pair, and an item with a key of 600
// bytes of invalid UTF-8 (which made goccy/go-json panic, and with it the
// syncer) — and a user's watch on the same source made through the API.
// The syncer mirrors every item with its id exact, the evaluator decodes
// the stored snapshots and notifies both the file's watch and the user's.
func TestUpstreamPageDecodersDisagreeOn(t *testing.T) {
	t.Parallel()
	badKey := strings.Repeat("\xdd", 600)
	page := `{"data": [` +
		`{"id": 9007199254740993, "title": "big id", "state": "open", "note": "a\"b\\c\n\u00e9\ud83d\ude00"},` +
		`{"id": 2, "title": "bad bytes", "state": "open", "` + badKey + `": 1}` +
		`], "links": {"next": null}}`
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, page)
	}))
	t.Cleanup(upstream.Close)

	e := newEnv(t)
	e.write("lookout.yaml", "sinks:\n  log: {type: log}\nsyncer:\n  poll_interval: 100ms\nevaluator:\n  catch_up_interval: 1s\ndefaults:\n  jitter: 0s\n")
	e.write("sources/api.yaml", fmt.Sprintf(`name: api
connector: http
every: 1h
rate_limit: {per_second: 1000, burst: 10}
http:
  url: %s/items
  items: body.data
  next: body.links.next
fields:
  status: item.state
watches:
  - name: all
    when: "true"
    notify: [log]
`, upstream.URL))

	// The syncer first: it applies the directory and mirrors the page;
	// the changes wait for the evaluator, started after alice's watch.
	syncerd := clitest.StartBinary(t, clitest.BuildBinary(t, "github.com/lookout-dev/lookout/cmd/syncer"), e.dir, e.url)
	apid := clitest.StartBinary(t, clitest.BuildBinary(t, "github.com/lookout-dev/lookout/cmd/api"), e.dir, e.url)
	e.daemons = []*clitest.DaemonTest{syncerd, apid}
	e.wait("the first run of api", 2, `SELECT count(*) FROM records WHERE source = 'api'`)

	_, secret, err := tokens.Create(t.Context(), e.pool, tokens.NewToken{Owner: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	alice := &client{t: t, base: "http://" + apid.Addr, token: secret}
	if code := alice.call(http.MethodPost, "/v1/watches", `{"source": "api",
		"watch": {"name": "mine", "when": "record.title == \"big id\"", "notify": ["log"]}}`, nil); code != http.StatusCreated {
		t.Fatalf("create alice's watch: %d", code)
	}
	e.daemons = append(e.daemons, clitest.StartBinary(t, clitest.BuildBinary(t, "github.com/lookout-dev/lookout/cmd/evaluator"), e.dir, e.url))
	e.wait("the file watch's notifications", 2, `SELECT count(*) FROM notifications WHERE watch = 'all'`)
	e.wait("alice's notification", 1, `SELECT count(*) FROM notifications WHERE watch = 'mine' AND owner = 'alice'`)

	if n := e.count(`SELECT count(*) FROM notifications WHERE watch = 'mine' AND record_id <> '9007199254740993'`); n != 0 {
		t.Errorf("alice's watch notified %d other records", n)
	}
	if n := e.count(`SELECT count(*) FROM records WHERE source = 'api' AND record_id = '9007199254740993'
	                   AND extra->>'note' = E'a"b\\c\né😀'`); n != 1 {
		t.Errorf("the record past 2^53 is not stored with its exact id and its note unescaped")
	}
	if n := e.count(`SELECT count(*) FROM records WHERE source = 'api' AND record_id = '2'
	                   AND extra ? repeat(U&'\FFFD', 600)`); n != 1 {
		t.Errorf("the item with invalid UTF-8 in a key is not stored with U+FFFD in its place")
	}
	if n := e.count(`SELECT count(*) FROM sync_runs WHERE source = 'api' AND status <> 'succeeded'`); n != 0 {
		t.Errorf("%d runs of api did not succeed", n)
	}
	if logs := syncerd.Logs(); strings.Contains(logs, "panic") {
		t.Errorf("the syncer logged a panic:\n%s", logs)
	}
}
