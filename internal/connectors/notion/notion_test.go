package notion_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/connectors"
	"github.com/lookout-dev/lookout/internal/connectors/conntest"
	"github.com/lookout-dev/lookout/internal/connectors/notion"
	"github.com/lookout-dev/lookout/internal/connectors/notion/notiontest"
	"github.com/lookout-dev/lookout/internal/normalize"
	"github.com/lookout-dev/lookout/internal/pgtest"
)

// The source files read the token from the environment; every fake
// accepts notiontest's default token.
func TestMain(m *testing.M) {
	os.Setenv("LOOKOUT_TEST_NOTION_TOKEN", "secret_test")
	os.Exit(m.Run())
}

// clock is a settable clock shared by the fake and the connector.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// taskProps is the seed's task database.
func taskProps() []notiontest.Property {
	return []notiontest.Property{
		{Name: "Name", Type: "title"},
		{Name: "Status", Type: "status", Options: []string{"Todo", "InProgress", "Complete", "Failed"}},
		{Name: "Priority", Type: "number"},
		{Name: "ClaimedBy", Type: "rich_text"},
		{Name: "ClaimedAt", Type: "date"},
		{Name: "ClaimExpiresAt", Type: "date"},
		{Name: "RunId", Type: "rich_text"},
		{Name: "RetryCount", Type: "number"},
		{Name: "LastError", Type: "rich_text"},
		{Name: "CompletedAt", Type: "date"},
	}
}

func setup(t *testing.T, props ...notiontest.Property) (*notiontest.Server, *clock) {
	t.Helper()
	f := notiontest.New(t, props...)
	clk := &clock{t: time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)}
	f.SetNow(clk.now)
	return f, clk
}

// build loads a source file for the fake and builds its connector.
func build(t *testing.T, f *notiontest.Server, clk *clock, extra string) *notion.Connector {
	t.Helper()
	c, err := tryBuild(t, f, clk, extra)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func tryBuild(t *testing.T, f *notiontest.Server, clk *clock, extra string) (*notion.Connector, error) {
	t.Helper()
	src := fmt.Sprintf("name: tasks\nconnector: notion\ntimeout: 5s\nnotion:\n  database: %s\n  token: ${LOOKOUT_TEST_NOTION_TOKEN}\n  base_url: %s\n%s",
		strings.ReplaceAll(f.DatabaseID, "-", ""), f.URL, extra)
	dir := conntest.WriteConfig(t, map[string]string{"sources/tasks.yaml": src})
	cfg, err := config.Load(dir)
	if err != nil {
		return nil, err
	}
	conn, err := connectors.New(cfg.Sources[0], connectors.Env{Dir: dir, Logger: slog.New(slog.DiscardHandler), Now: clk.now})
	if err != nil {
		return nil, err
	}
	return conn.(*notion.Connector), nil
}

func addTasks(f *notiontest.Server, clk *clock, n int) []string {
	var ids []string
	for i := 1; i <= n; i++ {
		ids = append(ids, f.AddPage(map[string]any{"Name": notiontest.Title(fmt.Sprintf("Task %d", i)),
			"Status": notiontest.Status("Todo"), "Priority": notiontest.Number(float64(i % 3))}))
		clk.add(time.Minute)
	}
	return ids
}

func body(t *testing.T, r notiontest.Request) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.Body, &m); err != nil {
		t.Fatalf("request body %s: %v", r.Body, err)
	}
	return m
}

