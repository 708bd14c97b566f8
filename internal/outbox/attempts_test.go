package outbox_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lookout-dev/lookout/internal/outbox"
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
