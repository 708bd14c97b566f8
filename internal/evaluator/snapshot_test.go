package evaluator

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lookout-dev/lookout/internal/changes"
	"github.com/lookout-dev/lookout/internal/explain"
	"github.com/lookout-dev/lookout/internal/normalize"
	"github.com/lookout-dev/lookout/internal/pgtest"
	"github.com/lookout-dev/lookout/internal/replay"
)

// snapshotWatches judge what a created change describes: a record that is
// open and titled v1 when created.
const snapshotWatches = `
  - {name: open, when: 'record.status == "open"', notify: [log]}
  - {name: first, when: 'record.title == "v1" && previous == nil', notify: [log]}
`

// remove deletes records as a complete snapshot run that no longer sees
// them does.
func remove(t *testing.T, pool *pgxpool.Pool, ids ...string) {
	t.Helper()
	err := pgx.BeginFunc(context.Background(), pool, func(tx pgx.Tx) error {
		_, err := changes.Delete(context.Background(), tx, "tasks", 2, ids)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// changeDecisions returns watch -> decision of the change of record at
// version.
func changeDecisions(t *testing.T, pool *pgxpool.Pool, recordID string, version int) map[string]string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `
		SELECT e.watch, e.decision FROM evaluations e JOIN changes c ON c.source = e.source AND c.id = e.change_id
		WHERE c.record_id = $1 AND c.version = $2`, recordID, version)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for rows.Next() {
		var w, d string
		if err := rows.Scan(&w, &d); err != nil {
			t.Fatal(err)
		}
		out[w] = d
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func changeID(t *testing.T, pool *pgxpool.Pool, recordID string, version int) int64 {
	t.Helper()
	var id int64
	if err := pool.QueryRow(context.Background(), `SELECT id FROM changes WHERE record_id = $1 AND version = $2`, recordID, version).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

// A created change is judged at the version it describes even when the
// record changed again, or was deleted, before the evaluator got to it:
// the writer materialized that version into the change.
func TestCreatedChangeIsJudgedAtItsVersion(t *testing.T) {
	t.Parallel()
	pool, e := commitSetup(t, "", snapshotWatches)
	apply(t, pool,
		normalize.Record{ID: "moved", Title: "v1", Status: "open"},
		normalize.Record{ID: "deleted", Title: "v1", Status: "open"},
		normalize.Record{ID: "still", Title: "v1", Status: "open"})
	apply(t, pool, normalize.Record{ID: "moved", Title: "v2", Status: "done"})
	remove(t, pool, "deleted")
	drain(t, e)

	both := map[string]string{"open": "notify", "first": "notify"}
	for _, id := range []string{"moved", "deleted", "still"} {
		if got := changeDecisions(t, pool, id, 1); !equalMaps(got, both) {
			t.Errorf("%s v1 (created): %v, want %v", id, got, both)
		}
	}
	if got, want := changeDecisions(t, pool, "moved", 2), map[string]string{"open": "skip", "first": "skip"}; !equalMaps(got, want) {
		t.Errorf("moved v2 (updated): %v, want %v", got, want)
	}
	// The deleted change carries the last content: still open, not created.
	if got, want := changeDecisions(t, pool, "deleted", 2), map[string]string{"open": "notify", "first": "skip"}; !equalMaps(got, want) {
		t.Errorf("deleted v2: %v, want %v", got, want)
	}
}

// explainAndReplay prints the explain trail of change id and the replay
// rows of every change, the text an operator compares.
func explainAndReplay(t *testing.T, pool *pgxpool.Pool, e *Evaluator, id int64, since time.Time) string {
	t.Helper()
	trails, err := explain.Trails(context.Background(), pool, nil, explain.Query{ChangeID: id})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	explain.WriteTrails(&out, trails)
	rep, err := e.Replay(context.Background(), replay.Query{Since: since, Until: time.Now().Add(time.Hour), NoModel: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rep.Rows {
		if r.ChangeID == id {
			fmt.Fprintf(&out, "replay %+v\n", r)
		}
	}
	return out.String()
}

// explain and replay of a created change print the same, whether its
// snapshot is still the record's, was materialized when the record moved
// on, or was stored in the change as every change did before migration 11.
func TestExplainAndReplayOfACreatedChangeAreExact(t *testing.T) {
	t.Parallel()
	pool, e := commitSetup(t, "", snapshotWatches)
	since := time.Now().Add(-time.Hour)
	first := normalize.Record{ID: "T-1", Title: "v1", Status: "open", Labels: []string{"x"},
		CreatedAt: &since, Extra: map[string]any{"n": int64(3)}}
	apply(t, pool, first)
	drain(t, e)
	id := changeID(t, pool, "T-1", 1)

	atRecord := explainAndReplay(t, pool, e, id, since)
	for _, want := range []string{"· tasks/T-1 · created v1 · ", "  title:    v1\n", "Old:notify", "New:notify"} {
		if !bytes.Contains([]byte(atRecord), []byte(want)) {
			t.Fatalf("explain/replay lacks %q:\n%s", want, atRecord)
		}
	}

	apply(t, pool, normalize.Record{ID: "T-1", Title: "v2", Status: "done"})
	var own *string
	if err := pool.QueryRow(context.Background(), `SELECT record::text FROM changes WHERE id = $1`, id).Scan(&own); err != nil {
		t.Fatal(err)
	}
	if own == nil {
		t.Fatal("the created change has no snapshot of its own after the record moved on")
	}
	if materialized := explainAndReplay(t, pool, e, id, since); materialized != atRecord {
		t.Errorf("after the record moved on:\n%s\nbefore:\n%s", materialized, atRecord)
	}

	// As stored before migration 11: the canonical snapshot in the change.
	h, _ := normalize.NewHasher(nil)
	h.Hash(&first)
	if _, err := pool.Exec(context.Background(), `UPDATE changes SET record = $2::jsonb WHERE id = $1`, id, string(first.Snapshot)); err != nil {
		t.Fatal(err)
	}
	if stored := explainAndReplay(t, pool, e, id, since); stored != atRecord {
		t.Errorf("with the snapshot stored in the change:\n%s\nfrom the record:\n%s", stored, atRecord)
	}
}

// The evaluator's snapshot of a change is the same map whether it came
// from the record or from the change.
func TestClaimedSnapshotIsTheStoredOne(t *testing.T) {
	t.Parallel()
	pool, _ := commitSetup(t, "", snapshotWatches)
	now := time.Date(2026, 5, 6, 7, 8, 9, 120000000, time.UTC)
	r := normalize.Record{ID: "T-9", Title: "t", Status: "open", Labels: []string{"a", "b"}, CreatedAt: &now, UpdatedAt: &now,
		Extra: map[string]any{"n": int64(1), "f": 1.5, "s": "é", "l": []any{"x", int64(2)}, "m": map[string]any{}}}
	apply(t, pool, r)
	read := func() map[string]any {
		t.Helper()
		rows, err := pool.Query(context.Background(), `
			SELECT id, source, record_id, kind, version, coalesce(new_hash, ''), changed_fields, record, previous, eval_attempts + 1, created_at
			FROM changes WHERE record_id = 'T-9'`)
		chs, err := scanChanges(rows, err)
		if err == nil {
			err = fillSnapshots(context.Background(), pool, chs)
		}
		if err != nil || len(chs) != 1 {
			t.Fatalf("read: %v (%d changes)", err, len(chs))
		}
		return chs[0].Record
	}
	fromRecord := read()
	h, _ := normalize.NewHasher(nil)
	h.Hash(&r)
	if _, err := pool.Exec(context.Background(), `UPDATE changes SET record = $1::jsonb WHERE record_id = 'T-9'`, string(r.Snapshot)); err != nil {
		t.Fatal(err)
	}
	fromChange := read()
	if a, b := string(normalize.Canonical(fromRecord)), string(normalize.Canonical(fromChange)); a != b {
		t.Errorf("snapshot from the record %s, from the change %s", a, b)
	}
	if fmt.Sprintf("%#v", fromRecord) != fmt.Sprintf("%#v", fromChange) {
		t.Errorf("decoded differently:\n%#v\n%#v", fromRecord, fromChange)
	}
}

// The claim builds a created change's snapshot from its record's columns
// (changes.RecordColumns), not with record_snapshot_of in PostgreSQL: the
// same map as the function's jsonb decoded, for texts, NULL texts, labels,
// times with and without a fraction or none, and numbers, lists and objects
// in extra; and the claim does not call the function (it is made to fail).
func TestClaimBuildsTheSnapshotFromTheRecordsColumns(t *testing.T) {
	t.Parallel()
	pool, _ := commitSetup(t, "", snapshotWatches)
	pgtest.SkipOnCitus(t, pool, "claimSQL, the one-PostgreSQL claim this test runs, locks across shards, which Citus refuses; a shard's claim (claimShardSQL) still builds the snapshot with record_snapshot_of below its locks, unchanged by the columns this test checks")
	ctx := context.Background()
	frac := time.Date(2026, 5, 6, 7, 8, 9, 120000000, time.UTC)
	whole := time.Date(1999, 12, 31, 23, 59, 59, 0, time.FixedZone("x", 3600))
	apply(t, pool,
		normalize.Record{ID: "A", Title: "t", Body: "b\n\"q\" é \\ \u2028", URL: "u", Author: "a", Status: "open",
			Labels: []string{"a", "b"}, CreatedAt: &frac, UpdatedAt: &whole,
			Extra: map[string]any{"n": int64(1), "f": 1.5, "big": int64(1) << 62, "s": "é", "l": []any{"x", int64(2), nil, true},
				"m": map[string]any{"k": map[string]any{}}}},
		normalize.Record{ID: "B"},
		normalize.Record{ID: "C", Labels: []string{}, CreatedAt: &whole, Extra: map[string]any{}})
	// A record written by hand: NULL texts, and an infinite time (no text).
	if _, err := pool.Exec(ctx, `UPDATE records SET title = NULL, body = NULL, url = NULL, author = NULL, status = NULL,
		external_updated_at = 'infinity' WHERE record_id = 'B'`); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	rows, err := pool.Query(ctx, `SELECT r.record_id, `+changes.SnapshotOfR+` FROM records r`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		var snap []byte
		if err := rows.Scan(&id, &snap); err != nil {
			t.Fatal(err)
		}
		m, err := normalize.DecodeObject(snap)
		if err != nil {
			t.Fatal(err)
		}
		want[id] = fmt.Sprintf("%#v", m)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(want) != 3 {
		t.Fatalf("%d records, want 3", len(want))
	}
	if _, err := pool.Exec(ctx, `
		CREATE OR REPLACE FUNCTION record_snapshot_of(record_id text, title text, body text, url text, author text, status text,
		                                              labels text[], external_created_at timestamptz, external_updated_at timestamptz,
		                                              extra jsonb) RETURNS jsonb
		LANGUAGE plpgsql STABLE AS $$ BEGIN RAISE EXCEPTION 'record_snapshot_of called for %', record_id; END $$`); err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	claimed, err := scanClaimed(tx.Query(ctx, claimSQL, 10, nil))
	if err != nil {
		t.Fatal(err)
	}
	if len(claimed) != 3 {
		t.Fatalf("claimed %d changes, want 3", len(claimed))
	}
	for _, c := range claimed {
		if got := fmt.Sprintf("%#v", c.Record); got != want[c.RecordID] {
			t.Errorf("record %s: claimed snapshot\n%s\nrecord_snapshot_of's\n%s", c.RecordID, got, want[c.RecordID])
		}
	}
}
