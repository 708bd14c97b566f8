package control

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lookout-dev/lookout/internal/outbox"
)

// TestDeliveryAttemptsAreTheOwners: a notification's attempts, oldest
// first, are its owner's and an admin's; another user, or an id that does
// not exist, gets the same NotFoundError; a notification without attempts
// yet is an empty list; and the admin page's statement of them is one of
// the named report queries.
func TestDeliveryAttemptsAreTheOwners(t *testing.T) {
	t.Parallel()
	s := newService(t, nil)
	ctx := context.Background()
	var notes []outbox.Notification
	for _, owner := range []string{"alice", "alice", "bob"} {
		k := fmt.Sprintf("src/r/%s/%d", owner, len(notes))
		notes = append(notes, outbox.Notification{DedupeKey: k, Sink: "hook", Source: "src", RecordID: "r", Watch: "w", Owner: owner,
			Title: k, Urgency: "medium", Reason: "test", Payload: []byte(`{}`)})
	}
	var got []outbox.Enqueued
	if err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		got, err = outbox.Enqueue(ctx, tx, notes)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	attempted, idle, bobs := got[0].ID, got[1].ID, got[2].ID
	// Two attempts each of alice's first notification and of bob's; her second is given back unsent.
	for range 2 {
		claimed, err := outbox.Claim(ctx, s.pool, "hook", "d", 10, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		var outs []outbox.Outcome
		for _, c := range claimed {
			o := outbox.Outcome{ID: c.ID, CreatedAt: c.CreatedAt, Kind: outbox.Retry, At: time.Now(), Next: time.Now(),
				Duration: 42 * time.Millisecond, HTTPStatus: 503, Response: "busy", Err: "webhook answered 503"}
			if c.ID == idle {
				o = outbox.Outcome{ID: c.ID, CreatedAt: c.CreatedAt, Kind: outbox.Unclaim}
			}
			outs = append(outs, o)
		}
		if err := outbox.Record(ctx, s.pool, "d", outs); err != nil {
			t.Fatal(err)
		}
	}
	alice, bob, admin := Principal{Owner: "alice"}, Principal{Owner: "bob"}, Principal{Owner: "root", Admin: true}

	for _, p := range []Principal{alice, admin} {
		rows, err := s.DeliveryAttempts(ctx, p, attempted)
		if err != nil || len(rows) != 2 || *rows[0].Attempt != 1 || *rows[1].Attempt != 2 || *rows[1].Outcome != "retry" ||
			*rows[1].HTTPStatus != 503 || *rows[1].DurationMS != 42 || *rows[1].Response != "busy" {
			t.Errorf("%s: attempts of %d = %+v, %v; want its 2 retries", p.Owner, attempted, rows, err)
		}
	}
	if rows, err := s.DeliveryAttempts(ctx, alice, idle); err != nil || len(rows) != 0 {
		t.Errorf("alice: attempts of %d (never attempted) = %+v, %v; want none", idle, rows, err)
	}
	var notFound []string
	for _, c := range []struct {
		p  Principal
		id int64
	}{{bob, attempted}, {bob, idle}, {alice, bobs}, {alice, bobs + 1000}, {admin, bobs + 1000}, {Principal{}, attempted}} {
		rows, err := s.DeliveryAttempts(ctx, c.p, c.id)
		var nf *NotFoundError
		if !errors.As(err, &nf) || rows != nil {
			t.Errorf("%q: attempts of %d = %+v, %v; want a NotFoundError", c.p.Owner, c.id, rows, err)
			continue
		}
		notFound = append(notFound, err.Error())
	}
	// A foreign id and one that does not exist read the same.
	if len(notFound) == 6 && strings.Replace(notFound[2], fmt.Sprint(bobs), "N", 1) != strings.Replace(notFound[3], fmt.Sprint(bobs+1000), "N", 1) {
		t.Errorf("a foreign id reads %q, an unknown one %q", notFound[2], notFound[3])
	}
	// The admin page reads them through the named statement, an admin's only.
	if rows, err := ReportRows(ctx, s, admin, ReportDeliveryAttempts, bobs, nil); err != nil || len(rows) != 2 || *rows[1].Attempt != 2 {
		t.Errorf("ReportRows(ReportDeliveryAttempts, %d) = %+v, %v; want bob's two attempts", bobs, rows, err)
	}
	var fe *ForbiddenError
	if _, err := ReportRows(ctx, s, alice, ReportDeliveryAttempts, attempted, "alice"); !errors.As(err, &fe) {
		t.Errorf("ReportRows as alice: %v, want a ForbiddenError", err)
	}
}

// TestReportSettings: a report's transaction plans without JIT, a custom
// plan per call, and no parallel workers (the admin pages' statements read
// a few hundred rows through indexes; on a busy machine the overview
// waited seconds for its workers to start, docs/benchmarks.md (9)).
func TestReportSettings(t *testing.T) {
	t.Parallel()
	s := newService(t, nil)
	const sql = `SELECT current_setting('jit') || ' ' || current_setting('plan_cache_mode') || ' ' ||
		current_setting('max_parallel_workers_per_gather')`
	var got string
	if err := s.inReport(context.Background(), sql, nil, func(rows pgx.Rows) error {
		for rows.Next() {
			if err := rows.Scan(&got); err != nil {
				return err
			}
		}
		return rows.Err()
	}); err != nil {
		t.Fatal(err)
	}
	if want := "off force_custom_plan 0"; got != want {
		t.Errorf("a report's settings: %q, want %q", got, want)
	}
}
