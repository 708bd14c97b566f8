// Package outbox owns the notifications table, the outbox between the
// deciders and the sinks. The evaluator, the digester and the watchdog
// enqueue rows through it, in their own transactions; the deliverer claims
// due rows and records the outcome of each attempt through it; the operator
// commands list rows and send dead ones back. Its named queries are in
// queries.go.
//
// A (dedupe_key, sink) is enqueued once: its row in notification_keys
// (written in the statement that inserts the notification; the table is
// the dedupe rule, since notifications is partitioned by time) makes
// Enqueue turn a second row with the same key and sink into a suppressed
// duplicate counted on the first (duplicates_suppressed,
// last_duplicate_at). NOTIFY on <schema>.outbox
// (Channel) is a wake-up for the deliverers, never the data: they also
// poll the table.
package outbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/lookout-dev/lookout/internal/db"
)

// Querier runs statements: a pgx.Tx, a *pgxpool.Pool or a *pgx.Conn. Pass
// a transaction to make a write part of the caller's.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Statuses of a row (notifications.status).
const (
	StatusPending   = "pending"
	StatusHeld      = "held"
	StatusDelivered = "delivered"
	StatusDead      = "dead"
	StatusDigested  = "digested"
)

// Kinds of a row (notifications.kind).
const (
	KindSingle = "single"
	KindDigest = "digest"
	KindAlert  = "alert"
)

// Channel is the NOTIFY channel of schema's outbox, signalled when rows
// become due (Wake). Its suffix is no longer than '.changes', so that it
// fits the 63 bytes of a channel name whenever that one does.
func Channel(schema string) string { return schema + channelSuffix }

// Wake signals the deliverers listening on Channel when q's transaction
// commits.
func Wake(ctx context.Context, q Querier) error {
	if _, err := q.Exec(ctx, queryWake); err != nil {
		return fmt.Errorf("wake the deliverers: %w", err)
	}
	return nil
}

// QueueWake adds the wake-up to b, for callers that send their last
// statements as one batch.
func QueueWake(b *pgx.Batch) { b.Queue(queryWake) }

// WakeAfterCommit signals the deliverers in a transaction of its own, for
// a caller whose notifications committed already; q is not in a
// transaction. PostgreSQL serializes the commits of transactions that
// NOTIFY with a lock held through the commit's WAL flush, so a wake-up
// sent with a writer's data makes every other NOTIFYing commit (the change
// log writer's) wait for that flush, and waits for theirs; this one
// commits asynchronously (it writes no data, only its commit record), so
// it holds the lock for no flush. A crash can lose it, as it can lose the
// wake-up of a process that dies between its commit and this call: the
// deliverers' catch-up takes the rows then.
func WakeAfterCommit(ctx context.Context, q Querier) error {
	if _, err := q.Exec(ctx, queryWakeAsync); err != nil {
		return fmt.Errorf("wake the deliverers: %w", err)
	}
	return nil
}

// Notification is a row to enqueue.
type Notification struct {
	DedupeKey string
	Sink      string
	Source    string
	RecordID  string
	Watch     string
	// Owner is the user of the watch ("" for the operator's).
	Owner string
	// Kind is single, digest or alert. Defaults to single.
	Kind string
	// ChangeID is the change decided, if any.
	ChangeID *int64
	// ContentHash is the record's content hash; "" stores NULL.
	ContentHash string
	// Title and Body are what the sink shows, rendered at enqueue time.
	Title   string
	Body    string
	Urgency string
	Reason  string
	// Payload is the JSON the sink sends.
	Payload []byte
	// Status is pending, or held for a digest (then DigestDueAt is the end
	// of its period). Defaults to pending.
	Status string
	// DigestDueAt: held rows, the end of the digest period; digest rows,
	// the period they summarize.
	DigestDueAt *time.Time
	// DigestCount is how many matches a digest row lists; 0 stores NULL.
	DigestCount int
}

