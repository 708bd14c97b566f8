package semantic

// The named queries of the briefings table, which this package owns (the
// briefing cache and the claim that keeps two evaluator replicas from
// asking the model for the same briefing at once).

// queryBriefClaim claims a briefing for owner $7 until now() + $8: a new
// row, or one whose writer's claim expired. It returns a row only when
// the caller now holds the claim.
const queryBriefClaim = `
	INSERT INTO briefings (prompt_version, model_digest, input_hash, source, watch, model, state, owner,
	                       lease_expires_at, items)
	VALUES ($1, $2, $3, $4, $5, $6, 'writing', $7, now() + $8::interval, $9)
	ON CONFLICT (prompt_version, model_digest, input_hash) DO UPDATE
	    SET owner = EXCLUDED.owner, lease_expires_at = EXCLUDED.lease_expires_at, updated_at = now()
	    WHERE briefings.state = 'writing' AND briefings.lease_expires_at < now()
	RETURNING true`

// queryBriefHit reads a finished briefing (ok or failed) and counts the hit.
const queryBriefHit = `
	UPDATE briefings SET hits = hits + 1, last_hit_at = now()
	WHERE prompt_version = $1 AND model_digest = $2 AND input_hash = $3 AND state IN ('ok', 'failed')
	RETURNING state, briefing, coalesce(error, ''), model_call_id`

// queryBriefFinish stores the outcome of a claim still held by owner $4.
const queryBriefFinish = `
	UPDATE briefings SET state = $5, briefing = $6, error = NULLIF($7, ''), model_call_id = $8,
	                     owner = NULL, lease_expires_at = NULL, updated_at = now()
	WHERE prompt_version = $1 AND model_digest = $2 AND input_hash = $3 AND owner = $4 AND state = 'writing'`

// queryBriefRelease gives up a claim held by owner $4 (the evaluator is
// stopping, or the database failed): another replica may write it.
const queryBriefRelease = `
	DELETE FROM briefings
	WHERE prompt_version = $1 AND model_digest = $2 AND input_hash = $3 AND owner = $4 AND state = 'writing'`

// queryBriefCall records one briefing request in model_calls (no change,
// no record: input_ref names the digest).
const queryBriefCall = `
	INSERT INTO model_calls (purpose, source, record_id, watch, model, model_digest, prompt_version, input_ref,
	                         input_hash, request, output, raw_output, prompt_tokens, output_tokens, latency_ms,
	                         outcome, error, attempt, evaluator)
	VALUES ('briefing', $1, '', $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17)
	RETURNING id`
