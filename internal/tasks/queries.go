package tasks

// The named queries of the task_runs table. Nothing outside this package
// writes it. Times come from the caller's clock ($now), like the syncer's
// leases, so that tests can move time.

// runColumns are the columns scanRun reads, in order.
const runColumns = `id, source, task, record_id, record_version, content_version, idempotency_key, coalesce(title, ''),
	attempt, run_id, sync_run_id, status, claimed_by, claimed_at, claim_expires_at, started_at, finished_at,
	executions, failures, retry_at, executor, exit_code, result, coalesce(stderr_tail, ''), coalesce(last_error, ''),
	coalesce(tool_action, ''), coalesce(tool_error, ''), reported_at, history, correction_count`

// queryLookup reads the runs of idempotency keys.
const queryLookup = `SELECT ` + runColumns + ` FROM task_runs WHERE idempotency_key = ANY ($1::text[])`

// queryClaimNew takes a task version that has no run: the UNIQUE
// idempotency key makes a second claimer (another replica, a repeated
// pass) insert nothing. run_id is 'run-<id>.<attempt>'.
const queryClaimNew = `
	INSERT INTO task_runs (id, source, task, record_id, record_version, content_version, idempotency_key, title,
	                       attempt, run_id, sync_run_id, status, claimed_by, claimed_at, claim_expires_at, executor,
	                       tool_action, created_at, updated_at)
	SELECT n.id, $1, $2, $3, $4, $5, $6, $7, 1, 'run-' || n.id || '.1', $8, 'claimed', $9, $10::timestamptz,
	       $10::timestamptz + $11::interval, $12, 'claim', $10, $10
	FROM (SELECT nextval(pg_get_serial_sequence('task_runs', 'id')) AS id) n
	ON CONFLICT ON CONSTRAINT task_runs_idempotency_key_key DO NOTHING
	RETURNING ` + runColumns

// queryReclaim takes the next attempt of a task version ($1, of source
// $8) whose last attempt was released, lost or expired and whose retry
// time has come. The row lock and the status check make a second claimer
// update nothing. The finished attempt goes to history.
const queryReclaim = finishedAttempt + `
	UPDATE task_runs SET history = history || h.entry,` + nextAttempt + `
	FROM h
	WHERE id = h.h_id AND source = h.h_source AND idempotency_key = $1 AND source = $8
	  AND status IN ('released', 'lost', 'expired') AND retry_at <= $6
	RETURNING ` + runColumns

// queryRerun takes a task version again ($1, of source $8) after it
// finished (completed or failed, the tool showing it: no write due) when
// the mirror shows it eligible at a newer record version than the last
// claim's: a person moved the card back to the todo status. It is the
// next attempt, with the failures reset; the finished attempt goes to
// history.
const queryRerun = finishedAttempt + `
	UPDATE task_runs SET history = history || h.entry, failures = 0,` + nextAttempt + `
	FROM h
	WHERE id = h.h_id AND source = h.h_source AND idempotency_key = $1 AND source = $8
	  AND status IN ('completed', 'failed') AND tool_action IS NULL AND record_version < $2
	RETURNING ` + runColumns

// finishedAttempt is h, the history entry of the attempt that ended of
// the task run $1 of source $8 (queryReclaim, queryRerun), read in a
// materialized CTE: Citus refuses a column of the updated row in a STABLE
// function of an UPDATE (jsonb_build_object of a timestamptz: "STABLE
// functions used in UPDATE queries cannot be called with column
// references"), in a subquery of its FROM too; a CTE it runs first, as a
// statement of its own. The UPDATE checks the row's status again on its
// newest version, so a concurrent claim still makes the second one update
// nothing.
const finishedAttempt = `
	WITH h AS MATERIALIZED (
	    SELECT id AS h_id, source AS h_source, jsonb_build_array(jsonb_build_object(
	        'attempt', attempt, 'run_id', run_id, 'status', status, 'claimed_by', claimed_by, 'claimed_at', claimed_at,
	        'started_at', started_at, 'finished_at', finished_at, 'exit_code', exit_code, 'last_error', last_error)) AS entry
	    FROM task_runs WHERE idempotency_key = $1 AND source = $8)`

