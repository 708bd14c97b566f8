package mcp_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/lookout-dev/lookout/internal/control"
	"github.com/lookout-dev/lookout/internal/mcp"
	"github.com/lookout-dev/lookout/internal/testsignal"
)

// The tools an assistant sees, listed through the SDK's client: their
// names, and input schemas inferred from the Go types (objects that allow
// no other property, every argument described).
func TestToolsAndSchemas(t *testing.T) {
	t.Parallel()
	f := setup(t)
	cs := f.connect("alice", nil)
	ctx := context.Background()
	want := map[string][]string{
		"describe_source":      {"connector", "sample", "source"},
		"recent_notifications": {"after_id", "cursor", "limit", "source", "watch"},
	}
	var names []string
	for tool, err := range cs.Tools(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, tool.Name)
		props, ok := want[tool.Name]
		if !ok {
			continue
		}
		var in jsonschema.Schema
		b, _ := json.Marshal(tool.InputSchema)
		if err := json.Unmarshal(b, &in); err != nil {
			t.Fatalf("%s input schema %s: %v", tool.Name, b, err)
		}
		var got []string
		for name, p := range in.Properties {
			got = append(got, name)
			if p.Description == "" {
				t.Errorf("%s.%s has no description", tool.Name, name)
			}
		}
		slices.Sort(got)
		if in.Type != "object" || !slices.Equal(got, props) || in.AdditionalProperties == nil || in.AdditionalProperties.Not == nil {
			t.Errorf("%s input schema = %s; want an object of %v allowing nothing else", tool.Name, b, props)
		}
		if tool.OutputSchema == nil || len(tool.Description) < 200 || tool.Annotations == nil || !tool.Annotations.ReadOnlyHint {
			t.Errorf("%s: output schema %v, description %q, annotations %+v", tool.Name, tool.OutputSchema, tool.Description, tool.Annotations)
		}
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"describe_source", "recent_notifications"}) {
		t.Errorf("tools = %v", names)
	}
	// The output schema of recent_notifications describes a notification's fields.
	for tool, err := range cs.Tools(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		if tool.Name == "recent_notifications" {
			b, _ := json.Marshal(tool.OutputSchema)
			if !strings.Contains(string(b), "The change that was judged; pass it to explain.") {
				t.Errorf("recent_notifications output schema lacks the notification's field docs: %s", b)
			}
		}
	}
}