// Pages are read in last_edited_time order through start_cursor and
// has_more; the next run asks only for pages edited on or after the
// largest last_edited_time minus the lookback, and finds an edit.
func TestPaginationAndIncrementalCursor(t *testing.T) {
	t.Parallel()
	f, clk := setup(t, taskProps()...)
	ids := addTasks(f, clk, 5)
	conn := build(t, f, clk, "  page_size: 2\n  lookback: 3m\n  status: Status\n")

	r1 := conntest.Fetch(t, conn, nil)
	if r1.Err != nil {
		t.Fatal(r1.Err)
	}
	if got := r1.IDs(); !slices.Equal(got, ids) {
		t.Errorf("ids = %v, want %v (oldest edit first)", got, ids)
	}
	if len(r1.Pages) != 3 || r1.Result.Requests != 4 { // the schema read + three pages
		t.Errorf("pages %d, requests %d; want 3 and 4", len(r1.Pages), r1.Result.Requests)
	}
	reqs := f.Requests()
	if reqs[0].Method != "GET" || !strings.HasSuffix(reqs[0].Path, "/v1/databases/"+strings.ReplaceAll(f.DatabaseID, "-", "")) {
		t.Errorf("first request %s %s, want the database read", reqs[0].Method, reqs[0].Path)
	}
	for _, r := range reqs {
		if r.Header.Get("Notion-Version") != "2022-06-28" || r.Header.Get("Authorization") != "Bearer "+f.Token {
			t.Errorf("%s %s headers: %v", r.Method, r.Path, r.Header)
		}
	}
	q1, q2 := body(t, reqs[1]), body(t, reqs[2])
	if q1["page_size"] != float64(2) || q1["filter"] != nil || q1["start_cursor"] != nil {
		t.Errorf("first query = %v, want page_size 2, no filter, no start_cursor", q1)
	}
	if fmt.Sprint(q1["sorts"]) != "[map[direction:ascending timestamp:last_edited_time]]" {
		t.Errorf("sorts = %v", q1["sorts"])
	}
	if q2["start_cursor"] != ids[2] {
		t.Errorf("second query start_cursor = %v, want %s", q2["start_cursor"], ids[2])
	}
	// Mid-run pages carry a resume point; the last one the final cursor.
	var mid, last notion.State
	mustJSON(t, r1.Pages[0].Cursor, &mid)
	mustJSON(t, r1.Result.Cursor, &last)
	if mid.Resume == nil || mid.Resume.StartCursor != ids[2] {
		t.Errorf("first page cursor = %s, want a resume at %s", r1.Pages[0].Cursor, ids[2])
	}
	if last.Resume != nil || last.MaxEdited != "2026-03-02T09:04:00Z" {
		t.Errorf("final cursor = %s, want max_edited 09:04", r1.Result.Cursor)
	}
	if item := r1.Items()[0]; item["status"] != "Todo" || item["title"] != "Task 1" || item["updated_at"] != "2026-03-02T09:00:00.000Z" {
		t.Errorf("item = %v", item)
	}

	// Task 2 is edited ten minutes later; the next run sends the filter.
	clk.add(10 * time.Minute)
	f.Edit(ids[1], map[string]any{"Status": notiontest.Status("Complete")})
	n := len(f.Requests())
	r2 := conntest.Fetch(t, conn, r1.Cursor(nil))
	if r2.Err != nil {
		t.Fatal(r2.Err)
	}
	q := body(t, f.Requests()[n])
	want := "map[last_edited_time:map[on_or_after:2026-03-02T09:01:00Z] timestamp:last_edited_time]"
	if fmt.Sprint(q["filter"]) != want {
		t.Errorf("filter = %v, want %s (09:04 minus the 3m lookback)", q["filter"], want)
	}
	// The lookback re-reads what was edited from 09:01 (hash dedupe
	// makes that harmless) and finds the edit.
	if got := r2.IDs(); !slices.Equal(got, []string{ids[2], ids[3], ids[4], ids[1]}) {
		t.Errorf("second run ids = %v", got)
	}
	if got := r2.Items()[3]["status"]; got != "Complete" {
		t.Errorf("edited status = %v", got)
	}
	if r2.Result.Complete {
		t.Error("an incremental run is never Complete")
	}
}

