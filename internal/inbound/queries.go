package inbound

// The named queries of inbound_events.
const (
	// insertValid stores a delivery whose signature verified, once per
	// (source, delivery_id); a pending one wakes the syncer.
	insertValid = `
		WITH ins AS (
		    INSERT INTO inbound_events (source, delivery_id, event_type, action, object_id, signature_valid, payload, payload_hash,
		                                processed_at, outcome, detail)
		    VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb, $8, CASE WHEN $9::text IS NOT NULL THEN now() END, $9, $10)
		    ON CONFLICT (source, delivery_id) WHERE signature_valid DO NOTHING
		    RETURNING id, received_at, outcome IS NULL AS pending
		)
		SELECT id, received_at FROM ins, LATERAL (
		    SELECT CASE WHEN ins.pending THEN pg_notify(current_schema() || '.inbound', $1) END
		) AS wake`

	// insertRejected stores a delivery whose signature did not verify,
	// without its payload, once per (source, delivery_id).
	insertRejected = `
		INSERT INTO inbound_events (source, delivery_id, event_type, action, object_id, signature_valid, payload, payload_hash,
		                            processed_at, outcome, detail)
		VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb, $8, now(), coalesce($9, 'rejected'), $10)
		ON CONFLICT (source, delivery_id) WHERE NOT signature_valid DO NOTHING
		RETURNING id, received_at`

	// claimEvents claims the oldest unprocessed events of the given
	// sources that nobody holds (or whose claim expired, or whose retry
	// time came).
	claimEvents = `
		UPDATE inbound_events e SET claimed_by = $1, claim_expires_at = now() + $2::interval, attempts = e.attempts + 1
		FROM (
		    SELECT id FROM inbound_events
		    WHERE processed_at IS NULL AND source = ANY ($3::text[])
		      AND (claim_expires_at IS NULL OR claim_expires_at < now())
		    ORDER BY id
		    LIMIT $4
		    FOR UPDATE SKIP LOCKED
		) c
		WHERE e.id = c.id AND e.source = ANY ($3::text[])
		RETURNING e.id, e.source, e.delivery_id, e.event_type, e.action, e.object_id, e.received_at, e.payload, e.payload_hash, e.attempts`

	// lockEvents locks the oldest unprocessed events of the given sources
	// that nobody holds (nor leases, nor waits to retry) in the caller's
	// transaction: the row locks are the claim, until it ends.
	lockEvents = `
		SELECT id, source, delivery_id, event_type, action, object_id, received_at, payload, payload_hash, attempts
		FROM inbound_events
		WHERE processed_at IS NULL AND source = ANY ($1::text[])
		  AND (claim_expires_at IS NULL OR claim_expires_at < now())
		ORDER BY id
		LIMIT $2
		FOR UPDATE SKIP LOCKED`

	// finishLockedEvents marks events processed that the caller's
	// transaction locked (lockEvents).
	finishLockedEvents = `
		UPDATE inbound_events e SET processed_at = now(), outcome = r.outcome, detail = r.detail,
		       claimed_by = NULL, claim_expires_at = NULL
		FROM unnest($1::bigint[], $2::text[], $3::text[]) AS r(id, outcome, detail)
		WHERE e.id = r.id AND e.processed_at IS NULL`

	// finishEvents marks claimed events processed, fenced by the claim.
	finishEvents = `
		UPDATE inbound_events e SET processed_at = now(), outcome = r.outcome, detail = r.detail,
		       claimed_by = NULL, claim_expires_at = NULL
		FROM unnest($2::bigint[], $3::text[], $4::text[]) AS r(id, outcome, detail)
		WHERE e.id = r.id AND e.claimed_by = $1 AND e.processed_at IS NULL`

	// releaseEvents gives claimed events back until a retry time, or
	// marks failed those out of attempts. The times are read once, in a
	// CTE: Citus refuses now() in the CASE of an UPDATE of a distributed
	// table ("non-IMMUTABLE functions are not allowed in CASE or COALESCE
	// statements").
	releaseEvents = `
		WITH t AS (SELECT now() AS now, now() + $3::interval AS retry_at), u AS (
		UPDATE inbound_events SET
		    claimed_by = NULL,
		    claim_expires_at = CASE WHEN attempts >= $5 THEN NULL ELSE t.retry_at END,
		    detail = $4,
		    processed_at = CASE WHEN attempts >= $5 THEN t.now END,
		    outcome = CASE WHEN attempts >= $5 THEN 'failed' END
		FROM t
		WHERE id = ANY ($2::bigint[]) AND claimed_by = $1 AND processed_at IS NULL
		RETURNING id, outcome
		)
		SELECT id FROM u WHERE outcome = 'failed'`

	getEvent = `
		SELECT id, source, delivery_id, event_type, action, object_id, received_at, signature_valid, payload, payload_hash,
		       processed_at, outcome, detail, attempts
		FROM inbound_events WHERE source = $1 AND delivery_id = $2
		ORDER BY signature_valid DESC LIMIT 1`

	countPending = `SELECT count(*) FROM inbound_events WHERE processed_at IS NULL AND ($1 = '' OR source = $1)`
)

// queryPrune deletes up to $2 processed events received before $1 (an
// event not yet processed is never deleted). It reads
// inbound_events_processed_idx. $3 restricts it to the events of those
// sources (NULL: every source): on Citus it runs once per shard of its
// candidates (queryPruneCandidates, db.PruneEachShard), a router
// statement, where Citus takes row locks.
const queryPrune = `
	DELETE FROM inbound_events WHERE ($3::text[] IS NULL OR source = ANY($3::text[])) AND id = ANY (ARRAY(
	    SELECT id FROM inbound_events
	    WHERE processed_at IS NOT NULL AND received_at < $1 AND ($3::text[] IS NULL OR source = ANY($3::text[]))
	    ORDER BY received_at
	    LIMIT $2
	    FOR UPDATE SKIP LOCKED))`

// queryPruneCandidates is queryPrune's pick without its locks: the source
// of each event it would delete now, in its order.
const queryPruneCandidates = `
	SELECT source FROM inbound_events WHERE processed_at IS NOT NULL AND received_at < $1 ORDER BY received_at LIMIT $2`

// queryCountPrunable counts what queryPrune deletes.
const queryCountPrunable = `SELECT count(*) FROM inbound_events WHERE processed_at IS NOT NULL AND received_at < $1`
