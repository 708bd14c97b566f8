package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lookout-dev/lookout/internal/control"
	"github.com/lookout-dev/lookout/internal/definitions"
)

type resolver map[string][]netip.Addr

func (r resolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	return r[host], nil
}

func body(s string) *strings.Reader { return strings.NewReader(s) }

func TestWatchLifecycleAndIsolation(t *testing.T) {
	f := setup(t)
	f.shared("gh")
	var created control.CreatedWatch
	resp := f.do(http.MethodPost, "/v1/watches", "alice", body(`{"source":"gh","watch":{"name":"releases","when":"change.kind == \"created\"","notify":["log"]}}`), &created)
	if resp.StatusCode != http.StatusCreated || created.Watch.Owner != "alice" || created.Watch.ManagedBy != "api" || created.Source != nil {
		t.Fatalf("create: %d %+v", resp.StatusCode, created)
	}
	var w control.WatchView
	if resp := f.do(http.MethodGet, "/v1/watches/gh/releases", "alice", nil, &w); resp.StatusCode != 200 || w.Name != "releases" {
		t.Fatalf("get: %d %+v", resp.StatusCode, w)
	}
	// Bob sees none of it: 404, not 403, for every verb.
	for _, r := range []struct{ method, path, body string }{
		{http.MethodGet, "/v1/watches/gh/releases", ""},
		{http.MethodPut, "/v1/watches/gh/releases", `{"name":"releases","when":"true"}`},
		{http.MethodDelete, "/v1/watches/gh/releases", ""},
		{http.MethodPost, "/v1/watches/gh/releases/pause", ""},
		{http.MethodPost, "/v1/watches/gh/releases/resume", ""},
	} {
		var rd *strings.Reader
		if r.body != "" {
			rd = body(r.body)
		}
		var p Problem
		var resp *http.Response
		if rd != nil {
			resp = f.do(r.method, r.path, "bob", rd, &p)
		} else {
			resp = f.do(r.method, r.path, "bob", nil, &p)
		}
		if resp.StatusCode != http.StatusNotFound || !strings.Contains(p.Detail, `watch "gh/releases" does not exist`) {
			t.Errorf("bob %s %s: %d %+v", r.method, r.path, resp.StatusCode, p)
		}
	}
	var page control.WatchPage
	f.do(http.MethodGet, "/v1/watches", "bob", nil, &page)
	if len(page.Items) != 0 {
		t.Errorf("bob lists %+v", page.Items)
	}
	f.do(http.MethodGet, "/v1/watches", "root", nil, &page)
	if len(page.Items) != 1 {
		t.Errorf("admin lists %d", len(page.Items))
	}
	// Update, pause, resume, delete — each audited with before and after.
	if resp := f.do(http.MethodPut, "/v1/watches/gh/releases", "alice", body(`{"name":"releases","when":"record.status == \"open\""}`), &w); resp.StatusCode != 200 {
		t.Fatalf("update: %d", resp.StatusCode)
	}
	if resp := f.do(http.MethodPost, "/v1/watches/gh/releases/pause", "alice", body(`{"reason":"holiday"}`), &w); resp.StatusCode != 200 || !w.Paused || w.PausedReason != "holiday" {
		t.Errorf("pause: %d %+v", resp.StatusCode, w)
	}
	if resp := f.do(http.MethodPost, "/v1/watches/gh/releases/resume", "alice", nil, &w); resp.StatusCode != 200 || w.Paused {
		t.Errorf("resume: %d %+v", resp.StatusCode, w)
	}
	if resp := f.do(http.MethodDelete, "/v1/watches/gh/releases", "alice", nil, nil); resp.StatusCode != http.StatusNoContent {
		t.Errorf("delete: %d", resp.StatusCode)
	}
	f.problem(http.MethodGet, "/v1/watches/gh/releases", "alice", nil, http.StatusNotFound)
	var audit control.AuditPage
	f.do(http.MethodGet, "/v1/audit?kind=watch", "alice", nil, &audit)
	var actions []string
	for _, e := range audit.Items {
		actions = append(actions, e.Action)
	}
	if strings.Join(actions, ",") != "delete,resume,pause,update,create" {
		t.Errorf("audit actions %v", actions)
	}
	if len(audit.Items) == 5 && (audit.Items[3].Before == nil || audit.Items[3].After == nil || !strings.Contains(string(audit.Items[3].After), `record.status`)) {
		t.Errorf("update audit: %s -> %s", audit.Items[3].Before, audit.Items[3].After)
	}
	// A file-managed source cannot be changed through the API: 409 naming the file.
	p := f.problem(http.MethodDelete, "/v1/sources/gh", "root", nil, http.StatusConflict)
	if !strings.Contains(p.Detail, "sources/gh.yaml") {
		t.Errorf("delete a file source: %+v", p)
	}
}

