package syncer

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lookout-dev/lookout/internal/connectors"
	"github.com/lookout-dev/lookout/internal/pgtest"
)

// pagesOf is an incremental source's fetch over pages 1..n of perPage
// items "p<page>-<i>" (titled by item), resuming after the page in its
// cursor ({"page": k}); extra adds items to a page.
func pagesOf(n, perPage int, extra map[int][]map[string]any) fetchFunc {
	return func(ctx context.Context, _ connectors.Env, cursor json.RawMessage, emit connectors.EmitFunc) (connectors.Result, error) {
		var c struct{ Page int }
		if cursor != nil {
			if err := json.Unmarshal(cursor, &c); err != nil {
				return connectors.Result{}, err
			}
		}
		for p := c.Page + 1; p <= n; p++ {
			var page connectors.Page
			for i := range perPage {
				id := fmt.Sprintf("p%d-%d", p, i)
				page.Items = append(page.Items, connectors.Item{Value: map[string]any{"id": id, "title": "item " + id}, Loc: id})
			}
			for _, it := range extra[p] {
				page.Items = append(page.Items, connectors.Item{Value: it, Loc: fmt.Sprint(it["id"])})
			}
			page.Cursor = json.RawMessage(`{"page": ` + strconv.Itoa(p) + `}`)
			if err := emit(ctx, page); err != nil {
				return connectors.Result{}, err
			}
		}
		return connectors.Result{Complete: true}, nil
	}
}

// storedIDs are the ids of source's records and the kinds and versions
// of their changes, in id order of the changes.
func (h *harness) stored(source string) (records map[string]int, changes []string) {
	h.t.Helper()
	rows, err := h.pool.Query(context.Background(), `SELECT record_id, version FROM records WHERE source = $1`, source)
	if err != nil {
		h.t.Fatal(err)
	}
	records = map[string]int{}
	for rows.Next() {
		var id string
		var v int
		if err := rows.Scan(&id, &v); err != nil {
			h.t.Fatal(err)
		}
		records[id] = v
	}
	rows.Close()
	rows, err = h.pool.Query(context.Background(), `
		SELECT record_id || ' ' || kind || ' v' || version FROM changes WHERE source = $1 ORDER BY record_id, version`, source)
	if err != nil {
		h.t.Fatal(err)
	}
	changes, err = pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		h.t.Fatal(err)
	}
	return records, changes
}

// TestFirstSyncRecordOnTwoPages runs a first sync (batches prepared as new
// records, written without reading stored hashes, two transactions in
// flight) in which a record comes on two pages, as an incremental API does
// when the record changes during the pagination: the second COPY finds it
// stored, and the batches are written again through the stored hashes.
// Every record is stored once, each version has one change.
func TestFirstSyncRecordOnTwoPages(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	extra := map[int][]map[string]any{
		6: {{"id": "p2-3", "title": "item p2-3, edited during the sync"}},
		7: {{"id": "p3-4", "title": "item p3-4"}}, // unchanged
	}
	cfg := loadConfig(t, "", map[string]string{"src": "every: 1h\njitter: 0s\n"}, map[string]fetchFunc{"src": pagesOf(10, 25, extra)})
	s := h.syncer(cfg, Config{BatchSize: 10})
	if n := h.runDue(s); n != 1 {
		t.Fatalf("ran %d", n)
	}
	runs := h.runs("src")
	if len(runs) != 1 || runs[0].Status != "succeeded" || runs[0].Created != 250 || runs[0].Updated != 1 || runs[0].Seen != 252 || runs[0].Pages != 10 {
		t.Fatalf("run: %+v, want succeeded with 250 created, 1 updated, 252 seen, 10 pages", runs)
	}
	records, changes := h.stored("src")
	if len(records) != 250 || records["p2-3"] != 2 || records["p3-4"] != 1 {
		t.Errorf("%d records, p2-3 at version %d, p3-4 at %d; want 250, 2 and 1", len(records), records["p2-3"], records["p3-4"])
	}
	if len(changes) != 251 {
		t.Errorf("%d changes, want 251", len(changes))
	}
	seen := map[string]bool{}
	for _, c := range changes {
		if seen[c] {
			t.Errorf("change %s written twice", c)
		}
		seen[c] = true
	}
	if !seen["p2-3 created v1"] || !seen["p2-3 updated v2"] || !seen["p3-4 created v1"] {
		t.Errorf("changes of the record on two pages: %v", changes)
	}
}