// Enqueued is what Enqueue did with one row.
type Enqueued struct {
	// ID is the row's id: the new row, or the existing one it duplicated
	// (0 when EnqueueNew left an existing row alone).
	ID int64
	// Inserted is false for a duplicate.
	Inserted bool
}

// Enqueue inserts notes in one statement, in order, and returns what
// happened to each (same index). A note whose (dedupe_key, sink) exists
// (or appears earlier in notes, which is an error for the database) is a
// suppressed duplicate: the existing row counts it. It does not wake the
// deliverers: call Wake (or QueueWake) in the same transaction when rows
// were inserted.
func Enqueue(ctx context.Context, q Querier, notes []Notification) ([]Enqueued, error) {
	return enqueue(ctx, q, notes, true)
}

// EnqueueNew is Enqueue for rows whose duplicates are no news (alerts: a
// problem seen again at the next check): a row whose key exists is left
// alone and not counted.
func EnqueueNew(ctx context.Context, q Querier, notes []Notification) ([]Enqueued, error) {
	return enqueue(ctx, q, notes, false)
}

func enqueue(ctx context.Context, q Querier, notes []Notification, count bool) ([]Enqueued, error) {
	if len(notes) == 0 {
		return nil, nil
	}
	n := len(notes)
	keys, sinks, sources, records, watches, kinds := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	hashes, titles, bodies, urgencies, reasons := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	payloads, statuses, owners := make([]string, n), make([]string, n), make([]string, n)
	changeIDs, counts := make([]*int64, n), make([]*int32, n)
	dues := make([]*time.Time, n)
	for i := range notes {
		nt := &notes[i]
		keys[i], sinks[i], sources[i], records[i], watches[i] = nt.DedupeKey, nt.Sink, nt.Source, nt.RecordID, nt.Watch
		kinds[i], changeIDs[i], hashes[i] = cmp.Or(nt.Kind, KindSingle), nt.ChangeID, nt.ContentHash
		titles[i], bodies[i], urgencies[i], reasons[i] = nt.Title, nt.Body, nt.Urgency, nt.Reason
		payloads[i], statuses[i], dues[i] = string(nt.Payload), cmp.Or(nt.Status, StatusPending), nt.DigestDueAt
		owners[i] = nt.Owner
		if nt.DigestCount != 0 {
			c := int32(nt.DigestCount)
			counts[i] = &c
		}
	}
	type keySink struct{ key, sink string }
	got := make(map[keySink]Enqueued, n)
	scan := func(rows pgx.Rows, err error) error {
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var e Enqueued
			var ks keySink
			if err := rows.Scan(&e.ID, &ks.key, &ks.sink, &e.Inserted); err != nil {
				return err
			}
			got[ks] = e
		}
		return rows.Err()
	}
	if err := scan(q.Query(ctx, enqueueInsert, keys, sinks, sources, records, watches, kinds, changeIDs, hashes,
		titles, bodies, urgencies, reasons, payloads, statuses, dues, counts, owners)); err != nil {
		return nil, fmt.Errorf("insert %d notification(s): %w", n, err)
	}
	if count && len(got) < n {
		// The duplicates: keys stored before (the insert returned no row
		// for them) and repeats of a key within notes (the insert took its
		// first occurrence); each is counted on the row its key names.
		var dupKeys, dupSinks []string
		inserted := maps.Clone(got)
		repeated := make(map[keySink]bool, n)
		for i := range notes {
			ks := keySink{notes[i].DedupeKey, notes[i].Sink}
			if _, ok := inserted[ks]; !ok || repeated[ks] {
				dupKeys, dupSinks = append(dupKeys, ks.key), append(dupSinks, ks.sink)
			}
			repeated[ks] = true
		}
		if err := scan(q.Query(ctx, enqueueDuplicates, dupKeys, dupSinks)); err != nil {
			return nil, fmt.Errorf("count %d duplicate notification(s): %w", len(dupKeys), err)
		}
		maps.Copy(got, inserted) // a key inserted here stays inserted
	}
	out := make([]Enqueued, n)
	seen := make(map[keySink]bool, n)
	for i := range notes {
		ks := keySink{notes[i].DedupeKey, notes[i].Sink}
		out[i] = got[ks]
		if seen[ks] {
			out[i].Inserted = false // a repeat within notes: at most one row was inserted
		}
		seen[ks] = true
	}
	return out, nil
}

