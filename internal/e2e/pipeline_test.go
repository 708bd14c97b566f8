package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/lookout-dev/lookout/internal/pgtest"
	"github.com/lookout-dev/lookout/internal/testsignal"
)

func TestPipeline(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.write("sources/tasks.yaml", tasksSource)
	const n = 50 // every 5th is urgent: 10 matches
	e.write("data/a.jsonl", tasks(n, nil))
	ctx := context.Background()

	// N new items -> N created changes -> exactly the matching notifications.
	e.sync()
	if got := e.count(`SELECT count(*) FROM changes WHERE kind = 'created'`); got != n {
		t.Fatalf("created changes = %d, want %d", got, n)
	}
	if got := e.count(`SELECT count(*) FROM records WHERE source = 'tasks'`); got != n {
		t.Fatalf("records = %d, want %d", got, n)
	}
	ev := e.evaluator("ev-1", nil)
	if done, err := ev.Drain(ctx); err != nil || done != n {
		t.Fatalf("Drain = %d, %v; want %d", done, err, n)
	}
	if got := e.count(`SELECT count(*) FROM evaluations`); got != 2*n {
		t.Errorf("evaluations = %d, want one per (change, watch) = %d", got, 2*n)
	}
	if got := e.count(`SELECT count(*) FROM notifications WHERE watch = 'urgent'`); got != n/5 {
		t.Errorf("notifications = %d, want %d", got, n/5)
	}
	rec := &recorder{}
	if got := e.deliver(rec); got != n/5 {
		t.Errorf("deliveries = %d, want %d", got, n/5)
	}
	if got := e.count(`SELECT count(*) FROM notifications WHERE status = 'delivered' AND delivered_at IS NOT NULL`); got != n/5 {
		t.Errorf("delivered = %d, want %d", got, n/5)
	}
	if got := e.count(`SELECT count(*) FROM sync_runs WHERE status = 'succeeded' AND items_seen = $1 AND items_created = $1`, n); got != 1 {
		t.Errorf("sync_runs with the run's counters = %d, want 1", got)
	}

	// An unchanged re-sync writes no change and no record.
	var syncedBefore string
	if err := e.pool.QueryRow(ctx, `SELECT max(synced_at)::text FROM records`).Scan(&syncedBefore); err != nil {
		t.Fatal(err)
	}
	e.sync()
	if got := e.count(`SELECT count(*) FROM changes`); got != n {
		t.Errorf("changes after unchanged re-sync = %d, want %d", got, n)
	}
	if got := e.count(`SELECT count(*) FROM records WHERE synced_at::text > $1`, syncedBefore); got != 0 {
		t.Errorf("unchanged re-sync rewrote %d records", got)
	}
	// A quiet run: no sync_runs row, one run in its source's hour.
	if got := e.count(`SELECT count(*) FROM sync_runs`); got != 1 {
		t.Errorf("sync_runs after the unchanged re-sync = %d, want 1 (a quiet run writes none)", got)
	}
	if got := e.count(`SELECT coalesce(sum(runs), 0) FROM sync_run_hours WHERE items_seen = $1 AND not_modified = 0`, n); got != 1 {
		t.Errorf("re-sync run not counted in sync_run_hours as one run of %d unchanged items", n)
	}

	// An edit writes one updated change with the right changed fields.
	e.write("data/a.jsonl", tasks(n, func(i int) string {
		if i == 7 {
			return fmt.Sprintf(`{"id": "t-007", "title": "Task 7 renamed", "state": "done", "labels": ["x"]}`)
		}
		return ""
	}))
	e.sync()
	var kind string
	var fields []string
	var version int
	if err := e.pool.QueryRow(ctx, `SELECT kind, changed_fields, version FROM changes WHERE id = (SELECT max(id) FROM changes)`).Scan(&kind, &fields, &version); err != nil {
		t.Fatal(err)
	}
	if kind != "updated" || !slices.Equal(fields, []string{"title", "status"}) || version != 2 {
		t.Errorf("change = %s %v v%d, want updated [title status] v2", kind, fields, version)
	}
	if got := e.count(`SELECT count(*) FROM changes`); got != n+1 {
		t.Errorf("changes = %d, want %d", got, n+1)
	}
	if done, err := ev.Drain(ctx); err != nil || done != 1 {
		t.Fatalf("Drain = %d, %v; want 1", done, err)
	}
	// The "closed" watch notifies two sinks: one row each.
	if got := e.count(`SELECT count(*) FROM notifications WHERE watch = 'closed' AND record_id = 't-007'`); got != 2 {
		t.Errorf("closed notifications = %d, want 2 (log and rec)", got)
	}

	// A vanished item is a deleted change (the file source is a snapshot).
	e.write("data/a.jsonl", tasks(n-1, nil))
	e.sync()
	if got := e.count(`SELECT count(*) FROM changes WHERE kind = 'deleted' AND record_id = $1`, fmt.Sprintf("t-%03d", n-1)); got != 1 {
		t.Errorf("deleted changes = %d, want 1", got)
	}
	if got := e.count(`SELECT count(*) FROM records WHERE deleted_at IS NOT NULL`); got != 1 {
		t.Errorf("tombstoned records = %d, want 1", got)
	}
}

