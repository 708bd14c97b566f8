package evaluator

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lookout-dev/lookout/internal/db"
	"github.com/lookout-dev/lookout/internal/metrics"
	"github.com/lookout-dev/lookout/internal/notify"
	"github.com/lookout-dev/lookout/internal/outbox"
)

// DedupeKey is the notification dedupe key of a decision under the watch's
// policy (the sink completes it: notifications are UNIQUE (dedupe_key,
// sink)):
//
//	version, window  <source>/<record>/<watch>/v<version>-<hash[:16]>
//	                 (deleted: <source>/<record>/<watch>/v<version>-deleted)
//	record           <source>/<record>/<watch>
//
// The version makes a record that returns to earlier content notify again;
// the hash keeps a source whose versions restart (dropped and re-added)
// from colliding with notifications about other content.
func DedupeKey(policy, source, recordID, watchName, kind, hash string, version int) string {
	base := source + "/" + recordID + "/" + watchName
	if policy == "record" {
		return base
	}
	if kind == "deleted" || hash == "" {
		return fmt.Sprintf("%s/v%d-deleted", base, version)
	}
	return fmt.Sprintf("%s/v%d-%s", base, version, hash[:min(len(hash), 16)])
}

// evaluationColumns are the columns an evaluations COPY writes.
var evaluationColumns = []string{"change_id", "source", "record_id", "watch", "content_hash", "step", "matched",
	"decision", "reason", "urgency", "notification_id", "evaluator", "model_call_id", "confidence", "created_at", "owner",
	"change_created_at"}

// copyEvaluations is the COPY of evaluationColumns.
var copyEvaluations = db.CopyStatement("evaluations", evaluationColumns)

// note is a notification row to enqueue for decision dec.
type note struct {
	dec        int // index into decisions
	row        outbox.Notification
	suppressed bool // within the watch's dedupe window: not enqueued
}

// commit writes the decisions of the leased changes this evaluator still
// owns and marks those changes done, in one transaction. It returns the
// number of changes completed and notifications created.
func (e *Evaluator) commit(ctx context.Context, claimed []*change, decs []decision, owner string) (int, int, error) {
	var completed, created int
	err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		e.queueBound(b)
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		var err error
		completed, created, err = e.commitIn(ctx, tx, claimed, decs, owner)
		return err
	})
	if err != nil {
		return 0, 0, fmt.Errorf("commit %d changes: %w", len(claimed), err)
	}
	return completed, created, nil
}

// commitIn writes decisions and settles the changes in tx. owner is the
// lease holder the changes must still belong to, or "" when tx itself holds
// their row locks (then this settle counts the attempt). It returns the
// number of changes completed and notifications created.
//
// The steps run in this order: settle locks the changes and fences out an
// evaluator whose lease expired, so only the decisions of changes this
// evaluator still owns are enqueued and recorded.
func (e *Evaluator) commitIn(ctx context.Context, tx pgx.Tx, claimed []*change, decs []decision, owner string) (int, int, error) {
	woke := notifies(decs)
	owned, completed, err := e.settle(ctx, tx, claimed, decs, owner, woke)
	if err != nil {
		return 0, 0, err
	}
	created, err := e.enqueue(ctx, tx, decs, owned)
	if err != nil {
		return 0, 0, err
	}
	if err := e.recordEvaluations(ctx, tx, claimed, decs, owned, created > 0 && !woke); err != nil {
		return 0, 0, err
	}
	return completed, created, nil
}

