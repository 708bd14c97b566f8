package outbox_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

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

// TestClaimIsPlannedOnce checks that a lane's claim on one PostgreSQL is
// a statement without parameters (claimStatement), which a connection
// plans once, and once again after an ANALYZE, never with PostgreSQL's
// five custom plans of a statement with parameters (on main: 5 custom
// plans of these 12 claims, and in the CI smoke, whose backlog is
// analyzed before each run, 63 plans of 72 claims). Earlier still, a
// generic LIMIT $2 (costed at a tenth of the pending rows) was never
// kept once the partition had statistics (0 generic plans of 20).
func TestClaimIsPlannedOnce(t *testing.T) {
	var notes []outbox.Notification
	for i := range 3000 {
		notes = append(notes, note(fmt.Sprintf("k%d", i), "hook"))
	}
	checkGenericPlans(t, notes, "%SET lease_owner = %", "claims", 100, 0,
		func(ctx context.Context, conn *pgxpool.Conn, i int) ([]outbox.Claimed, error) {
			if i == 6 { // the plan is made again, not five custom ones
				if _, err := conn.Exec(ctx, `ANALYZE notifications`); err != nil {
					return nil, err
				}
			}
			return outbox.Claim(ctx, conn, "hook", "me", 100, time.Minute)
		})
}

// TestClaimFairKeepsAGenericPlan checks that the own-webhook lane's claim
// (ClaimFair, still a statement with parameters), on a backlog of many
// owners, keeps the generic plan after PostgreSQL's five custom ones.
func TestClaimFairKeepsAGenericPlan(t *testing.T) {
	var notes []outbox.Notification
	for i := range 3000 {
		n := note(fmt.Sprintf("k%d", i), "@webhook")
		n.Owner = fmt.Sprintf("user%03d", i%600)
		notes = append(notes, n)
	}
	checkGenericPlans(t, notes, "%WITH RECURSIVE owners%", "fair claims", 50, 5,
		func(ctx context.Context, conn *pgxpool.Conn, i int) ([]outbox.Claimed, error) {
			return outbox.ClaimFair(ctx, conn, "@webhook", fmt.Sprint("me", i), 50, time.Minute, 2)
		})
}

// checkGenericPlans enqueues notes, analyzes them (as autovacuum keeps
// them: the planner costs the backlog), makes 12 claims of batch rows on
// one connection, and fails t unless the statement prepared there whose
// text is like pattern ran them with custom plans (PostgreSQL's 5
// of a statement with parameters, 0 without) and the generic one after
// them. On Citus a claim runs once per shard with that
// shard's limit, a parameter: skipped.
func checkGenericPlans(t *testing.T, notes []outbox.Notification, pattern, what string, batch, custom int,
	claim func(ctx context.Context, conn *pgxpool.Conn, i int) ([]outbox.Claimed, error)) {
	t.Helper()
	ctx, pool := setup(t)
	pgtest.SkipOnCitus(t, pool, "a claim on Citus runs once per shard with that shard's limit, a parameter")
	if os.Getenv(pgtest.ShardsEnv) != "" {
		t.Skipf("%s: the claims take their Citus form, once per shard with that shard's limit, a parameter", pgtest.ShardsEnv)
	}
	enqueue(t, ctx, pool, notes...)
	if _, err := pool.Exec(ctx, `ANALYZE notifications`); err != nil {
		t.Fatal(err)
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	const calls = 12
	for i := range calls {
		got, err := claim(ctx, conn, i)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != batch {
			t.Fatalf("%s %d: %d rows; want %d", what, i, len(got), batch)
		}
	}
	var gotGeneric, gotCustom int
	if err := conn.QueryRow(ctx, `
		SELECT generic_plans, custom_plans FROM pg_prepared_statements
		WHERE statement LIKE $1 AND statement NOT LIKE '%pg_prepared_statements%'`, pattern).Scan(&gotGeneric, &gotCustom); err != nil {
		t.Fatalf("the prepared statement of the %s: %v", what, err)
	}
	if gotGeneric != calls-custom || gotCustom != custom {
		t.Errorf("%d %s on one connection: %d generic plans, %d custom; want %d generic after %d custom",
			calls, what, gotGeneric, gotCustom, calls-custom, custom)
	}
}

// TestNotificationsIndexesEachRowEnters lists the reader of each index
// every notification enters (no predicate): the insert writes an entry in
// each, and so does the outcome of its delivery, an UPDATE of status
// (in the due indexes' predicate, so never HOT). notifications_dedupe_idx
// was read by nothing (the dedupe rule and a key's row are
// notification_keys'); migration 62 dropped it, a quarter of the index
// entries the common success path wrote. It fails with the index back.
func TestNotificationsIndexesEachRowEnters(t *testing.T) {
	_, pool := setup(t)
	readers := map[string]string{
		"notifications_pkey":        "a row by (id, created_at): claims, outcomes, the API's and admin's lookups",
		"notifications_created_idx": "the admin's rows of an hour",
		"notifications_record_idx":  "the dedupe window (querySuppressRecent)",
	}
	pgtest.CheckFullIndexes(t, pool, "notifications", readers)
}

// TestClaimWritesItsValuesAsLiterals checks the values a claim writes into
// its text on one PostgreSQL (claimStatement): a sink and an owner with
// quotes and backslashes claim their rows and lease them to that owner,
// for the lease given.
func TestClaimWritesItsValuesAsLiterals(t *testing.T) {
	ctx, pool := setup(t)
	sink, owner := `it's a \ sink`, `o'wner\\x`
	enqueue(t, ctx, pool, note("a", sink), note("b", sink), note("c", "other"))
	got, err := outbox.Claim(ctx, pool, sink, owner, 10, 90*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Sink != sink || got[1].Sink != sink {
		t.Fatalf("claimed %+v; want the 2 rows of sink %q", got, sink)
	}
	var leased int
	var lease time.Duration
	if err := pool.QueryRow(ctx, `
		SELECT count(*), max(lease_expires_at - now()) FROM notifications WHERE lease_owner = $1 AND sink = $2`,
		owner, sink).Scan(&leased, &lease); err != nil {
		t.Fatal(err)
	}
	// The lease runs from the claim's now(): at most 90 s are left, and
	// some are (not a lease written as 90 µs), whatever the load delayed.
	if leased != 2 || lease <= 0 || lease > 90*time.Second {
		t.Errorf("%d rows leased to %q for %v left; want 2 for at most 90s", leased, owner, lease)
	}
}
