package outbox_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lookout-dev/lookout/internal/db"
	"github.com/lookout-dev/lookout/internal/outbox"
	"github.com/lookout-dev/lookout/internal/pgtest"
	"github.com/lookout-dev/lookout/internal/testsignal"
)

func setup(t *testing.T) (context.Context, *pgxpool.Pool) {
	t.Helper()
	t.Parallel()
	// The schema first: on Citus leasing or making one may take minutes
	// on a busy machine, which the test's own time does not include.
	pool := pgtest.Pool(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx, pool
}

// note returns a pending row of sink for key.
func note(key, sink string) outbox.Notification {
	return outbox.Notification{DedupeKey: key, Sink: sink, Source: "src", RecordID: "r1", Watch: "w",
		Title: "title " + key, Urgency: "medium", Reason: "because", Payload: []byte(`{"dedupe_key":"` + key + `"}`)}
}

// enqueue enqueues notes in a transaction of its own.
func enqueue(t *testing.T, ctx context.Context, pool *pgxpool.Pool, notes ...outbox.Notification) []outbox.Enqueued {
	t.Helper()
	var res []outbox.Enqueued
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var err error
		res, err = outbox.Enqueue(ctx, tx, notes)
		return err
	})
	if err != nil {
		t.Fatalf("Enqueue: %v", err)
	}
	return res
}

// createdAt returns the created_at of notification id, the rest of its key.
func createdAt(t *testing.T, ctx context.Context, pool *pgxpool.Pool, id int64) time.Time {
	t.Helper()
	var at time.Time
	if err := pool.QueryRow(ctx, `SELECT created_at FROM notifications WHERE id = $1`, id).Scan(&at); err != nil {
		t.Fatalf("created_at of notification %d: %v", id, err)
	}
	return at
}

type counts struct {
	dups    int
	lastDup *time.Time
}

func dupsOf(t *testing.T, ctx context.Context, pool *pgxpool.Pool, id int64) counts {
	t.Helper()
	var c counts
	if err := pool.QueryRow(ctx, `SELECT duplicates_suppressed, last_duplicate_at FROM notifications WHERE id = $1`, id).
		Scan(&c.dups, &c.lastDup); err != nil {
		t.Fatalf("read duplicates of %d: %v", id, err)
	}
	return c
}

func TestEnqueueSuppressesDuplicates(t *testing.T) {
	ctx, pool := setup(t)
	first := enqueue(t, ctx, pool, note("k1", "a"), note("k1", "b"))
	if len(first) != 2 || !first[0].Inserted || !first[1].Inserted || first[0].ID == first[1].ID || first[0].ID > first[1].ID {
		t.Fatalf("first Enqueue = %+v; want two new rows in input order", first)
	}
	var kind, status string
	var hash *string
	var changeID *int64
	if err := pool.QueryRow(ctx, `SELECT kind, status, content_hash, change_id FROM notifications WHERE id = $1`, first[0].ID).
		Scan(&kind, &status, &hash, &changeID); err != nil {
		t.Fatal(err)
	}
	if kind != "single" || status != "pending" || hash != nil || changeID != nil {
		t.Errorf("defaults: kind %q status %q content_hash %v change_id %v; want single, pending, NULL, NULL", kind, status, hash, changeID)
	}

	again := enqueue(t, ctx, pool, note("k1", "a"), note("k2", "a"))
	if again[0] != (outbox.Enqueued{ID: first[0].ID, Inserted: false}) || !again[1].Inserted {
		t.Fatalf("second Enqueue = %+v; want the k1/a duplicate on row %d and a new k2/a row", again, first[0].ID)
	}
	if c := dupsOf(t, ctx, pool, first[0].ID); c.dups != 1 || c.lastDup == nil {
		t.Errorf("after one duplicate: duplicates_suppressed %d, last_duplicate_at %v; want 1 and set", c.dups, c.lastDup)
	}
	if c := dupsOf(t, ctx, pool, first[1].ID); c.dups != 0 || c.lastDup != nil {
		t.Errorf("k1/b (other sink): duplicates_suppressed %d, last_duplicate_at %v; want 0 and NULL", c.dups, c.lastDup)
	}
	enqueue(t, ctx, pool, note("k1", "a"))
	if c := dupsOf(t, ctx, pool, first[0].ID); c.dups != 2 {
		t.Errorf("after two duplicates: duplicates_suppressed %d; want 2", c.dups)
	}

	// EnqueueNew leaves an existing row alone.
	res, err := outbox.EnqueueNew(ctx, pool, []outbox.Notification{note("k1", "a"), note("k3", "a"), note("k3", "a")})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Inserted || !res[1].Inserted || res[2].Inserted || res[1].ID == 0 {
		t.Errorf("EnqueueNew = %+v; want k1/a skipped, k3/a inserted once", res)
	}
	if c := dupsOf(t, ctx, pool, first[0].ID); c.dups != 2 {
		t.Errorf("after EnqueueNew: duplicates_suppressed %d; want still 2", c.dups)
	}

	// In the caller's transaction: a rollback takes the rows back.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := outbox.Enqueue(ctx, tx, []outbox.Notification{note("k4", "a")}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM notifications WHERE dedupe_key = 'k4'`).Scan(&n); err != nil || n != 0 {
		t.Errorf("rows of a rolled-back Enqueue = %d, %v; want 0", n, err)
	}
}

