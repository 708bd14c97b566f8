package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/lookout-dev/lookout/internal/apitest"
	"github.com/lookout-dev/lookout/internal/clitest"
	"github.com/lookout-dev/lookout/internal/definitions"
	"github.com/lookout-dev/lookout/internal/syncer/syncertest"
	"github.com/lookout-dev/lookout/internal/testsignal"
	"github.com/lookout-dev/lookout/internal/tokens"
)

// upstream is an HTTP JSON API answering a list of tickets, like the
// http connector's upstreams.
type upstream struct {
	mu      sync.Mutex
	tickets map[string]string // id -> status
}

func (u *upstream) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	u.mu.Lock()
	defer u.mu.Unlock()
	var items []map[string]string
	for id, status := range u.tickets {
		items = append(items, map[string]string{"id": id, "title": "ticket " + id, "status": status})
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(items)
}

func (u *upstream) set(id, status string) {
	u.mu.Lock()
	u.tickets[id] = status
	u.mu.Unlock()
}

// client calls the api binary with one owner's token; every /v1
// exchange is checked against docs/openapi.json (apitest).
type client struct {
	t     *testing.T
	base  string
	token string
	http  *http.Client
}

// do sends req through the checking client.
func (c *client) do(req *http.Request) (*http.Response, error) {
	if c.http == nil {
		c.http = apitest.Client(c.t)
	}
	return c.http.Do(req)
}

func (c *client) call(method, path, body string, out any) int {
	c.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, c.base+path, rd)
	req.Header.Set("Authorization", "Bearer "+c.token)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			c.t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, b)
		}
	}
	return resp.StatusCode
}

// stream opens the notification stream and returns the ids of the
// notification events as they come.
func (c *client) stream() (<-chan string, func()) {
	c.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/v1/notifications/stream", nil)
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := c.do(req)
	if err != nil || resp.StatusCode != 200 {
		cancel()
		c.t.Fatalf("stream: %v %v", resp, err)
	}
	ch := make(chan string, 16)
	go func() {
		defer close(ch)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		event := ""
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				event = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: ") && event == "notification":
				ch <- strings.TrimPrefix(line, "data: ")
			case line == "":
				event = ""
			}
		}
	}()
	return ch, cancel
}