// Bad input: each a problem naming the field; nothing half-created.
func TestCreateWatchBadInput(t *testing.T) {
	f := setup(t)
	f.shared("gh")
	f.svc.SetResolver(resolver{"feeds.example": {netip.MustParseAddr("93.184.216.34")}, "db.internal": {netip.MustParseAddr("169.254.169.254")}})
	for _, tc := range []struct {
		name, body string
		status     int
		pointer    string
		detail     string
	}{
		{"unknown top-level field", `{"source":"gh","wach":{}}`, 422, "/wach", `unknown field "wach"; the fields allowed here are new_source, source, watch`},
		{"wrong type", `{"source":7,"watch":{"name":"x"}}`, 422, "/source", "wrong type: string, got a number"},
		{"neither source", `{"watch":{"name":"x"}}`, 422, "/source", "give either source"},
		{"unknown watch key", `{"source":"gh","watch":{"name":"x","whn":"true"}}`, 422, "/watch/whn", "whn"},
		{"expression does not compile", `{"source":"gh","watch":{"name":"x","when":"record.title ==="}}`, 422, "/watch/when", "when"},
		{"unknown sink", `{"source":"gh","watch":{"name":"x","notify":["pager"]}}`, 422, "/watch/notify/0", `notify[0]: names sink "pager", which lookout.yaml does not declare (declared: log)`},
		{"unknown record field", `{"source":"gh","watch":{"name":"x","when":"record.titel == \"x\""}}`, 422, "/watch/when", "record.titel is not a field: record has author, body"},
		{"unknown source", `{"source":"nope","watch":{"name":"x"}}`, 404, "", `source "nope" does not exist`},
		{"bad cron", `{"new_source":{"name":"feed","connector":"rss","cron":"61 * * * *","rss":{"url":"https://feeds.example/a.xml"}},"watch":{"name":"x"}}`, 422, "/new_source/cron", "cron"},
		{"file connector", `{"new_source":{"name":"f","connector":"file","file":{"paths":["/etc/passwd"]}},"watch":{"name":"x"}}`, 422, "/new_source/connector", "reads the server's files"},
		{"metadata url", `{"new_source":{"name":"m","connector":"http","every":"1h","http":{"url":"http://db.internal/"}},"watch":{"name":"x"}}`, 422, "/new_source/http/url", "cloud metadata"},
		// The connector's own block, checked by its decoder and built by its
		// constructor (the one validation path): found at the create, not
		// at the first run.
		{"unknown key of the connector block", `{"new_source":{"name":"h","connector":"http","every":"1h","http":{"url":"https://feeds.example/a.json","itms":"body.items"}},"watch":{"name":"x"}}`, 422, "/new_source/http/itms", "http.itms: is not a known key (known: "},
		{"connector block's wrong type", `{"new_source":{"name":"h","connector":"http","every":"1h","http":{"url":"https://feeds.example/a.json","max_pages":"many"}},"watch":{"name":"x"}}`, 422, "/new_source/http/max_pages", `http.max_pages: must be an integer, not "many"`},
		{"connector block's expression does not compile", `{"new_source":{"name":"h","connector":"http","every":"1h","http":{"url":"https://feeds.example/a.json","items":"body.items[["}},"watch":{"name":"x"}}`, 422, "/new_source/http/items", "http.items: "},
		{"connector block's missing key", `{"new_source":{"name":"r","connector":"rss","every":"1h","rss":{"headers":{"Accept":"application/rss+xml"}}},"watch":{"name":"x"}}`, 422, "/new_source/rss/url", "rss.url: is required"},
		{"digest briefing's model option", `{"source":"gh","watch":{"name":"x","notify":["log"],"digest":{"cron":"0 8 * * *","summarize":{"ask":"What needs me today?","model":{"options":{"temprature":0}}}}}}`, 422, "/watch/digest/summarize/model/options", `model option "temprature" is not an Ollama option`},
		{"connector block's invalid value", `{"new_source":{"name":"g","connector":"github","every":"1h","github":{"repo":"just-a-name"}},"watch":{"name":"x"}}`, 422, "/new_source/github/repo", "github.repo: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var p Problem
			resp := f.do(http.MethodPost, "/v1/watches", "alice", body(tc.body), &p)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %+v", resp.StatusCode, tc.status, p)
			}
			if tc.pointer == "" {
				if !strings.Contains(p.Detail, tc.detail) {
					t.Errorf("detail %q lacks %q", p.Detail, tc.detail)
				}
				return
			}
			found := false
			for _, e := range p.Errors {
				if e.Pointer == tc.pointer && strings.Contains(e.Detail, tc.detail) {
					found = true
				}
			}
			if !found {
				t.Errorf("no error at %s with %q: %+v", tc.pointer, tc.detail, p.Errors)
			}
		})
	}
	var n int
	if err := f.pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM watches) + (SELECT count(*) FROM source_definitions WHERE owner <> '') + (SELECT count(*) FROM audit_log)`).Scan(&n); err != nil || n != 0 {
		t.Errorf("half-created: %d rows (%v)", n, err)
	}
}

// A flood of concurrent creates stops at the owner's limit (3 in setup),
// each refusal a limit-exceeded problem; an admin has no limit.
func TestWatchLimit(t *testing.T) {
	f := setup(t)
	f.shared("gh")
	var wg sync.WaitGroup
	codes := make([]int, 10)
	problems := make([]Problem, 10)
	for i := range codes {
		wg.Go(func() {
			resp := f.do(http.MethodPost, "/v1/watches", "alice", body(fmt.Sprintf(`{"source":"gh","watch":{"name":"w%d"}}`, i)), &problems[i])
			codes[i] = resp.StatusCode
		})
	}
	wg.Wait()
	created := 0
	for i, c := range codes {
		switch c {
		case http.StatusCreated:
			created++
		case http.StatusForbidden:
			if problems[i].Type != ProblemTypeBase+ProblemLimit || !strings.Contains(problems[i].Detail, "limit of 3 watches") || problems[i].Errors[0].Pointer != "/watch" {
				t.Errorf("refusal: %+v", problems[i])
			}
		default:
			t.Errorf("status %d: %+v", c, problems[i])
		}
	}
	if created != 3 {
		t.Errorf("created %d watches past a limit of 3", created)
	}
	if resp := f.do(http.MethodPost, "/v1/watches", "root", body(`{"source":"gh","watch":{"name":"admin"}}`), nil); resp.StatusCode != http.StatusCreated {
		t.Errorf("admin create: %d", resp.StatusCode)
	}
}

func TestCreateWatchIdempotent(t *testing.T) {
	f := setup(t)
	f.shared("gh")
	req := `{"source":"gh","watch":{"name":"once"}}`
	var a, b control.CreatedWatch
	r1 := f.do(http.MethodPost, "/v1/watches", "alice", body(req), &a, "Idempotency-Key", "k-1")
	r2 := f.do(http.MethodPost, "/v1/watches", "alice", body(req), &b, "Idempotency-Key", "k-1")
	if r1.StatusCode != 201 || r2.StatusCode != 201 || r2.Header.Get("Idempotent-Replayed") != "true" || r1.Header.Get("Idempotent-Replayed") == "true" ||
		a.Watch.CreatedAt != b.Watch.CreatedAt {
		t.Fatalf("retry: %d %d %q %+v %+v", r1.StatusCode, r2.StatusCode, r2.Header.Get("Idempotent-Replayed"), a, b)
	}
	// The first answer (encoded from what the create returned) and the
	// replay (decoded from the stored answer) say the same.
	if !reflect.DeepEqual(a, b) {
		t.Errorf("first answer %+v, replay %+v", a, b)
	}
	p := f.problem(http.MethodPost, "/v1/watches", "alice", body(`{"source":"gh","watch":{"name":"twice"}}`), http.StatusUnprocessableEntity, "Idempotency-Key", "k-1")
	if p.Type != ProblemTypeBase+ProblemIdempotency || p.Errors[0].Header != "Idempotency-Key" {
		t.Errorf("other body: %+v", p)
	}
	// Without a key, a second create is a conflict naming the watch.
	p = f.problem(http.MethodPost, "/v1/watches", "alice", body(req), http.StatusConflict)
	if !strings.Contains(p.Detail, `watch "once" of source "gh"`) {
		t.Errorf("duplicate: %+v", p)
	}
	var n int
	_ = f.pool.QueryRow(context.Background(), `SELECT count(*) FROM watches`).Scan(&n)
	if n != 1 {
		t.Errorf("%d watches, want 1", n)
	}
}

func TestSourcesOverHTTP(t *testing.T) {
	f := setup(t)
	f.shared("gh")
	f.svc.SetResolver(resolver{"feeds.example": {netip.MustParseAddr("93.184.216.34")}})
	var s control.SourceView
	resp := f.do(http.MethodPost, "/v1/sources", "alice", body(`{"name":"alice-feed","connector":"rss","every":"1h","rss":{"url":"https://feeds.example/a.xml"},"watches":[{"name":"all"}]}`), &s)
	if resp.StatusCode != 201 || s.Owner != "alice" || s.Shared {
		t.Fatalf("create source: %d %+v", resp.StatusCode, s)
	}
	var page control.SourcePage
	f.do(http.MethodGet, "/v1/sources", "bob", nil, &page)
	if len(page.Items) != 1 || page.Items[0].Name != "gh" || !page.Items[0].Shared {
		t.Errorf("bob's sources: %+v", page.Items)
	}
	f.do(http.MethodGet, "/v1/sources", "alice", nil, &page)
	if len(page.Items) != 2 {
		t.Errorf("alice's sources: %+v", page.Items)
	}
	// update_source goes through the same validation, connector block included.
	p := f.problem(http.MethodPut, "/v1/sources/alice-feed", "alice", body(`{"name":"alice-feed","connector":"http","every":"1h","http":{"url":"https://feeds.example/a.json","items":"body.items[["}}`), http.StatusUnprocessableEntity)
	if len(p.Errors) == 0 || p.Errors[0].Pointer != "/http/items" || !strings.HasPrefix(p.Errors[0].Detail, "http.items: ") {
		t.Errorf("update_source with a bad block: %+v", p)
	}
	f.do(http.MethodGet, "/v1/sources/alice-feed", "alice", nil, &s)
	if s.Connector != "rss" {
		t.Errorf("a refused update changed the source: %+v", s)
	}
	f.problem(http.MethodGet, "/v1/sources/alice-feed", "bob", nil, http.StatusNotFound)
	f.problem(http.MethodPost, "/v1/sources/alice-feed/run", "bob", nil, http.StatusNotFound)
	if resp := f.do(http.MethodPost, "/v1/sources/alice-feed/pause", "alice", nil, &s); resp.StatusCode != 200 || !s.Paused {
		t.Errorf("pause: %d %+v", resp.StatusCode, s)
	}
	if resp := f.do(http.MethodDelete, "/v1/sources/alice-feed", "alice", nil, nil); resp.StatusCode != http.StatusNoContent {
		t.Errorf("delete: %d", resp.StatusCode)
	}
	// The limit of sources (2 in setup).
	for i := range 3 {
		var p Problem
		resp := f.do(http.MethodPost, "/v1/sources", "bob", body(fmt.Sprintf(`{"name":"b%d","connector":"rss","every":"1h","rss":{"url":"https://feeds.example/%d.xml"}}`, i, i)), &p)
		if want := map[bool]int{true: 201, false: 403}[i < 2]; resp.StatusCode != want {
			t.Errorf("bob's source %d: %d %+v", i, resp.StatusCode, p)
		}
	}
}

// model_calls_per_day (250 here) is kept through the per-watch budgets:
// an ask without a budget gets min(100, what remains); past the limit the
// create is refused at the field that would have to change.
func TestModelCallAllowance(t *testing.T) {
	f := setup(t)
	f.shared("gh")
	f.svc.SetLimits(control.Limits{Watches: 10, Sources: 2, ModelCallsPerDay: 250})
	create := func(name, extra string) (int, control.CreatedWatch, Problem) {
		var ok control.CreatedWatch
		var p Problem
		var raw json.RawMessage
		b := fmt.Sprintf(`{"source":"gh","watch":{"name":%q,"ask":"is it a release?"%s}}`, name, extra)
		resp := f.do(http.MethodPost, "/v1/watches", "alice", body(b), &raw)
		_ = json.Unmarshal(raw, &ok)
		_ = json.Unmarshal(raw, &p)
		return resp.StatusCode, ok, p
	}
	code, w, _ := create("a", "")
	if code != 201 || !strings.Contains(string(w.Watch.Definition), `"calls_per_day":100`) {
		t.Fatalf("a: %d %s", code, w.Watch.Definition)
	}
	if code, _, p := create("b", `,"budget":{"calls_per_day":200}`); code != 403 || p.Errors[0].Pointer != "/watch/budget/calls_per_day" ||
		!strings.Contains(p.Detail, "only 150 remain of your limit of 250") {
		t.Errorf("b: %d %+v", code, p)
	}
	if code, _, _ := create("c", `,"budget":{"calls_per_day":120}`); code != 201 {
		t.Errorf("c: %d", code)
	}
	code, w, _ = create("d", "")
	if code != 201 || !strings.Contains(string(w.Watch.Definition), `"calls_per_day":30`) {
		t.Errorf("d: %d %s", code, w.Watch.Definition)
	}
	if code, _, p := create("e", ""); code != 403 || p.Errors[0].Pointer != "/watch/ask" || !strings.Contains(p.Detail, "already have budgets of 250") {
		t.Errorf("e: %d %+v", code, p)
	}
	// A watch without an ask costs no model call.
	if resp := f.do(http.MethodPost, "/v1/watches", "alice", body(`{"source":"gh","watch":{"name":"f","when":"true"}}`), nil); resp.StatusCode != 201 {
		t.Errorf("f: %d", resp.StatusCode)
	}
}

// A create through the API wakes the daemons following the definitions
// (a NOTIFY on <schema>.config) after it committed: sent by Idempotent
// after the commit, not from the create's transaction.
func TestCreateWatchWakesTheFollowers(t *testing.T) {
	f := setup(t)
	f.shared("gh")
	ctx := context.Background()
	conn, err := f.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	var schema string
	if err := conn.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{definitions.Channel(schema)}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	var created control.CreatedWatch
	if resp := f.do(http.MethodPost, "/v1/watches", "alice", body(`{"source":"gh","watch":{"name":"releases"}}`), &created); resp.StatusCode != http.StatusCreated {
		t.Fatalf("create: %d", resp.StatusCode)
	}
	wait, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	n, err := conn.Conn().WaitForNotification(wait)
	if err != nil {
		t.Fatalf("no wake-up after the create: %v", err)
	}
	var version int64
	if err := f.pool.QueryRow(ctx, `SELECT version FROM watches WHERE source = 'gh' AND name = 'releases'`).Scan(&version); err != nil {
		t.Fatal(err)
	}
	if n.Payload != fmt.Sprint(version) {
		t.Errorf("wake-up payload %q, want the create's version %d (the last taken)", n.Payload, version)
	}
}

// Without a per-owner limit there is nothing to count, and an owner's
// creates do not take turns: while alice's first create is open (not
// committed), her second completes. With a limit they take turns on the
// owner's lock (TestWatchLimit).
func TestCreatesOfOneOwnerWithoutLimitsDoNotWaitForEachOther(t *testing.T) {
	f := setup(t)
	f.shared("gh")
	f.svc.SetLimits(control.Limits{})
	ctx := context.Background()
	alice := control.Principal{Owner: "alice"}
	create := func(name string) (pgx.Tx, uint32, func() error) {
		conn, err := f.pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tx.Rollback(ctx); conn.Release() })
		return tx, conn.Conn().PgConn().PID(), func() error {
			_, err := f.svc.CreateWatch(ctx, tx, alice, control.CreateWatchRequest{Source: "gh", Watch: []byte(fmt.Sprintf(`{"name": %q}`, name))})
			return err
		}
	}
	first, _, run := create("first")
	if err := run(); err != nil {
		t.Fatal(err)
	}
	second, pid, run := create("second")
	done := make(chan error, 1)
	go func() { done <- run() }()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(time.Minute)
	for {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			if err := second.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			return
		case <-deadline:
			t.Fatal("alice's second create neither completed nor waited for a lock in a minute")
		case <-tick.C:
		}
		var blockers []int32
		if err := f.pool.QueryRow(ctx, `SELECT pg_blocking_pids($1)`, int32(pid)).Scan(&blockers); err != nil {
			t.Fatal(err)
		}
		if len(blockers) > 0 {
			_ = first.Rollback(ctx)
			<-done
			t.Fatalf("alice's second create waits for a lock held by her first (backends %v), with no limit to check", blockers)
		}
	}
}