// A key repeated within one Enqueue is one row, and the repeat a
// suppressed duplicate counted on it, as it would be in a later Enqueue.
func TestEnqueueCountsARepeatWithinOneCall(t *testing.T) {
	ctx, pool := setup(t)
	res := enqueue(t, ctx, pool, note("k1", "a"), note("k2", "a"), note("k1", "a"))
	if !res[0].Inserted || !res[1].Inserted || res[2].Inserted || res[2].ID != res[0].ID {
		t.Fatalf("Enqueue = %+v; want k1 and k2 inserted, the repeat of k1 on k1's row", res)
	}
	if c := dupsOf(t, ctx, pool, res[0].ID); c.dups != 1 || c.lastDup == nil {
		t.Errorf("k1: duplicates_suppressed %d, last_duplicate_at %v; want 1 and set", c.dups, c.lastDup)
	}
	if c := dupsOf(t, ctx, pool, res[1].ID); c.dups != 0 {
		t.Errorf("k2: duplicates_suppressed %d; want 0", c.dups)
	}
}

// notifications is partitioned by week; the dedupe rule is not: the same
// key a week later (another partition) is one row and a suppressed
// duplicate on it, and so are two transactions racing with one key.
func TestEnqueueDedupesAcrossPartitions(t *testing.T) {
	ctx, pool := setup(t)
	first := enqueue(t, ctx, pool, note("k1", "a"))
	// As if enqueued ten days ago: its row sits in another partition
	// (the default one, for a week without its own).
	// The time is read first and each table written by its own
	// statement, by its distribution key: Citus takes no column
	// reference into a STABLE function (timestamptz - interval) in an
	// UPDATE's SET, nor a data-modifying CTE across two tables'
	// shards.
	var ago time.Time
	if err := pool.QueryRow(ctx, `SELECT created_at - interval '10 days' FROM notifications WHERE id = $1 AND source = 'src'`,
		first[0].ID).Scan(&ago); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE notifications SET created_at = $2 WHERE id = $1 AND source = 'src'`, first[0].ID, ago); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE notification_keys SET created_at = $2 WHERE dedupe_key = 'k1' AND sink = 'a' AND notification_id = $1`, first[0].ID, ago); err != nil {
		t.Fatal(err)
	}
	partOf := func(key string) []string {
		t.Helper()
		rows, err := pool.Query(ctx, `SELECT tableoid::regclass::text FROM notifications WHERE dedupe_key = $1`, key)
		if err != nil {
			t.Fatal(err)
		}
		parts, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return parts
	}
	enqueue(t, ctx, pool, note("k2", "a"))
	if a, b := partOf("k1"), partOf("k2"); len(a) != 1 || len(b) != 1 || a[0] == b[0] {
		t.Fatalf("partitions of the rows: %v and %v; want two", a, b)
	}
	again := enqueue(t, ctx, pool, note("k1", "a"))
	if again[0] != (outbox.Enqueued{ID: first[0].ID, Inserted: false}) {
		t.Fatalf("Enqueue of k1 ten days later = %+v; want the duplicate of row %d", again, first[0].ID)
	}
	if n := len(partOf("k1")); n != 1 {
		t.Errorf("k1 has %d rows, want 1", n)
	}
	if c := dupsOf(t, ctx, pool, first[0].ID); c.dups != 1 || c.lastDup == nil {
		t.Errorf("duplicates_suppressed %d, last_duplicate_at %v; want 1 and set", c.dups, c.lastDup)
	}

	// Two transactions with one key: the second waits for the first, then
	// counts a duplicate on its row.
	tx1, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx1.Rollback(ctx)
	won, err := outbox.Enqueue(ctx, tx1, []outbox.Notification{note("k3", "a")})
	if err != nil || !won[0].Inserted {
		t.Fatalf("first Enqueue of k3 = %+v, %v", won, err)
	}
	done := make(chan []outbox.Enqueued, 1)
	go func() {
		res, err := outbox.Enqueue(ctx, pool, []outbox.Notification{note("k3", "a"), note("k4", "a")})
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	// The second is blocked on the key's row lock until tx1 commits. On
	// Citus it waits on the worker that holds the key's shard, which
	// citus_stat_activity shows (pg_stat_activity is the coordinator's).
	activity := "pg_stat_activity"
	if pgtest.OnCitus(t, pool) {
		activity = "citus_stat_activity"
	}
	testsignal.Eventually(t, "the second Enqueue to wait on the key", func() bool {
		var waiting bool
		err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM `+activity+` WHERE wait_event_type = 'Lock'
		                           AND query LIKE '%notification_keys%' AND pid <> pg_backend_pid())`).Scan(&waiting)
		return err == nil && waiting
	})
	if err := tx1.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	lost := <-done
	if len(lost) != 2 || lost[0] != (outbox.Enqueued{ID: won[0].ID, Inserted: false}) || !lost[1].Inserted {
		t.Fatalf("racing Enqueue = %+v; want the duplicate of row %d and a new k4", lost, won[0].ID)
	}
	if c := dupsOf(t, ctx, pool, won[0].ID); c.dups != 1 {
		t.Errorf("k3: duplicates_suppressed %d, want 1", c.dups)
	}
	var rows int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM notifications WHERE dedupe_key = 'k3'`).Scan(&rows); err != nil || rows != 1 {
		t.Errorf("k3 rows = %d, %v; want 1", rows, err)
	}
}

