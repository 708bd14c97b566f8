package replay

// The named queries of the replay: what it reads (changes, evaluations,
// verdicts; read only) and the statements of the table it owns,
// dry_run_requests.

// queryChanges reads the changes of a window with their snapshots.
const queryChanges = `
	SELECT id, source, record_id, kind, version, coalesce(new_hash, ''), changed_fields, record, previous
	FROM changes_with_record
	WHERE created_at >= $1 AND created_at < $2 AND ($3 = '' OR source = $3)
	ORDER BY id LIMIT $4`

// queryRecordedDecisions reads the evaluations of changes.
const queryRecordedDecisions = `SELECT change_id, watch, decision, step FROM evaluations WHERE change_id = ANY($1)`

// queryCachedVerdicts reads, per (prompt version, model name, input hash),
// the newest cached verdict, whichever model digest made it.
const queryCachedVerdicts = `
	SELECT DISTINCT ON (k.pv, k.model, k.hash) k.pv, k.model, k.hash,
	       v.should_notify, v.urgency, v.confidence, v.reason
	FROM verdicts v
	JOIN (SELECT DISTINCT * FROM unnest($1::text[], $2::text[], $3::text[])) AS k(pv, model, hash)
	  ON v.prompt_version = k.pv AND v.input_hash = k.hash AND v.model = k.model
	ORDER BY k.pv, k.model, k.hash, v.created_at DESC, v.model_digest`

// requestsChannel and reportsChannel end the NOTIFY channels of
// dry_run_requests: <schema>.dryrun (a request to claim) and
// <schema>.dryrun_done (a request answered).
const (
	requestsChannel = ".dryrun"
	reportsChannel  = ".dryrun_done"
)

// querySubmit records a request and wakes the evaluators.
const querySubmit = `
	WITH r AS (
		INSERT INTO dry_run_requests (owner, source, watch, definition, since, until, max_calls, expires_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
		RETURNING id)
	SELECT id, pg_notify(current_schema() || '` + requestsChannel + `', id::text) FROM r`

// queryDeleteStale forgets requests nobody waits for any more: past their
// expiry by an hour (answered or not).
const queryDeleteStale = `DELETE FROM dry_run_requests WHERE expires_at < now() - interval '1 hour'`

// queryClaim takes the oldest pending request that has not expired.
const queryClaim = `
	UPDATE dry_run_requests SET status = 'running', claimed_by = $1, claimed_at = now()
	WHERE id = (
		SELECT id FROM dry_run_requests
		WHERE status = 'pending' AND expires_at > now()
		ORDER BY id
		FOR UPDATE SKIP LOCKED
		LIMIT 1)
	RETURNING id, owner, source, watch, definition, since, until, max_calls`

// queryFinish writes the answer of a claimed request and wakes the api.
const queryFinish = `
	WITH r AS (
		UPDATE dry_run_requests SET status = $3, report = $4, error = $5, finished_at = now()
		WHERE id = $1 AND claimed_by = $2 AND status = 'running'
		RETURNING id)
	SELECT id, pg_notify(current_schema() || '` + reportsChannel + `', id::text) FROM r`

// queryState reads a request's state and answer.
const queryState = `SELECT status, coalesce(claimed_by, ''), report, coalesce(error, '') FROM dry_run_requests WHERE id = $1`

// queryForget deletes a request once its answer was read.
const queryForget = `DELETE FROM dry_run_requests WHERE id = $1`

// queryGiveUp deletes a request no evaluator claimed.
const queryGiveUp = `DELETE FROM dry_run_requests WHERE id = $1 AND status = 'pending'`
