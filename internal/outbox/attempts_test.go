package outbox_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lookout-dev/lookout/internal/outbox"
	"github.com/lookout-dev/lookout/internal/pgtest"
)

// TestRecordWritesAttempts: Record appends one delivery_attempts row per
// attempt it records, in its one statement — none for a row given back
// unclaimed, none for a row whose lease another replica took — with the
// notification's source and sink, its attempt number, the outcome
// (refused when the egress policy refused the connection), the HTTP
// status and a bounded excerpt of the answer.
func TestRecordWritesAttempts(t *testing.T) {
	ctx, pool := setup(t)
	var notes []outbox.Notification
	for i := range 6 {
		notes = append(notes, note(fmt.Sprintf("k%d", i), "a"))
	}
	enqueue(t, ctx, pool, notes...)
	claimed, err := outbox.Claim(ctx, pool, "a", "me", 10, time.Minute)
	if err != nil || len(claimed) != 6 {
		t.Fatalf("Claim = %d rows, %v; want 6", len(claimed), err)
	}
	if _, err := pool.Exec(ctx, `UPDATE notifications SET lease_owner = 'thief' WHERE id = $1`, claimed[5].ID); err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 12, 1, 9, 30, 0, 0, time.UTC)
	at := start.Add(1500 * time.Millisecond)
	long := strings.Repeat("é", 400) // 800 bytes: cut within 512, on a rune boundary, "…" added
	outs := []outbox.Outcome{
		{ID: claimed[0].ID, CreatedAt: claimed[0].CreatedAt, Kind: outbox.Delivered, At: at, Started: start, Duration: 1500 * time.Millisecond,
			HTTPStatus: 204},
		{ID: claimed[1].ID, CreatedAt: claimed[1].CreatedAt, Kind: outbox.Retry, At: at, Next: at.Add(time.Hour), Started: start,
			Duration: 20 * time.Millisecond, Err: "webhook answered 503 Service Unavailable: busy", HTTPStatus: 503, Response: long},
		{ID: claimed[2].ID, CreatedAt: claimed[2].CreatedAt, Kind: outbox.Dead, At: at, Started: start, Err: "410 gone", HTTPStatus: 410,
			Response: "gone\x00"},
		{ID: claimed[3].ID, CreatedAt: claimed[3].CreatedAt, Kind: outbox.Dead, At: at, Started: start, Refused: true,
			Err: "egress policy refuses connections to 127.0.0.1:80"},
		{ID: claimed[4].ID, CreatedAt: claimed[4].CreatedAt, Kind: outbox.Unclaim},
		{ID: claimed[5].ID, CreatedAt: claimed[5].CreatedAt, Kind: outbox.Delivered, At: at, Started: start},
	}
	if err := outbox.Record(ctx, pool, "me", outs); err != nil {
		t.Fatal(err)
	}
	var got []string
	for i, c := range claimed {
		as, err := outbox.Attempts(ctx, pool, "src", c.ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range as {
			s := func(p *string) string {
				if p == nil {
					return "-"
				}
				return fmt.Sprintf("%d bytes %.10q", len(*p), *p)
			}
			st := "-"
			if a.HTTPStatus != nil {
				st = fmt.Sprint(*a.HTTPStatus)
			}
			got = append(got, fmt.Sprintf("k%d: %s %s attempt=%d started=%s took=%v %s status=%s err=%s response=%s", i, a.Source, a.Sink,
				a.Attempt, a.StartedAt.UTC().Format(time.RFC3339), a.Duration, a.Outcome, st, s(a.Error), s(a.Response)))
		}
	}
	want := []string{
		`k0: src a attempt=1 started=2026-12-01T09:30:00Z took=1.5s delivered status=204 err=- response=-`,
		`k1: src a attempt=1 started=2026-12-01T09:30:00Z took=20ms retry status=503 err=46 bytes "webhook an" response=511 bytes "éééééééééé"`,
		`k2: src a attempt=1 started=2026-12-01T09:30:00Z took=0s dead status=410 err=8 bytes "410 gone" response=4 bytes "gone"`,
		`k3: src a attempt=1 started=2026-12-01T09:30:00Z took=0s refused status=- err=49 bytes "egress pol" response=-`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("attempts:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// A second attempt of k1 counts 2.
	if _, err := pool.Exec(ctx, `UPDATE notifications SET next_attempt_at = now() WHERE id = $1`, claimed[1].ID); err != nil {
		t.Fatal(err)
	}
	again, err := outbox.Claim(ctx, pool, "a", "me", 10, time.Minute)
	if err != nil || len(again) != 2 { // k1 and the unclaimed k4
		t.Fatalf("Claim again = %d rows, %v; want 2", len(again), err)
	}
	if err := outbox.Record(ctx, pool, "me", []outbox.Outcome{{ID: claimed[1].ID, CreatedAt: claimed[1].CreatedAt, Kind: outbox.Delivered, At: at}}); err != nil {
		t.Fatal(err)
	}
	as, err := outbox.Attempts(ctx, pool, "src", claimed[1].ID)
	if err != nil || len(as) != 2 || as[1].Attempt != 2 || as[1].Outcome != outbox.AttemptDelivered || !as[1].StartedAt.Equal(at) {
		t.Fatalf("attempts of k1 after its second = %+v, %v; want the second delivered, started at its At", as, err)
	}
}

// TestPruneAttempts: PruneAttempts deletes the attempts that started
// before the cutoff, a batch at a time, and CountPrunableAttempts counts
// them.
func TestPruneAttempts(t *testing.T) {
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
	cutoff := time.Date(2026, 12, 1, 9, 30, 0, 0, time.UTC)
	var outs []outbox.Outcome
	for i, c := range claimed {
		outs = append(outs, outbox.Outcome{ID: c.ID, CreatedAt: c.CreatedAt, Kind: outbox.Delivered, At: cutoff,
			Started: cutoff.Add(time.Duration(i-3) * time.Hour)}) // k0..k2 before the cutoff
	}
	if err := outbox.Record(ctx, pool, "me", outs); err != nil {
		t.Fatal(err)
	}
	if n, err := outbox.CountPrunableAttempts(ctx, pool, cutoff); err != nil || n != 3 {
		t.Fatalf("CountPrunableAttempts = %d, %v; want 3", n, err)
	}
	if n, err := outbox.PruneAttempts(ctx, pool, cutoff, 2); err != nil || n != 2 {
		t.Fatalf("PruneAttempts (batch of 2) = %d, %v; want 2", n, err)
	}
	if n, err := outbox.PruneAttempts(ctx, pool, cutoff, 2); err != nil || n != 1 {
		t.Fatalf("PruneAttempts (the rest) = %d, %v; want 1", n, err)
	}
	var left []time.Time
	rows, err := pool.Query(ctx, `SELECT started_at FROM delivery_attempts ORDER BY started_at`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var at time.Time
		if err := rows.Scan(&at); err != nil {
			t.Fatal(err)
		}
		left = append(left, at)
	}
	if len(left) != 2 || left[0].Before(cutoff) {
		t.Fatalf("attempts left = %v; want the 2 that started at or after %s", left, cutoff)
	}
}

// TestRecordedAttemptEntersTwoIndexes: the delivery_attempts row of an
// outcome enters two B-trees, its primary key and (notification_id,
// attempt), the attempts' readers; the prune's index on started_at is a
// BRIN index (migration 64), which an insert into the table's last,
// unsummarized block ranges does not write. EXPLAIN (ANALYZE, WAL) of
// recording 200 deliveries (rolled back) counts the WAL records of the
// attempts' INSERT apart from the notifications' UPDATE: one for the
// heap and one for each index entry, a few more for page splits. With
// the B-tree on started_at back (migration 39's) it is four a row.
func TestRecordedAttemptEntersTwoIndexes(t *testing.T) {
	ctx, pool := setup(t)
	if pgtest.OnCitus(t, pool) {
		t.Skip("on Citus the rows are written on the workers: the coordinator's plan counts none of their WAL")
	}
	var btrees []string
	rows, err := pool.Query(ctx, `
		SELECT c.relname::text FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am a ON a.oid = c.relam
		WHERE i.indrelid = 'delivery_attempts'::regclass AND a.amname = 'btree' ORDER BY 1`)
	if err == nil {
		btrees, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"delivery_attempts_notification_idx", "delivery_attempts_pkey"}; !slices.Equal(btrees, want) {
		t.Errorf("delivery_attempts' B-tree indexes = %v; want %v", btrees, want)
	}
	const n = 200
	notes := make([]outbox.Notification, n)
	for i := range notes {
		notes[i] = note(fmt.Sprintf("k%d", i), "hook")
	}
	enqueue(t, ctx, pool, notes...)
	got, err := outbox.Claim(ctx, pool, "hook", "me", n, time.Minute)
	if err != nil || len(got) != n {
		t.Fatalf("Claim = %d rows, %v; want %d", len(got), err, n)
	}
	now := time.Now()
	outs := make([]outbox.Outcome, n)
	for i, c := range got {
		outs[i] = outbox.Outcome{ID: c.ID, CreatedAt: c.CreatedAt, Kind: outbox.Delivered, At: now, Started: now.Add(-time.Millisecond),
			Duration: time.Millisecond, HTTPStatus: 204}
	}
	top := pgtest.ExplainAnalyze(t, pool, "WAL", outbox.QueryRecord, outbox.RecordArgs("me", outs)...)
	total, _ := top["WAL Records"].(float64)
	var update float64
	pgtest.EachPlanNode(top, func(node map[string]any) {
		if node["Subplan Name"] == "CTE recorded" {
			update, _ = node["WAL Records"].(float64)
		}
	})
	if update == 0 {
		t.Fatalf("no WAL records counted for the CTE recorded (the notifications' UPDATE) in %v", top)
	}
	if perRow := (total - update) / n; perRow < 2.9 || perRow > 3.3 {
		t.Errorf("the attempts' INSERT wrote %.2f WAL records a row (%v of %v, the UPDATE %v); want about 3: heap, primary key, (notification_id, attempt)",
			perRow, total-update, total, update)
	}
}