// TestFirstSyncStopsAtAFailedBatch fails a first sync's batch on page 5
// of 10 (a trigger refuses one record): no transaction after it commits,
// though one may have been written beside it; the cursor and the pages
// counted are those of the last page committed whole; the next run
// resumes there and every record ends stored once, with one change.
func TestFirstSyncStopsAtAFailedBatch(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	pgtest.SkipOnCitus(t, h.pool, "the test makes a batch fail with a trigger on records, and Citus refuses triggers on distributed tables")
	h.exec(`CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN IF NEW.record_id = 'p5-7' THEN RAISE EXCEPTION 'refused %', NEW.record_id; END IF; RETURN NEW; END $$`)
	h.exec(`CREATE TRIGGER refuse BEFORE INSERT ON records FOR EACH ROW EXECUTE FUNCTION refuse()`)
	cfg := loadConfig(t, "", map[string]string{"src": "every: 1h\njitter: 0s\n"}, map[string]fetchFunc{"src": pagesOf(10, 25, nil)})
	s := h.syncer(cfg, Config{BatchSize: 10})
	h.runDue(s)
	runs := h.runs("src")
	if len(runs) != 1 || runs[0].Status != "failed" {
		t.Fatalf("run: %+v, want failed", runs)
	}
	records, _ := h.stored("src")
	var cursor struct{ Page int }
	if c := h.source("src").Cursor; c != "" && c != "null" {
		if err := json.Unmarshal([]byte(c), &cursor); err != nil {
			t.Fatal(err)
		}
	}
	if cursor.Page > 4 || runs[0].Pages != cursor.Page {
		t.Errorf("cursor at page %d, %d pages counted; want the same, at most 4", cursor.Page, runs[0].Pages)
	}
	// What is stored is the records in the order they came, up to a
	// point at or after the cursor's page and before the refused batch.
	last := -1
	for p := 1; p <= 10; p++ {
		for i := range 25 {
			n := (p-1)*25 + i
			_, ok := records[fmt.Sprintf("p%d-%d", p, i)]
			switch {
			case ok && last != n-1:
				t.Fatalf("p%d-%d stored after a record not stored", p, i)
			case ok:
				last = n
			case p <= cursor.Page:
				t.Fatalf("p%d-%d not stored, though the cursor is at page %d", p, i, cursor.Page)
			}
		}
	}
	if last >= 4*25 {
		t.Errorf("records stored up to p%d-%d, at or after the refused batch", last/25+1, last%25)
	}

	h.exec(`DROP TRIGGER refuse ON records`)
	h.runAt(s, "src")
	runs = h.runs("src")
	if runs[1].Status != "succeeded" {
		t.Fatalf("second run: %+v", runs[1])
	}
	records, changes := h.stored("src")
	if len(records) != 250 || len(changes) != 250 {
		t.Errorf("after the second run: %d records, %d changes; want 250 of each", len(records), len(changes))
	}
	for id, v := range records {
		if v != 1 {
			t.Errorf("%s at version %d, want 1", id, v)
		}
	}
}

// TestManyFirstSyncsAtOnce runs twelve first syncs at once on a pool with
// two writing slots: each run writes two transactions at once, and the
// second takes its slot and connection only after the first holds its
// own, so the runs never wait on each other in a cycle. Every record is
// stored once.
func TestManyFirstSyncsAtOnce(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	pool := pgtest.PoolFor(t, h.url+"&pool_max_conns=8")
	sources, fetch := map[string]string{}, map[string]fetchFunc{}
	for i := range 12 {
		name := fmt.Sprintf("src%02d", i)
		sources[name] = "every: 1h\njitter: 0s\n"
		fetch[name] = pagesOf(12, 20, nil)
	}
	cfg := loadConfig(t, "", sources, fetch)
	s := h.syncerOn(pool, cfg, Config{BatchSize: 5, Concurrency: 12})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if n, err := s.RunDue(ctx); err != nil || n != 12 {
		t.Fatalf("ran %d: %v", n, err)
	}
	for name := range sources {
		if runs := h.runs(name); len(runs) != 1 || runs[0].Status != "succeeded" || runs[0].Created != 240 {
			t.Errorf("%s: %+v", name, runs)
		}
		if records, changes := h.stored(name); len(records) != 240 || len(changes) != 240 {
			t.Errorf("%s: %d records, %d changes; want 240 of each", name, len(records), len(changes))
		}
	}
}