// nextAttempt sets the columns of the next attempt of a task run, claimed
// by $5 at $6 for $7 at record version $2 (queryReclaim, queryRerun).
const nextAttempt = `
	    attempt = attempt + 1, run_id = 'run-' || id::text || '.' || (attempt + 1)::text, status = 'claimed',
	    record_version = $2, title = $3, sync_run_id = $4, claimed_by = $5, claimed_at = $6::timestamptz,
	    claim_expires_at = $6::timestamptz + $7::interval, started_at = NULL, finished_at = NULL, exit_code = NULL,
	    result = NULL, stderr_tail = NULL, retry_at = NULL, tool_action = 'claim', tool_error = NULL, tool_due_at = NULL,
	    report_token_hash = NULL, report = NULL, reported_at = NULL, updated_at = $6`

// queryConfirming records that the visible claim was written.
const queryConfirming = `
	UPDATE task_runs SET status = 'confirming', tool_action = NULL, tool_error = NULL, updated_at = $3
	WHERE id = $1 AND attempt = $2 AND status = 'claimed'`

// queryStart moves a confirmed claim to running — the one statement that
// lets an executor start — unless the claim expired meanwhile.
const queryStart = `
	UPDATE task_runs SET status = 'running', started_at = $3, executions = executions + 1, report_token_hash = $4,
	                     updated_at = $3
	WHERE id = $1 AND attempt = $2 AND status = 'confirming' AND claim_expires_at > $3
	RETURNING executions`

// queryEnd ends an attempt: from running (or from expired, for an
// executor that finished after the recovery of its claim but before a
// next attempt), or from claimed/confirming when it never ran. toolAction
// is the write the tool still needs (” for none), due at $11.
const queryEndSet = `
	UPDATE task_runs SET status = $3, finished_at = $4, exit_code = $5, result = $6::jsonb, stderr_tail = nullif($7, ''),
	                     last_error = nullif($8, ''), failures = $9, retry_at = $10, tool_action = nullif($12, ''),
	                     tool_error = NULL, tool_due_at = CASE WHEN $12 = '' THEN NULL ELSE $11::timestamptz END,
	                     updated_at = $4,
	                     correction_count = correction_count + CASE WHEN $14 THEN 1 ELSE 0 END
	WHERE id = $1 AND attempt = $2 AND status = ANY ($13::text[])
	`

const queryEnd = queryEndSet + ` RETURNING ` + runColumns

// queryToolDone records that the tool shows the attempt's state.
const queryToolDone = `
	UPDATE task_runs SET tool_action = NULL, tool_error = NULL, tool_due_at = NULL
	WHERE id = $1 AND attempt = $2 AND tool_action = $3`

// queryToolFailed records a failed write to the tool and when to try again.
const queryToolFailed = `
	UPDATE task_runs SET tool_error = $4, tool_due_at = $5
	WHERE id = $1 AND attempt = $2 AND tool_action = $3`

// queryExpired locks up to $3 active claims of the given sources that
// expired before $2.
const queryExpired = `
	SELECT ` + runColumns + ` FROM task_runs
	WHERE status IN ('claimed', 'confirming', 'running') AND claim_expires_at < $2 AND source = ANY ($1::text[])
	ORDER BY claim_expires_at
	LIMIT $3
	FOR UPDATE SKIP LOCKED`

// queryToolDue leases up to $3 due tool writes of the given sources to
// this caller until $4 (by moving tool_due_at), so that replicas do not
// write the same one at once.
const queryToolDue = `
	UPDATE task_runs SET tool_due_at = $4
	WHERE source = ANY ($1::text[]) AND id IN (
	    SELECT id FROM task_runs
	    WHERE tool_action IS NOT NULL AND tool_due_at <= $2 AND source = ANY ($1::text[])
	      AND status NOT IN ('claimed', 'confirming', 'running')
	    ORDER BY tool_due_at
	    LIMIT $3
	    FOR UPDATE SKIP LOCKED)
	RETURNING ` + runColumns

// queryReport stores an agent's report of a running attempt (a webhook
// execution answered 202), given the attempt's token; the task runner
// finishes the attempt from it (queryReported).
const queryReport = `
	UPDATE task_runs SET report = $3::jsonb, reported_at = $4, updated_at = $4
	WHERE id = $1 AND report_token_hash = $2 AND status = 'running' AND report IS NULL`

// queryReported locks up to $2 running attempts of the given sources that
// have a report.
const queryReported = `
	SELECT ` + runColumns + `, report FROM task_runs
	WHERE status = 'running' AND report IS NOT NULL AND source = ANY ($1::text[])
	LIMIT $2
	FOR UPDATE SKIP LOCKED`