// SuppressRecent applies a dedupe window: when (source, recordID, watch,
// sink) has a row created within window, it counts a suppressed duplicate
// on the newest such row and returns its id; otherwise nil.
func SuppressRecent(ctx context.Context, q Querier, source, recordID, watch, sink string, window time.Duration) (*int64, error) {
	var id int64
	err := q.QueryRow(ctx, querySuppressRecent, source, recordID, watch, sink, window).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("check dedupe window of %s/%s/%s for sink %s: %w", source, recordID, watch, sink, err)
	}
	return &id, nil
}

// Claimed is a row leased for one delivery attempt.
type Claimed struct {
	ID        int64
	DedupeKey string
	Sink      string
	Source    string
	RecordID  string
	Watch     string
	Kind      string
	Title     string
	Body      string
	Urgency   string
	Reason    string
	Payload   []byte
	// Attempts counts this attempt: 1 on the first.
	Attempts int
	// CreatedAt is the row's creation time, the rest of its key: Record
	// finds the row by (ID, CreatedAt), in its partition.
	CreatedAt time.Time
	// TakenOver is set when the row's previous lease expired unrecorded
	// (its holder died or hung).
	TakenOver bool
}

// Claim leases up to limit due rows of sink to owner for lease and counts
// their attempt. Due rows are pending, past next_attempt_at and not leased
// (or leased past expiry); rows locked by another claim are skipped (FOR
// UPDATE SKIP LOCKED), so any number of replicas may claim at once. The
// rows come back in id order.
//
// On Citus the claim is one statement per shard of its candidates
// (db.ClaimGroups), each locking with SKIP LOCKED in its shard.
func Claim(ctx context.Context, q Querier, sink, owner string, limit int, lease time.Duration) ([]Claimed, error) {
	groups, err := db.ClaimGroups(ctx, q, "notifications", limit, queryClaimCandidates, sink, limit, owner, lease, nil)
	if err != nil {
		return nil, fmt.Errorf("claim notifications of sink %s: %w", sink, err)
	}
	var out []Claimed
	for _, g := range groups {
		sql, args := claimStatement(sink, g.Limit, owner, lease, g.Restriction(), g.Keys != nil)
		rows, err := q.Query(ctx, sql, args...)
		if err != nil {
			return nil, fmt.Errorf("claim notifications of sink %s: %w", sink, err)
		}
		got, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Claimed, error) {
			var c Claimed
			err := row.Scan(&c.ID, &c.DedupeKey, &c.Sink, &c.Source, &c.RecordID, &c.Watch, &c.Kind, &c.Title, &c.Body,
				&c.Urgency, &c.Reason, &c.Payload, &c.Attempts, &c.CreatedAt, &c.TakenOver)
			return c, err
		})
		if err != nil {
			return nil, fmt.Errorf("claim notifications of sink %s: %w", sink, err)
		}
		out = append(out, got...)
	}
	slices.SortFunc(out, func(a, b Claimed) int { return cmp.Compare(a.ID, b.ID) })
	return out, nil
}

