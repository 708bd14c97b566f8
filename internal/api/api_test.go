package api

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/lookout-dev/lookout/internal/control"
	"github.com/lookout-dev/lookout/internal/testsignal"
	"github.com/lookout-dev/lookout/internal/tokens"
)

var update = flag.Bool("update", false, "rewrite docs/openapi.json from the handlers")

// docs/openapi.json is the document the API serves; regenerate it with
// `go test ./internal/api -run TestOpenAPIDocument -update`.
func TestOpenAPIDocument(t *testing.T) {
	doc, err := Document()
	if err != nil {
		t.Fatal(err)
	}
	again, _ := Document()
	if !bytes.Equal(doc, again) {
		t.Fatal("the OpenAPI document is not deterministic")
	}
	var parsed map[string]any
	if err := json.Unmarshal(doc, &parsed); err != nil || parsed["openapi"] != "3.1.0" {
		t.Fatalf("not an OpenAPI 3.1 document: %v %v", err, parsed["openapi"])
	}
	path := filepath.Join("..", "..", "docs", "openapi.json")
	if *update {
		if err := os.WriteFile(path, doc, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	checked, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (create it with go test ./internal/api -run TestOpenAPIDocument -update)", err)
	}
	if !bytes.Equal(checked, doc) {
		t.Errorf("docs/openapi.json differs from the document the handlers generate: run go test ./internal/api -run TestOpenAPIDocument -update and commit it")
	}
}

// The server serves the same document at /openapi.json, without a token.
func TestServesOpenAPI(t *testing.T) {
	f := setup(t)
	var doc map[string]any
	resp := f.do(http.MethodGet, "/openapi.json", "", nil, &doc)
	if resp.StatusCode != http.StatusOK || doc["openapi"] != "3.1.0" {
		t.Fatalf("GET /openapi.json: %d %v", resp.StatusCode, doc["openapi"])
	}
	paths, _ := doc["paths"].(map[string]any)
	for _, p := range []string{"/v1/me", "/v1/notifications", "/v1/notifications/stream", "/v1/sources/{source}/fields"} {
		if paths[p] == nil {
			t.Errorf("document lacks %s", p)
		}
	}
}

func TestAuthentication(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	var me struct{ Owner, Scope string }
	if resp := f.do(http.MethodGet, "/v1/me", "alice", nil, &me); resp.StatusCode != 200 || me.Owner != "alice" || me.Scope != "user" {
		t.Fatalf("alice /v1/me: %d %+v", resp.StatusCode, me)
	}
	if f.do(http.MethodGet, "/v1/me", "root", nil, &me); me.Scope != "admin" {
		t.Errorf("root scope %q", me.Scope)
	}
	list, _ := tokens.List(ctx, f.pool, "alice")
	if len(list) != 1 || list[0].LastUsedAt == nil {
		t.Errorf("alice's token has no last use: %+v", list)
	}

	p := f.problem(http.MethodGet, "/v1/me", "", nil, http.StatusUnauthorized)
	if !strings.Contains(p.Detail, "Authorization: Bearer") || p.Errors[0].Header != "Authorization" {
		t.Errorf("missing token: %+v", p)
	}
	f.tokens["mallory"] = "lk_" + strings.Repeat("A", 43)
	if p := f.problem(http.MethodGet, "/v1/me", "mallory", nil, http.StatusUnauthorized); !strings.Contains(p.Detail, "not known") {
		t.Errorf("unknown token: %+v", p)
	}
	if p := f.problem(http.MethodGet, "/v1/me", "", nil, http.StatusUnauthorized, "Authorization", "Basic YWxpY2U6eA=="); !strings.Contains(p.Detail, "Bearer <token>") {
		t.Errorf("basic auth: %+v", p)
	}

	// Revoked: refused from the next request on.
	tok, secret, err := tokens.Create(ctx, f.pool, tokens.NewToken{Owner: "carol"})
	if err != nil {
		t.Fatal(err)
	}
	f.tokens["carol"] = secret
	f.do(http.MethodGet, "/v1/me", "carol", nil, &me)
	if _, err := control.RevokeToken(ctx, f.pool, control.Principal{Owner: "carol", Via: "cli"}, tok.ID); err != nil {
		t.Fatal(err)
	}
	if p := f.problem(http.MethodGet, "/v1/me", "carol", nil, http.StatusUnauthorized); !strings.Contains(p.Detail, "revoked") {
		t.Errorf("revoked token: %+v", p)
	}
	// Bob cannot revoke Alice's token: it does not exist for him.
	aliceTok := list[0]
	if _, err := control.RevokeToken(ctx, f.pool, control.Principal{Owner: "bob"}, aliceTok.ID); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("bob revoking alice's token: %v", err)
	}
	// Expired.
	_, secret, _ = tokens.Create(ctx, f.pool, tokens.NewToken{Owner: "dave", TTL: time.Millisecond})
	f.tokens["dave"] = secret
	testsignal.Eventually(t, "token expiry", func() bool {
		var p Problem
		return f.do(http.MethodGet, "/v1/me", "dave", nil, &p).StatusCode == http.StatusUnauthorized && strings.Contains(p.Detail, "expired")
	})
}