// Every property type becomes plain JSON.
func TestPropertyValues(t *testing.T) {
	t.Parallel()
	f, clk := setup(t,
		notiontest.Property{Name: "Name", Type: "title"},
		notiontest.Property{Name: "Notes", Type: "rich_text"},
		notiontest.Property{Name: "Kind", Type: "select", Options: []string{"Bug", "Chore"}},
		notiontest.Property{Name: "Status", Type: "status", Options: []string{"Todo", "Done"}},
		notiontest.Property{Name: "Tags", Type: "multi_select", Options: []string{"a", "b"}},
		notiontest.Property{Name: "Due", Type: "date"},
		notiontest.Property{Name: "Window", Type: "date"},
		notiontest.Property{Name: "Priority", Type: "number"},
		notiontest.Property{Name: "Estimate", Type: "number"},
		notiontest.Property{Name: "Done", Type: "checkbox"},
		notiontest.Property{Name: "Owner", Type: "people"},
		notiontest.Property{Name: "Link", Type: "url"},
		notiontest.Property{Name: "Mail", Type: "email"},
		notiontest.Property{Name: "Phone", Type: "phone_number"},
		notiontest.Property{Name: "Created", Type: "created_time"},
		notiontest.Property{Name: "Edited", Type: "last_edited_time"},
		notiontest.Property{Name: "Creator", Type: "created_by"},
		notiontest.Property{Name: "Editor", Type: "last_edited_by"},
		notiontest.Property{Name: "Blocked by", Type: "relation"},
		notiontest.Property{Name: "Score", Type: "formula", Compute: func(p map[string]any) map[string]any {
			n, _ := p["Priority"].(map[string]any)["number"].(float64)
			return map[string]any{"type": "number", "number": n * 10}
		}},
		notiontest.Property{Name: "Label", Type: "formula", Compute: func(map[string]any) map[string]any {
			return map[string]any{"type": "string", "string": "P1"}
		}},
		notiontest.Property{Name: "Next", Type: "formula", Compute: func(map[string]any) map[string]any {
			return map[string]any{"type": "date", "date": map[string]any{"start": "2026-04-01", "end": nil, "time_zone": nil}}
		}},
		notiontest.Property{Name: "Blockers", Type: "rollup", Compute: func(p map[string]any) map[string]any {
			return map[string]any{"type": "number", "number": float64(len(p["Blocked by"].(map[string]any)["relation"].([]any)))}
		}},
		notiontest.Property{Name: "Key", Type: "unique_id"},
	)
	other := f.AddPage(map[string]any{"Name": notiontest.Title("Other")})
	id := f.AddPage(map[string]any{
		"Name": notiontest.Title("Write the report"), "Notes": notiontest.Text("first draft"),
		"Kind": notiontest.Select("Bug"), "Status": notiontest.Status("Todo"), "Tags": notiontest.MultiSelect("a", "b"),
		"Due": notiontest.Date("2026-03-10", ""), "Window": notiontest.Date("2026-03-10T09:00:00Z", "2026-03-12T17:00:00Z"),
		"Priority": notiontest.Number(2), "Done": notiontest.Checkbox(true), "Owner": notiontest.People(notiontest.HumanID),
		"Link": notiontest.URL("https://example.com/r"), "Mail": notiontest.Email("ada@example.com"), "Phone": notiontest.Phone("+44 20 7946 0000"),
		"Blocked by": notiontest.Relation(other),
	})
	conn := build(t, f, clk, "  status: Status\n")
	r := conntest.Fetch(t, conn, nil)
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	var item map[string]any
	for _, it := range r.Items() {
		if it["id"] == id {
			item = it
		}
	}
	if item == nil {
		t.Fatalf("page %s not emitted: %v", id, r.IDs())
	}
	props := item["properties"].(map[string]any)
	want := map[string]string{
		"Name":       `"Write the report"`,
		"Notes":      `"first draft"`,
		"Kind":       `"Bug"`,
		"Status":     `"Todo"`,
		"Tags":       `["a","b"]`,
		"Due":        `{"end":null,"start":"2026-03-10"}`,
		"Window":     `{"end":"2026-03-12T17:00:00Z","start":"2026-03-10T09:00:00Z"}`,
		"Priority":   `2`,
		"Estimate":   `null`,
		"Done":       `true`,
		"Owner":      `[{"email":"ada.lovelace@example.com","id":"` + notiontest.HumanID + `","name":"Ada Lovelace"}]`,
		"Link":       `"https://example.com/r"`,
		"Mail":       `"ada@example.com"`,
		"Phone":      `"+44 20 7946 0000"`,
		"Created":    `"2026-03-02T09:00:00.000Z"`,
		"Edited":     `"2026-03-02T09:00:00.000Z"`,
		"Creator":    `{"id":"` + notiontest.HumanID + `"}`,
		"Editor":     `{"id":"` + notiontest.HumanID + `"}`,
		"Blocked by": `["` + other + `"]`,
		"Score":      `20`,
		"Label":      `"P1"`,
		"Next":       `{"end":null,"start":"2026-04-01"}`,
		"Blockers":   `1`,
		"Key":        `"TASK-2"`,
	}
	for name, w := range want {
		if got := string(normalize.Canonical(props[name])); got != w {
			t.Errorf("%s = %s, want %s", name, got, w)
		}
	}
	if len(props) != len(want) {
		t.Errorf("properties %d, want %d: %v", len(props), len(want), props)
	}
	if item["title"] != "Write the report" || item["status"] != "Todo" || item["archived"] != false || item["author"] != notiontest.HumanID ||
		item["url"] != "https://www.notion.so/Write-the-report-"+strings.ReplaceAll(id, "-", "") {
		t.Errorf("item = %v", item)
	}

	// Mapped with the source's fields: expressions into a record.
	m, err := normalize.NewMapper(normalize.FieldExprs{Title: "item.properties.Name", Labels: "item.properties.Tags",
		Extra: map[string]string{"due": "item.properties.Due.start", "score": "item.properties.Score"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var raw json.RawMessage
	for _, it := range r.Pages[0].Items {
		if it.Value.(map[string]any)["id"] == id {
			raw = it.Raw
		}
	}
	rec, err := m.Map(item, raw)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Title != "Write the report" || rec.Status != "Todo" || fmt.Sprint(rec.Labels) != "[a b]" || rec.Extra["due"] != "2026-03-10" ||
		rec.UpdatedAt == nil || rec.URL == "" {
		t.Errorf("record = %+v", rec)
	}
	if !strings.Contains(string(raw), `"object":"page"`) {
		t.Errorf("raw is not the page object: %s", raw)
	}
}

// In snapshot mode every run is a full scan; a page archived (moved to the
// trash) is not returned by the query and is recorded as deleted, on a
// real PostgreSQL.
func TestSnapshotRecordsArchivedPagesAsDeleted(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	f, clk := setup(t, taskProps()...)
	ids := addTasks(f, clk, 5)
	conn := build(t, f, clk, "  snapshot: true\n  page_size: 2\n")
	r1 := conntest.Fetch(t, conn, nil)
	if r1.Err != nil || !r1.Result.Complete || !r1.Snapshot {
		t.Fatalf("first run: err %v complete %v snapshot %v", r1.Err, r1.Result.Complete, r1.Snapshot)
	}
	conntest.Mirror(t, pool, "tasks", normalize.FieldExprs{}, nil, r1)

	clk.add(time.Hour)
	f.Archive(ids[3])
	r2 := conntest.Fetch(t, conn, r1.Cursor(nil))
	if r2.Err != nil {
		t.Fatal(r2.Err)
	}
	// A snapshot run sends no last_edited_time filter.
	for _, r := range f.Requests() {
		if r.Method == "POST" && strings.Contains(string(r.Body), "on_or_after") {
			t.Errorf("snapshot query sent a filter: %s", r.Body)
		}
	}
	st := conntest.Mirror(t, pool, "tasks", normalize.FieldExprs{}, nil, r2)
	var deleted []string
	for _, c := range conntest.Changes(t, pool, "tasks") {
		if c.Kind == "deleted" {
			deleted = append(deleted, c.RecordID)
		}
	}
	if !slices.Equal(deleted, []string{ids[3]}) {
		t.Errorf("deleted = %v, want [%s]; stats %+v", deleted, ids[3], st)
	}
}

// A storm of 429, 529 and 503 answers with Retry-After defers the run
// (*RetryLaterError at Retry-After) page after page; resumed from its
// cursor each time, the source is mirrored whole, each page once.
func TestRateLimitStormDelaysButLosesNothing(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	f, clk := setup(t, taskProps()...)
	ids := addTasks(f, clk, 9)
	conn := build(t, f, clk, "  page_size: 2\n")
	if err := conn.Verify(context.Background()); err != nil {
		t.Fatal(err)
	}
	var cursor json.RawMessage
	retries := 0
	f.Storm(2, 7, 429, 529, 503) // every second request fails
	for run := 0; ; run++ {
		if run > 50 {
			t.Fatal("the storm never ended")
		}
		r := conntest.Fetch(t, conn, cursor)
		conntest.Mirror(t, pool, "tasks", normalize.FieldExprs{}, nil, r)
		cursor = r.Cursor(cursor)
		if r.Err == nil {
			break
		}
		var rl *connectors.RetryLaterError
		if !errors.As(r.Err, &rl) {
			t.Fatalf("run %d: %v, want a *RetryLaterError", run, r.Err)
		}
		if want := clk.now().Add(7 * time.Second); !rl.RetryAt.Equal(want) {
			t.Errorf("RetryAt = %s, want Retry-After 7s from now (%s)", rl.RetryAt, want)
		}
		retries++
	}
	if retries < 3 {
		t.Errorf("only %d deferred runs; the storm did not bite", retries)
	}
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM records WHERE source = 'tasks' AND deleted_at IS NULL`).Scan(&n); err != nil || n != len(ids) {
		t.Errorf("records = %d (%v), want %d", n, err, len(ids))
	}
	for _, c := range conntest.Changes(t, pool, "tasks") {
		if c.Kind != "created" {
			t.Errorf("change %s %s: the storm made a page look changed", c.Kind, c.RecordID)
		}
	}
	// Resumed runs went on from their start_cursor: no page of the
	// database was queried twice.
	if q := f.Count("POST", "/query"); q != 5+retries {
		t.Errorf("queries = %d, want 5 pages + %d refused", q, retries)
	}
}

// A property the source names that the database lacks fails the first
// run with an error naming the file, the key and the properties it has;
// Verify (the online check) says the same without fetching pages.
func TestUnknownPropertyIsAConfigError(t *testing.T) {
	t.Parallel()
	f, clk := setup(t, taskProps()...)
	addTasks(f, clk, 1)
	conn := build(t, f, clk, "  status: State\nfields:\n  title: item.properties.Name\n  extra:\n    due: item.properties[\"Due date\"].start\n")
	r := conntest.Fetch(t, conn, nil)
	has := "ClaimExpiresAt, ClaimedAt, ClaimedBy, CompletedAt, LastError, Name, Priority, RetryCount, RunId, Status"
	want := `sources/tasks.yaml:8: notion.status names property "State", which database ` + strings.ReplaceAll(f.DatabaseID, "-", "") +
		` does not have (it has: ` + has + `)` + "\n" +
		`sources/tasks.yaml:12: fields.extra.due names property "Due date", which database ` + strings.ReplaceAll(f.DatabaseID, "-", "") +
		` does not have (it has: ` + has + `)`
	if r.Err == nil || r.Err.Error() != want {
		t.Errorf("error =\n%v\nwant\n%s", r.Err, want)
	}
	if f.Count("POST", "/query") != 0 || len(r.Pages) != 0 {
		t.Error("a source with a wrong property name fetched pages")
	}
	if err := conn.Verify(context.Background()); err == nil || err.Error() != want {
		t.Errorf("Verify = %v", err)
	}
}

// Every request carries the token; a refused one is ErrUnauthorized.
func TestUnauthorized(t *testing.T) {
	t.Parallel()
	f, clk := setup(t, taskProps()...)
	conn := build(t, f, clk, "")
	f.SetToken("secret_other")
	r := conntest.Fetch(t, conn, nil)
	if !errors.Is(r.Err, connectors.ErrUnauthorized) || !strings.Contains(r.Err.Error(), "API token is invalid") {
		t.Errorf("error = %v, want ErrUnauthorized with Notion's message", r.Err)
	}
}

func mustJSON(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
}