// queryByID reads one run.
const queryByID = `SELECT ` + runColumns + `, coalesce(report_token_hash, ''), report FROM task_runs WHERE id = $1`

// queryList lists runs, newest first, of a source (and a record).
const queryList = `
	SELECT ` + runColumns + ` FROM task_runs
	WHERE ($1 = '' OR source = $1) AND ($2 = '' OR record_id = $2)
	ORDER BY updated_at DESC, id DESC
	LIMIT $3`

// queryCandidates reads the live records of a source: the task
// candidates, whose eligibility the caller evaluates.
const queryCandidates = `
	SELECT record_id, version, coalesce(title, ''), coalesce(body, ''), coalesce(url, ''), coalesce(author, ''),
	       coalesce(status, ''), labels, external_created_at, external_updated_at, extra
	FROM records
	WHERE source = $1 AND deleted_at IS NULL`

// queryPrune deletes up to $2 runs that finished before $1, will not be
// tried again (completed, failed, or released, lost or expired with no
// retry time) and whose state the tool already shows: never an attempt in
// progress, a run waiting for its retry or a tool write still due. It
// reads task_runs_finished_idx, whose predicate is the same. $3 restricts
// it to the runs of those sources (NULL: every source): on Citus it runs
// once per shard of its candidates (queryPruneCandidates,
// db.PruneEachShard), a router statement, where Citus takes row locks.
const queryPrune = `
	DELETE FROM task_runs WHERE ($3::text[] IS NULL OR source = ANY($3::text[])) AND id = ANY (ARRAY(
	    SELECT id FROM task_runs
	    WHERE finished_at < $1 AND tool_action IS NULL
	      AND (status IN ('completed', 'failed') OR (status IN ('released', 'lost', 'expired') AND retry_at IS NULL))
	      AND ($3::text[] IS NULL OR source = ANY($3::text[]))
	    ORDER BY finished_at
	    LIMIT $2
	    FOR UPDATE SKIP LOCKED))`

// queryPruneCandidates is queryPrune's pick without its locks: the source
// of each run it would delete now, in its order.
const queryPruneCandidates = `
	SELECT source FROM task_runs
	WHERE finished_at < $1 AND tool_action IS NULL
	  AND (status IN ('completed', 'failed') OR (status IN ('released', 'lost', 'expired') AND retry_at IS NULL))
	ORDER BY finished_at
	LIMIT $2`

// queryCountPrunable counts what queryPrune deletes.
const queryCountPrunable = `
	SELECT count(*) FROM task_runs
	WHERE finished_at < $1 AND tool_action IS NULL
	  AND (status IN ('completed', 'failed') OR (status IN ('released', 'lost', 'expired') AND retry_at IS NULL))`

// The named queries of the task_reviews table (migration 34), which this
// package owns with task_runs: the review of a task watch's successful
// attempt (docs/tasks.md#review). The task runner writes a pending review
// with the attempt's end (queryEndForReview) and applies decisions; the
// evaluator claims, holds and decides them.

// queryEndForReview ends an executed attempt in 'reviewing' and writes its
// pending review, due at once, in one statement.
const queryEndForReview = `
	WITH ended AS (` + queryEndSet + ` RETURNING *),
	review AS (
	    INSERT INTO task_reviews (task_run_id, attempt, source, task, record_id, retry_at, created_at)
	    SELECT id, attempt, source, task, record_id, finished_at, finished_at FROM ended
	    ON CONFLICT ON CONSTRAINT task_reviews_task_run_id_attempt_key DO NOTHING)
	SELECT ` + runColumns + ` FROM ended`

// reviewColumns are the columns scanPending reads, in order.
const reviewColumns = `r.id, r.task_run_id, r.attempt, r.source, r.task, r.record_id, r.holds, t.result,
	t.correction_count, coalesce(t.title, ''), t.run_id`