// ClaimFair is Claim for a sink that many users share (the lane of
// watches' own webhooks): it never leases a row that would give one owner
// (notifications.owner, the user of the watch) more than perOwner rows in
// flight. An owner's window is its first perOwner due rows in due order,
// the leased ones among them; only rows of the window may be claimed, so
// an owner whose window is all leased gets nothing until an outcome of
// one is recorded (Record), whatever its backlog. Leases, expiry, fencing
// and SKIP LOCKED are Claim's: any number of replicas may claim at once,
// and the cap holds across them (a row another claim holds is skipped,
// not replaced by the owner's next one). The rows come back turn by turn
// — every owner's oldest before anyone's second — then in due order, the
// order to send them in. The cost of a claim grows with the number of
// owners that have pending rows in sink, not with their backlogs
// (notifications_owner_due_idx).
func ClaimFair(ctx context.Context, q Querier, sink, owner string, limit int, lease time.Duration, perOwner int) ([]Claimed, error) {
	if perOwner < 1 {
		return nil, fmt.Errorf("claim notifications of sink %s: %d rows per owner; want at least 1", sink, perOwner)
	}
	type turned struct {
		c    Claimed
		turn int64
		due  time.Time
	}
	// On Citus, one run per shard of the candidates: an owner's window is
	// then its rows in that shard (queryClaimFair).
	groups, err := db.ClaimGroups(ctx, q, "notifications", limit, queryClaimCandidates, sink, 2*limit, owner, lease, nil)
	if err != nil {
		return nil, fmt.Errorf("claim notifications of sink %s fairly: %w", sink, err)
	}
	var got []turned
	for _, g := range groups {
		rows, err := q.Query(ctx, queryClaimFair, sink, min(g.Limit, limit), owner, lease, perOwner, g.Restriction())
		if err != nil {
			return nil, fmt.Errorf("claim notifications of sink %s fairly: %w", sink, err)
		}
		part, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (turned, error) {
			var t turned
			c := &t.c
			err := row.Scan(&c.ID, &c.DedupeKey, &c.Sink, &c.Source, &c.RecordID, &c.Watch, &c.Kind, &c.Title, &c.Body,
				&c.Urgency, &c.Reason, &c.Payload, &c.Attempts, &c.CreatedAt, &c.TakenOver, &t.turn, &t.due)
			return t, err
		})
		if err != nil {
			return nil, fmt.Errorf("claim notifications of sink %s fairly: %w", sink, err)
		}
		got = append(got, part...)
	}
	slices.SortFunc(got, func(a, b turned) int {
		return cmp.Or(cmp.Compare(a.turn, b.turn), a.due.Compare(b.due), cmp.Compare(a.c.ID, b.c.ID))
	})
	if len(got) > limit { // several shards' turns: the first limit of all
		got = got[:limit]
	}
	out := make([]Claimed, len(got))
	for i := range got {
		out[i] = got[i].c
	}
	return out, nil
}

// Outcome kinds of an attempt (Outcome.Kind).
const (
	// Delivered: the sink accepted the row.
	Delivered = StatusDelivered
	// Retry: the attempt failed; the row is due again at Outcome.Next.
	Retry = StatusPending
	// Dead: the row failed permanently or ran out of attempts.
	Dead = StatusDead
	// Unclaim: the row was never sent (the lease could not cover an
	// attempt, or the deliverer stopped); it is due now again and its
	// attempt is not counted.
	Unclaim = "unclaim"
)

// Outcome is the result of one claimed row's attempt.
type Outcome struct {
	// ID and CreatedAt are the row's key (Claimed.ID, Claimed.CreatedAt).
	ID        int64
	CreatedAt time.Time
	Kind      string
	// At is when the attempt ended (zero for Unclaim).
	At time.Time
	// Next is when a Retry is due.
	Next time.Time
	// Err is the failure, kept in last_error and in the attempt's row.
	Err string
	// Started is when the attempt began and Duration how long it took
	// (zero for Unclaim): its delivery_attempts row. A zero Started is
	// taken as At.
	Started  time.Time
	Duration time.Duration
	// Refused is set when the egress policy refused the attempt's
	// connection: its attempt row's outcome is AttemptRefused.
	Refused bool
	// HTTPStatus is the status of the receiver's answer (0: no HTTP
	// answer) and Response an excerpt of its body (at most
	// ResponseExcerpt bytes are stored).
	HTTPStatus int
	Response   string
}

// Outcomes of an attempt (delivery_attempts.outcome): the row's outcome
// kinds, and refused.
const (
	AttemptDelivered = Delivered
	AttemptRetry     = "retry"
	AttemptDead      = Dead
	// AttemptRefused is an attempt whose connection the egress policy
	// refused (the row itself is retried or dead as its sink decided).
	AttemptRefused = "refused"
)