// settle marks the claimed changes done, or held until their earliest
// held decision's retry time, and returns the changes this evaluator still
// owned (the others' leases expired: another evaluator has them) and how
// many were completed. Completed changes get their evaluation lag.
//
// With wake, the deliverers' wake-up is queued in the same round trip (it
// is sent at commit): the caller passes it when decisions are about to
// notify, and does not queue it again.
func (e *Evaluator) settle(ctx context.Context, tx pgx.Tx, claimed []*change, decs []decision, owner string, wake bool) (map[int64]bool, int, error) {
	var ownerArg any
	attempt := 1
	if owner != "" {
		ownerArg, attempt = owner, 0
	}
	heldBy := map[int64]*decision{} // change -> its earliest-retried held decision
	for i := range decs {
		d := &decs[i]
		if d.verdict == "hold" {
			if h := heldBy[d.change.ID]; h == nil || d.retryAt.Before(h.retryAt) {
				heldBy[d.change.ID] = d
			}
		}
	}
	var done, held []*change
	var heldUntil []time.Time
	var heldReason []string
	for _, c := range claimed {
		if h := heldBy[c.ID]; h != nil {
			held, heldUntil = append(held, c), append(heldUntil, h.retryAt)
			heldReason = append(heldReason, h.watch.Config.Name+": "+h.reason)
			continue
		}
		done = append(done, c)
	}
	owned := make(map[int64]bool, len(claimed))
	lags := make(map[int64]float64, len(claimed))
	// On Citus (and with simulated shards) the two statements name the
	// batch's sources too, so that each touches only the shards of the
	// batch: by id alone they ran on every shard, and a multi-shard UPDATE
	// next to the claims' per-shard locks was seen in Citus' distributed
	// deadlocks (cancelled after 2 s each). On one PostgreSQL they are as
	// they were (docs/scaling.md: the sources may cost the first batches
	// of a backlog there).
	sh, err := db.ShardingOf(ctx, tx)
	if err != nil {
		return nil, 0, fmt.Errorf("settle: %w", err)
	}
	b := &pgx.Batch{}
	if len(done) > 0 {
		k := keysOf(done)
		if sh.Distributed() {
			b.Queue(settleDoneBySourceSQL, k.ids, ownerArg, attempt, k.since, k.sources)
		} else {
			b.Queue(settleDoneSQL, k.ids, ownerArg, attempt, k.since)
		}
	}
	if len(held) > 0 {
		// Held: still pending, lease released, due again at retryAt.
		k := keysOf(held)
		if sh.Distributed() {
			b.Queue(holdBySourceSQL, k.ids, heldUntil, heldReason, ownerArg, attempt, k.since, k.sources)
		} else {
			b.Queue(holdSQL, k.ids, heldUntil, heldReason, ownerArg, attempt, k.since)
		}
	}
	updates := b.Len()
	if wake {
		outbox.QueueWake(b)
	}
	br := tx.SendBatch(ctx, b)
	for range updates {
		rows, err := br.Query()
		if err != nil {
			br.Close()
			return nil, 0, fmt.Errorf("settle changes: %w", err)
		}
		for rows.Next() {
			var id int64
			var lag *float64
			if err := rows.Scan(&id, &lag); err != nil {
				rows.Close()
				br.Close()
				return nil, 0, fmt.Errorf("settle changes: %w", err)
			}
			owned[id] = true
			if lag != nil {
				lags[id] = *lag
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			br.Close()
			return nil, 0, fmt.Errorf("settle changes: %w", err)
		}
	}
	if wake {
		if _, err := br.Exec(); err != nil {
			br.Close()
			return nil, 0, fmt.Errorf("wake the deliverers: %w", err)
		}
	}
	if err := br.Close(); err != nil {
		return nil, 0, fmt.Errorf("settle changes: %w", err)
	}
	completed := 0
	for _, c := range claimed {
		if lag, ok := lags[c.ID]; ok {
			completed++
			c.lag = time.Duration(lag * float64(time.Second))
		}
	}
	if len(owned) < len(claimed) {
		e.logger.Warn("lost lease on changes; another evaluator will evaluate them", "lost", len(claimed)-len(owned))
		e.conf.Metrics.ClaimsExpired(metrics.ComponentEvaluator, len(claimed)-len(owned))
	}
	return owned, completed, nil
}

// settleDoneSQL marks the changes $1 done (owned by $2, or locked by the
// transaction when $2 is NULL), counting $3 attempts; $4 is the earliest
// of their created_at (changeKeys). It returns each change's lag.
const settleDoneSQL = `
	WITH settled AS (SELECT clock_timestamp() AS at)
	UPDATE changes SET eval_status = 'done', evaluated_at = settled.at, eval_owner = NULL,
	       eval_lease_expires_at = NULL, eval_error = NULL, eval_attempts = eval_attempts + $3
	FROM settled
	WHERE id = ANY($1) AND created_at >= $4
	  AND ($2::text IS NULL OR eval_owner = $2) AND eval_status = 'pending'
	RETURNING id, extract(epoch FROM evaluated_at - created_at)::float8`

// holdSQL keeps the changes $1 pending (owned by $4, or locked by the
// caller when $4 is NULL), due again at $2 with the reason $3, their
// lease released; $5 counts the attempt, $6 bounds created_at (the
// partitions to read).
const holdSQL = `
	UPDATE changes SET eval_next_at = u.next_at, eval_owner = NULL, eval_lease_expires_at = NULL,
	       eval_error = u.reason, eval_attempts = eval_attempts + $5
	FROM unnest($1::bigint[], $2::timestamptz[], $3::text[]) AS u(id, next_at, reason)
	WHERE changes.id = u.id AND changes.created_at >= $6
	  AND ($4::text IS NULL OR changes.eval_owner = $4) AND changes.eval_status = 'pending'
	RETURNING changes.id, NULL::float8`

// holdBySourceSQL is holdSQL on Citus, routed by the batch's sources ($7)
// as settleDoneBySourceSQL is.
const holdBySourceSQL = `
	UPDATE changes SET eval_next_at = u.next_at, eval_owner = NULL, eval_lease_expires_at = NULL,
	       eval_error = u.reason, eval_attempts = eval_attempts + $5
	FROM unnest($1::bigint[], $2::timestamptz[], $3::text[]) AS u(id, next_at, reason)
	WHERE changes.id = u.id AND changes.created_at >= $6 AND changes.source = ANY($7)
	  AND ($4::text IS NULL OR changes.eval_owner = $4) AND changes.eval_status = 'pending'
	RETURNING changes.id, NULL::float8`

// settleDoneBySourceSQL is settleDoneSQL on Citus, where the batch's
// sources ($5) route the UPDATE to their shards instead of every shard
// (an UPDATE by id alone across shards took part in distributed
// deadlocks). The clock is read in a CTE because Citus refuses
// clock_timestamp() in a distributed UPDATE's SET.
const settleDoneBySourceSQL = `
	WITH settled AS (SELECT clock_timestamp() AS at)
	UPDATE changes SET eval_status = 'done', evaluated_at = settled.at, eval_owner = NULL,
	       eval_lease_expires_at = NULL, eval_error = NULL, eval_attempts = eval_attempts + $3
	FROM settled
	WHERE id = ANY($1) AND created_at >= $4 AND source = ANY($5)
	  AND ($2::text IS NULL OR eval_owner = $2) AND eval_status = 'pending'
	RETURNING id, extract(epoch FROM evaluated_at - created_at)::float8`

// notifies reports whether any of decs is a notify decision: its
// transaction will most likely create a notification (a spurious wake-up,
// when all turn out duplicates, costs a deliverer an empty claim).
func notifies(decs []decision) bool {
	for i := range decs {
		if decs[i].verdict == "notify" {
			return true
		}
	}
	return false
}

// enqueue writes the notifications of the owned changes' notify decisions,
// one per sink, through the outbox, and returns how many rows it created.
// A note within its watch's dedupe window, or whose dedupe key exists, is
// a suppressed duplicate; a decision whose every note was one becomes
// "duplicate".
func (e *Evaluator) enqueue(ctx context.Context, tx pgx.Tx, decs []decision, owned map[int64]bool) (int, error) {
	now := e.conf.Now().UTC()
	var notes []note
	for i := range decs {
		d := &decs[i]
		if !owned[d.change.ID] || d.verdict != "notify" {
			continue
		}
		for _, sink := range d.watch.Config.Sinks() {
			notes = append(notes, e.buildNote(i, d, sink, now))
		}
	}
	if err := suppressWindow(ctx, tx, decs, notes); err != nil {
		return 0, err
	}
	created, err := insertNotes(ctx, tx, decs, notes)
	if err != nil {
		return 0, err
	}
	for i := range decs {
		d := &decs[i]
		if d.verdict == "notify" && d.inserted == 0 && d.suppressed > 0 {
			d.verdict, d.step = "duplicate", "dedupe"
			d.reason += "; already notified (dedupe " + d.watch.Config.Dedupe + ")"
		}
	}
	return created, nil
}

// recordEvaluations writes one evaluations row per decision of the owned
// changes, and wakes the deliverers when notifications were created.
func (e *Evaluator) recordEvaluations(ctx context.Context, tx pgx.Tx, claimed []*change, decs []decision, owned map[int64]bool, wake bool) error {
	b := &pgx.Batch{}
	// The columns count_evaluations reads, sized for every decision at
	// once (grown by append, the columns were a tenth of a drain's
	// allocations); the others only for the INSERT below, the COPY reads
	// the decisions in place.
	n := len(decs)
	evStep, evDecision, evOwner := make([]string, 0, n), make([]string, 0, n), make([]string, 0, n)
	evCall, evConfidence := make([]*int64, 0, n), make([]*float64, 0, n)
	evIdx := make([]int, 0, n)
	for i := range decs {
		d := &decs[i]
		if !owned[d.change.ID] {
			continue
		}
		d.written = true
		evIdx = append(evIdx, i)
		evOwner = append(evOwner, d.watch.Owner)
		evStep = append(evStep, d.step)
		evDecision = append(evDecision, d.verdict)
		evCall = append(evCall, d.modelCallID)
		evConfidence = append(evConfidence, d.confidence)
	}
	firstAttempt := true
	for _, c := range claimed {
		if owned[c.ID] && c.Attempts > 1 {
			firstAttempt = false
		}
	}
	// One decision time for the statement's rows, as a COPY writes them
	// and as count_evaluations adds them to the hour's and day's totals.
	at := time.Now()
	switch {
	case len(evIdx) > 0 && firstAttempt:
		// No change of the batch was ever decided before (a decision is
		// only written by the transaction that settles or holds its
		// change, and a held change comes back with more attempts):
		// nothing can conflict, so the rows go in with COPY, in batches
		// (no trigger on evaluations' inserts: migration 57), and every
		// row is counted.
		if _, err := db.CopyFrom(ctx, tx, "evaluations", evaluationColumns, copyEvaluations, evaluationRows(decs, evIdx, &e.conf.Owner, &at)); err != nil {
			return fmt.Errorf("write evaluations: %w", err)
		}
		queueCount(b, at, evDecision, evStep, evOwner, evConfidence, evCall, nil)
	case len(evIdx) > 0:
		// A held decision is replaced when the change comes back; any
		// other existing decision stands (a repeat is a no-op). Only the
		// rows inserted are counted here: a replaced one is counted by
		// evaluations' update triggers. The changes' locks (or the lease
		// the settle fenced) keep any other writer off their decisions,
		// so what exists now is what the insert finds.
		exists, err := existingDecisions(ctx, tx, claimed, owned)
		if err != nil {
			return err
		}
		m := len(evIdx)
		evChange, evChangeAt := make([]int64, m), make([]time.Time, m)
		evSource, evRecord, evWatch, evHash := make([]string, m), make([]string, m), make([]string, m), make([]string, m)
		evReason, evUrgency := make([]string, m), make([]string, m)
		evMatched, evNote := make([]bool, m), make([]*int64, m)
		inserted := make([]bool, m)
		for j, i := range evIdx {
			d := &decs[i]
			evChange[j], evChangeAt[j], evSource[j], evRecord[j] = d.change.ID, d.change.CreatedAt, d.change.Source, d.change.RecordID
			evWatch[j], evHash[j], evReason[j], evUrgency[j] = d.watch.Config.Name, d.change.NewHash, d.reason, d.urgency
			evMatched[j], evNote[j] = d.matched, d.noteID
			inserted[j] = !exists[decisionKey{evChange[j], evWatch[j]}]
		}
		b.Queue(`
			INSERT INTO evaluations (change_id, source, record_id, watch, content_hash, step, matched,
			                         decision, reason, urgency, notification_id, evaluator, model_call_id, confidence,
			                         created_at, owner, change_created_at)
			SELECT u.change_id, u.source, u.record_id, u.watch, NULLIF(u.hash, ''), u.step, u.matched,
			       u.decision, u.reason, u.urgency, u.note, $1, u.call, u.confidence, $17, u.owner, u.change_at
			FROM unnest($2::bigint[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[],
			            $8::bool[], $9::text[], $10::text[], $11::text[], $12::bigint[], $13::bigint[], $14::float8[], $15::text[],
			            $16::timestamptz[])
			     AS u(change_id, source, record_id, watch, hash, step, matched, decision, reason, urgency, note, call, confidence,
			          owner, change_at)
			ON CONFLICT ON CONSTRAINT evaluations_change_id_watch_key DO UPDATE
			    SET content_hash = EXCLUDED.content_hash, step = EXCLUDED.step, matched = EXCLUDED.matched,
			        decision = EXCLUDED.decision, reason = EXCLUDED.reason, urgency = EXCLUDED.urgency,
			        notification_id = EXCLUDED.notification_id, evaluator = EXCLUDED.evaluator,
			        model_call_id = EXCLUDED.model_call_id, confidence = EXCLUDED.confidence, created_at = EXCLUDED.created_at
			    WHERE evaluations.decision = 'hold'`,
			e.conf.Owner, evChange, evSource, evRecord, evWatch, evHash, evStep, evMatched, evDecision, evReason, evUrgency, evNote,
			evCall, evConfidence, evOwner, evChangeAt, at)
		queueCount(b, at, evDecision, evStep, evOwner, evConfidence, evCall, inserted)
	}
	if wake {
		outbox.QueueWake(b)
	}
	if b.Len() > 0 {
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return fmt.Errorf("write evaluations: %w", err)
		}
	}
	return nil
}

