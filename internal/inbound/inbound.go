// Package inbound is the one owner of inbound_events: the webhook
// deliveries the api's ingest stores (Insert, durable before the provider
// is answered) and the syncer claims, mirrors and marks (Claim, Finish,
// Release). Its named queries are in queries.go.
//
// A stored event is a unit of work with a lease, like a change or a
// notification: Claim takes unprocessed events with FOR UPDATE SKIP
// LOCKED and a claim that expires, so any number of syncer replicas share
// them and an event whose claimer died is taken again; Finish marks it
// processed in the caller's transaction (the one that wrote its records
// and changes), fenced by the claim. An event processed without an
// upstream request needs no lease: Lock claims it by its row lock in the
// transaction that mirrors it, and FinishLocked marks it there, so the
// claim writes nothing and costs no commit of its own. A NOTIFY on
// <schema>.inbound wakes the syncer; it is a wake-up only: the table is
// the truth.
package inbound

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/lookout-dev/lookout/internal/db"
)

// Outcomes of an event (inbound_events.outcome).
const (
	OutcomeCreated   = "created"   // the event's object became a new record
	OutcomeUpdated   = "updated"   // the event changed its record
	OutcomeUnchanged = "unchanged" // the record already had this content (a poll or an earlier event brought it)
	OutcomeDeleted   = "deleted"   // the event deleted its record
	OutcomeStale     = "stale"     // the record is newer than the event (events arrived out of order)
	OutcomeIgnored   = "ignored"   // not an event the source maps (ping, another type, another repository)
	OutcomeRejected  = "rejected"  // the signature did not verify; no payload kept
	OutcomeFailed    = "failed"    // mapping or fetching failed after every attempt; the reconciliation poll repairs it
)

// Channel is the NOTIFY channel of schema's inbound events, signalled
// when a delivery to process is stored.
func Channel(schema string) string { return schema + ".inbound" }

// Event is a row of inbound_events.
type Event struct {
	ID     int64
	Source string
	// DeliveryID is the provider's delivery id, or "sha256:<hash>".
	DeliveryID string
	// Type is the provider's event type; Action its action, if any.
	Type, Action string
	// ObjectID is the record id the event is about, or "".
	ObjectID       string
	ReceivedAt     time.Time
	SignatureValid bool
	// Payload is the body as received (valid deliveries only).
	Payload []byte
	// PayloadHash is the hex sha256 of the raw body.
	PayloadHash string
	// Outcome and Detail are set for an event processed on arrival
	// (rejected, ignored) or by the syncer.
	Outcome, Detail string
	ProcessedAt     *time.Time
	// Attempts counts the syncer's claims of the event.
	Attempts int
}

// Querier runs a statement: a pool, a connection or a transaction.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Insert stores e in one autocommitted statement and reports whether it
// is new: a valid delivery whose id the source already stored, or a
// rejected one already stored as rejected, stores nothing. An event
// without an outcome is pending and the statement NOTIFYs the syncer; one
// with an outcome (rejected, ignored) is stored as processed. When Insert
// returns, the row is durable (committed).
func Insert(ctx context.Context, q Querier, e *Event) (bool, error) {
	sql := insertValid
	if !e.SignatureValid {
		sql = insertRejected
		e.Payload = nil
	}
	var payload any
	if e.Payload != nil {
		payload = string(e.Payload)
	}
	err := q.QueryRow(ctx, sql, e.Source, e.DeliveryID, e.Type, nullText(e.Action), nullText(e.ObjectID),
		e.SignatureValid, payload, e.PayloadHash, nullText(e.Outcome), nullText(e.Detail)).Scan(&e.ID, &e.ReceivedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("store inbound event %s of %s: %w", e.DeliveryID, e.Source, err)
	}
	return true, nil
}

// Claim takes up to limit unprocessed events of sources (oldest first)
// that nobody holds, for lease, as owner. Each claim counts an attempt.
func Claim(ctx context.Context, q Querier, owner string, sources []string, limit int, lease time.Duration) ([]Event, error) {
	out, err := db.EachShard(ctx, q, "inbound_events", sources, limit, func(group []string, limit int) ([]Event, error) {
		rows, err := q.Query(ctx, claimEvents, owner, lease, group, limit)
		if err != nil {
			return nil, err
		}
		return pgx.CollectRows(rows, scanClaimed)
	})
	if err != nil {
		return nil, fmt.Errorf("claim inbound events: %w", err)
	}
	return out, nil
}

// Lock takes up to limit unprocessed events of sources (oldest first)
// that nobody holds, in tx: the row locks (FOR UPDATE SKIP LOCKED) are
// the claim, and it ends with tx. It writes nothing and counts no
// attempt, so it is for events processed within tx (FinishLocked); a
// processor that needs the events beyond tx (an upstream request to
// make) claims them with a lease instead (Claim).
func Lock(ctx context.Context, tx pgx.Tx, sources []string, limit int) ([]Event, error) {
	out, err := db.EachShard(ctx, tx, "inbound_events", sources, limit, func(group []string, limit int) ([]Event, error) {
		rows, err := tx.Query(ctx, lockEvents, group, limit)
		if err != nil {
			return nil, err
		}
		return pgx.CollectRows(rows, scanClaimed)
	})
	if err != nil {
		return nil, fmt.Errorf("lock inbound events: %w", err)
	}
	return out, nil
}