// ResponseExcerpt is the most bytes of a receiver's answer an attempt's
// row keeps (delivery_attempts.response).
const ResponseExcerpt = 512

// Record writes outcomes in one statement, releasing the leases. Rows no
// longer leased to owner (the lease expired and another replica took them
// over) are left alone. A row that becomes dead is due for a dead-letter
// alert again (dead_alerted_at cleared). The same statement appends one
// delivery_attempts row per attempt it recorded (every outcome but
// Unclaim, of a row still leased to owner): the history the admin page
// and /me show.
func Record(ctx context.Context, q Querier, owner string, outs []Outcome) error {
	for i := range outs {
		if outs[i].CreatedAt.IsZero() {
			return fmt.Errorf("record %d delivery outcome(s): outcome of notification %d has no CreatedAt", len(outs), outs[i].ID)
		}
	}
	if _, err := q.Exec(ctx, queryRecord, recordArgs(owner, outs)...); err != nil {
		return fmt.Errorf("record %d delivery outcome(s): %w", len(outs), err)
	}
	return nil
}

// recordArgs are queryRecord's arguments: owner, then the outcomes as
// parallel arrays.
func recordArgs(owner string, outs []Outcome) []any {
	ids := make([]int64, len(outs))
	created := make([]time.Time, len(outs))
	kinds := make([]string, len(outs))
	errs := make([]*string, len(outs))
	nexts := make([]*time.Time, len(outs))
	ats := make([]*time.Time, len(outs))
	starts := make([]*time.Time, len(outs))
	durations := make([]float64, len(outs))
	attempts := make([]string, len(outs))
	statuses := make([]*int32, len(outs))
	responses := make([]*string, len(outs))
	for i := range outs {
		o := &outs[i]
		ids[i], created[i], kinds[i] = o.ID, o.CreatedAt, o.Kind
		if o.Err != "" {
			errs[i] = &o.Err
		}
		if !o.Next.IsZero() {
			nexts[i] = &o.Next
		}
		if !o.At.IsZero() {
			ats[i] = &o.At
		}
		if !o.Started.IsZero() {
			starts[i] = &o.Started
		}
		durations[i] = float64(o.Duration) / float64(time.Millisecond)
		attempts[i] = attemptOutcome(o)
		if o.HTTPStatus != 0 {
			st := int32(o.HTTPStatus)
			statuses[i] = &st
		}
		if o.Response != "" {
			r := Excerpt(o.Response)
			responses[i] = &r
		}
	}
	return []any{owner, ids, kinds, errs, nexts, ats, created, starts, durations, attempts, statuses, responses}
}

// attemptOutcome is the delivery_attempts.outcome of o ("" for Unclaim,
// which is no attempt).
func attemptOutcome(o *Outcome) string {
	switch {
	case o.Kind == Unclaim:
		return ""
	case o.Refused:
		return AttemptRefused
	case o.Kind == Retry:
		return AttemptRetry
	}
	return o.Kind
}

