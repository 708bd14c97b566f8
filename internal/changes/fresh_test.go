package changes_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lookout-dev/lookout/internal/changes"
	"github.com/lookout-dev/lookout/internal/normalize"
	"github.com/lookout-dev/lookout/internal/pgtest"
)

// writeFresh prepares recs (hashed) of source as new records and writes
// them in one transaction, as a first sync does.
func writeFresh(t *testing.T, pool *pgxpool.Pool, source string, recs ...normalize.Record) (changes.Stats, error) {
	t.Helper()
	f := changes.PrepareFresh(source, 7, recs, hashAll(t, recs))
	var st changes.Stats
	err := pgx.BeginFunc(context.Background(), pool, func(tx pgx.Tx) (err error) {
		st, err = changes.WriteFresh(context.Background(), tx, f)
		return err
	})
	return st, err
}

// rowsOf is what source stores, without the source's name and the times
// of writing: every column a reader sees.
func rowsOf(t *testing.T, pool *pgxpool.Pool, source string) (records, changeRows []string) {
	t.Helper()
	ctx := context.Background()
	rows, err := pool.Query(ctx, `
		SELECT format('%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s', record_id, version, content_hash, title, body, url, author,
		              status, labels, external_created_at, external_updated_at, extra, raw, deleted_at IS NULL, last_run_id)
		FROM records WHERE source = $1 ORDER BY record_id`, source)
	if err != nil {
		t.Fatal(err)
	}
	records, err = pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	rows, err = pool.Query(ctx, `
		SELECT format('%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s', c.record_id, c.kind, c.version, c.old_hash, c.new_hash, c.changed_fields,
		              c.record, c.previous, c.run_id, c.eval_status, w.record)
		FROM changes c JOIN changes_with_record w ON w.id = c.id AND w.created_at = c.created_at
		WHERE c.source = $1 ORDER BY c.record_id, c.id`, source)
	if err != nil {
		t.Fatal(err)
	}
	changeRows, err = pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return records, changeRows
}

// TestFreshWritesWhatApplyWrites checks that a first sync's batch,
// prepared as new records and written without reading stored hashes,
// stores exactly what Apply stores for a source with no records: the
// same records, the same created changes (snapshot left to the record,
// or stored when the record cannot give it back), the same counts.
func TestFreshWritesWhatApplyWrites(t *testing.T) {
	pool := pgtest.Pool(t)
	applied := write(t, pool, "applied", tricky(t)...)
	fresh, err := writeFresh(t, pool, "fresh", tricky(t)...)
	if err != nil {
		t.Fatal(err)
	}
	if applied != fresh {
		t.Errorf("stats: Apply %+v, fresh %+v", applied, fresh)
	}
	wantRecs, wantChanges := rowsOf(t, pool, "applied")
	gotRecs, gotChanges := rowsOf(t, pool, "fresh")
	if len(wantRecs) != len(tricky(t)) || len(wantChanges) != len(tricky(t)) {
		t.Fatalf("Apply wrote %d records and %d changes, want %d of each", len(wantRecs), len(wantChanges), len(tricky(t)))
	}
	for i := range wantRecs {
		if gotRecs[i] != wantRecs[i] {
			t.Errorf("record %d:\n fresh %s\n Apply %s", i, gotRecs[i], wantRecs[i])
		}
	}
	for i := range wantChanges {
		if gotChanges[i] != wantChanges[i] {
			t.Errorf("change %d:\n fresh %s\n Apply %s", i, gotChanges[i], wantChanges[i])
		}
	}

	// The arrays went in element by element: labels with quotes and an
	// empty string, and the created change's fields.
	var labels, fields []string
	if err := pool.QueryRow(context.Background(), `
		SELECT r.labels, c.changed_fields FROM records r JOIN changes c USING (source, record_id)
		WHERE r.source = 'fresh' AND r.record_id = 'full'`).Scan(&labels, &fields); err != nil {
		t.Fatal(err)
	}
	full := tricky(t)[0]
	h, _ := normalize.NewHasher(nil)
	if fmt.Sprint(labels) != fmt.Sprint(full.Labels) || fmt.Sprintf("%q", fields) != fmt.Sprintf("%q", h.CreatedFields(&full)) || len(fields) < 10 {
		t.Errorf("stored labels %q and changed_fields %q, want %q and %q", labels, fields, full.Labels, h.CreatedFields(&full))
	}

	// The records move on alike: an update materializes the snapshot the
	// created change left to the record in both.
	moved := tricky(t)[:1]
	moved[0].Title = "moved on"
	write(t, pool, "applied", moved...)
	moved = tricky(t)[:1]
	moved[0].Title = "moved on"
	write(t, pool, "fresh", moved...)
	wantRecs, wantChanges = rowsOf(t, pool, "applied")
	gotRecs, gotChanges = rowsOf(t, pool, "fresh")
	if fmt.Sprint(gotRecs) != fmt.Sprint(wantRecs) || fmt.Sprint(gotChanges) != fmt.Sprint(wantChanges) {
		t.Errorf("after an update:\n fresh %q %q\n Apply %q %q", gotRecs, gotChanges, wantRecs, wantChanges)
	}
}

// TestFreshRefusesARecordStoredAlready checks that a batch prepared as
// new records that holds a stored record fails with ErrStored and writes
// nothing: the caller writes it again with Apply.
func TestFreshRefusesARecordStoredAlready(t *testing.T) {
	pool := pgtest.Pool(t)
	write(t, pool, "src", normalize.Record{ID: "b", Title: "stored by a webhook event"})
	_, err := writeFresh(t, pool, "src", normalize.Record{ID: "a", Title: "new"}, normalize.Record{ID: "b", Title: "new too"})
	if !errors.Is(err, changes.ErrStored) {
		t.Fatalf("err = %v, want ErrStored", err)
	}
	recs, chs := rowsOf(t, pool, "src")
	if len(recs) != 1 || len(chs) != 1 {
		t.Errorf("after the refused batch: %d records, %d changes, want the 1 and 1 stored before", len(recs), len(chs))
	}
	st := write(t, pool, "src", normalize.Record{ID: "a", Title: "new"}, normalize.Record{ID: "b", Title: "new too"})
	if st.Created != 1 || st.Updated != 1 {
		t.Errorf("Apply after ErrStored: %+v, want 1 created and 1 updated", st)
	}
}

// TestActivityCountsEveryChange checks the hourly totals of the admin
// page (migration 27): every change written, by Apply, by a first sync's
// COPY and by Delete, is counted in activity_hour_totals in its hour.
func TestActivityCountsEveryChange(t *testing.T) {
	pool := pgtest.Pool(t)
	write(t, pool, "a", tricky(t)...)
	if _, err := writeFresh(t, pool, "b", tricky(t)...); err != nil {
		t.Fatal(err)
	}
	updated := tricky(t)[:2]
	updated[0].Title, updated[1].Title = "x", "y"
	write(t, pool, "a", updated...)
	remove(t, pool, "b", "full", "empty", "seconds")

	rows, err := pool.Query(context.Background(), `
		SELECT format('%s %s', hour, n) FROM (
		    SELECT date_trunc('hour', created_at, 'UTC') AS hour, count(*) AS n FROM changes GROUP BY 1) c
		ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	want, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	rows, err = pool.Query(context.Background(), `
		SELECT format('%s %s', hour, sum(changes)) FROM activity_hour_totals GROUP BY hour HAVING sum(changes) > 0 ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) || len(want) == 0 {
		t.Errorf("activity_hour_totals counts %q, changes by hour %q", got, want)
	}
}