func TestNotificationsScopedAndPaged(t *testing.T) {
	f := setup(t)
	var alice []int64
	for i := range 5 {
		alice = append(alice, f.enqueue("alice", "gh", "releases", fmt.Sprintf("v1.%d", i)))
		f.enqueue("bob", "gh", "bugs", fmt.Sprintf("bug %d", i))
	}
	var page control.NotificationPage
	var got []int64
	cursor := ""
	for pages := 0; ; pages++ {
		page = control.NotificationPage{}
		path := "/v1/notifications?limit=2"
		if cursor != "" {
			path += "&cursor=" + cursor
		}
		if resp := f.do(http.MethodGet, path, "alice", nil, &page); resp.StatusCode != 200 {
			t.Fatalf("page %d: %d", pages, resp.StatusCode)
		}
		for _, n := range page.Items {
			if n.Watch != "releases" {
				t.Fatalf("alice sees %s/%s", n.Source, n.Watch)
			}
			got = append(got, n.ID)
		}
		if cursor = page.NextCursor; cursor == "" {
			break
		}
		if pages > 5 {
			t.Fatal("cursor never ends")
		}
	}
	slices.Reverse(alice)
	if !slices.Equal(got, alice) {
		t.Errorf("alice paged %v, want %v (newest first)", got, alice)
	}
	f.do(http.MethodGet, "/v1/notifications", "root", nil, &page)
	if len(page.Items) != 10 {
		t.Errorf("admin sees %d, want 10", len(page.Items))
	}
	f.do(http.MethodGet, "/v1/notifications?watch=releases", "bob", nil, &page)
	if len(page.Items) != 0 {
		t.Errorf("bob sees alice's: %+v", page.Items)
	}
	p := f.problem(http.MethodGet, "/v1/notifications?cursor=bogus", "alice", nil, http.StatusUnprocessableEntity)
	if len(p.Errors) != 1 || p.Errors[0].Parameter != "cursor" || !strings.Contains(p.Errors[0].Detail, "next_cursor") {
		t.Errorf("bad cursor: %+v", p)
	}
	p = f.problem(http.MethodGet, "/v1/notifications?limit=500", "alice", nil, http.StatusUnprocessableEntity)
	if len(p.Errors) != 1 || p.Errors[0].Parameter != "limit" {
		t.Errorf("limit 500: %+v", p)
	}
}

