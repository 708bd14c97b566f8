package evaluator

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lookout-dev/lookout/internal/metrics"
	"github.com/lookout-dev/lookout/internal/notify"
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
	"decision", "reason", "urgency", "notification_id", "evaluator", "model_call_id", "confidence", "created_at"}

// note is a notification row to insert.
type note struct {
	dec     int // index into decisions
	key     string
	sink    string // "" once suppressed as a duplicate
	title   string
	body    string
	payload []byte
	status  string     // pending, or held for a digest
	dueAt   *time.Time // held: the end of the digest period
}

// commit writes the decisions of the leased changes this evaluator still
// owns and marks those changes done, in one transaction. It returns the
// number of changes completed and notifications created.
func (e *Evaluator) commit(ctx context.Context, claimed []*change, decs []decision, owner string) (int, int, error) {
	var completed, created int
	err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
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
// their row locks (then this settle counts the attempt).
func (e *Evaluator) commitIn(ctx context.Context, tx pgx.Tx, claimed []*change, decs []decision, owner string) (int, int, error) {
	ids := make([]int64, len(claimed))
	for i, c := range claimed {
		ids[i] = c.ID
	}
	var completed, created int
	var ownerArg any
	attempt := 1
	if owner != "" {
		ownerArg, attempt = owner, 0
	}
	err := func() error {
		// Settle the changes first: the UPDATE locks them and its owner
		// check fences out an evaluator whose lease expired; only the
		// changes this evaluator still owns get decisions written.
		held := map[int64]*decision{} // change -> its earliest-retried held decision
		for i := range decs {
			d := &decs[i]
			if d.verdict == "hold" {
				if h := held[d.change.ID]; h == nil || d.retryAt.Before(h.retryAt) {
					held[d.change.ID] = d
				}
			}
		}
		var doneIDs, heldIDs []int64
		var heldUntil []time.Time
		var heldReason []string
		for _, id := range ids {
			if h := held[id]; h != nil {
				heldIDs, heldUntil = append(heldIDs, id), append(heldUntil, h.retryAt)
				heldReason = append(heldReason, h.watch.cfg.Name+": "+h.reason)
				continue
			}
			doneIDs = append(doneIDs, id)
		}
		owned := make(map[int64]bool, len(ids))
		lags := make(map[int64]float64, len(ids))
		settle := &pgx.Batch{}
		settle.Queue(`
			UPDATE changes SET eval_status = 'done', evaluated_at = clock_timestamp(), eval_owner = NULL,
			       eval_lease_expires_at = NULL, eval_error = NULL, eval_attempts = eval_attempts + $3
			WHERE id = ANY($1) AND ($2::text IS NULL OR eval_owner = $2) AND eval_status = 'pending'
			RETURNING id, extract(epoch FROM evaluated_at - created_at)::float8`, doneIDs, ownerArg, attempt)
		if len(heldIDs) > 0 {
			// Held: still pending, lease released, due again at retryAt.
			settle.Queue(`
				UPDATE changes SET eval_next_at = u.next_at, eval_owner = NULL, eval_lease_expires_at = NULL,
				       eval_error = u.reason, eval_attempts = eval_attempts + $5
				FROM unnest($1::bigint[], $2::timestamptz[], $3::text[]) AS u(id, next_at, reason)
				WHERE changes.id = u.id AND ($4::text IS NULL OR changes.eval_owner = $4) AND changes.eval_status = 'pending'
				RETURNING changes.id, NULL::float8`, heldIDs, heldUntil, heldReason, ownerArg, attempt)
		}
		br := tx.SendBatch(ctx, settle)
		for range settle.Len() {
			rows, err := br.Query()
			if err != nil {
				br.Close()
				return fmt.Errorf("settle changes: %w", err)
			}
			for rows.Next() {
				var id int64
				var lag *float64
				if err := rows.Scan(&id, &lag); err != nil {
					rows.Close()
					br.Close()
					return fmt.Errorf("settle changes: %w", err)
				}
				owned[id] = true
				if lag != nil {
					lags[id] = *lag
				}
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				br.Close()
				return fmt.Errorf("settle changes: %w", err)
			}
		}
		if err := br.Close(); err != nil {
			return fmt.Errorf("settle changes: %w", err)
		}
		for _, c := range claimed {
			if lag, ok := lags[c.ID]; ok {
				completed++
				c.lag = time.Duration(lag * float64(time.Second))
			}
		}
		if len(owned) < len(ids) {
			e.logger.Warn("lost lease on changes; another evaluator will evaluate them", "lost", len(ids)-len(owned))
			e.conf.Metrics.ClaimsExpired(metrics.ComponentEvaluator, len(ids)-len(owned))
		}

		now := time.Now().UTC()
		var notes []note
		for i := range decs {
			d := &decs[i]
			if !owned[d.change.ID] || d.verdict != "notify" {
				continue
			}
			for _, sink := range d.watch.cfg.Notify {
				notes = append(notes, e.buildNote(i, d, sink, now))
			}
		}
		if err := e.suppressWindow(ctx, tx, decs, notes); err != nil {
			return err
		}
		notified, err := insertNotes(ctx, tx, decs, notes)
		if err != nil {
			return err
		}
		created = notified

		b := &pgx.Batch{}
		var evChange []int64
		var evSource, evRecord, evWatch, evHash, evStep, evDecision, evReason, evUrgency []string
		var evMatched []bool
		var evNote, evCall []*int64
		var evConfidence []*float64
		for i := range decs {
			d := &decs[i]
			if !owned[d.change.ID] {
				continue
			}
			evChange = append(evChange, d.change.ID)
			evSource = append(evSource, d.change.Source)
			evRecord = append(evRecord, d.change.RecordID)
			evWatch = append(evWatch, d.watch.cfg.Name)
			evHash = append(evHash, d.change.NewHash)
			evStep = append(evStep, d.step)
			evMatched = append(evMatched, d.matched)
			evDecision = append(evDecision, d.verdict)
			evReason = append(evReason, d.reason)
			evUrgency = append(evUrgency, d.urgency)
			evNote = append(evNote, d.noteID)
			evCall = append(evCall, d.modelCallID)
			evConfidence = append(evConfidence, d.confidence)
		}
		firstAttempt := true
		for _, c := range claimed {
			if owned[c.ID] && c.Attempts > 1 {
				firstAttempt = false
			}
		}
		switch {
		case len(evChange) > 0 && firstAttempt:
			// No change of the batch was ever decided before (a decision is
			// only written by the transaction that settles or holds its
			// change, and a held change comes back with more attempts):
			// nothing can conflict, so the rows go in with COPY.
			at := time.Now()
			rows := make([][]any, len(evChange))
			for i := range evChange {
				var hash any
				if evHash[i] != "" {
					hash = evHash[i]
				}
				rows[i] = []any{evChange[i], evSource[i], evRecord[i], evWatch[i], hash, evStep[i], evMatched[i],
					evDecision[i], evReason[i], evUrgency[i], evNote[i], e.conf.Owner, evCall[i], evConfidence[i], at}
			}
			if _, err := tx.CopyFrom(ctx, pgx.Identifier{"evaluations"}, evaluationColumns, pgx.CopyFromRows(rows)); err != nil {
				return fmt.Errorf("write evaluations: %w", err)
			}
		case len(evChange) > 0:
			// A held decision is replaced when the change comes back; any
			// other existing decision stands (a repeat is a no-op).
			b.Queue(`
				INSERT INTO evaluations (change_id, source, record_id, watch, content_hash, step, matched,
				                         decision, reason, urgency, notification_id, evaluator, model_call_id, confidence,
				                         created_at)
				SELECT u.change_id, u.source, u.record_id, u.watch, NULLIF(u.hash, ''), u.step, u.matched,
				       u.decision, u.reason, u.urgency, u.note, $1, u.call, u.confidence, clock_timestamp()
				FROM unnest($2::bigint[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[],
				            $8::bool[], $9::text[], $10::text[], $11::text[], $12::bigint[], $13::bigint[], $14::float8[])
				     AS u(change_id, source, record_id, watch, hash, step, matched, decision, reason, urgency, note, call, confidence)
				ON CONFLICT (change_id, watch) DO UPDATE
				    SET content_hash = EXCLUDED.content_hash, step = EXCLUDED.step, matched = EXCLUDED.matched,
				        decision = EXCLUDED.decision, reason = EXCLUDED.reason, urgency = EXCLUDED.urgency,
				        notification_id = EXCLUDED.notification_id, evaluator = EXCLUDED.evaluator,
				        model_call_id = EXCLUDED.model_call_id, confidence = EXCLUDED.confidence, created_at = clock_timestamp()
				    WHERE evaluations.decision = 'hold'`,
				e.conf.Owner, evChange, evSource, evRecord, evWatch, evHash, evStep, evMatched, evDecision, evReason, evUrgency, evNote,
				evCall, evConfidence)
		}
		if created > 0 {
			b.Queue(`SELECT pg_notify(current_schema() || '.outbox', '')`)
		}
		if b.Len() > 0 {
			if err := tx.SendBatch(ctx, b).Close(); err != nil {
				return fmt.Errorf("write evaluations: %w", err)
			}
		}
		return nil
	}()
	if err != nil {
		return 0, 0, err
	}
	for i := range decs {
		d := &decs[i]
		if d.verdict == "hold" {
			e.logger.Warn("decision held", "source", d.change.Source, "change_id", d.change.ID, "record_id", d.change.RecordID,
				"watch", d.watch.cfg.Name, "step", d.step, "reason", d.reason)
		}
		if d.verdict == "notify" || d.verdict == "duplicate" {
			e.logger.Info("decision", "source", d.change.Source, "change_id", d.change.ID, "record_id", d.change.RecordID,
				"watch", d.watch.cfg.Name, "decision", d.verdict, "reason", d.reason, "dedupe_key", d.dedupeKey)
		}
	}
	return completed, created, nil
}

// buildNote renders the notification of decision d for one sink: title and
// body from the templates (stored, so what is sent is what was decided),
// the payload, and for a digest watch the end of the period it waits for.
func (e *Evaluator) buildNote(i int, d *decision, sink string, now time.Time) note {
	c, w := d.change, d.watch.cfg
	key := DedupeKey(w.Dedupe, c.Source, c.RecordID, w.Name, c.Kind, c.NewHash, c.Version)
	d.dedupeKey = key
	rec := notify.RecordFromFields(c.Record)
	rec.ContentHash = c.NewHash
	v := notify.Verdict{Urgency: d.urgency, Reason: d.reason}
	if d.confidence != nil {
		v.Confidence = *d.confidence
	}
	out := e.composer.Compose(&notify.Match{
		Source: c.Source, Watch: w, Sink: sink, DedupeKey: key, Record: rec,
		Change:  notify.PayloadChange{ID: c.ID, Kind: c.Kind, Version: c.Version, ChangedFields: nonNil(c.ChangedFields)},
		Verdict: v, Confidence: d.confidence, Now: now,
	})
	if out.Err != nil {
		e.logger.Warn("render notification", "source", c.Source, "watch", w.Name, "sink", sink, "dedupe_key", key, "error", out.Err)
	}
	n := note{dec: i, key: key, sink: sink, title: out.Title, body: out.Body, payload: out.Payload, status: "pending"}
	if out.DigestDueAt != nil {
		n.status, n.dueAt = "held", out.DigestDueAt
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
// record already notified that sink within the window.
func (e *Evaluator) suppressWindow(ctx context.Context, tx pgx.Tx, decs []decision, notes []note) error {
	for i := range notes {
		n := &notes[i]
		d := &decs[n.dec]
		win := d.watch.cfg.DedupeWindow()
		if win <= 0 {
			continue
		}
		var recent *int64
		err := tx.QueryRow(ctx, `
			SELECT id FROM notifications
			WHERE source = $1 AND record_id = $2 AND watch = $3 AND sink = $4 AND created_at > now() - $5::interval
			ORDER BY created_at DESC LIMIT 1`, d.change.Source, d.change.RecordID, d.watch.cfg.Name, n.sink, win).Scan(&recent)
		if err != nil && err != pgx.ErrNoRows {
			return fmt.Errorf("check dedupe window: %w", err)
		}
		if recent != nil {
			if _, err := tx.Exec(ctx, `
				UPDATE notifications SET duplicates_suppressed = duplicates_suppressed + 1, last_duplicate_at = now()
				WHERE id = $1`, *recent); err != nil {
				return fmt.Errorf("count suppressed duplicate: %w", err)
			}
			n.sink = "" // suppressed
			d.suppressed++
			if d.noteID == nil {
				d.noteID = recent
			}
		}
	}
	return nil
}

// insertNotes inserts the notes; a conflicting dedupe key counts a
// suppressed duplicate on the existing row instead. Decisions whose every
// note was a duplicate become "duplicate".
func insertNotes(ctx context.Context, tx pgx.Tx, decs []decision, notes []note) (int, error) {
	var keys, sinks, sources, records, watchesCol, hashes, titles, bodies, urgencies, reasons, payloads, statuses []string
	var changeIDs []int64
	var dues []*time.Time
	var idx []int
	for i, n := range notes {
		if n.sink == "" {
			continue
		}
		d := &decs[n.dec]
		idx = append(idx, i)
		keys = append(keys, n.key)
		sinks = append(sinks, n.sink)
		sources = append(sources, d.change.Source)
		records = append(records, d.change.RecordID)
		watchesCol = append(watchesCol, d.watch.cfg.Name)
		changeIDs = append(changeIDs, d.change.ID)
		hashes = append(hashes, d.change.NewHash)
		titles = append(titles, n.title)
		bodies = append(bodies, n.body)
		statuses = append(statuses, n.status)
		dues = append(dues, n.dueAt)
		urgencies = append(urgencies, d.urgency)
		reasons = append(reasons, d.reason)
		payloads = append(payloads, string(n.payload))
	}
	created := 0
	if len(keys) > 0 {
		rows, err := tx.Query(ctx, `
			INSERT INTO notifications (dedupe_key, sink, source, record_id, watch, change_id, content_hash,
			                           title, body, urgency, reason, payload, status, digest_due_at)
			SELECT u.key, u.sink, u.source, u.record_id, u.watch, u.change_id, NULLIF(u.hash, ''),
			       u.title, u.body, u.urgency, u.reason, u.payload::jsonb, u.status, u.due
			FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[], $7::text[],
			            $8::text[], $9::text[], $10::text[], $11::text[], $12::text[], $13::text[], $14::timestamptz[])
			     WITH ORDINALITY AS u(key, sink, source, record_id, watch, change_id, hash, title, body, urgency, reason,
			                          payload, status, due, ord)
			ORDER BY u.ord
			ON CONFLICT (dedupe_key, sink) DO UPDATE
			    SET duplicates_suppressed = notifications.duplicates_suppressed + 1, last_duplicate_at = now()
			RETURNING id, dedupe_key, sink, xmax = 0`,
			keys, sinks, sources, records, watchesCol, changeIDs, hashes, titles, bodies, urgencies, reasons, payloads,
			statuses, dues)
		if err != nil {
			return 0, fmt.Errorf("insert notifications: %w", err)
		}
		type ks struct{ key, sink string }
		got := map[ks]struct {
			id       int64
			inserted bool
		}{}
		for rows.Next() {
			var id int64
			var k, s string
			var inserted bool
			if err := rows.Scan(&id, &k, &s, &inserted); err != nil {
				rows.Close()
				return 0, fmt.Errorf("insert notifications: %w", err)
			}
			got[ks{k, s}] = struct {
				id       int64
				inserted bool
			}{id, inserted}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return 0, fmt.Errorf("insert notifications: %w", err)
		}
		for _, i := range idx {
			n := notes[i]
			d := &decs[n.dec]
			r := got[ks{n.key, n.sink}]
			id := r.id
			if d.noteID == nil {
				d.noteID = &id
			}
			if r.inserted {
				created++
				d.inserted++
			} else {
				d.suppressed++
			}
		}
	}
	for i := range decs {
		d := &decs[i]
		if d.verdict == "notify" && d.inserted == 0 && d.suppressed > 0 {
			d.verdict, d.step = "duplicate", "dedupe"
			d.reason += "; already notified (dedupe " + d.watch.cfg.Dedupe + ")"
		}
	}
	return created, nil
}