func TestEvaluatorCatchesUpAfterDowntime(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.write("sources/tasks.yaml", tasksSource)
	e.write("data/a.jsonl", tasks(20, nil))
	ctx := context.Background()

	// A running evaluator is woken by NOTIFY: its catch-up timer is an hour.
	ev := e.evaluator("ev-1", nil)
	if err := ev.Start(ctx); err != nil {
		t.Fatal(err)
	}
	testsignal.Eventually(t, "listener connected", ev.Listening)
	e.sync()
	testsignal.Eventually(t, "20 changes evaluated after NOTIFY", func() bool {
		return e.count(`SELECT count(*) FROM changes WHERE eval_status = 'done'`) == 20
	})
	if err := ev.Stop(); err != nil {
		t.Fatal(err)
	}

	// Changes committed while no evaluator runs (their NOTIFY is lost) are
	// caught up from the table when the next evaluator starts.
	e.write("data/a.jsonl", tasks(30, nil))
	e.sync()
	if got := e.count(`SELECT count(*) FROM changes WHERE eval_status = 'pending'`); got != 10 {
		t.Fatalf("pending while down = %d, want 10", got)
	}
	ev2 := e.evaluator("ev-2", nil)
	if err := ev2.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ev2.Stop() })
	testsignal.Eventually(t, "backlog evaluated after restart", func() bool {
		return e.count(`SELECT count(*) FROM changes WHERE eval_status = 'pending'`) == 0
	})
	if got := e.count(`SELECT count(*) FROM notifications WHERE watch = 'urgent'`); got != 6 {
		t.Errorf("urgent notifications = %d, want 6 (every 5th of 30)", got)
	}
}