// Excerpt bounds s to ResponseExcerpt bytes of valid UTF-8 without NUL
// (a text column refuses both), ending in "…" when it was cut.
func Excerpt(s string) string {
	s = strings.ToValidUTF8(strings.ReplaceAll(s, "\x00", ""), "\uFFFD")
	if len(s) <= ResponseExcerpt {
		return s
	}
	n := ResponseExcerpt - len("…")
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// Filter selects rows for RetryDead and List; zero fields match
// everything.
type Filter struct {
	ID int64
	// IDs selects the rows of these ids (none: no such condition): the
	// rows a page listed, for a bulk action that must act on exactly them.
	IDs    []int64
	Sink   string
	Source string
	Watch  string
	// Owner is the user of the watch that notified (the rows' owner
	// column); empty matches every owner, the operator's watches included.
	Owner  string
	Status string
	// Limit bounds a listing. Defaults to 50.
	Limit int
}

// where returns the filter as SQL conditions with placeholders numbered
// after args.
func (f Filter) where(args []any) (string, []any) {
	cond := "TRUE"
	add := func(col string, v any) {
		args = append(args, v)
		cond += fmt.Sprintf(" AND %s = $%d", col, len(args))
	}
	if f.ID != 0 {
		add("id", f.ID)
	}
	if f.IDs != nil {
		args = append(args, f.IDs)
		cond += fmt.Sprintf(" AND id = ANY($%d)", len(args))
	}
	if f.Sink != "" {
		add("sink", f.Sink)
	}
	if f.Source != "" {
		add("source", f.Source)
	}
	if f.Watch != "" {
		add("watch", f.Watch)
	}
	if f.Owner != "" {
		add("owner", f.Owner)
	}
	if f.Status != "" {
		add("status", f.Status)
	}
	return cond, args
}

// RetryDead sends the dead rows f selects (f.Status is ignored) back to
// pending: due now, attempts from zero, manual_retries counted, last_error
// kept until the next attempt. It wakes the deliverers and returns how
// many rows it reset.
func RetryDead(ctx context.Context, db interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}, f Filter) (int64, error) {
	f.Status = ""
	cond, args := f.where(nil)
	var n int64
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, queryRetryDead+cond, args...)
		if err != nil {
			return err
		}
		if n = tag.RowsAffected(); n > 0 {
			return Wake(ctx, tx)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("retry dead notifications: %w", err)
	}
	return n, nil
}

// Row is one row as the deliveries listing shows it.
type Row struct {
	ID            int64
	Status        string
	Kind          string
	Sink          string
	Source        string
	Watch         string
	RecordID      string
	DedupeKey     string
	Title         string
	Attempts      int
	Duplicates    int
	CreatedAt     time.Time
	NextAttemptAt time.Time
	DeliveredAt   *time.Time
	DigestDueAt   *time.Time
	DeadAt        *time.Time
	LastError     *string
}