// describe_source, then the upstream changes, the real syncer and
// evaluator make a notification of alice's watch, and alice's assistant
// reads it with recent_notifications and is told of it on her feed; bob
// sees none of it.
func TestNotificationsReachTheirOwner(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.up.set(release(1, "v1.0", "draft"), release(2, "v2.0", "draft"))
	if n := f.pipeline(); n != 2 {
		t.Fatalf("evaluator judged %d changes, want 2 created", n)
	}

	updated := make(chan string, 10)
	alice := f.connect("alice", &mcpsdk.ClientOptions{
		ResourceUpdatedHandler: func(_ context.Context, req *mcpsdk.ResourceUpdatedNotificationRequest) {
			updated <- req.Params.URI
		},
	})
	bob := f.connect("bob", nil)

	d := call[control.SourceDescription](t, alice, "describe_source", map[string]any{"source": "releases"})
	if d.Connector != "http" || d.Sampled != 2 {
		t.Errorf("describe_source = %+v", d)
	}
	var status *control.FieldInfo
	for i, fi := range d.Fields {
		if fi.Path == "record.status" {
			status = &d.Fields[i]
		}
	}
	if status == nil || !slices.Equal(status.Types, []string{"string"}) || !slices.Contains(status.Examples, any("draft")) {
		t.Errorf("record.status described as %+v; fields %+v", status, d.Fields)
	}

	page := call[mcp.RecentNotificationsOutput](t, alice, "recent_notifications", map[string]any{})
	if len(page.Items) != 0 || page.Feed != "lookout://notifications/alice" {
		t.Fatalf("before the release: %+v", page)
	}
	ctx := context.Background()
	if err := alice.Subscribe(ctx, &mcpsdk.SubscribeParams{URI: page.Feed}); err != nil {
		t.Fatalf("subscribe to %s: %v", page.Feed, err)
	}
	// Bob may not read or subscribe to alice's feed: it does not exist for him.
	if _, err := bob.ReadResource(ctx, &mcpsdk.ReadResourceParams{URI: page.Feed}); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("bob reads alice's feed: %v", err)
	}
	if err := bob.Subscribe(ctx, &mcpsdk.SubscribeParams{URI: page.Feed}); err == nil {
		t.Errorf("bob subscribed to alice's feed")
	}

	// v2.0 is released upstream.
	f.up.set(release(1, "v1.0", "draft"), release(2, "v2.0", "released"))
	if n := f.pipeline(); n != 1 {
		t.Fatalf("evaluator judged %d changes, want 1 update", n)
	}
	if uri := testsignal.Receive(t, updated, "notifications/resources/updated for alice's feed"); uri != page.Feed {
		t.Errorf("updated %s, want %s", uri, page.Feed)
	}
	page = call[mcp.RecentNotificationsOutput](t, alice, "recent_notifications", map[string]any{"limit": 10})
	if len(page.Items) != 1 {
		t.Fatalf("alice's notifications: %+v", page.Items)
	}
	n := page.Items[0]
	if n.Source != "releases" || n.Watch != "shipped" || n.RecordID != "2" || !strings.Contains(n.Title, "v2.0") || n.ChangeID == nil {
		t.Errorf("notification = %d %s %s %s %q", n.ID, n.Source, n.Watch, n.RecordID, n.Title)
	}
	// Polling with after_id returns only what is newer.
	if got := call[mcp.RecentNotificationsOutput](t, alice, "recent_notifications", map[string]any{"after_id": n.ID}); len(got.Items) != 0 || got.NextCursor != "" {
		t.Errorf("after_id %d: %+v", n.ID, got)
	}
	if got := call[mcp.RecentNotificationsOutput](t, alice, "recent_notifications", map[string]any{"after_id": n.ID - 1}); len(got.Items) != 1 {
		t.Errorf("after_id %d: %+v", n.ID-1, got)
	}
	// The feed resource holds it too.
	res, err := alice.ReadResource(ctx, &mcpsdk.ReadResourceParams{URI: page.Feed})
	if err != nil || len(res.Contents) != 1 || !strings.Contains(res.Contents[0].Text, `"record_id":"2"`) {
		t.Errorf("read %s: %v %+v", page.Feed, err, res)
	}

	// Bob sees nothing of alice's.
	if got := call[mcp.RecentNotificationsOutput](t, bob, "recent_notifications", map[string]any{}); len(got.Items) != 0 || got.Feed != "lookout://notifications/bob" {
		t.Errorf("bob's notifications: %+v", got)
	}
	// A source private to alice does not exist for bob.
	if _, err := f.pool.Exec(ctx, `UPDATE source_definitions SET owner = 'alice', managed_by = 'api' WHERE name = 'releases'`); err != nil {
		t.Fatal(err)
	}
	if msg := toolError(t, bob, "describe_source", map[string]any{"source": "releases"}); !strings.HasPrefix(msg, `not found: source "releases" does not exist`) {
		t.Errorf("bob describes alice's source: %s", msg)
	}
	// An admin sees every notification.
	root := f.connect("root", nil)
	if got := call[mcp.RecentNotificationsOutput](t, root, "recent_notifications", map[string]any{}); len(got.Items) != 1 {
		t.Errorf("admin's notifications: %+v", got)
	}
}