// countEvaluationsSQL adds inserted evaluations to the hourly activity and
// the model drift (migration 57: their writer counts them, so that their
// COPY is not made to insert row by row by a trigger's transition table).
const countEvaluationsSQL = `SELECT count_evaluations($1::timestamptz[], $2::text[], $3::text[], $4::text[], $5::float8[], $6::bigint[])`

// queueCount queues count_evaluations for the rows written at at whose
// inserted is true (every row when inserted is nil): the columns the
// totals read, in the round trip that ends the transaction's writes.
func queueCount(b *pgx.Batch, at time.Time, decision, step, owner []string, confidence []*float64, call []*int64, inserted []bool) {
	if inserted == nil {
		// Every row: the columns as they are (pgx encodes them when the
		// batch is sent, and nobody changes them before).
		if len(decision) == 0 {
			return
		}
		ats := make([]time.Time, len(decision))
		for i := range ats {
			ats[i] = at
		}
		b.Queue(countEvaluationsSQL, ats, decision, step, owner, confidence, call)
		return
	}
	var n int
	var ats []time.Time
	var decs, steps, owners []string
	var confs []*float64
	var calls []*int64
	for i := range decision {
		if !inserted[i] {
			continue
		}
		n++
		ats = append(ats, at)
		decs = append(decs, decision[i])
		steps = append(steps, step[i])
		owners = append(owners, owner[i])
		confs = append(confs, confidence[i])
		calls = append(calls, call[i])
	}
	if n == 0 {
		return
	}
	b.Queue(countEvaluationsSQL, ats, decs, steps, owners, confs, calls)
}