// List returns the newest rows f selects, at most f.Limit.
func List(ctx context.Context, q Querier, f Filter) ([]Row, error) {
	cond, args := f.where(nil)
	limit := f.Limit
	if limit <= 0 {
		limit = 50
	}
	args = append(args, limit)
	rows, err := q.Query(ctx, queryList+cond+fmt.Sprintf(` ORDER BY id DESC LIMIT $%d`, len(args)), args...)
	if err != nil {
		return nil, fmt.Errorf("list notifications: %w", err)
	}
	defer rows.Close()
	var out []Row
	for rows.Next() {
		var r Row
		if err := rows.Scan(&r.ID, &r.Status, &r.Kind, &r.Sink, &r.Source, &r.Watch, &r.RecordID, &r.DedupeKey, &r.Title,
			&r.Attempts, &r.Duplicates, &r.CreatedAt, &r.NextAttemptAt, &r.DeliveredAt, &r.DigestDueAt, &r.DeadAt, &r.LastError); err != nil {
			return nil, fmt.Errorf("list notifications: %w", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list notifications: %w", err)
	}
	return out, nil
}

// DeadLetters are one sink's dead rows that MarkDeadAlerted marked.
type DeadLetters struct {
	Sink  string
	Count int
	// First and Last bound when the rows became dead.
	First, Last time.Time
	// MaxID is the newest row's id.
	MaxID int64
	// IDs, Watches, Titles and Errors describe the newest rows (at most
	// the examples asked for), newest first.
	IDs     []int64
	Watches []string
	Titles  []string
	Errors  []string
}

// MarkDeadAlerted marks the dead rows not yet alerted about
// (dead_alerted_at) and returns them per sink, with up to examples rows
// each. Alert rows are never marked: an alert about a dead alert would
// go to the sink that is failing. Run it in the transaction that writes
// the alert, so that a failed alert leaves the rows unmarked.
func MarkDeadAlerted(ctx context.Context, q Querier, examples int) ([]DeadLetters, error) {
	rows, err := q.Query(ctx, queryMarkDeadAlerted, examples)
	if err != nil {
		return nil, fmt.Errorf("mark dead letters alerted: %w", err)
	}
	defer rows.Close()
	var out []DeadLetters
	for rows.Next() {
		var d DeadLetters
		if err := rows.Scan(&d.Sink, &d.Count, &d.First, &d.Last, &d.MaxID, &d.IDs, &d.Watches, &d.Titles, &d.Errors); err != nil {
			return nil, fmt.Errorf("mark dead letters alerted: %w", err)
		}
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("mark dead letters alerted: %w", err)
	}
	return out, nil
}

// Held is a held row (a match of a digest watch) whose period ended.
type Held struct {
	ID        int64
	Source    string
	Watch     string
	Sink      string
	DueAt     time.Time
	Title     string
	Urgency   string
	Reason    string
	Payload   []byte
	CreatedAt time.Time
	// Owner is the user of the watch ("" for the operator's).
	Owner string
}

// LockDueHeld locks up to limit held rows whose digest period ended, in
// (source, watch, sink, period end, id) order, skipping rows another
// transaction holds. Fold them with Enqueue (the summary) and MarkDigested
// in the same transaction.
//
// On Citus it is one statement per shard of its candidates
// (db.ClaimGroups), each locking with SKIP LOCKED in its shard.
func LockDueHeld(ctx context.Context, tx pgx.Tx, limit int) ([]Held, error) {
	groups, err := db.ClaimGroups(ctx, tx, "notifications", limit, queryHeldCandidates, limit, nil)
	if err != nil {
		return nil, fmt.Errorf("lock held notifications: %w", err)
	}
	var out []Held
	for _, g := range groups {
		rows, err := tx.Query(ctx, queryLockHeld, g.Limit, g.Restriction())
		if err != nil {
			return nil, fmt.Errorf("lock held notifications: %w", err)
		}
		got, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Held, error) {
			var h Held
			err := row.Scan(&h.ID, &h.Source, &h.Watch, &h.Sink, &h.DueAt, &h.Title, &h.Urgency, &h.Reason, &h.Payload, &h.CreatedAt, &h.Owner)
			return h, err
		})
		if err != nil {
			return nil, fmt.Errorf("lock held notifications: %w", err)
		}
		out = append(out, got...)
	}
	if len(groups) > 1 {
		slices.SortFunc(out, func(a, b Held) int {
			return cmp.Or(cmp.Compare(a.Source, b.Source), cmp.Compare(a.Watch, b.Watch), cmp.Compare(a.Sink, b.Sink),
				a.DueAt.Compare(b.DueAt), cmp.Compare(a.ID, b.ID))
		})
	}
	return out, nil
}

// MarkDigested marks the held rows ids as carried by the summary digestID.
func MarkDigested(ctx context.Context, q Querier, ids []int64, digestID int64) error {
	if _, err := q.Exec(ctx, queryMarkDigested, ids, digestID); err != nil {
		return fmt.Errorf("mark %d notification(s) digested: %w", len(ids), err)
	}
	return nil
}

// Transactions, pools and connections all run the outbox's statements.
var (
	_ Querier = (pgx.Tx)(nil)
	_ Querier = (*pgx.Conn)(nil)
)

// PageQuery selects rows for an API listing or stream.
type PageQuery struct {
	// All selects every row (an admin); otherwise only the rows of
	// Owner's watches (notifications.owner).
	All   bool
	Owner string
	// Before lists rows with a smaller id, newest first (a cursor; 0 from
	// the newest). After lists rows with a larger id, oldest first; with
	// Recent, also the rows created within Recent whatever their id (a
	// stream's second look at rows whose transaction committed after a
	// newer one's).
	Before, After int64
	Recent        time.Duration
	// Watch and Source filter further; "" matches everything.
	Watch, Source string
	// Limit bounds the rows. Defaults to 50.
	Limit int
}