func TestEnqueueHeldAndDigestRows(t *testing.T) {
	ctx, pool := setup(t)
	due := time.Now().Add(-time.Minute).UTC().Truncate(time.Microsecond)
	later := due.Add(time.Hour)
	changeID := int64(42)
	held := []outbox.Notification{note("h1", "a"), note("h2", "a"), note("h3", "a")}
	for i := range held {
		held[i].Status, held[i].DigestDueAt, held[i].ChangeID, held[i].ContentHash = outbox.StatusHeld, &due, &changeID, "abc"
	}
	held[2].DigestDueAt = &later // its period has not ended
	res := enqueue(t, ctx, pool, held...)

	var locked []outbox.Held
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var err error
		if locked, err = outbox.LockDueHeld(ctx, tx, 10); err != nil {
			return err
		}
		got, err := outbox.Enqueue(ctx, tx, []outbox.Notification{{DedupeKey: "digest/1", Sink: "a", Source: "src",
			Watch: "w", Kind: outbox.KindDigest, Title: "2 matches", Urgency: "low", Payload: []byte(`{}`),
			DigestDueAt: &due, DigestCount: len(locked)}})
		if err != nil {
			return err
		}
		ids := []int64{locked[0].ID, locked[1].ID}
		return outbox.MarkDigested(ctx, tx, ids, got[0].ID)
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(locked) != 2 || locked[0].ID != res[0].ID || locked[1].ID != res[1].ID || !locked[0].DueAt.Equal(due) {
		t.Fatalf("LockDueHeld = %+v; want rows %d and %d due at %s", locked, res[0].ID, res[1].ID, due)
	}
	rows, err := pool.Query(ctx, `SELECT dedupe_key, status, kind, coalesce(digest_count, 0), coalesce(digest_id, 0) <> 0,
		coalesce(change_id, 0), coalesce(content_hash, '') FROM notifications ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (string, error) {
		var key, status, kind, hash string
		var count int
		var digested bool
		var change int64
		err := r.Scan(&key, &status, &kind, &count, &digested, &change, &hash)
		return fmt.Sprintf("%s %s %s count=%d digested=%v change=%d hash=%s", key, status, kind, count, digested, change, hash), err
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"h1 digested single count=0 digested=true change=42 hash=abc",
		"h2 digested single count=0 digested=true change=42 hash=abc",
		"h3 held single count=0 digested=false change=42 hash=abc",
		"digest/1 pending digest count=2 digested=false change=0 hash=",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("rows:\n%q\nwant\n%q", got, want)
	}
}

func TestSuppressRecent(t *testing.T) {
	ctx, pool := setup(t)
	res := append(enqueue(t, ctx, pool, note("v1", "a")), enqueue(t, ctx, pool, note("v2", "a"))...)
	id, err := outbox.SuppressRecent(ctx, pool, "src", "r1", "w", "a", time.Hour)
	if err != nil || id == nil || *id != res[1].ID {
		t.Fatalf("SuppressRecent = %v, %v; want the newest row %d", id, err, res[1].ID)
	}
	if c := dupsOf(t, ctx, pool, res[1].ID); c.dups != 1 || c.lastDup == nil {
		t.Errorf("newest row: duplicates_suppressed %d, last_duplicate_at %v; want 1 and set", c.dups, c.lastDup)
	}
	if c := dupsOf(t, ctx, pool, res[0].ID); c.dups != 0 {
		t.Errorf("older row: duplicates_suppressed %d; want 0", c.dups)
	}
	if _, err := pool.Exec(ctx, `UPDATE notifications SET created_at = now() - interval '2 hours'`); err != nil {
		t.Fatal(err)
	}
	for _, sink := range []string{"a", "b"} {
		if id, err := outbox.SuppressRecent(ctx, pool, "src", "r1", "w", sink, time.Hour); err != nil || id != nil {
			t.Errorf("SuppressRecent(sink %s, outside the window) = %v, %v; want nil", sink, id, err)
		}
	}
}

func TestClaimRespectsDueTimeLeasesAndLocks(t *testing.T) {
	ctx, pool := setup(t)
	var notes []outbox.Notification
	for i := range 6 {
		notes = append(notes, note(fmt.Sprintf("k%d", i), "a"))
	}
	notes = append(notes, note("other", "b"))
	held := note("held", "a")
	held.Status, held.DigestDueAt = outbox.StatusHeld, new(time.Now().Add(-time.Hour))
	notes = append(notes, held)
	ids := enqueue(t, ctx, pool, notes...)
	id := func(i int) int64 { return ids[i].ID }
	// k0: due later; k1: leased by another replica; k2: its lease expired;
	// k3: locked by an open transaction; k4, k5: due.
	if _, err := pool.Exec(ctx, `UPDATE notifications SET next_attempt_at = now() + interval '1 hour' WHERE id = $1`, id(0)); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE notifications SET lease_owner = 'other', lease_expires_at = now() + interval '1 hour', attempts = 1 WHERE id = $1`, id(1)); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE notifications SET lease_owner = 'dead', lease_expires_at = now() - interval '1 second', attempts = 1 WHERE id = $1`, id(2)); err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	// By id and source: on Citus a row lock must name its shard.
	var src string
	if err := pool.QueryRow(ctx, `SELECT source FROM notifications WHERE id = $1`, id(3)).Scan(&src); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT id FROM notifications WHERE id = $1 AND source = $2 FOR UPDATE`, id(3), src); err != nil {
		t.Fatal(err)
	}

	got, err := outbox.Claim(ctx, pool, "a", "me", 2, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].ID != id(2) || got[1].ID != id(4) {
		t.Fatalf("Claim(limit 2) = %+v; want rows %d (expired lease) and %d", got, id(2), id(4))
	}
	if !got[0].TakenOver || got[0].Attempts != 2 || got[1].TakenOver || got[1].Attempts != 1 {
		t.Errorf("claimed: %+v; want the expired lease taken over on attempt 2, the other fresh on attempt 1", got)
	}
	if got[1].DedupeKey != "k4" || got[1].Title != "title k4" || string(got[1].Payload) != `{"dedupe_key": "k4"}` || got[1].Kind != "single" {
		t.Errorf("claimed row = %+v; want its columns", got[1])
	}
	var owner string
	var leaseLeft time.Duration
	if err := pool.QueryRow(ctx, `SELECT lease_owner, extract(epoch FROM lease_expires_at - now()) * interval '1 second' FROM notifications WHERE id = $1`, id(4)).
		Scan(&owner, &leaseLeft); err != nil {
		t.Fatal(err)
	}
	if owner != "me" || leaseLeft <= 0 || leaseLeft > time.Minute {
		t.Errorf("lease of a claimed row: %q for %s; want me for up to a minute", owner, leaseLeft)
	}

	got, err = outbox.Claim(ctx, pool, "a", "me", 10, time.Minute)
	if err != nil || len(got) != 1 || got[0].ID != id(5) {
		t.Fatalf("second Claim = %+v, %v; want only row %d (k3 locked, k0 not due, k1 leased, held not pending)", got, err, id(5))
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	got, err = outbox.Claim(ctx, pool, "a", "me", 10, time.Minute)
	if err != nil || len(got) != 1 || got[0].ID != id(3) {
		t.Fatalf("Claim after the lock ended = %+v, %v; want row %d", got, err, id(3))
	}
	got, err = outbox.Claim(ctx, pool, "b", "me", 10, time.Minute)
	if err != nil || len(got) != 1 || got[0].ID != id(6) {
		t.Fatalf("Claim(sink b) = %+v, %v; want only row %d", got, err, id(6))
	}
}

