package changes_test

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lookout-dev/lookout/internal/changes"
	"github.com/lookout-dev/lookout/internal/normalize"
	"github.com/lookout-dev/lookout/internal/pgtest"
)

func at(s string) *time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return &t
}

func extra(t *testing.T, js string) map[string]any {
	t.Helper()
	v, err := normalize.Decode([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	return v.(map[string]any)
}

// tricky are records whose snapshot must come back from the records row
// exactly: escapes, unicode, numbers at the edges of int64 and float64,
// empty and missing fields, times at every precision PostgreSQL keeps and
// at the ends of the four-digit years.
func tricky(t *testing.T) []normalize.Record {
	return []normalize.Record{
		{ID: "full", Title: "Ticket \"1\": <b>&</b> é ✓ 😀", Body: "line\nnext\ttab \\ back \u2028 \x01 end", URL: "https://x.test/?a=1&b=2",
			Author: "ann", Status: "open", Labels: []string{"a", "b \"q\"", ""},
			CreatedAt: at("2026-01-02T03:04:05.123456Z"), UpdatedAt: at("2026-01-02T03:04:05.1Z"),
			Extra: extra(t, `{"n": 1, "f": 1.5, "big": 1e300, "tiny": -1e-7, "exact": 9007199254740993, "sum": 0.30000000000000004,
				"s": "é\u2028<>&\"\\\n", "nested": {"a": [1, "x", null, true, false, {"z": []}]}, "empty": {}, "arr": [],
				"ключ": "значение", "zero": 0, "neg": -12, "float_int": 2.0}`)},
		{ID: "empty"},
		{ID: "seconds", Title: "t", CreatedAt: at("2026-03-04T05:06:07Z"), UpdatedAt: at("2026-03-04T05:06:07.000001Z")},
		{ID: "zone", CreatedAt: at("2026-03-04T05:06:07.5+02:00")},
		{ID: "first-year", CreatedAt: at("0001-01-01T00:00:00Z"), UpdatedAt: at("9999-12-31T23:59:59.999999Z")},
		{ID: "42", Title: "numeric id"},
	}
}

// write applies recs (hashed) as one page of source, as the syncer does.
func write(t *testing.T, pool *pgxpool.Pool, source string, recs ...normalize.Record) changes.Stats {
	t.Helper()
	h := hashAll(t, recs)
	var st changes.Stats
	err := pgx.BeginFunc(context.Background(), pool, func(tx pgx.Tx) (err error) {
		st, err = changes.Apply(context.Background(), tx, source, 7, recs, h)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// hashAll hashes recs with a hasher of no volatile path, and returns it.
func hashAll(t *testing.T, recs []normalize.Record) *normalize.Hasher {
	t.Helper()
	h, err := normalize.NewHasher(nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range recs {
		h.Hash(&recs[i])
	}
	return h
}

func remove(t *testing.T, pool *pgxpool.Pool, source string, ids ...string) {
	t.Helper()
	err := pgx.BeginFunc(context.Background(), pool, func(tx pgx.Tx) error {
		_, err := changes.Delete(context.Background(), tx, source, 8, ids)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// stored is what a change of record id at version holds: its own snapshot
// (nil when it left it to the record), and the snapshot
// changes_with_record gives.
type stored struct {
	own, seen *string
}

func snapshotOf(t *testing.T, pool *pgxpool.Pool, source, id string, version int) stored {
	t.Helper()
	var s stored
	err := pool.QueryRow(context.Background(), `
		SELECT c.record::text, w.record::text
		FROM changes c JOIN changes_with_record w ON w.id = c.id
		WHERE c.source = $1 AND c.record_id = $2 AND c.version = $3`, source, id, version).Scan(&s.own, &s.seen)
	if err != nil {
		t.Fatalf("%s/%s v%d: %v", source, id, version, err)
	}
	return s
}

// snap is the jsonb text of r's canonical snapshot.
func snap(t *testing.T, pool *pgxpool.Pool, r normalize.Record) string {
	t.Helper()
	h, err := normalize.NewHasher(nil)
	if err != nil {
		t.Fatal(err)
	}
	h.Hash(&r)
	return asJSONB(t, pool, r.Snapshot)
}

// asJSONB is the text of snapshot as PostgreSQL stores it in jsonb: what
// changes.record held when every change stored its snapshot.
func asJSONB(t *testing.T, pool *pgxpool.Pool, snapshot []byte) string {
	t.Helper()
	var s string
	if err := pool.QueryRow(context.Background(), `SELECT $1::jsonb::text`, string(snapshot)).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// A created change stores no snapshot, and record_snapshot gives back
// from the records row exactly the jsonb the change used to store.
func TestCreatedChangeLeavesItsSnapshotToTheRecord(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	recs := tricky(t)
	write(t, pool, "src", recs...)
	for _, r := range recs {
		s := snapshotOf(t, pool, "src", r.ID, 1)
		if s.own != nil {
			t.Errorf("%s: created change stores a snapshot: %s", r.ID, *s.own)
		}
		if want := snap(t, pool, r); s.seen == nil || *s.seen != want {
			t.Errorf("%s: changes_with_record.record =\n%v\nwant the snapshot\n%s", r.ID, deref(s.seen), want)
		}
	}
}

// A time finer than a microsecond cannot come back from the records row:
// such a created change stores its snapshot.
func TestCreatedChangeStoresASnapshotTheRecordCannotGiveBack(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	r := normalize.Record{ID: "ns", CreatedAt: at("2026-01-02T03:04:05.123456789Z")}
	if !changes.StoresSnapshot(&r) {
		t.Fatal("StoresSnapshot is false for a nanosecond time")
	}
	write(t, pool, "src", r)
	want := snap(t, pool, r)
	s := snapshotOf(t, pool, "src", "ns", 1)
	if s.own == nil || *s.own != want || s.seen == nil || *s.seen != want {
		t.Fatalf("own %v, seen %v, want both %s", deref(s.own), deref(s.seen), want)
	}
}

// When the record moves on (updated, deleted, then created again), the
// change of the version it left gets that version's snapshot in the same
// transaction, whether or not it was evaluated.
func TestSnapshotIsMaterializedWhenTheRecordMovesOn(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	recs := tricky(t)
	write(t, pool, "src", recs...)
	v1 := map[string]string{}
	for _, r := range recs {
		v1[r.ID] = snap(t, pool, r)
	}
	// "seconds" was evaluated already: explain and replay still need it.
	if _, err := pool.Exec(ctx, `UPDATE changes SET eval_status = 'done', evaluated_at = now() WHERE record_id = 'seconds'`); err != nil {
		t.Fatal(err)
	}
	// Another source's record of the same id is left alone.
	write(t, pool, "other", normalize.Record{ID: "full", Title: "other"})

	next := tricky(t)
	next[0].Title = "Ticket 1, edited"
	next[2].Status = "done"
	st := write(t, pool, "src", next[0], next[2], next[5])
	if st.Updated != 2 || st.Unchanged != 1 {
		t.Fatalf("second page: %+v", st)
	}
	remove(t, pool, "src", "empty", "zone")

	for _, id := range []string{"full", "seconds", "empty", "zone"} {
		if s := snapshotOf(t, pool, "src", id, 1); s.own == nil || *s.own != v1[id] || *s.seen != v1[id] {
			t.Errorf("%s v1 after the record moved on: own %v, seen %v, want %s", id, deref(s.own), deref(s.seen), v1[id])
		}
	}
	for _, id := range []string{"first-year", "42"} {
		if s := snapshotOf(t, pool, "src", id, 1); s.own != nil || *s.seen != v1[id] {
			t.Errorf("%s v1, record unchanged: own %v, seen %v, want none and %s", id, deref(s.own), deref(s.seen), v1[id])
		}
	}
	if s := snapshotOf(t, pool, "other", "full", 1); s.own != nil {
		t.Errorf("other/full was materialized by a write of src: %s", *s.own)
	}
	// The updated and deleted changes store theirs, as before.
	if s := snapshotOf(t, pool, "src", "full", 2); s.own == nil || *s.own != snap(t, pool, next[0]) {
		t.Errorf("full v2: own %v", deref(s.own))
	}
	if s := snapshotOf(t, pool, "src", "zone", 2); s.own == nil || *s.own != v1["zone"] {
		t.Errorf("zone v2 (deleted): own %v, want %s", deref(s.own), v1["zone"])
	}

	// Created again after the deletion: a created change at version 3
	// that leaves its snapshot to the record again.
	again := normalize.Record{ID: "zone", Title: "back"}
	write(t, pool, "src", again)
	if s := snapshotOf(t, pool, "src", "zone", 3); s.own != nil || *s.seen != snap(t, pool, again) {
		t.Errorf("zone v3 (created again): own %v, seen %v", deref(s.own), deref(s.seen))
	}
	var nulls int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM changes_with_record WHERE record IS NULL`).Scan(&nulls); err != nil {
		t.Fatal(err)
	}
	if nulls != 0 {
		t.Errorf("%d changes without a snapshot in changes_with_record", nulls)
	}
}

func deref(s *string) any {
	if s == nil {
		return nil
	}
	return *s
}

// TestSnapshotsDecodeTheExtrasTogether builds the snapshots of several
// records' columns with one Snapshots and checks each against Snapshot of
// its columns alone; an extra that does not decode fails Finish with the
// record's id.
func TestSnapshotsDecodeTheExtrasTogether(t *testing.T) {
	t.Parallel()
	text := func(s string) pgtype.Text { return pgtype.Text{String: s, Valid: true} }
	cols := []changes.RecordColumns{
		{ID: text("a"), Title: text("A"), Labels: []string{"x"}, Extra: []byte(`{"n": 9007199254740993, "f": 0.5}`)},
		{ID: text("b"), Status: text("open")},
		{},
		{ID: text("c"), Extra: []byte(`{"list": [1, {"deep": 2}], "s": "é"}`)},
	}
	var s changes.Snapshots
	var got []map[string]any
	for i := range cols {
		got = append(got, s.Add(&cols[i]))
	}
	if err := s.Finish(); err != nil {
		t.Fatal(err)
	}
	for i := range cols {
		want, err := cols[i].Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got[i], want) {
			t.Errorf("record %d: Snapshots gives %#v, Snapshot %#v", i, got[i], want)
		}
	}
	if got[0]["extra"].(map[string]any)["n"] != int64(9007199254740993) {
		t.Errorf("extra of a: %#v, want n as an exact int64", got[0]["extra"])
	}
	s.Add(&cols[0])
	s.Add(&changes.RecordColumns{ID: text("bad"), Extra: []byte(`{"n": `)})
	if err := s.Finish(); err == nil || !strings.Contains(err.Error(), "record bad: extra") {
		t.Errorf("Finish with a broken extra: %v, want an error naming record bad", err)
	}
}