func TestNotificationStream(t *testing.T) {
	f := setup(t)
	first := f.enqueue("alice", "gh", "releases", "v1")
	second := f.enqueue("alice", "gh", "releases", "v2")

	// Catch-up after Last-Event-ID, then live.
	events, stop := f.stream("/v1/notifications/stream", "alice", "Last-Event-ID", strconv.FormatInt(first, 10))
	defer stop()
	bobEvents, stopBob := f.stream("/v1/notifications/stream", "bob")
	defer stopBob()
	ev := testsignal.Receive(t, events, "catch-up event")
	var n control.Notification
	if err := json.Unmarshal([]byte(ev.Data), &n); err != nil {
		t.Fatal(err)
	}
	if ev.Event != "notification" || ev.ID != strconv.FormatInt(second, 10) || n.ID != second || n.Title != "v2" {
		t.Fatalf("catch-up event %+v", ev)
	}
	f.enqueue("bob", "gh", "bugs", "not alice's")
	third := f.enqueue("alice", "gh", "releases", "v3")
	ev = testsignal.Receive(t, events, "live event")
	if ev.ID != strconv.FormatInt(third, 10) {
		t.Fatalf("live event %+v, want id %d", ev, third)
	}
	// Bob's stream has his notification only.
	if ev := testsignal.Receive(t, bobEvents, "bob's event"); !strings.Contains(ev.Data, `"watch":"bugs"`) {
		t.Errorf("bob received %+v", ev)
	}
	select {
	case ev := <-bobEvents:
		t.Errorf("bob received %+v", ev)
	default:
	}
	// The server's shutdown ends streams.
	f.api.Shutdown()
	testsignal.Eventually(t, "stream closed", func() bool {
		select {
		case _, ok := <-events:
			return !ok
		default:
			return false
		}
	})
}

// A stream opened without Last-Event-ID (or ?after) starts from now: the
// notifications created before it opened, however recent, are not sent
// (the list endpoint has them); the first event is the first one created
// after (docs/api.md#the-notification-stream).
func TestStreamWithoutLastEventIDStartsFromNow(t *testing.T) {
	f := setup(t)
	f.enqueue("alice", "gh", "releases", "past-1")
	f.enqueue("alice", "gh", "releases", "past-2")

	events, stop := f.stream("/v1/notifications/stream", "alice")
	defer stop()
	filtered, stopFiltered := f.stream("/v1/notifications/stream?source=gh", "alice")
	defer stopFiltered()
	next := f.enqueue("alice", "gh", "releases", "new")
	for name, ch := range map[string]<-chan event{"unfiltered": events, "?source=gh": filtered} {
		if ev := testsignal.Receive(t, ch, name+" first event"); ev.ID != strconv.FormatInt(next, 10) {
			t.Errorf("%s stream without Last-Event-ID: first event %+v, want the notification created after it opened (id %d)", name, ev, next)
		}
	}
}

// The problems huma answers before a handler runs are the document's
// (the checking client fails the test on an undeclared status): a body
// that is a JSON array where an object belongs is a 422 whose error
// points at the whole body (pointer ""), a body that is not JSON a 400,
// another content type a 415; a path parameter out of its bounds a 422.
func TestBodyProblemsAreDocumented(t *testing.T) {
	f := setup(t)
	f.shared("gh")
	for _, op := range []struct{ method, path string }{
		{http.MethodPost, "/v1/watches"}, {http.MethodPost, "/v1/sources"}, {http.MethodPut, "/v1/sources/gh"},
		{http.MethodPut, "/v1/watches/gh/w"}, {http.MethodPost, "/v1/dry_run"},
	} {
		var raw struct {
			Errors []map[string]any `json:"errors"`
		}
		resp := f.do(op.method, op.path, "alice", strings.NewReader(`[{"name":"x"}]`), &raw)
		if resp.StatusCode != http.StatusUnprocessableEntity || len(raw.Errors) != 1 {
			t.Errorf("%s %s with an array: %d %+v, want 422 with one error", op.method, op.path, resp.StatusCode, raw.Errors)
		} else if ptr, ok := raw.Errors[0]["pointer"]; !ok || ptr != "" || !strings.Contains(fmt.Sprint(raw.Errors[0]["detail"]), "must be a JSON object, got an array") {
			t.Errorf("%s %s with an array: error %v, want pointer \"\" (the whole body) and a detail naming object and array", op.method, op.path, raw.Errors[0])
		}
		p := f.problem(op.method, op.path, "alice", strings.NewReader(`{"name":`), http.StatusBadRequest)
		if p.Type != ProblemTypeBase+ProblemMalformed {
			t.Errorf("%s %s malformed: %+v", op.method, op.path, p)
		}
		f.problem(op.method, op.path, "alice", strings.NewReader(`name: x`), http.StatusUnsupportedMediaType, "Content-Type", "application/yaml")
	}
	p := f.problem(http.MethodGet, "/v1/changes/0/explain", "alice", nil, http.StatusUnprocessableEntity)
	if len(p.Errors) != 1 || p.Errors[0].Parameter != "change" {
		t.Errorf("explain of change 0: %+v", p)
	}
}

