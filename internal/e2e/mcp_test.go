package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/lookout-dev/lookout/internal/clitest"
	"github.com/lookout-dev/lookout/internal/testsignal"
	"github.com/lookout-dev/lookout/internal/tokens"
)

// bearerTransport adds a token to every request of an MCP client.
type bearerTransport struct{ token string }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// mcpCall calls a tool through the SDK's client and decodes its answer;
// a tool error is returned as its text.
func mcpCall(t *testing.T, cs *mcpsdk.ClientSession, tool string, args map[string]any, out any) (toolErr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcpsdk.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	var text strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcpsdk.TextContent); ok {
			text.WriteString(tc.Text)
		}
	}
	if res.IsError {
		return text.String()
	}
	if out != nil {
		if err := json.Unmarshal([]byte(text.String()), out); err != nil {
			t.Fatalf("%s: decode %s: %v", tool, text.String(), err)
		}
	}
	return ""
}

// End to end with the real binaries, through the MCP SDK's own client:
// alice's assistant creates a source and a watch over /mcp of `api run`;
// the upstream changes and run_now asks for a run; the syncer and the
// evaluator make her notification, her feed subscription is told of it,
// recent_notifications returns it (over HTTP and over `api mcp --stdio`);
// bob sees none of it.
func TestMCPCreatesWatchThatNotifies(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.write("lookout.yaml", "sinks:\n  log: {type: log}\nsyncer:\n  poll_interval: 200ms\nevaluator:\n  catch_up_interval: 1s\napi:\n  allow_private: true\n")
	up := &upstream{tickets: map[string]string{"1": "open"}}
	srv := httptest.NewServer(up)
	defer srv.Close()
	s, ev := e.binaries()
	apiBin := clitest.BuildBinary(t, "github.com/lookout-dev/lookout/cmd/api")
	apid := clitest.StartBinary(t, apiBin, e.dir, e.url)
	e.daemons = []*clitest.DaemonTest{s, ev, apid}
	apid.WaitFor("api readyz", func() bool { code, _ := apid.Get("/readyz"); return code == http.StatusOK })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	secrets := map[string]string{}
	for _, owner := range []string{"alice", "bob"} {
		_, secret, err := tokens.Create(ctx, e.pool, tokens.NewToken{Owner: owner})
		if err != nil {
			t.Fatal(err)
		}
		secrets[owner] = secret
	}
	updated := make(chan string, 16)
	connect := func(owner string, opts *mcpsdk.ClientOptions) *mcpsdk.ClientSession {
		client := mcpsdk.NewClient(&mcpsdk.Implementation{Name: "assistant-of-" + owner, Version: "1"}, opts)
		cs, err := client.Connect(ctx, &mcpsdk.StreamableClientTransport{
			Endpoint:   "http://" + apid.Addr + "/mcp",
			HTTPClient: &http.Client{Transport: bearerTransport{secrets[owner]}},
		}, nil)
		if err != nil {
			t.Fatalf("connect as %s: %v", owner, err)
		}
		t.Cleanup(func() { _ = cs.Close() })
		return cs
	}
	alice := connect("alice", &mcpsdk.ClientOptions{ResourceUpdatedHandler: func(_ context.Context, req *mcpsdk.ResourceUpdatedNotificationRequest) {
		updated <- req.Params.URI
	}})
	bob := connect("bob", nil)

	var created struct {
		Watch  struct{ Source, Name, Owner string }
		Source *struct{ Name, Owner string }
	}
	if msg := mcpCall(t, alice, "create_watch", map[string]any{
		"new_source": map[string]any{"name": "alice-tickets", "connector": "http", "every": "1h",
			"http":   map[string]any{"url": srv.URL + "/tickets"},
			"fields": map[string]any{"id": "item.id", "title": "item.title", "status": "item.status"}},
		"watch":           map[string]any{"name": "done", "when": `record.status == "done"`, "notify": []string{"log"}},
		"idempotency_key": "e2e-1",
	}, &created); msg != "" || created.Source == nil || created.Source.Owner != "alice" || created.Watch.Owner != "alice" {
		t.Fatalf("create_watch: %s %+v", msg, created)
	}
	e.wait("the first run of alice's source", 1, `SELECT count(*) FROM records WHERE source = 'alice-tickets'`)
	var first struct{ Feed string }
	mcpCall(t, alice, "recent_notifications", map[string]any{}, &first)
	if err := alice.Subscribe(ctx, &mcpsdk.SubscribeParams{URI: first.Feed}); err != nil {
		t.Fatalf("subscribe to %s: %v", first.Feed, err)
	}

	up.set("1", "done")
	var run struct{ Requested bool }
	if msg := mcpCall(t, alice, "run_now", map[string]any{"source": "alice-tickets"}, &run); msg != "" || !run.Requested {
		t.Fatalf("run_now: %s %+v", msg, run)
	}
	if uri := testsignal.Receive(t, updated, "notifications/resources/updated of alice's feed"); uri != "lookout://notifications/alice" {
		t.Errorf("updated %s", uri)
	}
	type page struct {
		Items []struct {
			ID       int64
			ChangeID int64 `json:"change_id"`
			Source   string
			Watch    string
			Payload  map[string]any
		}
	}
	var mine page
	mcpCall(t, alice, "recent_notifications", map[string]any{}, &mine)
	if len(mine.Items) != 1 || mine.Items[0].Source != "alice-tickets" || mine.Items[0].Watch != "done" || mine.Items[0].Payload["owner"] != "alice" {
		t.Fatalf("alice's notifications: %+v", mine)
	}
	var trail struct {
		Watches []struct{ Watch, Decision string }
	}
	if msg := mcpCall(t, alice, "explain", map[string]any{"change_id": mine.Items[0].ChangeID}, &trail); msg != "" || len(trail.Watches) != 1 || trail.Watches[0].Decision != "notify" {
		t.Errorf("explain: %s %+v", msg, trail)
	}

	// Bob sees nothing of alice's.
	var his page
	mcpCall(t, bob, "recent_notifications", map[string]any{}, &his)
	if len(his.Items) != 0 {
		t.Errorf("bob's notifications: %+v", his)
	}
	for tool, args := range map[string]map[string]any{
		"get_watch":       {"source": "alice-tickets", "name": "done"},
		"describe_source": {"source": "alice-tickets"},
		"explain":         {"change_id": mine.Items[0].ChangeID},
		"run_now":         {"source": "alice-tickets"},
	} {
		if msg := mcpCall(t, bob, tool, args, nil); !strings.HasPrefix(msg, "not found: ") {
			t.Errorf("bob's %s: %q", tool, msg)
		}
	}

	// The same notification over stdio, as a local assistant sees it.
	cmd := exec.Command(apiBin, "--config", e.dir, "mcp", "--stdio")
	cmd.Env = append(os.Environ(), "DATABASE_URL="+e.url, "LOOKOUT_TOKEN="+secrets["alice"])
	local, err := mcpsdk.NewClient(&mcpsdk.Implementation{Name: "local-assistant", Version: "1"}, nil).Connect(ctx, &mcpsdk.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connect to api mcp --stdio: %v", err)
	}
	defer local.Close()
	var viaStdio page
	if msg := mcpCall(t, local, "recent_notifications", map[string]any{}, &viaStdio); msg != "" || len(viaStdio.Items) != 1 || viaStdio.Items[0].ID != mine.Items[0].ID {
		t.Errorf("recent_notifications over stdio: %s %+v", msg, viaStdio)
	}
	if e.count(`SELECT count(*) FROM audit_log WHERE via = 'mcp' AND owner = 'alice'`) == 0 {
		t.Errorf("no audit row of alice's MCP changes")
	}
}
