package semantic

// The named queries of the briefings table, which this package owns (the
// briefing cache and the claim that keeps two evaluator replicas from
// asking the model for the same briefing at once).

// queryBriefClaim claims a briefing for owner $7 until now() + $8: a new
// row, or one whose writer's claim expired. It returns a row only when
// the caller now holds the claim. The DO UPDATE and its WHERE call no
// function that is not immutable (EXCLUDED.updated_at is the inserted
// row's default, now()): Citus refuses one there.
const queryBriefClaim = `
	INSERT INTO briefings (prompt_version, model_digest, input_hash, source, watch, model, state, owner,
	                       lease_expires_at, items)
	VALUES ($1, $2, $3, $4, $5, $6, 'writing', $7, now() + $8::interval, $9)
	ON CONFLICT (prompt_version, model_digest, input_hash) DO UPDATE
	    SET owner = EXCLUDED.owner, lease_expires_at = EXCLUDED.lease_expires_at, updated_at = EXCLUDED.updated_at
	    WHERE briefings.state = 'writing' AND briefings.lease_expires_at < EXCLUDED.updated_at
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

// The prune queries of the tables this package owns (model_budgets,
// verdicts, briefings), run by internal/retention: each deletes one batch
// of at most $2 rows older than $1 and never what is in use; each count
// query is its dry run. A batch locks its rows (SKIP LOCKED: a row another
// transaction holds is left for the next prune) and deletes them by ctid,
// a TID scan of the rows it read through the index. $3 restricts a batch
// of model_budgets or verdicts to the rows of those sources (NULL: every
// source): on Citus, where they are distributed by source, it runs once
// per shard of its candidates (the …Candidates query, db.PruneEachShard),
// a router statement, where Citus takes row locks and a ctid is one
// shard's. briefings is a reference table there: its batch runs whole on
// every node that holds it, which locks as one PostgreSQL does.

// queryPruneBudgets deletes the model budgets of days before $1's UTC day,
// never the current UTC day (the budgets count it).
const queryPruneBudgets = `
	DELETE FROM model_budgets WHERE ($3::text[] IS NULL OR source = ANY($3::text[])) AND ctid = ANY (ARRAY(
	    SELECT ctid FROM model_budgets
	    WHERE day < ($1::timestamptz AT TIME ZONE 'UTC')::date AND day < (now() AT TIME ZONE 'UTC')::date
	      AND ($3::text[] IS NULL OR source = ANY($3::text[]))
	    ORDER BY day
	    LIMIT $2
	    FOR UPDATE SKIP LOCKED))`

// queryPruneBudgetsCandidates is queryPruneBudgets' pick without its
// locks: the source of each row it would delete now, in its order.
const queryPruneBudgetsCandidates = `
	SELECT source FROM model_budgets
	WHERE day < ($1::timestamptz AT TIME ZONE 'UTC')::date AND day < (now() AT TIME ZONE 'UTC')::date
	ORDER BY day
	LIMIT $2`

// queryCountBudgets counts what queryPruneBudgets deletes.
const queryCountBudgets = `
	SELECT count(*) FROM model_budgets
	WHERE day < ($1::timestamptz AT TIME ZONE 'UTC')::date AND day < (now() AT TIME ZONE 'UTC')::date`

// queryPruneVerdicts deletes cached verdicts made before $1 and not hit
// since.
const queryPruneVerdicts = `
	DELETE FROM verdicts WHERE ($3::text[] IS NULL OR source = ANY($3::text[])) AND ctid = ANY (ARRAY(
	    SELECT ctid FROM verdicts
	    WHERE created_at < $1 AND (last_hit_at IS NULL OR last_hit_at < $1) AND ($3::text[] IS NULL OR source = ANY($3::text[]))
	    ORDER BY created_at
	    LIMIT $2
	    FOR UPDATE SKIP LOCKED))`

// queryPruneVerdictsCandidates is queryPruneVerdicts' pick without its
// locks: the source of each verdict it would delete now, in its order.
const queryPruneVerdictsCandidates = `
	SELECT source FROM verdicts
	WHERE created_at < $1 AND (last_hit_at IS NULL OR last_hit_at < $1)
	ORDER BY created_at
	LIMIT $2`

// queryCountVerdicts counts what queryPruneVerdicts deletes.
const queryCountVerdicts = `
	SELECT count(*) FROM verdicts WHERE created_at < $1 AND (last_hit_at IS NULL OR last_hit_at < $1)`

// queryPruneBriefings deletes finished briefings (ok, failed) last used
// (written or hit) before $1; a briefing being written is never deleted.
const queryPruneBriefings = `
	DELETE FROM briefings WHERE ctid = ANY (ARRAY(
	    SELECT ctid FROM briefings
	    WHERE state <> 'writing' AND coalesce(last_hit_at, updated_at) < $1
	    ORDER BY coalesce(last_hit_at, updated_at)
	    LIMIT $2
	    FOR UPDATE SKIP LOCKED))`

// queryCountBriefings counts what queryPruneBriefings deletes.
const queryCountBriefings = `
	SELECT count(*) FROM briefings WHERE state <> 'writing' AND coalesce(last_hit_at, updated_at) < $1`