// Note is a row as the API shows it.
type Note struct {
	ID          int64
	Kind        string
	Status      string
	Source      string
	RecordID    string
	Watch       string
	Sink        string
	DedupeKey   string
	ChangeID    *int64
	Title       string
	Body        string
	Urgency     string
	Reason      string
	Payload     []byte
	CreatedAt   time.Time
	DeliveredAt *time.Time
}

// Page returns the rows q selects.
func Page(ctx context.Context, q Querier, pq PageQuery) ([]Note, error) {
	if !pq.All && pq.Owner == "" {
		return nil, nil
	}
	limit := pq.Limit
	if limit <= 0 {
		limit = 50
	}
	query := queryPageNewest
	if pq.Before == 0 && (pq.After > 0 || pq.Recent > 0) {
		query = queryPageAfter
	}
	if pq.All {
		query = strings.Replace(query, pageOwner, pageAll, 1)
	}
	rows, err := q.Query(ctx, query, pq.All, pq.Owner, pq.Before, pq.After, pq.Recent, pq.Source, pq.Watch, limit)
	if err != nil {
		return nil, fmt.Errorf("list notifications: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Note, error) {
		var n Note
		err := r.Scan(&n.ID, &n.Kind, &n.Status, &n.Source, &n.RecordID, &n.Watch, &n.Sink, &n.DedupeKey, &n.ChangeID,
			&n.Title, &n.Body, &n.Urgency, &n.Reason, &n.Payload, &n.CreatedAt, &n.DeliveredAt)
		return n, err
	})
	if err != nil {
		return nil, fmt.Errorf("list notifications: %w", err)
	}
	return out, nil
}

// Attempt is a delivery_attempts row: one delivery attempt of a
// notification, as Record wrote it.
type Attempt struct {
	ID             int64
	Source         string
	NotificationID int64
	Sink           string
	// Attempt is 1 for the notification's first.
	Attempt    int
	StartedAt  time.Time
	Duration   time.Duration
	Outcome    string
	HTTPStatus *int
	Error      *string
	Response   *string
}

// Attempts returns the delivery attempts of notification id of source,
// oldest first: what the tests and the operator read (the pages read
// them through control's report query).
func Attempts(ctx context.Context, q Querier, source string, id int64) ([]Attempt, error) {
	rows, err := q.Query(ctx, queryAttempts, source, id)
	if err != nil {
		return nil, fmt.Errorf("attempts of notification %d: %w", id, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Attempt, error) {
		var a Attempt
		var ms float64
		err := row.Scan(&a.ID, &a.Source, &a.NotificationID, &a.Sink, &a.Attempt, &a.StartedAt, &ms, &a.Outcome,
			&a.HTTPStatus, &a.Error, &a.Response)
		a.Duration = time.Duration(ms * float64(time.Millisecond))
		return a, err
	})
	if err != nil {
		return nil, fmt.Errorf("attempts of notification %d: %w", id, err)
	}
	return out, nil
}

// PruneAttempts deletes at most limit delivery attempts that started
// before before and returns how many. internal/retention calls it, with
// retention.delivery_attempts, until a batch is short.
//
// On Citus the batch is one statement per shard of its candidates
// (db.ClaimGroups), each locking with SKIP LOCKED in its shard.
func PruneAttempts(ctx context.Context, q Querier, before time.Time, limit int) (int64, error) {
	n, err := db.PruneEachShard(ctx, q, "delivery_attempts", before, limit, queryPruneAttemptCandidates, queryPruneAttempts)
	if err != nil {
		return n, fmt.Errorf("prune delivery attempts started before %s: %w", before.UTC().Format(time.RFC3339), err)
	}
	return n, nil
}

// CountPrunableAttempts counts the attempts PruneAttempts would delete (a
// dry run).
func CountPrunableAttempts(ctx context.Context, q Querier, before time.Time) (int64, error) {
	var n int64
	if err := q.QueryRow(ctx, queryCountPrunableAttempts, before).Scan(&n); err != nil {
		return 0, fmt.Errorf("count delivery attempts started before %s: %w", before.UTC().Format(time.RFC3339), err)
	}
	return n, nil
}