func TestTwoEvaluatorsNeverNotifyTwice(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.write("sources/tasks.yaml", strings.Replace(tasksSource, `when: record.status == "open" && "urgent" in record.labels`, `when: "true"`, 1))
	ctx := context.Background()
	// Three versions of 200 records: 600 changes, three per record, that
	// must be evaluated in order per record.
	const n = 200
	for round := 0; round < 3; round++ {
		e.write("data/a.jsonl", tasks(n, func(i int) string {
			return fmt.Sprintf(`{"id": "t-%03d", "title": "Task %d v%d", "state": "open"}`, i, i, round)
		}))
		e.sync()
	}
	if got := e.count(`SELECT count(*) FROM changes`); got != 3*n {
		t.Fatalf("changes = %d, want %d", got, 3*n)
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range 2 {
		ev := e.evaluator(fmt.Sprintf("ev-%d", i), pgtest.PoolFor(t, e.url))
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = ev.Drain(ctx)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := e.count(`SELECT count(*) FROM changes WHERE eval_status = 'pending'`); got != 0 {
		t.Errorf("pending = %d, want 0", got)
	}
	if got := e.count(`SELECT count(*) FROM evaluations WHERE watch = 'urgent'`); got != 3*n {
		t.Errorf("evaluations = %d, want exactly one per change (%d)", got, 3*n)
	}
	if got := e.count(`SELECT count(*) FROM notifications WHERE watch = 'urgent'`); got != 3*n {
		t.Errorf("notifications = %d, want %d (one per version)", got, 3*n)
	}
	// A change decided twice would show as a suppressed duplicate (the
	// UNIQUE dedupe key turns a second insert into a count) or as a
	// "duplicate" decision.
	if got := e.count(`SELECT coalesce(sum(duplicates_suppressed), 0) FROM notifications`); got != 0 {
		t.Errorf("%d notifications were decided a second time", got)
	}
	if got := e.count(`SELECT count(*) FROM evaluations WHERE decision = 'duplicate'`); got != 0 {
		t.Errorf("%d duplicate decisions", got)
	}
	// Per record, evaluations happened in change order.
	if got := e.count(`
		SELECT count(*) FROM (
		    SELECT ev.change_id, lag(ev.change_id) OVER (PARTITION BY ev.record_id ORDER BY ev.id) AS prev
		    FROM evaluations ev WHERE watch = 'urgent') x
		WHERE prev > change_id`); got != 0 {
		t.Errorf("%d changes were evaluated before an earlier change of the same record", got)
	}
	var owners int
	owners = e.count(`SELECT count(DISTINCT evaluator) FROM evaluations`)
	t.Logf("evaluations split across %d evaluator(s)", owners)
}

func TestBadInputFailsRunWithoutDamage(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.write("sources/tasks.yaml", tasksSource)
	e.write("data/a.jsonl", tasks(10, nil))
	e.sync()
	var hashes string
	hashSum := func() string {
		var s string
		if err := e.pool.QueryRow(context.Background(), `SELECT string_agg(record_id || content_hash, ',' ORDER BY record_id) FROM records WHERE deleted_at IS NULL`).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	hashes = hashSum()

	tests := []struct {
		name, content, wantErr string
	}{
		{"malformed JSON", tasks(10, nil) + "{\"id\": \"t-x\", \"title\": \n", "data/a.jsonl:11: malformed JSON"},
		{"no id", tasks(10, nil) + `{"title": "anonymous"}` + "\n", "data/a.jsonl:11: item has no id"},
		{"duplicate id", tasks(10, nil) + taskLine(3, "done", false) + "\n", `data/a.jsonl:11: duplicate record id "t-003" (also at data/a.jsonl:4)`},
		{"bad field", tasks(10, func(i int) string {
			if i == 2 {
				return `{"id": "t-002", "updated_at": "last tuesday"}`
			}
			return ""
		}), `data/a.jsonl:3: record "t-002" field updated_at: "last tuesday" is not a time`},
	}
	for _, tt := range tests {
		e.write("data/a.jsonl", tt.content)
		e.sync()
		var status, errText string
		if err := e.pool.QueryRow(context.Background(), `SELECT status, coalesce(error, '') FROM sync_runs ORDER BY id DESC LIMIT 1`).Scan(&status, &errText); err != nil {
			t.Fatal(err)
		}
		if status != "failed" || !strings.Contains(errText, tt.wantErr) {
			t.Errorf("%s: run = %s %q, want failed with %q", tt.name, status, errText, tt.wantErr)
		}
		if got := hashSum(); got != hashes {
			t.Errorf("%s: mirrored records changed by a failed run", tt.name)
		}
		if got := e.count(`SELECT count(*) FROM changes`); got != 10 {
			t.Errorf("%s: changes = %d, want the 10 from the first run", tt.name, got)
		}
		var failures int
		var lastErr string
		if err := e.pool.QueryRow(context.Background(), `SELECT failure_count, coalesce(last_error, '') FROM sources WHERE name = 'tasks'`).Scan(&failures, &lastErr); err != nil {
			t.Fatal(err)
		}
		if failures == 0 || lastErr != errText {
			t.Errorf("%s: source failure_count %d, last_error %q", tt.name, failures, lastErr)
		}
	}
}

// fakeAPI is a paginated JSON API like many real ones: ?page=N, a "next"
// link in the body, and a way to break one page.
type fakeAPI struct {
	mu       sync.Mutex
	items    []string
	perPage  int
	breakOn  int // page that answers malformed JSON; 0 for none
	requests int
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests++
	page := 1
	fmt.Sscanf(r.URL.Query().Get("page"), "%d", &page)
	if page == f.breakOn {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"data": [{"id": 1,`)
		return
	}
	start := (page - 1) * f.perPage
	end := min(start+f.perPage, len(f.items))
	next := "null"
	if end < len(f.items) {
		next = fmt.Sprintf(`"/items?page=%d"`, page+1)
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"data": [%s], "links": {"next": %s}}`, strings.Join(f.items[start:end], ","), next)
}

func TestHTTPSourcePaginates(t *testing.T) {
	t.Parallel()
	api := &fakeAPI{perPage: 7}
	for i := 0; i < 20; i++ {
		api.items = append(api.items, fmt.Sprintf(`{"id": %d, "name": "item %d", "state": "open"}`, i, i))
	}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	e := newEnv(t)
	e.write("sources/api.yaml", fmt.Sprintf(`name: api
connector: http
rate_limit: {per_second: 1000, burst: 10}
http:
  url: %s/items?page=1
  items: body.data
  next: body.links.next
fields:
  title: item.name
  status: item.state
watches:
  - name: all
    when: "true"
`, srv.URL))
	e.sync()
	if got := e.count(`SELECT count(*) FROM records WHERE source = 'api'`); got != 20 {
		t.Fatalf("records = %d, want 20 over 3 pages", got)
	}
	if got := e.count(`SELECT count(*) FROM sync_runs WHERE status = 'succeeded' AND pages = 3`); got != 1 {
		t.Errorf("want one succeeded run of 3 pages")
	}

	// A malformed page fails the run, names the page, and damages nothing.
	api.mu.Lock()
	api.breakOn = 2
	api.mu.Unlock()
	e.sync()
	var status, errText string
	if err := e.pool.QueryRow(context.Background(), `SELECT status, error FROM sync_runs ORDER BY id DESC LIMIT 1`).Scan(&status, &errText); err != nil {
		t.Fatal(err)
	}
	if status != "failed" || !strings.Contains(errText, "page 2 ("+srv.URL+"/items?page=2): malformed JSON body") {
		t.Errorf("run = %s %q", status, errText)
	}
	if got := e.count(`SELECT count(*) FROM records WHERE source = 'api' AND deleted_at IS NULL`); got != 20 {
		t.Errorf("records after failed run = %d, want 20", got)
	}
}

func TestUnknownConnector(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.write("sources/x.yaml", "name: x\nconnector: jira\n")
	_, err := loadErr(e)
	want := `sources/x.yaml:2: connector "jira" is not known (known: file, github, http, imap, notion, postgres, rss, web)`
	if err == nil || err.Error() != want {
		t.Errorf("error:\n got: %v\nwant: %s", err, want)
	}
}

// TestNULCharacters: PostgreSQL's text and jsonb cannot hold NUL; an
// upstream item with one is mirrored with U+FFFD instead of failing its
// source forever.
func TestNULCharacters(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.write("sources/tasks.yaml", tasksSource)
	e.write("data/a.jsonl", `{"id": "n1", "title": "a\u0000b", "state": "open", "note": "c\u0000d"}`+"\n")
	e.sync()
	var title, note, status string
	if err := e.pool.QueryRow(context.Background(), `
		SELECT r.title, r.extra->>'note', s.status FROM records r JOIN sync_runs s ON s.source = r.source WHERE r.record_id = 'n1'`).Scan(&title, &note, &status); err != nil {
		t.Fatal(err)
	}
	if status != "succeeded" || title != "a\uFFFDb" || note != "c\uFFFDd" {
		t.Errorf("run %s, title %q, extra.note %q; want succeeded with U+FFFD for NUL", status, title, note)
	}
}

// TestMissingFileIsNotADeletion: one of several patterns matching nothing
// (a file being rewritten, a missing mount) fails the run instead of
// deleting every record the file held.
func TestMissingFileIsNotADeletion(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.write("sources/tasks.yaml", strings.Replace(tasksSource, `paths: ["data/*.jsonl"]`, `paths: ["data/*.jsonl", "extra.json"]`, 1))
	e.write("data/a.jsonl", tasks(3, nil))
	e.write("extra.json", `[{"id": "x-1", "title": "from extra.json"}]`)
	e.sync()
	e.remove("extra.json")
	e.sync()
	if got := e.count(`SELECT count(*) FROM changes WHERE kind = 'deleted'`); got != 0 {
		t.Errorf("%d deletions recorded for a missing file", got)
	}
	var status, errText string
	if err := e.pool.QueryRow(context.Background(), `SELECT status, error FROM sync_runs ORDER BY id DESC LIMIT 1`).Scan(&status, &errText); err != nil {
		t.Fatal(err)
	}
	if status != "failed" || !strings.Contains(errText, "no file matches extra.json") {
		t.Errorf("run = %s %q, want failed naming extra.json", status, errText)
	}
}
