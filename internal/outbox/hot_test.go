package outbox_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lookout-dev/lookout/internal/outbox"
	"github.com/lookout-dev/lookout/internal/pgtest"
)

// xactUpdates returns the row updates of notifications' partitions that
// tx's backend counted and has not reported yet (the transaction's, and
// those of earlier ones on the connection), and how many of them were HOT
// (a new row version on the row's own page, no index written).
func xactUpdates(t *testing.T, ctx context.Context, tx pgx.Tx) (updated, hot int64) {
	t.Helper()
	if err := tx.QueryRow(ctx, `
		SELECT coalesce(sum(pg_stat_get_xact_tuples_updated(i.inhrelid)), 0)::bigint,
		       coalesce(sum(pg_stat_get_xact_tuples_hot_updated(i.inhrelid)), 0)::bigint
		FROM pg_inherits i WHERE i.inhparent = 'notifications'::regclass`).Scan(&updated, &hot); err != nil {
		t.Fatalf("read the transaction's updates of notifications: %v", err)
	}
	return updated, hot
}

// TestClaimUpdatesAreHOT checks that a claim's UPDATE (lease and attempt
// count, no indexed column) stays on each row's page: the partitions
// leave room for it (migration 58), so a claim writes none of the 13
// indexes of the rows it leases. Rows enqueued together fill their pages
// before they are claimed together, as a backlog is.
func TestClaimUpdatesAreHOT(t *testing.T) {
	ctx, pool := setup(t)
	pgtest.SkipOnCitus(t, pool, "the transaction's table statistics are the coordinator's; the rows are updated on the workers")
	payload := `{"text":"` + strings.Repeat("x", 500) + `"}` // about the size of a real payload
	var notes []outbox.Notification
	for i := range 200 {
		n := note(fmt.Sprintf("plain%d", i), "hook")
		n.Payload = []byte(payload)
		notes = append(notes, n)
	}
	for i := range 200 {
		n := note(fmt.Sprintf("fair%d", i), "@webhook")
		n.Owner = fmt.Sprintf("user%d", i%100)
		n.Payload = []byte(payload)
		notes = append(notes, n)
	}
	enqueue(t, ctx, pool, notes...)

	for _, c := range []struct {
		name  string
		claim func(tx pgx.Tx) ([]outbox.Claimed, error)
	}{
		{"Claim", func(tx pgx.Tx) ([]outbox.Claimed, error) {
			return outbox.Claim(ctx, tx, "hook", "me", 150, time.Minute)
		}},
		{"ClaimFair", func(tx pgx.Tx) ([]outbox.Claimed, error) {
			return outbox.ClaimFair(ctx, tx, "@webhook", "me", 150, time.Minute, 2)
		}},
	} {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		updated0, hot0 := xactUpdates(t, ctx, tx)
		got, err := c.claim(tx)
		if err != nil {
			tx.Rollback(ctx)
			t.Fatalf("%s: %v", c.name, err)
		}
		updated, hot := xactUpdates(t, ctx, tx)
		updated, hot = updated-updated0, hot-hot0
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if len(got) != 150 || updated != 150 || hot != updated {
			t.Errorf("%s of 150 rows: claimed %d, updated %d rows, %d of them HOT; want every update HOT", c.name, len(got), updated, hot)
		}
	}
}