// A test operation with a body exercises the request problems: unknown
// fields, wrong types, missing fields, malformed JSON, a body over 1 MiB.
func TestRequestProblems(t *testing.T) {
	f := setup(t)
	type inner struct {
		When string `json:"when"`
		Ask  string `json:"ask,omitempty"`
	}
	type body struct {
		Name  string  `json:"name"`
		Every int     `json:"every_seconds,omitempty"`
		Watch []inner `json:"watches,omitempty"`
	}
	// The test operation is not in docs/openapi.json: its calls are not checked against it.
	f.client = &http.Client{}
	huma.Register(f.api.huma, huma.Operation{OperationID: "test_create", Method: http.MethodPost, Path: "/v1/test", Security: bearer},
		func(ctx context.Context, in *struct{ Body body }) (*struct{}, error) { return &struct{}{}, nil })

	post := func(b string, status int) Problem {
		t.Helper()
		return f.problem(http.MethodPost, "/v1/test", "alice", strings.NewReader(b), status)
	}
	p := post(`{"name":"x","watches":[{"when":"true","whn":"x"}]}`, 422)
	if len(p.Errors) != 1 || p.Errors[0].Pointer != "/watches/0/whn" ||
		p.Errors[0].Detail != `unknown field "whn"; the fields allowed here are ask, when: remove it or correct its name` {
		t.Errorf("unknown field: %+v", p.Errors)
	}
	p = post(`{"name":7}`, 422)
	if len(p.Errors) != 1 || p.Errors[0].Pointer != "/name" || p.Errors[0].Detail != "wrong type: string, got a number" {
		t.Errorf("wrong type: %+v", p.Errors)
	}
	p = post(`{"watches":[{"when":"x"}]}`, 422)
	if len(p.Errors) != 1 || p.Errors[0].Pointer != "/name" || !strings.Contains(p.Errors[0].Detail, `"name" is required`) {
		t.Errorf("missing field: %+v", p.Errors)
	}
	p = post(`{"name":`, 400)
	if p.Type != ProblemTypeBase+ProblemMalformed || !strings.Contains(p.Detail, "not valid JSON") {
		t.Errorf("malformed: %+v", p)
	}
	big := `{"name":"` + strings.Repeat("x", maxBody) + `"}`
	p = post(big, 413)
	if p.Type != ProblemTypeBase+ProblemTooLarge || !strings.Contains(p.Detail, "1 MiB") {
		t.Errorf("too large: %+v", p)
	}
	// Bob's token on the same operation is fine; no token is not.
	if resp := f.do(http.MethodPost, "/v1/test", "bob", strings.NewReader(`{"name":"x"}`), nil); resp.StatusCode != 204 && resp.StatusCode != 200 {
		t.Errorf("valid post: %d", resp.StatusCode)
	}
}