// decisionKey is an evaluation's key within its change's partition: a
// change and a watch.
type decisionKey struct {
	change int64
	watch  string
}

// existingDecisions returns the decisions (of any verdict) written
// already for the owned changes of claimed.
func existingDecisions(ctx context.Context, tx pgx.Tx, claimed []*change, owned map[int64]bool) (map[decisionKey]bool, error) {
	var mine []*change
	for _, c := range claimed {
		if owned[c.ID] {
			mine = append(mine, c)
		}
	}
	out := map[decisionKey]bool{}
	if len(mine) == 0 {
		return out, nil
	}
	k := keysOf(mine)
	rows, err := tx.Query(ctx, `
		SELECT change_id, watch FROM evaluations
		WHERE change_id = ANY($1) AND source = ANY($2) AND change_created_at >= $3`, k.ids, k.sources, k.since)
	if err != nil {
		return nil, fmt.Errorf("read earlier decisions: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var key decisionKey
		if err := rows.Scan(&key.change, &key.watch); err != nil {
			return nil, fmt.Errorf("read earlier decisions: %w", err)
		}
		out[key] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read earlier decisions: %w", err)
	}
	return out, nil
}

// logDecisions logs the held, notify and duplicate decisions that were
// written; call it once their transaction committed.
func (e *Evaluator) logDecisions(decs []decision) {
	for i := range decs {
		d := &decs[i]
		if !d.written {
			continue
		}
		if d.verdict == "hold" {
			e.logger.Warn("decision held", "source", d.change.Source, "change_id", d.change.ID, "record_id", d.change.RecordID,
				"watch", d.watch.Config.Name, "step", d.step, "reason", d.reason)
		}
		if d.verdict == "notify" || d.verdict == "duplicate" {
			e.logger.Info("decision", "source", d.change.Source, "change_id", d.change.ID, "record_id", d.change.RecordID,
				"watch", d.watch.Config.Name, "decision", d.verdict, "reason", d.reason, "dedupe_key", d.dedupeKey)
		}
	}
}

// buildNote renders the notification of decision d for one sink: title and
// body from the templates (stored, so what is sent is what was decided),
// the payload, and for a digest watch the end of the period it waits for.
func (e *Evaluator) buildNote(i int, d *decision, sink string, now time.Time) note {
	c, w := d.change, d.watch.Config
	key := DedupeKey(w.Dedupe, c.Source, c.RecordID, w.Name, c.Kind, c.NewHash, c.Version)
	d.dedupeKey = key
	rec := notify.RecordFromFields(c.Record)
	rec.ContentHash = c.NewHash
	v := notify.Verdict{Urgency: d.urgency, Reason: d.reason}
	if d.confidence != nil {
		v.Confidence = *d.confidence
	}
	out := e.composer.Compose(&notify.Match{
		Source: c.Source, Watch: w, Owner: d.watch.Owner, Sink: sink, DedupeKey: key, Record: rec,
		Change:  notify.PayloadChange{ID: c.ID, Kind: c.Kind, Version: c.Version, ChangedFields: nonNil(c.ChangedFields)},
		Verdict: v, Confidence: d.confidence, Now: now,
	})
	if out.Err != nil {
		e.logger.Warn("render notification", "source", c.Source, "watch", w.Name, "sink", sink, "dedupe_key", key, "error", out.Err)
	}
	changeID := c.ID
	n := note{dec: i, row: outbox.Notification{
		DedupeKey: key, Sink: sink, Source: c.Source, RecordID: c.RecordID, Watch: w.Name, Owner: d.watch.Owner, ChangeID: &changeID,
		ContentHash: c.NewHash, Title: out.Title, Body: out.Body, Urgency: d.urgency, Reason: d.reason,
		Payload: out.Payload, Status: outbox.StatusPending,
	}}
	if out.DigestDueAt != nil {
		n.row.Status, n.row.DigestDueAt = outbox.StatusHeld, out.DigestDueAt
	}
	return n
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// suppressWindow marks notes of windowed watches as duplicates when the
// record already notified that sink within the window (the outbox counts
// the duplicate on that notification).
func suppressWindow(ctx context.Context, tx pgx.Tx, decs []decision, notes []note) error {
	for i := range notes {
		n := &notes[i]
		d := &decs[n.dec]
		win := d.watch.Config.DedupeWindow()
		if win <= 0 {
			continue
		}
		recent, err := outbox.SuppressRecent(ctx, tx, d.change.Source, d.change.RecordID, d.watch.Config.Name, n.row.Sink, win)
		if err != nil {
			return err
		}
		if recent != nil {
			n.suppressed = true
			d.suppressed++
			if d.noteID == nil {
				d.noteID = recent
			}
		}
	}
	return nil
}

// insertNotes enqueues the notes not suppressed, in one statement; a
// dedupe key that exists counts a suppressed duplicate on the existing
// row instead. It returns the number of rows created.
func insertNotes(ctx context.Context, tx pgx.Tx, decs []decision, notes []note) (int, error) {
	var rows []outbox.Notification
	var idx []int
	for i := range notes {
		if !notes[i].suppressed {
			idx = append(idx, i)
			rows = append(rows, notes[i].row)
		}
	}
	res, err := outbox.Enqueue(ctx, tx, rows)
	if err != nil {
		return 0, err
	}
	created := 0
	for j, i := range idx {
		d := &decs[notes[i].dec]
		if d.noteID == nil {
			id := res[j].ID
			d.noteID = &id
		}
		if res[j].Inserted {
			created++
			d.inserted++
		} else {
			d.suppressed++
		}
	}
	return created, nil
}