// FinishLocked marks the events of results processed with their outcome,
// in tx, which locked them (Lock). It fails if any of them is no longer
// pending.
func FinishLocked(ctx context.Context, tx pgx.Tx, results []Result) error {
	if len(results) == 0 {
		return nil
	}
	ids, outcomes, details := resultColumns(results)
	tag, err := tx.Exec(ctx, finishLockedEvents, ids, outcomes, details)
	if err != nil {
		return fmt.Errorf("mark inbound events processed: %w", err)
	}
	if n := int(tag.RowsAffected()); n != len(results) {
		return fmt.Errorf("mark inbound events processed: %d of %d were still pending", n, len(results))
	}
	return nil
}

// scanClaimed reads the columns of claimEvents and lockEvents.
func scanClaimed(r pgx.CollectableRow) (Event, error) {
	var e Event
	var action, object *string
	err := r.Scan(&e.ID, &e.Source, &e.DeliveryID, &e.Type, &action, &object, &e.ReceivedAt, &e.Payload, &e.PayloadHash, &e.Attempts)
	e.Action, e.ObjectID, e.SignatureValid = deref(action), deref(object), true
	return e, err
}

// resultColumns turns results into the arrays of the finish queries.
func resultColumns(results []Result) ([]int64, []string, []*string) {
	ids := make([]int64, len(results))
	outcomes := make([]string, len(results))
	details := make([]*string, len(results))
	for i, r := range results {
		ids[i], outcomes[i] = r.ID, r.Outcome
		if r.Detail != "" {
			d := r.Detail
			details[i] = &d
		}
	}
	return ids, outcomes, details
}

// Result is how one claimed event ended.
type Result struct {
	ID      int64
	Outcome string
	Detail  string
}

// ErrClaimLost means an event's claim expired and another replica took it;
// the caller's transaction must roll back.
var ErrClaimLost = errors.New("inbound event claim lost to another replica")

// Finish marks the events of results processed with their outcome, in
// the caller's transaction (the one that wrote their records), fenced by
// owner's claim: if any of them is no longer claimed by owner it returns
// ErrClaimLost.
func Finish(ctx context.Context, q Querier, owner string, results []Result) error {
	if len(results) == 0 {
		return nil
	}
	ids, outcomes, details := resultColumns(results)
	tag, err := q.Exec(ctx, finishEvents, owner, ids, outcomes, details)
	if err != nil {
		return fmt.Errorf("mark inbound events processed: %w", err)
	}
	if int(tag.RowsAffected()) != len(results) {
		return ErrClaimLost
	}
	return nil
}

// Release gives claimed events back to be claimed again after retryAfter
// (a fetch the upstream refused for now, a database error), recording why;
// an event that has had maxAttempts claims is marked failed instead. It
// returns the ids marked failed.
func Release(ctx context.Context, q Querier, owner string, ids []int64, retryAfter time.Duration, detail string, maxAttempts int) ([]int64, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	rows, err := q.Query(ctx, releaseEvents, owner, ids, retryAfter, detail, maxAttempts)
	if err != nil {
		return nil, fmt.Errorf("release inbound events: %w", err)
	}
	failed, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("release inbound events: %w", err)
	}
	return failed, nil
}

// Get returns the event of source with a delivery id (the valid one when
// there are both), or nil.
func Get(ctx context.Context, q Querier, source, deliveryID string) (*Event, error) {
	var e Event
	var action, object, outcome, detail *string
	err := q.QueryRow(ctx, getEvent, source, deliveryID).Scan(&e.ID, &e.Source, &e.DeliveryID, &e.Type, &action, &object,
		&e.ReceivedAt, &e.SignatureValid, &e.Payload, &e.PayloadHash, &e.ProcessedAt, &outcome, &detail, &e.Attempts)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read inbound event %s of %s: %w", deliveryID, source, err)
	}
	e.Action, e.ObjectID, e.Outcome, e.Detail = deref(action), deref(object), deref(outcome), deref(detail)
	return &e, nil
}

// Pending counts the unprocessed events of source ("" for every source).
func Pending(ctx context.Context, q Querier, source string) (int, error) {
	var n int
	if err := q.QueryRow(ctx, countPending, source).Scan(&n); err != nil {
		return 0, fmt.Errorf("count pending inbound events: %w", err)
	}
	return n, nil
}

func nullText(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// Prune deletes at most limit processed events received before before and
// returns how many; an event not yet processed (pending, claimed, waiting
// for a retry) is never deleted. With its row goes its delivery id: a
// provider redelivering it later would have it stored again, so the
// window must outlast the providers' redeliveries. internal/retention
// calls it until a batch is short.
func Prune(ctx context.Context, q Querier, before time.Time, limit int) (int64, error) {
	n, err := db.PruneEachShard(ctx, q, "inbound_events", before, limit, queryPruneCandidates, queryPrune)
	if err != nil {
		return n, fmt.Errorf("prune inbound events received before %s: %w", before.UTC().Format(time.RFC3339), err)
	}
	return n, nil
}

// CountPrunable counts the events Prune would delete (a dry run).
func CountPrunable(ctx context.Context, q Querier, before time.Time) (int64, error) {
	var n int64
	if err := q.QueryRow(ctx, queryCountPrunable, before).Scan(&n); err != nil {
		return 0, fmt.Errorf("count inbound events received before %s: %w", before.UTC().Format(time.RFC3339), err)
	}
	return n, nil
}