// queryClaimReviews leases up to $3 pending reviews that are due at $1 and
// not leased by another evaluator (or whose lease lapsed) to $2 until $4;
// it skips the rows another evaluator is claiming. $5 restricts it to the
// reviews of those sources (NULL: every source): on Citus a claim runs
// once per shard of its candidates (queryClaimReviewCandidates,
// db.ClaimGroups), a router query, where Citus takes row locks; the join
// with the reviewed run names its source, as co-located tables join on
// Citus (docs/scaling.md, "Claims on Citus").
const queryClaimReviews = `
	UPDATE task_reviews r SET claimed_by = $2, claim_expires_at = $4
	FROM task_runs t
	WHERE t.id = r.task_run_id AND t.source = r.source
	  AND ($5::text[] IS NULL OR r.source = ANY($5::text[])) AND r.id IN (
	    SELECT id FROM task_reviews` + reviewsDue + `
	    LIMIT $3
	    FOR UPDATE SKIP LOCKED)
	RETURNING ` + reviewColumns

// reviewsDue is which reviews queryClaimReviews takes, in its order.
const reviewsDue = `
	    WHERE status = 'pending' AND retry_at <= $1 AND (claim_expires_at IS NULL OR claim_expires_at < $1)
	      AND ($5::text[] IS NULL OR source = ANY($5::text[]))
	    ORDER BY retry_at`

// queryClaimReviewCandidates is queryClaimReviews' pick without its
// locks: the source of each review it would take now, in its order ($2,
// $4 unused, $5 NULL).
const queryClaimReviewCandidates = `
	SELECT source FROM (
	    SELECT source FROM task_reviews` + reviewsDue + `
	    LIMIT $3) c
	WHERE $2::text IS NOT NULL AND $4::timestamptz IS NOT NULL`

// queryDecideReview records a claimed review's decision (the review of
// source $8: one shard's statement on Citus).
const queryDecideReview = `
	UPDATE task_reviews SET status = $3, score = $4, criteria = $5::jsonb, final = $6, decided_at = $7,
	                        last_error = NULL, claimed_by = NULL, claim_expires_at = NULL
	WHERE id = $1 AND source = $8 AND claimed_by = $2 AND status = 'pending'`

// queryHoldReview gives a claimed review of source $6 back until $4,
// saying why ($3).
const queryHoldReview = `
	UPDATE task_reviews SET holds = holds + 1, retry_at = $4, last_error = $3, criteria = $5::jsonb,
	                        claimed_by = NULL, claim_expires_at = NULL
	WHERE id = $1 AND source = $6 AND claimed_by = $2 AND status = 'pending'`

// queryDropReviews drops the pending reviews written before $4 of the
// task watches ($1[i], $2[i]), saying why ($3), decided at $5.
const queryDropReviews = `
	UPDATE task_reviews SET status = 'dropped', last_error = $3, decided_at = $5, claimed_by = NULL, claim_expires_at = NULL
	WHERE status = 'pending' AND created_at < $4
	  AND (source, task) IN (SELECT * FROM unnest($1::text[], $2::text[]))`

// queryDecidedReviews locks up to $2 reviewing runs of the given sources
// whose review of the current attempt is decided and not yet applied.
// The reviews are read by the same sources and joined on the source:
// Citus locks rows only in a statement whose every table it can route to
// one shard (db.EachShard runs it per shard group).
const queryDecidedReviews = `
	SELECT ` + runColumns + `, rv.review_id, rv.review_status, rv.review_score, rv.review_criteria, rv.review_final
	FROM task_runs
	JOIN (SELECT id AS review_id, task_run_id, attempt AS review_attempt, status AS review_status,
	             coalesce(score, 0) AS review_score, criteria AS review_criteria, final AS review_final,
	             source AS review_source
	      FROM task_reviews WHERE status <> 'pending' AND applied_at IS NULL AND source = ANY ($1::text[])) rv
	  ON rv.task_run_id = task_runs.id AND rv.review_source = task_runs.source AND rv.review_attempt = task_runs.attempt
	WHERE task_runs.status = 'reviewing' AND source = ANY ($1::text[])
	LIMIT $2
	FOR UPDATE OF task_runs SKIP LOCKED`

// queryReviewApplied records that the decision was applied to its run.
const queryReviewApplied = `UPDATE task_reviews SET applied_at = $2 WHERE id = $1 AND applied_at IS NULL`

// queryReviewsOf reads the reviews of a task run, oldest attempt first.
const queryReviewsOf = `
	SELECT attempt, status, score, criteria, final, holds, coalesce(last_error, ''), created_at, decided_at, applied_at
	FROM task_reviews WHERE task_run_id = $1 ORDER BY attempt`