// Bad arguments are tool errors that name the argument with the HTTP
// API's words, so that a model corrects its call.
func TestBadArguments(t *testing.T) {
	t.Parallel()
	f := setup(t)
	cs := f.connect("alice", nil)
	for _, tc := range []struct {
		tool string
		args map[string]any
		want string
	}{
		{"describe_source", map[string]any{"sourc": "releases"},
			"/sourc: unknown field \"sourc\"; the fields allowed here are connector, sample, source: remove it or correct its name"},
		{"describe_source", map[string]any{"source": "releases", "sample": "many"},
			`/sample: wrong type: expected integer, got the string "many"`},
		{"describe_source", map[string]any{"source": "releases", "sample": 1.5},
			`/sample: wrong type: expected integer, got the number 1.5`},
		{"describe_source", map[string]any{"source": "releases", "sample": 5000},
			"/sample: sample must be between 1 and 1000"},
		{"describe_source", map[string]any{},
			"/source: give either source (a source name) or connector"},
		{"recent_notifications", map[string]any{"limit": 0, "cursor": "not-a-cursor"},
			"/cursor: "},
		{"recent_notifications", map[string]any{"limit": 500},
			"/limit: limit must be between 1 and 200"},
		{"recent_notifications", map[string]any{"after_id": -1},
			"/after_id: after_id must be 0 or a notification id"},
	} {
		msg := toolError(t, cs, tc.tool, tc.args)
		if !strings.HasPrefix(msg, "invalid arguments (") || !strings.Contains(msg, "\n"+tc.want) {
			t.Errorf("%s %v:\n got: %s\nwant a line: %s", tc.tool, tc.args, msg, tc.want)
		}
	}
	if msg := toolError(t, cs, "describe_source", map[string]any{"source": "nope"}); !strings.HasPrefix(msg, `not found: source "nope" does not exist`) {
		t.Errorf("unknown source: %s", msg)
	}
}

// /mcp is behind the API's tokens: none, an unknown one or a revoked one
// cannot open a session; revoking a token ends its session's calls.
func TestTokens(t *testing.T) {
	t.Parallel()
	f := setup(t)
	resp, err := http.Post(f.srv.URL+"/mcp", "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") == "" {
		t.Errorf("no token: %d %v", resp.StatusCode, resp.Header)
	}
	if _, err := f.dial("lk_nonsense", nil); err == nil || !strings.Contains(err.Error(), "Unauthorized") {
		t.Errorf("unknown token: %v", err)
	}
	cs := f.connect("alice", nil)
	call[mcp.RecentNotificationsOutput](t, cs, "recent_notifications", map[string]any{})
	if _, err := f.pool.Exec(context.Background(), `UPDATE api_tokens SET revoked_at = now() WHERE id = $1`, f.tokenID["alice"]); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := cs.CallTool(ctx, &mcpsdk.CallToolParams{Name: "recent_notifications", Arguments: map[string]any{}}); err == nil {
		t.Errorf("a revoked token's session still calls tools")
	}
	if _, err := f.dial(f.tokens["alice"], nil); err == nil {
		t.Errorf("a revoked token opens a session")
	}
}

// docs/mcp.md has a section for every tool whose input schema is the
// server's.
func TestDocsDescribeEveryTool(t *testing.T) {
	t.Parallel()
	f := setup(t)
	cs := f.connect("alice", nil)
	doc, err := os.ReadFile("../../docs/mcp.md")
	if err != nil {
		t.Fatal(err)
	}
	for tool, err := range cs.Tools(context.Background(), nil) {
		if err != nil {
			t.Fatal(err)
		}
		_, section, ok := strings.Cut(string(doc), "\n### `"+tool.Name+"`\n")
		if !ok {
			t.Errorf("docs/mcp.md has no section ### `%s`", tool.Name)
			continue
		}
		section, _, _ = strings.Cut(section, "\n### ")
		_, block, ok := strings.Cut(section, "Input schema:\n\n```json\n")
		block, _, _ = strings.Cut(block, "```")
		var documented, served any
		if !ok || json.Unmarshal([]byte(block), &documented) != nil {
			t.Errorf("docs/mcp.md: the section of %s has no JSON input schema", tool.Name)
			continue
		}
		b, _ := json.Marshal(tool.InputSchema)
		_ = json.Unmarshal(b, &served)
		if !reflect.DeepEqual(documented, served) {
			want, _ := json.MarshalIndent(served, "", "  ")
			t.Errorf("docs/mcp.md: the input schema of %s is out of date; the server's is\n%s", tool.Name, want)
		}
	}
}