func TestClaimFairCapsEachOwnersRowsInFlight(t *testing.T) {
	ctx, pool := setup(t)
	var notes []outbox.Notification
	add := func(owner, key, sink string) {
		n := note(key, sink)
		n.Owner = owner
		notes = append(notes, n)
	}
	for i := range 6 {
		add("alice", fmt.Sprintf("a%d", i), "@webhook")
	}
	add("bob", "b0", "@webhook")
	add("carol", "c0", "@webhook")
	add("carol", "c1", "@webhook")
	add("dave", "d0", "@webhook")
	add("dave", "d1", "@webhook")
	add("alice", "other-sink", "hook")
	ids := enqueue(t, ctx, pool, notes...)
	id := map[string]int64{}
	for i, n := range notes {
		id[n.DedupeKey] = ids[i].ID
	}
	// c0 is in flight at another replica; d0's lease expired (its
	// replica died); d1 is due later.
	for _, q := range []string{
		`UPDATE notifications SET lease_owner = 'other', lease_expires_at = now() + interval '1 hour', attempts = 1 WHERE dedupe_key = 'c0'`,
		`UPDATE notifications SET lease_owner = 'dead', lease_expires_at = now() - interval '1 second', attempts = 1 WHERE dedupe_key = 'd0'`,
		`UPDATE notifications SET next_attempt_at = now() + interval '1 hour' WHERE dedupe_key = 'd1'`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	keys := func(cs []outbox.Claimed) []string {
		var out []string
		for _, c := range cs {
			out = append(out, c.DedupeKey)
		}
		return out
	}
	claim := func(limit int) []string {
		t.Helper()
		got, err := outbox.ClaimFair(ctx, pool, "@webhook", "me", limit, time.Minute, 2)
		if err != nil {
			t.Fatal(err)
		}
		return keys(got)
	}

	// Turn 1: each owner's oldest claimable row (carol's oldest is in
	// flight), in due order, up to the limit; turn 2: alice's second and
	// carol's second (c0 in flight leaves her one more). alice's a2..a5
	// wait for her window; d1 is not due.
	first, err := outbox.ClaimFair(ctx, pool, "@webhook", "me", 3, time.Minute, 2)
	if err != nil {
		t.Fatal(err)
	}
	second, err := outbox.ClaimFair(ctx, pool, "@webhook", "me", 100, time.Minute, 2)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(keys(first)) != "[a0 b0 d0]" || fmt.Sprint(keys(second)) != "[a1 c1]" {
		t.Fatalf("ClaimFair(limit 3), then ClaimFair(limit 100) = %v, %v; want [a0 b0 d0], [a1 c1]", keys(first), keys(second))
	}
	got := append(first, second...)
	for _, c := range got {
		if c.Sink != "@webhook" || (c.DedupeKey == "d0") != c.TakenOver || (c.DedupeKey == "d0") != (c.Attempts == 2) {
			t.Errorf("claimed %s: sink %s, taken over %v, attempt %d; want @webhook, only d0 taken over on its attempt 2",
				c.DedupeKey, c.Sink, c.TakenOver, c.Attempts)
		}
	}
	if got := claim(100); len(got) != 0 {
		t.Fatalf("ClaimFair with every window in flight = %v; want nothing", got)
	}

	// An outcome recorded frees a place in alice's window: her next row.
	if err := outbox.Record(ctx, pool, "me", []outbox.Outcome{{ID: id["a0"], CreatedAt: createdAt(t, ctx, pool, id["a0"]), Kind: outbox.Delivered, At: time.Now()}}); err != nil {
		t.Fatal(err)
	}
	if got := claim(100); fmt.Sprint(got) != "[a2]" {
		t.Fatalf("ClaimFair after a0 was delivered = %v; want [a2]", got)
	}

	// A row of the window that another claim holds locked is skipped, not
	// replaced by the owner's next one: the cap holds across replicas.
	if err := outbox.Record(ctx, pool, "me", []outbox.Outcome{
		{ID: id["a1"], CreatedAt: createdAt(t, ctx, pool, id["a1"]), Kind: outbox.Delivered, At: time.Now()}, {ID: id["a2"], CreatedAt: createdAt(t, ctx, pool, id["a2"]), Kind: outbox.Delivered, At: time.Now()}}); err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT id FROM notifications WHERE dedupe_key = 'a3' AND source = 'src' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	if got := claim(100); fmt.Sprint(got) != "[a4]" {
		t.Fatalf("ClaimFair with a3 locked elsewhere = %v; want [a4] (a5 is past alice's window)", got)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if got := claim(100); fmt.Sprint(got) != "[a3]" {
		t.Fatalf("ClaimFair after the lock ended = %v; want [a3]", got)
	}

	// A retry due later leaves the window: alice's last row comes in.
	if err := outbox.Record(ctx, pool, "me", []outbox.Outcome{
		{ID: id["a3"], CreatedAt: createdAt(t, ctx, pool, id["a3"]), Kind: outbox.Retry, At: time.Now(), Next: time.Now().Add(time.Hour), Err: "503"},
		{ID: id["a4"], CreatedAt: createdAt(t, ctx, pool, id["a4"]), Kind: outbox.Delivered, At: time.Now()}}); err != nil {
		t.Fatal(err)
	}
	if got := claim(100); fmt.Sprint(got) != "[a5]" {
		t.Fatalf("ClaimFair after a3 was put off = %v; want [a5]", got)
	}
	if _, err := outbox.ClaimFair(ctx, pool, "@webhook", "me", 10, time.Minute, 0); err == nil {
		t.Error("ClaimFair with 0 rows per owner: no error")
	}
	// The other sink was never touched.
	if got, err := outbox.Claim(ctx, pool, "hook", "me", 10, time.Minute); err != nil || len(got) != 1 || got[0].Attempts != 1 {
		t.Errorf("Claim(hook) = %+v, %v; want its one row on attempt 1", got, err)
	}
}

func TestRecordOutcomes(t *testing.T) {
	ctx, pool := setup(t)
	var notes []outbox.Notification
	for i := range 5 {
		notes = append(notes, note(fmt.Sprintf("k%d", i), "a"))
	}
	enqueue(t, ctx, pool, notes...)
	claimed, err := outbox.Claim(ctx, pool, "a", "me", 10, time.Minute)
	if err != nil || len(claimed) != 5 {
		t.Fatalf("Claim = %d rows, %v; want 5", len(claimed), err)
	}
	// k4's lease was lost to another replica: its outcome is not ours to record.
	if _, err := pool.Exec(ctx, `UPDATE notifications SET lease_owner = 'thief' WHERE id = $1`, claimed[4].ID); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE notifications SET dead_alerted_at = now()`); err != nil {
		t.Fatal(err)
	}
	at := time.Now().UTC().Truncate(time.Microsecond)
	next := at.Add(time.Hour)
	err = outbox.Record(ctx, pool, "me", []outbox.Outcome{
		{ID: claimed[0].ID, CreatedAt: claimed[0].CreatedAt, Kind: outbox.Delivered, At: at},
		{ID: claimed[1].ID, CreatedAt: claimed[1].CreatedAt, Kind: outbox.Retry, At: at, Next: next, Err: "503"},
		{ID: claimed[2].ID, CreatedAt: claimed[2].CreatedAt, Kind: outbox.Dead, At: at, Err: "410 gone"},
		{ID: claimed[3].ID, CreatedAt: claimed[3].CreatedAt, Kind: outbox.Unclaim},
		{ID: claimed[4].ID, CreatedAt: claimed[4].CreatedAt, Kind: outbox.Delivered, At: at},
	})
	if err != nil {
		t.Fatal(err)
	}
	rows, err := pool.Query(ctx, `
		SELECT status, attempts, coalesce(lease_owner, ''), delivered_at = $1, dead_at = $1, coalesce(last_error, ''),
		       next_attempt_at = $2, next_attempt_at <= now(), dead_alerted_at IS NULL
		FROM notifications ORDER BY id`, at, next)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (string, error) {
		var status, owner, lastErr string
		var attempts int
		var delivered, dead, nextAt, dueNow, unalerted *bool
		err := r.Scan(&status, &attempts, &owner, &delivered, &dead, &lastErr, &nextAt, &dueNow, &unalerted)
		b := func(p *bool) bool { return p != nil && *p }
		return fmt.Sprintf("%s attempts=%d owner=%q delivered=%v dead=%v err=%q next=%v due=%v unalerted=%v",
			status, attempts, owner, b(delivered), b(dead), lastErr, b(nextAt), b(dueNow), b(unalerted)), err
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`delivered attempts=1 owner="" delivered=true dead=false err="" next=false due=true unalerted=false`,
		`pending attempts=1 owner="" delivered=false dead=false err="503" next=true due=false unalerted=false`,
		`dead attempts=1 owner="" delivered=false dead=true err="410 gone" next=false due=true unalerted=true`,
		`pending attempts=0 owner="" delivered=false dead=false err="" next=false due=true unalerted=false`,
		`pending attempts=1 owner="thief" delivered=false dead=false err="" next=false due=true unalerted=false`,
	}
	for i := range want {
		if i >= len(got) || got[i] != want[i] {
			t.Errorf("row k%d:\n got %s\nwant %s", i, got[min(i, len(got)-1)], want[i])
		}
	}
}

// listen returns a connection listening on the outbox channel of pool's schema.
func listen(t *testing.T, ctx context.Context, pool *pgxpool.Pool) *pgxpool.Conn {
	t.Helper()
	schema, err := db.CurrentSchema(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Release)
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{outbox.Channel(schema)}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	return conn
}

// noWake fails when a notification is already waiting on conn.
func noWake(t *testing.T, ctx context.Context, conn *pgxpool.Conn, when string) {
	t.Helper()
	// A round trip delivers any notification already sent to conn.
	if _, err := conn.Exec(ctx, "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, time.Millisecond)
	defer cancel()
	if n, err := conn.Conn().WaitForNotification(short); err == nil {
		t.Errorf("%s: got wake-up %+v; want none", when, n)
	}
}

func waitWake(t *testing.T, ctx context.Context, conn *pgxpool.Conn, when string) {
	t.Helper()
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	n, err := conn.Conn().WaitForNotification(wctx)
	if err != nil {
		t.Fatalf("%s: no wake-up: %v", when, err)
	}
	if n.Payload != "" {
		t.Errorf("%s: wake-up payload %q; want none (a wake-up is not the data)", when, n.Payload)
	}
}

func TestWakeReachesListenerOnCommit(t *testing.T) {
	ctx, pool := setup(t)
	conn := listen(t, ctx, pool)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := outbox.Enqueue(ctx, tx, []outbox.Notification{note("k", "a")}); err != nil {
		t.Fatal(err)
	}
	if err := outbox.Wake(ctx, tx); err != nil {
		t.Fatal(err)
	}
	noWake(t, ctx, conn, "before commit")
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	waitWake(t, ctx, conn, "after commit")

	b := &pgx.Batch{}
	outbox.QueueWake(b)
	if err := pool.SendBatch(ctx, b).Close(); err != nil {
		t.Fatal(err)
	}
	waitWake(t, ctx, conn, "QueueWake")
}

func TestRetryDead(t *testing.T) {
	ctx, pool := setup(t)
	res := enqueue(t, ctx, pool, note("k0", "a"), note("k1", "a"), note("k2", "b"), note("k3", "a"))
	if _, err := pool.Exec(ctx, `UPDATE notifications SET status = 'dead', dead_at = now(), attempts = 5, last_error = 'gone',
		next_attempt_at = now() - interval '1 day' WHERE id <> $1`, res[3].ID); err != nil {
		t.Fatal(err)
	}
	conn := listen(t, ctx, pool)
	if n, err := outbox.RetryDead(ctx, pool, outbox.Filter{Sink: "c"}); err != nil || n != 0 {
		t.Fatalf("RetryDead(sink c) = %d, %v; want 0", n, err)
	}
	noWake(t, ctx, conn, "nothing retried")
	if n, err := outbox.RetryDead(ctx, pool, outbox.Filter{Sink: "a", Status: "pending"}); err != nil || n != 2 {
		t.Fatalf("RetryDead(sink a) = %d, %v; want 2 (the status filter ignored, the pending row left alone)", n, err)
	}
	waitWake(t, ctx, conn, "after RetryDead")
	rows, err := outbox.List(ctx, pool, outbox.Filter{Sink: "a"})
	if err != nil {
		t.Fatal(err)
	}
	var manual int
	if err := pool.QueryRow(ctx, `SELECT manual_retries FROM notifications WHERE id = $1`, res[0].ID).Scan(&manual); err != nil || manual != 1 {
		t.Errorf("manual_retries = %d, %v; want 1", manual, err)
	}
	if len(rows) != 3 {
		t.Fatalf("List(sink a) = %d rows; want 3", len(rows))
	}
	for _, r := range rows {
		if r.Status != "pending" || r.DeadAt != nil || r.NextAttemptAt.After(time.Now().Add(time.Minute)) {
			t.Errorf("row %d after retry: %+v; want pending, not dead, due now", r.ID, r)
		}
		if r.ID != res[3].ID && (r.Attempts != 0 || r.LastError == nil || *r.LastError != "gone") {
			t.Errorf("row %d after retry: attempts %d, last_error %v; want 0 and the error kept", r.ID, r.Attempts, r.LastError)
		}
	}
	if n, err := outbox.RetryDead(ctx, pool, outbox.Filter{ID: res[2].ID}); err != nil || n != 1 {
		t.Errorf("RetryDead(id) = %d, %v; want 1", n, err)
	}
}

// TestRetryDeadOfOneOwner: a retry filtered by owner sends back only that
// owner's dead rows; the other owner's and the operator's stay dead.
func TestRetryDeadOfOneOwner(t *testing.T) {
	ctx, pool := setup(t)
	alice, bob, ops := note("k0", "a"), note("k1", "a"), note("k2", "a")
	alice.Owner, bob.Owner = "alice", "bob"
	res := enqueue(t, ctx, pool, alice, bob, ops)
	if _, err := pool.Exec(ctx, `UPDATE notifications SET status = 'dead', dead_at = now(), attempts = 5`); err != nil {
		t.Fatal(err)
	}
	if n, err := outbox.RetryDead(ctx, pool, outbox.Filter{Sink: "a", Owner: "alice"}); err != nil || n != 1 {
		t.Fatalf("RetryDead(owner alice) = %d, %v; want 1", n, err)
	}
	want := map[int64]string{res[0].ID: "pending", res[1].ID: "dead", res[2].ID: "dead"}
	for id, st := range want {
		var got string
		if err := pool.QueryRow(ctx, `SELECT status FROM notifications WHERE id = $1`, id).Scan(&got); err != nil || got != st {
			t.Errorf("notification %d: %q, %v; want %s", id, got, err, st)
		}
	}
	rows, err := outbox.List(ctx, pool, outbox.Filter{Owner: "bob"})
	if err != nil || len(rows) != 1 || rows[0].ID != res[1].ID {
		t.Errorf("List(owner bob) = %+v, %v; want bob's row only", rows, err)
	}
}

func TestList(t *testing.T) {
	ctx, pool := setup(t)
	res := enqueue(t, ctx, pool, note("k0", "a"), note("k1", "a"), note("k2", "b"))
	rows, err := outbox.List(ctx, pool, outbox.Filter{Sink: "a", Limit: 1})
	if err != nil || len(rows) != 1 || rows[0].ID != res[1].ID || rows[0].DedupeKey != "k1" || rows[0].Status != "pending" {
		t.Fatalf("List(sink a, limit 1) = %+v, %v; want the newest row of sink a", rows, err)
	}
	rows, err = outbox.List(ctx, pool, outbox.Filter{Status: "dead"})
	if err != nil || len(rows) != 0 {
		t.Errorf("List(dead) = %+v, %v; want none", rows, err)
	}
	rows, err = outbox.List(ctx, pool, outbox.Filter{ID: res[2].ID, Source: "src", Watch: "w"})
	if err != nil || len(rows) != 1 || rows[0].Sink != "b" {
		t.Errorf("List(id) = %+v, %v; want row %d", rows, err, res[2].ID)
	}
}

func TestMarkDeadAlerted(t *testing.T) {
	ctx, pool := setup(t)
	var notes []outbox.Notification
	for i := range 7 {
		notes = append(notes, note(fmt.Sprintf("k%d", i), "a"))
	}
	alert := note("alert", "a")
	alert.Kind = outbox.KindAlert
	notes = append(notes, alert, note("b0", "b"), note("pending", "b"))
	res := enqueue(t, ctx, pool, notes...)
	if _, err := pool.Exec(ctx, `UPDATE notifications SET status = 'dead', dead_at = now(), last_error = 'err ' || dedupe_key
		WHERE dedupe_key <> 'pending'`); err != nil {
		t.Fatal(err)
	}
	var got []outbox.DeadLetters
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var err error
		got, err = outbox.MarkDeadAlerted(ctx, tx, 5)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Sink != "a" || got[0].Count != 7 || got[0].MaxID != res[6].ID || len(got[0].IDs) != 5 ||
		got[0].IDs[0] != res[6].ID || got[0].Errors[0] != "err k6" || got[0].Titles[0] != "title k6" || got[0].Watches[0] != "w" {
		t.Fatalf("MarkDeadAlerted = %+v; want sink a with 7 rows (not the alert), 5 examples newest first, then sink b", got)
	}
	if got[1].Sink != "b" || got[1].Count != 1 || got[1].First.IsZero() {
		t.Errorf("sink b = %+v; want 1 row", got[1])
	}
	again, err := outbox.MarkDeadAlerted(ctx, pool, 5)
	if err != nil || len(again) != 0 {
		t.Errorf("second MarkDeadAlerted = %+v, %v; want nothing (all marked)", again, err)
	}
	var unmarked int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM notifications WHERE dead_alerted_at IS NULL`).Scan(&unmarked); err != nil || unmarked != 2 {
		t.Errorf("rows left unmarked = %d, %v; want 2 (the alert and the pending row)", unmarked, err)
	}
}

func TestChannelIsTheSchemasOutbox(t *testing.T) {
	t.Parallel()
	if got := outbox.Channel("t_x"); got != "t_x.outbox" {
		t.Errorf("Channel = %q", got)
	}
	if len(outbox.Channel("")) > len(db.ChangesChannel("")) {
		t.Errorf("the outbox channel's suffix is longer than the changes channel's: it may not fit 63 bytes where that one does")
	}
}

// planRows walks an EXPLAIN (ANALYZE, FORMAT JSON) plan and returns the
// most rows any scan node of notifications returned (over all its loops).
func planRows(node map[string]any) float64 {
	most := 0.0
	pgtest.EachPlanNode(node, func(node map[string]any) {
		if rel, _ := node["Relation Name"].(string); strings.HasPrefix(rel, "notifications") {
			rows, _ := node["Actual Rows"].(float64)
			loops, _ := node["Actual Loops"].(float64)
			most = max(most, rows*max(loops, 1))
		}
	})
	return most
}

// TestClaimReadsOnlyItsBatch: a claim of 100 rows out of a backlog of
// 3,000 enqueued together (one next_attempt_at, as an evaluator's batch
// has) reads about its 100 rows, not the backlog: before, every claim
// read and sorted all pending rows of the sink (the due index had no id
// to break the tie), so draining n rows read n²/200 of them.
func TestClaimReadsOnlyItsBatch(t *testing.T) {
	ctx, pool := setup(t)
	if pgtest.OnCitus(t, pool) {
		t.Skip("on Citus the claim runs per shard of its candidates, each shard's plan a worker's: the one PostgreSQL plan checked here is not the coordinator's (docs/scaling.md)")
	}
	const backlog, limit = 3000, 100
	notes := make([]outbox.Notification, backlog)
	for i := range notes {
		notes[i] = note(fmt.Sprintf("k%d", i), "hook")
	}
	enqueue(t, ctx, pool, notes...)
	if _, err := pool.Exec(ctx, `ANALYZE notifications`); err != nil {
		t.Fatal(err)
	}
	for round := range 3 {
		plan := pgtest.ExplainAnalyze(t, pool, "", outbox.QueryClaim, "hook", limit, "me", time.Minute, nil)
		if got := planRows(plan); got > 2*limit {
			t.Fatalf("round %d: a claim of %d out of %d pending rows read %.0f rows of notifications; want at most %d",
				round, limit, backlog, got, 2*limit)
		}
		// Claim for real, so that the next round starts past leased rows.
		if got, err := outbox.Claim(ctx, pool, "hook", "me", limit, time.Minute); err != nil || len(got) != limit {
			t.Fatalf("Claim = %d rows, %v; want %d", len(got), err, limit)
		}
	}
}

// scannedPartitions returns the partitions of notifications a plan
// executed a scan of at least once.
func scannedPartitions(node map[string]any, into map[string]bool) {
	pgtest.EachPlanNode(node, func(node map[string]any) {
		rel, _ := node["Relation Name"].(string)
		if loops, _ := node["Actual Loops"].(float64); loops > 0 && rel != "notifications" && strings.HasPrefix(rel, "notifications_") {
			if _, update := node["Operation"]; !update {
				into[rel] = true
			}
		}
	})
}

// TestRecordReadsOnlyTheRowsPartitions: recording an outcome looks the
// row up in its own partition only (by id and created_at, the primary
// key); by id alone every partition's index was searched for every row.
func TestRecordReadsOnlyTheRowsPartitions(t *testing.T) {
	ctx, pool := setup(t)
	if pgtest.OnCitus(t, pool) {
		t.Skip("on Citus each shard's plan is a worker's: the one PostgreSQL plan checked here is not the coordinator's (docs/scaling.md); TestRecordOutcomes records outcomes there")
	}
	notes := make([]outbox.Notification, 2000)
	for i := range notes {
		notes[i] = note(fmt.Sprintf("k%d", i), "hook")
	}
	enqueue(t, ctx, pool, notes...)
	if _, err := pool.Exec(ctx, `ANALYZE notifications`); err != nil {
		t.Fatal(err)
	}
	var parts int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_inherits WHERE inhparent = 'notifications'::regclass`).Scan(&parts); err != nil {
		t.Fatal(err)
	}
	if parts < 2 {
		t.Fatalf("notifications has %d partitions; the test needs at least 2", parts)
	}
	got, err := outbox.Claim(ctx, pool, "hook", "me", 2, time.Minute)
	if err != nil || len(got) != 2 {
		t.Fatalf("Claim = %d rows, %v; want 2", len(got), err)
	}
	outs := []outbox.Outcome{{ID: got[0].ID, CreatedAt: got[0].CreatedAt, Kind: outbox.Delivered, At: time.Now()},
		{ID: got[1].ID, CreatedAt: got[1].CreatedAt, Kind: outbox.Delivered, At: time.Now()}}
	plan := pgtest.ExplainAnalyze(t, pool, "", outbox.QueryRecord, outbox.RecordArgs("me", outs)...)
	scanned := map[string]bool{}
	scannedPartitions(plan, scanned)
	if len(scanned) != 1 {
		t.Fatalf("recording 2 outcomes of rows of one partition read partitions %v; want that one only", slices.Sorted(maps.Keys(scanned)))
	}
	if err := outbox.Record(ctx, pool, "me", outs); err != nil {
		t.Fatal(err)
	}
	var delivered int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM notifications WHERE status = 'delivered' AND lease_owner IS NULL`).Scan(&delivered); err != nil || delivered != 2 {
		t.Fatalf("delivered rows after Record = %d, %v; want 2", delivered, err)
	}
}
