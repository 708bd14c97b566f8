package tasks

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
	    ON CONFLICT (task_run_id, attempt) DO NOTHING)
	SELECT ` + runColumns + ` FROM ended`

// reviewColumns are the columns scanPending reads, in order.
const reviewColumns = `r.id, r.task_run_id, r.attempt, r.source, r.task, r.record_id, r.holds, t.result,
	t.correction_count, coalesce(t.title, ''), t.run_id`

// queryClaimReviews leases up to $3 pending reviews that are due at $1 and
// not leased by another evaluator (or whose lease lapsed) to $2 until $4;
// it skips the rows another evaluator is claiming.
const queryClaimReviews = `
	UPDATE task_reviews r SET claimed_by = $2, claim_expires_at = $4
	FROM task_runs t
	WHERE t.id = r.task_run_id AND r.id IN (
	    SELECT id FROM task_reviews
	    WHERE status = 'pending' AND retry_at <= $1 AND (claim_expires_at IS NULL OR claim_expires_at < $1)
	    ORDER BY retry_at
	    LIMIT $3
	    FOR UPDATE SKIP LOCKED)
	RETURNING ` + reviewColumns

// queryDecideReview records a claimed review's decision.
const queryDecideReview = `
	UPDATE task_reviews SET status = $3, score = $4, criteria = $5::jsonb, final = $6, decided_at = $7,
	                        last_error = NULL, claimed_by = NULL, claim_expires_at = NULL
	WHERE id = $1 AND claimed_by = $2 AND status = 'pending'`

// queryHoldReview gives a claimed review back until $4, saying why ($3).
const queryHoldReview = `
	UPDATE task_reviews SET holds = holds + 1, retry_at = $4, last_error = $3, criteria = $5::jsonb,
	                        claimed_by = NULL, claim_expires_at = NULL
	WHERE id = $1 AND claimed_by = $2 AND status = 'pending'`

// queryDecidedReviews locks up to $2 reviewing runs of the given sources
// whose review of the current attempt is decided and not yet applied.
const queryDecidedReviews = `
	SELECT ` + runColumns + `, rv.review_id, rv.review_status, rv.review_score, rv.review_criteria, rv.review_final
	FROM task_runs
	JOIN (SELECT id AS review_id, task_run_id, attempt AS review_attempt, status AS review_status,
	             coalesce(score, 0) AS review_score, criteria AS review_criteria, final AS review_final
	      FROM task_reviews WHERE status <> 'pending' AND applied_at IS NULL) rv
	  ON rv.task_run_id = task_runs.id AND rv.review_attempt = task_runs.attempt
	WHERE task_runs.status = 'reviewing' AND source = ANY ($1::text[])
	LIMIT $2
	FOR UPDATE OF task_runs SKIP LOCKED`

// queryReviewApplied records that the decision was applied to its run.
const queryReviewApplied = `UPDATE task_reviews SET applied_at = $2 WHERE id = $1 AND applied_at IS NULL`

// queryReviewsOf reads the reviews of a task run, oldest attempt first.
const queryReviewsOf = `
	SELECT attempt, status, score, criteria, final, holds, coalesce(last_error, ''), created_at, decided_at, applied_at
	FROM task_reviews WHERE task_run_id = $1 ORDER BY attempt`