func TestDescribeSource(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	for _, src := range []string{"gh", "secret"} {
		if _, err := f.pool.Exec(ctx, `INSERT INTO sources (name, connector, config_hash) VALUES ($1, 'github', 'h')`, src); err != nil {
			t.Fatal(err)
		}
	}
	f.shared("gh")
	if _, err := f.pool.Exec(ctx, `INSERT INTO source_definitions (name, owner, managed_by, connector, definition, definition_hash, version)
		VALUES ('secret', 'alice', 'api', 'github', '{}', 'h', 1)`); err != nil {
		t.Fatal(err)
	}
	for i, rec := range []string{
		`{"id":"1","title":"Crash on start","status":"open","labels":["bug"],"extra":{"stars":5,"draft":false}}`,
		`{"id":"2","title":"Add docs","status":"closed","labels":[],"extra":{"stars":7,"draft":true}}`,
	} {
		if _, err := f.pool.Exec(ctx, `INSERT INTO changes (source, record_id, kind, version, record) VALUES ('gh', $1, 'created', 1, $2)`,
			strconv.Itoa(i+1), rec); err != nil {
			t.Fatal(err)
		}
	}
	// A created change whose record has not changed since stores no
	// snapshot: the record holds it.
	if _, err := f.pool.Exec(ctx, `
		INSERT INTO records (source, record_id, content_hash, title, status) VALUES ('gh', '3', 'h', 'From the record', 'open');
		INSERT INTO changes (source, record_id, kind, version) VALUES ('gh', '3', 'created', 1)`); err != nil {
		t.Fatal(err)
	}
	var d control.SourceDescription
	if resp := f.do(http.MethodGet, "/v1/sources/gh/fields", "bob", nil, &d); resp.StatusCode != 200 {
		t.Fatalf("describe: %d", resp.StatusCode)
	}
	fields := map[string]control.FieldInfo{}
	for _, fi := range d.Fields {
		fields[fi.Path] = fi
	}
	if d.Sampled != 3 || d.Connector != "github" {
		t.Errorf("sampled %d, connector %q", d.Sampled, d.Connector)
	}
	if fi := fields["record.extra.stars"]; !slices.Equal(fi.Types, []string{"number"}) || fi.Present != 2 || len(fi.Examples) != 2 {
		t.Errorf("record.extra.stars: %+v", fi)
	}
	if fi := fields["record.title"]; len(fi.Examples) != 3 || !slices.Contains(fi.Examples, any("From the record")) {
		t.Errorf("record.title: %+v", fi)
	}
	if !slices.Contains(d.Examples, `"bug" in record.labels`) {
		t.Errorf("examples: %v", d.Examples)
	}
	var byKind control.SourceDescription
	f.do(http.MethodGet, "/v1/connectors/github/fields", "bob", nil, &byKind)
	if !slices.Equal(byKind.Sources, []string{"gh"}) {
		t.Errorf("bob's github sources: %v", byKind.Sources)
	}
	// Alice's own source does not exist for Bob.
	p := f.problem(http.MethodGet, "/v1/sources/secret/fields", "bob", nil, http.StatusNotFound)
	if !strings.Contains(p.Detail, `source "secret" does not exist`) {
		t.Errorf("bob describing alice's source: %+v", p)
	}
	if resp := f.do(http.MethodGet, "/v1/sources/secret/fields", "alice", nil, nil); resp.StatusCode != 200 {
		t.Errorf("alice describing her source: %d", resp.StatusCode)
	}
	f.problem(http.MethodGet, "/v1/sources/nope/fields", "root", nil, http.StatusNotFound)
}

// The audit log shows each owner the changes of its objects; admins all.
func TestAuditLog(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	op := control.Principal{Owner: "operator:root", Admin: true, Via: "cli"}
	var secrets []string
	for _, owner := range []string{"alice", "bob", "alice"} {
		_, secret, err := control.IssueToken(ctx, f.pool, op, tokens.NewToken{Owner: owner, Name: "laptop"})
		if err != nil {
			t.Fatal(err)
		}
		secrets = append(secrets, secret)
	}
	var page control.AuditPage
	f.do(http.MethodGet, "/v1/audit?limit=1", "alice", nil, &page)
	if len(page.Items) != 1 || page.NextCursor == "" || page.Items[0].Owner != "alice" || page.Items[0].Actor != "operator:root" {
		t.Fatalf("alice page 1: %+v", page)
	}
	var after map[string]any
	if err := json.Unmarshal(page.Items[0].After, &after); err != nil || after["name"] != "laptop" || strings.Contains(string(page.Items[0].After), secrets[2]) {
		t.Errorf("after: %s", page.Items[0].After)
	}
	next := page.NextCursor
	page = control.AuditPage{}
	f.do(http.MethodGet, "/v1/audit?limit=1&cursor="+next, "alice", nil, &page)
	if len(page.Items) != 1 || page.NextCursor != "" || page.Items[0].Owner != "alice" {
		t.Errorf("alice page 2: %+v", page)
	}
	page = control.AuditPage{}
	f.do(http.MethodGet, "/v1/audit", "root", nil, &page)
	if len(page.Items) != 3 {
		t.Errorf("admin sees %d entries, want 3", len(page.Items))
	}
	p := f.problem(http.MethodGet, "/v1/audit?kind=planet", "alice", nil, http.StatusUnprocessableEntity)
	if len(p.Errors) != 1 || p.Errors[0].Parameter != "kind" {
		t.Errorf("bad kind: %+v", p)
	}
}