// End to end with the real binaries: alice's token creates a source and a
// watch over HTTP; the upstream changes; the notification is hers, listed
// and streamed; bob sees none of it.
func TestAPICreatesWatchThatNotifies(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.write("lookout.yaml", "sinks:\n  log: {type: log}\nsyncer:\n  poll_interval: 200ms\nevaluator:\n  catch_up_interval: 1s\napi:\n  allow_private: true\n")
	up := &upstream{tickets: map[string]string{"1": "open"}}
	srv := httptest.NewServer(up)
	defer srv.Close()
	s, ev := e.binaries()
	apid := clitest.StartBinary(t, clitest.BuildBinary(t, "github.com/lookout-dev/lookout/cmd/api"), e.dir, e.url)
	e.daemons = []*clitest.DaemonTest{s, ev, apid}
	ctx := context.Background()
	mk := func(owner string) *client {
		_, secret, err := tokens.Create(ctx, e.pool, tokens.NewToken{Owner: owner})
		if err != nil {
			t.Fatal(err)
		}
		return &client{t: t, base: "http://" + apid.Addr, token: secret}
	}
	alice, bob := mk("alice"), mk("bob")

	var created struct {
		Watch  struct{ Source, Name, Owner string }
		Source *struct{ Name, Owner string }
	}
	code := alice.call(http.MethodPost, "/v1/watches", fmt.Sprintf(`{
		"new_source": {"name": "alice-tickets", "connector": "http", "every": "1h", "http": {"url": %q},
		               "fields": {"id": "item.id", "title": "item.title", "status": "item.status"}},
		"watch": {"name": "done", "when": "record.status == \"done\"", "notify": ["log"]}}`, srv.URL+"/tickets"), &created)
	if code != http.StatusCreated || created.Source == nil || created.Source.Owner != "alice" || created.Watch.Owner != "alice" {
		t.Fatalf("create_watch: %d %+v", code, created)
	}
	e.wait("the first run of alice's source", 1, `SELECT count(*) FROM records WHERE source = 'alice-tickets'`)
	events, stop := alice.stream()
	defer stop()
	bobEvents, stopBob := bob.stream()
	defer stopBob()

	up.set("1", "done")
	if code := alice.call(http.MethodPost, "/v1/sources/alice-tickets/run", "", nil); code != http.StatusAccepted {
		t.Fatalf("run_now: %d", code)
	}
	data := testsignal.Receive(t, events, "alice's streamed notification")
	var n struct {
		ID                  int64
		ChangeID            int64 `json:"change_id"`
		Source, Watch, Kind string
		Payload             map[string]any
	}
	if err := json.Unmarshal([]byte(data), &n); err != nil || n.Source != "alice-tickets" || n.Watch != "done" || n.Payload["owner"] != "alice" {
		t.Fatalf("streamed %s (%v)", data, err)
	}
	var page struct {
		Items []struct {
			ID    int64
			Watch string
		}
	}
	if code := alice.call(http.MethodGet, "/v1/notifications", "", &page); code != 200 || len(page.Items) != 1 || page.Items[0].ID != n.ID {
		t.Errorf("alice's list: %d %+v", code, page)
	}
	// Bob sees nothing of alice's: no notification, no watch, no source.
	if code := bob.call(http.MethodGet, "/v1/notifications", "", &page); code != 200 || len(page.Items) != 0 {
		t.Errorf("bob's list: %d %+v", code, page)
	}
	for _, path := range []string{"/v1/watches/alice-tickets/done", "/v1/sources/alice-tickets", "/v1/sources/alice-tickets/fields"} {
		var p struct{ Status int }
		if code := bob.call(http.MethodGet, path, "", &p); code != http.StatusNotFound {
			t.Errorf("bob GET %s: %d", path, code)
		}
	}
	select {
	case d := <-bobEvents:
		t.Errorf("bob streamed %s", d)
	default:
	}
	// explain: the trail of the change her watch judged; not bob's.
	var trail struct {
		RecordID string `json:"record_id"`
		Watches  []struct {
			Watch, Decision, Step string
			Notifications         []struct{ ID int64 }
		}
	}
	if code := alice.call(http.MethodGet, fmt.Sprintf("/v1/changes/%d/explain", n.ChangeID), "", &trail); code != 200 ||
		len(trail.Watches) != 1 || trail.Watches[0].Decision != "notify" || trail.Watches[0].Step != "filter" ||
		len(trail.Watches[0].Notifications) != 1 || trail.Watches[0].Notifications[0].ID != n.ID {
		t.Errorf("explain: %d %+v", code, trail)
	}
	var p struct{ Detail string }
	if code := bob.call(http.MethodGet, fmt.Sprintf("/v1/changes/%d/explain", n.ChangeID), "", &p); code != http.StatusNotFound {
		t.Errorf("bob explains alice's change: %d %+v", code, p)
	}
	// The evaluator's explain and replay commands read the watches from
	// the definitions, not from the files: alice's watch, made through
	// the API, is configured there, with its when, and is replayed.
	evaluatorCLI := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(clitest.BuildBinary(t, "github.com/lookout-dev/lookout/cmd/evaluator"), append([]string{"--config", e.dir}, args...)...)
		cmd.Env = append(os.Environ(), "DATABASE_URL="+e.url)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("evaluator %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	out := evaluatorCLI("explain", "--change", fmt.Sprint(n.ChangeID))
	if !strings.Contains(out, "\n  watch done\n") || !strings.Contains(out, `record.status == "done"`) || strings.Contains(out, "no longer configured") {
		t.Errorf("evaluator explain of alice's change:\n%s", out)
	}
	out = evaluatorCLI("replay", "--source", "alice-tickets", "--since", "1h", "--all", "--no-model")
	if !strings.Contains(out, "source alice-tickets: 2 change(s), 2 decision(s), 0 would change, 0 new") || !regexp.MustCompile(`(?m)^\d+\s+alice-tickets/1\s+done\s+notify \(filter\)\s+=\s+notify \(filter\)`).MatchString(out) {
		t.Errorf("evaluator replay of alice's source:\n%s", out)
	}
	var dry struct {
		Changes     int
		WouldNotify int `json:"would_notify"`
		Matches     []struct {
			RecordID string `json:"record_id"`
			Recorded string
		}
		Summary string
	}
	// dry_run of her saved watch replays it: the notify recorded then,
	// and the one it would make now.
	if code := alice.call(http.MethodPost, "/v1/dry_run", `{"source": "alice-tickets", "since": "1h",
		"watch": {"name": "done", "when": "record.status == \"done\"", "notify": ["log"]}}`, &dry); code != 200 || dry.Changes != 2 || dry.WouldNotify != 1 ||
		dry.Matches[0].RecordID != "1" || dry.Matches[0].Recorded != "notify" {
		t.Errorf("dry_run of alice's saved watch: %d %+v", code, dry)
	}
	// dry_run: a new watch backtested over the stored changes, saving nothing.
	if code := alice.call(http.MethodPost, "/v1/dry_run", `{"source": "alice-tickets", "since": "1h",
		"watch": {"name": "opened", "when": "record.status == \"open\""}}`, &dry); code != 200 || dry.Changes != 2 || dry.WouldNotify != 1 ||
		dry.Matches[0].RecordID != "1" || !strings.Contains(dry.Summary, "would have notified 1 time(s)") {
		t.Errorf("dry_run: %d %+v", code, dry)
	}
	if code := alice.call(http.MethodPost, "/v1/dry_run", `{"source": "alice-tickets", "watch": {"name": "x", "when": "record.stat == 1"}}`, &p); code != 422 ||
		!strings.Contains(p.Detail, "problem") {
		t.Errorf("dry_run with a bad field: %d %+v", code, p)
	}
	if code := bob.call(http.MethodPost, "/v1/dry_run", `{"source": "alice-tickets", "watch": {"name": "x"}}`, &p); code != http.StatusNotFound {
		t.Errorf("bob's dry_run on alice's source: %d %+v", code, p)
	}
	if e.count(`SELECT count(*) FROM watches WHERE name IN ('opened', 'x')`) != 0 {
		t.Error("dry_run saved a watch")
	}
	// describe_source shows alice the fields her watch can use.
	var d struct{ Fields []struct{ Path string } }
	alice.call(http.MethodGet, "/v1/sources/alice-tickets/fields", "", &d)
	var paths []string
	for _, f := range d.Fields {
		paths = append(paths, f.Path)
	}
	if !strings.Contains(strings.Join(paths, ","), "record.status") {
		t.Errorf("describe_source fields: %v", paths)
	}
}

// A source created through the API is fetched through the untrusted
// egress policy when it is dialed, not only checked when it is created:
// with api.allow_private off, its loopback URL (here stored directly, as
// a name that resolved elsewhere at creation could rebind) fails the run;
// an operator's file source on the same upstream is fetched.
func TestAPISourceDialsThroughUntrustedPolicy(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	up := &upstream{tickets: map[string]string{"1": "open"}}
	srv := httptest.NewServer(up)
	defer srv.Close()
	e.write("sources/ops.yaml", fmt.Sprintf("name: ops\nconnector: http\nevery: 1h\nhttp:\n  url: %s/tickets\n", srv.URL))
	cfg := e.config()
	ctx := context.Background()
	if _, err := definitions.Apply(ctx, e.pool, cfg, definitions.ApplyOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	store := definitions.NewStore(e.pool, &definitions.Validator{Global: &cfg.Global})
	if _, _, err := store.CreateSource(ctx, definitions.Actor{Owner: "mallory"},
		[]byte(fmt.Sprintf(`{"name": "mine", "connector": "http", "every": "1h", "http": {"url": %q}}`, srv.URL+"/tickets"))); err != nil {
		t.Fatal(err)
	}
	s := e.syncer("syncer-1")
	if _, err := definitions.NewFollower(e.pool, &cfg.Global, s.Apply).CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e.pool.Exec(ctx, `UPDATE sources SET next_run_at = now()`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RunDue(ctx); err != nil {
		t.Fatal(err)
	}
	status, errText := syncertest.LastRun(t, e.pool, "mine")
	if status != "failed" || !strings.Contains(errText, "egress policy refuses connections to 127.0.0.1") {
		t.Errorf("mallory's loopback source: %s %q", status, errText)
	}
	if status, errText := syncertest.LastRun(t, e.pool, "ops"); status != "succeeded" {
		t.Errorf("the operator's source: %s %q", status, errText)
	}
}
