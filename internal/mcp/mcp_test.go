package mcp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"reflect"
	"regexp"
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
		"describe_source":       {"connector", "sample", "source"},
		"recent_notifications":  {"after_id", "cursor", "limit", "source", "watch"},
		"create_watch":          {"idempotency_key", "new_source", "source", "watch"},
		"list_watches":          {"cursor", "limit", "source"},
		"get_watch":             {"name", "source"},
		"update_watch":          {"name", "source", "watch"},
		"delete_watch":          {"name", "source"},
		"pause_watch":           {"name", "reason", "source"},
		"resume_watch":          {"name", "source"},
		"rotate_webhook_secret": {"name", "source"},
		"run_now":               {"source"},
		"dry_run":               {"max_calls", "since", "source", "use_model", "watch"},
		"explain":               {"change_id"},
		"preview":               {"fields", "url", "web"},
		"export":                {"format"},
		"import":                {"dry_run", "format", "note", "sources", "watches", "yaml"},
		"import_feeds":          {"dry_run", "every", "kind", "opml", "urls"},
		"report_model_drift":    {"source", "watch", "weeks"},
		"report_task_runs":      {"cursor", "limit", "record_id", "source", "status", "task"},
		"me_link":               {"ttl"},
	}
	readOnly := map[string]bool{"export": true, "describe_source": true, "recent_notifications": true, "list_watches": true, "get_watch": true, "dry_run": true, "explain": true, "preview": true, "report_model_drift": true, "report_task_runs": true}
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
		if tool.OutputSchema == nil || len(tool.Description) < 200 || tool.Annotations == nil || tool.Annotations.ReadOnlyHint != readOnly[tool.Name] {
			t.Errorf("%s: output schema %v, description %q, annotations %+v", tool.Name, tool.OutputSchema, tool.Description, tool.Annotations)
		}
	}
	slices.Sort(names)
	var wantNames []string
	for name := range want {
		wantNames = append(wantNames, name)
	}
	slices.Sort(wantNames)
	if !slices.Equal(names, wantNames) {
		t.Errorf("tools = %v, want %v", names, wantNames)
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

// Alice's assistant, through the SDK's client over streamable HTTP:
// describe_source, create_watch (idempotent), then the upstream changes,
// the real syncer and evaluator make a notification of her watch, which
// recent_notifications returns and her feed announces; pause, resume,
// update, run_now and delete act on her watch; bob sees none of it and
// can touch none of it (not found).
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

	// Alice's assistant creates her watch; a retry with the same key
	// creates nothing more, the same key with other arguments is refused.
	create := map[string]any{"source": "releases", "watch": shippedWatch, "idempotency_key": "k-1"}
	created := call[control.CreatedWatch](t, alice, "create_watch", create)
	if w := created.Watch; w.Source != "releases" || w.Name != "shipped" || w.Owner != "alice" || w.ManagedBy != "api" || w.Paused || created.Source != nil {
		t.Errorf("create_watch = %+v", created)
	}
	if again := call[control.CreatedWatch](t, alice, "create_watch", create); !again.Watch.CreatedAt.Equal(created.Watch.CreatedAt) {
		t.Errorf("retry of create_watch = %+v, want the first answer %+v", again, created)
	}
	other := map[string]any{"source": "releases", "watch": map[string]any{"name": "other", "when": "true"}, "idempotency_key": "k-1"}
	if msg := toolError(t, alice, "create_watch", other); !strings.Contains(msg, "\n/idempotency_key: ") {
		t.Errorf("same key, other arguments: %s", msg)
	}
	if msg := toolError(t, alice, "create_watch", map[string]any{"source": "releases", "watch": shippedWatch}); !strings.HasPrefix(msg, "conflict: ") {
		t.Errorf("a second watch of the same name: %s", msg)
	}
	if got := call[control.WatchPage](t, alice, "list_watches", map[string]any{}); len(got.Items) != 1 || got.Items[0].Name != "shipped" {
		t.Errorf("alice's watches: %+v", got)
	}
	if got := call[control.WatchPage](t, bob, "list_watches", map[string]any{}); len(got.Items) != 0 {
		t.Errorf("bob's watches: %+v", got)
	}
	for _, tool := range []string{"get_watch", "delete_watch", "pause_watch", "resume_watch"} {
		if msg := toolError(t, bob, tool, map[string]any{"source": "releases", "name": "shipped"}); !strings.HasPrefix(msg, `not found: watch "releases/shipped" does not exist`) {
			t.Errorf("bob's %s of alice's watch: %s", tool, msg)
		}
	}
	if msg := toolError(t, bob, "update_watch", map[string]any{"source": "releases", "name": "shipped", "watch": shippedWatch}); !strings.HasPrefix(msg, "not found: ") {
		t.Errorf("bob's update_watch of alice's watch: %s", msg)
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
	// explain: the decision trail of the change that notified alice; bob
	// has no trail of it.
	trail := call[control.TrailView](t, alice, "explain", map[string]any{"change_id": *n.ChangeID})
	if trail.RecordID != "2" || len(trail.Watches) != 1 || trail.Watches[0].Watch != "shipped" || trail.Watches[0].Decision != "notify" ||
		!trail.Watches[0].Matched || len(trail.Watches[0].Notifications) != 1 || trail.Watches[0].Notifications[0].ID != n.ID {
		t.Errorf("explain %d = %+v", *n.ChangeID, trail)
	}
	if msg := toolError(t, bob, "explain", map[string]any{"change_id": *n.ChangeID}); !strings.HasPrefix(msg, "not found: change ") {
		t.Errorf("bob explains alice's change: %s", msg)
	}
	// dry_run: over the stored history, a broader watch would have
	// notified on every change (2 created, 1 update); nothing is saved.
	rep := call[control.DryRunReport](t, alice, "dry_run", map[string]any{"source": "releases", "since": "24h",
		"watch": map[string]any{"name": "everything", "when": "true"}})
	if rep.Changes != 3 || rep.WouldNotify != 3 || len(rep.Matches) != 3 || rep.Summary == "" {
		t.Errorf("dry_run = %+v", rep)
	}
	// With use_model an evaluator answers: none runs here, so the call
	// says so and names the request it withdrew.
	if msg := toolError(t, alice, "dry_run", map[string]any{"source": "releases", "since": "24h", "use_model": true,
		"watch": map[string]any{"name": "asked", "when": "true", "ask": "Is this a major release?"}}); !regexp.MustCompile(
		`^unavailable: dry run request \d+ was not taken by any evaluator within 300ms, and was withdrawn: .*is an evaluator running\?`).MatchString(msg) {
		t.Errorf("dry_run with use_model and no evaluator: %s", msg)
	}
	if msg := toolError(t, alice, "dry_run", map[string]any{"source": "releases", "watch": map[string]any{"name": "x", "when": `record.titel == "x"`}}); !strings.Contains(msg, "\n/watch/when: ") {
		t.Errorf("dry_run of a bad expression: %s", msg)
	}
	if msg := toolError(t, alice, "dry_run", map[string]any{"source": "releases", "since": "a week", "watch": map[string]any{"name": "x"}}); !strings.Contains(msg, "\n/since: must be a positive duration such as 24h or 168h, not \"a week\"") {
		t.Errorf("dry_run with a bad since: %s", msg)
	}
	if got := call[control.WatchPage](t, alice, "list_watches", map[string]any{}); len(got.Items) != 1 {
		t.Errorf("dry_run saved a watch: %+v", got)
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

	// Paused, the watch judges nothing; resumed, it notifies again.
	if w := call[control.WatchView](t, alice, "pause_watch", map[string]any{"source": "releases", "name": "shipped", "reason": "on holiday"}); !w.Paused || w.PausedReason != "on holiday" {
		t.Errorf("pause_watch = %+v", w)
	}
	f.up.set(release(1, "v1.0", "released"), release(2, "v2.0", "released"))
	f.pipeline()
	if got := call[mcp.RecentNotificationsOutput](t, alice, "recent_notifications", map[string]any{"after_id": n.ID}); len(got.Items) != 0 {
		t.Errorf("a paused watch notified: %+v", got.Items)
	}
	if w := call[control.WatchView](t, alice, "resume_watch", map[string]any{"source": "releases", "name": "shipped"}); w.Paused {
		t.Errorf("resume_watch = %+v", w)
	}
	f.up.set(release(1, "v1.0", "released"), release(2, "v2.0", "released"), release(3, "v3.0", "draft"))
	f.pipeline()
	f.up.set(release(1, "v1.0", "released"), release(2, "v2.0", "released"), release(3, "v3.0", "released"))
	f.pipeline()
	if got := call[mcp.RecentNotificationsOutput](t, alice, "recent_notifications", map[string]any{"after_id": n.ID}); len(got.Items) != 1 || got.Items[0].RecordID != "3" {
		t.Errorf("after resume_watch: %+v", got.Items)
	}

	// update_watch: a bad expression names the field and changes nothing;
	// a good one replaces the definition.
	bad := map[string]any{"source": "releases", "name": "shipped", "watch": map[string]any{"name": "shipped", "when": `record.titel == "x"`}}
	if msg := toolError(t, alice, "update_watch", bad); !strings.Contains(msg, "\n/watch/when: ") || !strings.Contains(msg, "record.titel") {
		t.Errorf("update_watch with an unknown field: %s", msg)
	}
	good := map[string]any{"source": "releases", "name": "shipped", "watch": map[string]any{"name": "shipped", "when": `change.kind == "created"`}}
	if w := call[control.WatchView](t, alice, "update_watch", good); !strings.Contains(string(w.Definition), `change.kind == \"created\"`) {
		t.Errorf("update_watch = %s", w.Definition)
	}
	if w := call[control.WatchView](t, alice, "get_watch", map[string]any{"source": "releases", "name": "shipped"}); !strings.Contains(string(w.Definition), `change.kind == \"created\"`) {
		t.Errorf("get_watch after update = %s", w.Definition)
	}

	// run_now asks the syncer for a run of the source.
	if _, err := f.pool.Exec(ctx, `UPDATE sources SET run_requested_at = NULL`); err != nil {
		t.Fatal(err)
	}
	if r := call[mcp.RunRequested](t, alice, "run_now", map[string]any{"source": "releases"}); !r.Requested {
		t.Errorf("run_now = %+v", r)
	}
	var requested bool
	if err := f.pool.QueryRow(ctx, `SELECT run_requested_at IS NOT NULL FROM sources WHERE name = 'releases'`).Scan(&requested); err != nil || !requested {
		t.Errorf("run_now did not ask for a run: %v %v", requested, err)
	}
	if msg := toolError(t, bob, "run_now", map[string]any{"source": "nope"}); !strings.HasPrefix(msg, `not found: source "nope"`) {
		t.Errorf("run_now of an unknown source: %s", msg)
	}

	// Bob sees nothing of alice's.
	if got := call[mcp.RecentNotificationsOutput](t, bob, "recent_notifications", map[string]any{}); len(got.Items) != 0 || got.Feed != "lookout://notifications/bob" {
		t.Errorf("bob's notifications: %+v", got)
	}
	// Alice's assistant creates a source of her own with a watch; it runs
	// and is hers: bob can neither describe it nor watch it.
	mine := map[string]any{
		"new_source": map[string]any{"name": "mine", "connector": "http", "every": "1h",
			"http":   map[string]any{"url": f.upURL + "/releases", "items": "body.data"},
			"fields": map[string]any{"title": "item.name", "status": "item.state"}},
		"watch": map[string]any{"name": "any", "when": `change.kind == "created"`},
	}
	if c := call[control.CreatedWatch](t, alice, "create_watch", mine); c.Source == nil || c.Source.Name != "mine" || c.Source.Owner != "alice" || c.Source.Shared {
		t.Fatalf("create_watch with a new source = %+v", c)
	}
	f.pipeline()
	if got := call[mcp.RecentNotificationsOutput](t, alice, "recent_notifications", map[string]any{"source": "mine"}); len(got.Items) != 3 {
		t.Errorf("notifications of alice's own source: %d, want 3 created records", len(got.Items))
	}
	if d := call[control.SourceDescription](t, alice, "describe_source", map[string]any{"source": "mine"}); d.Sampled != 3 {
		t.Errorf("describe_source of alice's own source: %+v", d)
	}
	if msg := toolError(t, bob, "describe_source", map[string]any{"source": "mine"}); !strings.HasPrefix(msg, `not found: source "mine" does not exist`) {
		t.Errorf("bob describes alice's source: %s", msg)
	}
	if msg := toolError(t, bob, "create_watch", map[string]any{"source": "mine", "watch": map[string]any{"name": "spy"}}); !strings.HasPrefix(msg, `not found: source "mine" does not exist`) {
		t.Errorf("bob watches alice's source: %s", msg)
	}
	// An admin sees every notification.
	root := f.connect("root", nil)
	if got := call[mcp.RecentNotificationsOutput](t, root, "recent_notifications", map[string]any{}); len(got.Items) != 5 {
		t.Errorf("admin's notifications: %+v", got)
	}

	// delete_watch: gone for good; its notifications stay.
	if d := call[mcp.Deleted](t, alice, "delete_watch", map[string]any{"source": "releases", "name": "shipped"}); !d.Deleted {
		t.Errorf("delete_watch = %+v", d)
	}
	if msg := toolError(t, alice, "get_watch", map[string]any{"source": "releases", "name": "shipped"}); !strings.HasPrefix(msg, "not found: ") {
		t.Errorf("get_watch after delete_watch: %s", msg)
	}
	var audits int
	if err := f.pool.QueryRow(ctx, `SELECT count(*) FROM audit_log WHERE via = 'mcp' AND actor LIKE '%alice%'`).Scan(&audits); err != nil || audits < 6 {
		t.Errorf("audit rows of alice's MCP changes: %d %v", audits, err)
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
			`/sample: wrong type: integer, got the string "many"`},
		{"describe_source", map[string]any{"source": "releases", "sample": 1.5},
			`/sample: wrong type: integer, got a number`},
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
		{"create_watch", map[string]any{"source": "releases", "wach": map[string]any{}},
			`/wach: unknown field "wach"; the fields allowed here are idempotency_key, new_source, source, watch: remove it or correct its name`},
		{"create_watch", map[string]any{"source": "releases"},
			`/watch: field "watch" is required here and missing`},
		{"create_watch", map[string]any{"source": 7, "watch": map[string]any{"name": "x"}},
			"/source: wrong type: string, got a number"},
		{"create_watch", map[string]any{"watch": map[string]any{"name": "x"}},
			"/source: give either source"},
		{"create_watch", map[string]any{"source": "releases", "watch": map[string]any{"name": "x", "whn": "true"}},
			`/watch/whn: `},
		{"create_watch", map[string]any{"source": "releases", "watch": map[string]any{"name": "x", "when": `record.titel == "x"`}},
			"/watch/when: "},
		{"create_watch", map[string]any{"source": "releases", "watch": map[string]any{"name": "x", "when": "record.title ==="}},
			"/watch/when: "},
		{"create_watch", map[string]any{"source": "releases", "watch": map[string]any{"name": "x", "notify": []string{"pager"}}},
			`/watch/notify/0: notify[0]: names sink "pager", which lookout.yaml does not declare (declared: log)`},
		{"create_watch", map[string]any{"new_source": map[string]any{"name": "feed", "connector": "rss", "cron": "61 * * * *", "rss": map[string]any{"url": "https://feeds.example/a.xml"}}, "watch": map[string]any{"name": "x"}},
			"/new_source/cron: "},
		// The connector's own block: its decoder, then its constructor.
		{"create_watch", map[string]any{"new_source": map[string]any{"name": "feed", "connector": "http", "every": "1h", "http": map[string]any{"url": "https://feeds.example/a.json", "itms": "body.items"}}, "watch": map[string]any{"name": "x"}},
			"/new_source/http/itms: http.itms: is not a known key (known: "},
		{"create_watch", map[string]any{"new_source": map[string]any{"name": "feed", "connector": "http", "every": "1h", "http": map[string]any{"url": "https://feeds.example/a.json", "items": "body.items[["}}, "watch": map[string]any{"name": "x"}},
			"/new_source/http/items: http.items: "},
		{"create_watch", map[string]any{"new_source": map[string]any{"name": "feed", "connector": "rss", "every": "1h", "rss": map[string]any{"headers": map[string]any{"Accept": "application/rss+xml"}}}, "watch": map[string]any{"name": "x"}},
			"/new_source/rss/url: rss.url: is required"},
		{"update_watch", map[string]any{"source": "releases", "name": "x"},
			`/watch: field "watch" is required here and missing`},
		{"explain", map[string]any{"change_id": 0},
			"/change_id: must be a change id"},
		{"dry_run", map[string]any{"source": "releases", "watch": map[string]any{"name": "x"}, "max_calls": 99},
			"/max_calls: must be between 1 and 50"},
		{"get_watch", map[string]any{"source": "releases"},
			`/name: field "name" is required here and missing`},
	} {
		msg := toolError(t, cs, tc.tool, tc.args)
		if !strings.HasPrefix(msg, "invalid arguments (") || !strings.Contains(msg, "\n"+tc.want) {
			t.Errorf("%s %v:\n got: %s\nwant a line: %s", tc.tool, tc.args, msg, tc.want)
		}
	}
	if msg := toolError(t, cs, "describe_source", map[string]any{"source": "nope"}); !strings.HasPrefix(msg, `not found: source "nope" does not exist`) {
		t.Errorf("unknown source: %s", msg)
	}
	if msg := toolError(t, cs, "create_watch", map[string]any{"source": "nope", "watch": map[string]any{"name": "x"}}); !strings.HasPrefix(msg, `not found: source "nope" does not exist`) {
		t.Errorf("create_watch on an unknown source: %s", msg)
	}
	// Nothing was half-created.
	var n int
	if err := f.pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM watches) + (SELECT count(*) FROM source_definitions WHERE owner <> '') + (SELECT count(*) FROM audit_log)`).Scan(&n); err != nil || n != 0 {
		t.Errorf("half-created: %d rows (%v)", n, err)
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
	// Every 401 says how to authenticate (RFC 6750), a refused token's too.
	for _, auth := range []string{"", "Basic YWxpY2U6eA==", "Bearer lk_nonsense"} {
		req, err := http.NewRequest(http.MethodPost, f.srv.URL+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := resp.Header.Get("WWW-Authenticate"); resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(got, "Bearer") {
			t.Errorf("Authorization %q: %d, WWW-Authenticate %q; want 401 with a Bearer challenge", auth, resp.StatusCode, got)
		}
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
		// "Input schema:", the docs test's marker, then the block.
		_, block, ok := strings.Cut(section, "Input schema:\n\n<!-- mcp: input schema "+tool.Name+" -->\n```json\n")
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

// Creates past the owner's limit (4 watches here) are tool errors that
// say which limit and what to do; nothing more is created.
func TestWatchLimit(t *testing.T) {
	t.Parallel()
	f := setup(t)
	cs := f.connect("alice", nil)
	for i := range 4 {
		call[control.CreatedWatch](t, cs, "create_watch", map[string]any{"source": "releases", "watch": map[string]any{"name": fmt.Sprintf("w%d", i), "when": "true"}})
	}
	msg := toolError(t, cs, "create_watch", map[string]any{"source": "releases", "watch": map[string]any{"name": "w4", "when": "true"}})
	if msg != "limit exceeded: /watch: you have reached your limit of 4 watches: delete one you no longer need, or ask an operator to raise api.limits.watches" {
		t.Errorf("past the limit: %s", msg)
	}
	if got := call[control.WatchPage](t, cs, "list_watches", map[string]any{}); len(got.Items) != 4 {
		t.Errorf("watches after the refusal: %d", len(got.Items))
	}
}

// The other limits per owner are tool errors too, each at the argument to
// change: model_calls_per_day (through the watch's budget) and sources.
func TestModelCallAndSourceLimits(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.svc.SetLimits(control.Limits{Watches: 10, Sources: 1, ModelCallsPerDay: 50})
	cs := f.connect("alice", nil)
	msg := toolError(t, cs, "create_watch", map[string]any{"source": "releases",
		"watch": map[string]any{"name": "judge", "ask": "Is this release important?", "budget": map[string]any{"calls_per_day": 80}}})
	if want := "limit exceeded: /watch/budget/calls_per_day: asks for 80 model calls per day but only 50 remain of your limit of 50 (your other watches' budgets take 0): ask for 50 or fewer"; msg != want {
		t.Errorf("past model_calls_per_day:\n got: %s\nwant: %s", msg, want)
	}
	w := call[control.CreatedWatch](t, cs, "create_watch", map[string]any{"source": "releases", "watch": map[string]any{"name": "judge", "ask": "Is this release important?"}})
	if !strings.Contains(string(w.Watch.Definition), `"calls_per_day":50`) {
		t.Errorf("an ask without a budget gets what remains: %s", w.Watch.Definition)
	}
	msg = toolError(t, cs, "create_watch", map[string]any{"source": "releases", "watch": map[string]any{"name": "judge2", "ask": "Is it late?"}})
	if !strings.HasPrefix(msg, "limit exceeded: /watch/ask: your watches with an ask already have budgets of 50 model calls per day, your limit of 50: ") {
		t.Errorf("nothing left of model_calls_per_day: %s", msg)
	}
	newSource := func(name string) map[string]any {
		return map[string]any{"new_source": map[string]any{"name": name, "connector": "rss", "every": "1h", "rss": map[string]any{"url": "https://feeds.example/" + name + ".xml"}},
			"watch": map[string]any{"name": "all"}}
	}
	call[control.CreatedWatch](t, cs, "create_watch", newSource("first"))
	msg = toolError(t, cs, "create_watch", newSource("second"))
	if !strings.HasPrefix(msg, "limit exceeded: /new_source: you have reached your limit of 1 sources") {
		t.Errorf("past the sources limit: %s", msg)
	}
	var n int
	if err := f.pool.QueryRow(context.Background(), `SELECT count(*) FROM watches WHERE owner = 'alice'`).Scan(&n); err != nil || n != 2 {
		t.Errorf("alice's watches after the refusals: %d (%v), want 2", n, err)
	}
}
