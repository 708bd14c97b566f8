-- Review of task results (docs/tasks.md#review): a task watch with a
-- review: block has a successful attempt scored by the evaluator against
-- its acceptance criteria before the task is Complete. The attempt waits in
-- task_runs.status 'reviewing'; its review is a row of task_reviews, which
-- an evaluator claims (FOR UPDATE SKIP LOCKED), decides (passed or
-- failed) or holds (the model is down, the budget is spent), and whose
-- decision the syncer's task runner applies to the run and the tool.
-- Owned by internal/tasks, like task_runs (named queries in
-- internal/tasks/queries.go).
ALTER TABLE task_runs DROP CONSTRAINT task_runs_status_check;
ALTER TABLE task_runs ADD CONSTRAINT task_runs_status_check
    CHECK (status IN ('claimed', 'confirming', 'running', 'reviewing', 'completed', 'failed', 'released', 'lost', 'expired'));
-- How often a review sent the task back (the seed's correction_count).
ALTER TABLE task_runs ADD COLUMN correction_count integer NOT NULL DEFAULT 0;

CREATE TABLE task_reviews (
    id               bigserial   PRIMARY KEY,
    task_run_id      bigint      NOT NULL REFERENCES task_runs (id) ON DELETE CASCADE,
    attempt          integer     NOT NULL,
    source           text        NOT NULL,
    task             text        NOT NULL,
    record_id        text        NOT NULL,
    -- pending until an evaluator decides it; a held review stays pending
    -- with a later retry_at and why in last_error.
    status           text        NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'passed', 'failed')),
    -- the lowest criterion score (0-10) once decided.
    score            integer,
    -- one object per criterion: name, pass, score, comment, step (check,
    -- model, cache), model_call_id.
    criteria         jsonb       NOT NULL DEFAULT '[]'::jsonb,
    -- true when the failure is past max_corrections: the task is Failed.
    final            boolean     NOT NULL DEFAULT false,
    claimed_by       text,
    claim_expires_at timestamptz,
    retry_at         timestamptz NOT NULL,
    holds            integer     NOT NULL DEFAULT 0,
    last_error       text,
    created_at       timestamptz NOT NULL,
    decided_at       timestamptz,
    applied_at       timestamptz,
    UNIQUE (task_run_id, attempt)
);
-- The evaluators' claim reads only the pending reviews, by due time.
CREATE INDEX task_reviews_pending_idx ON task_reviews (retry_at) WHERE status = 'pending';
-- The reviews of a record (explain).
CREATE INDEX task_reviews_record_idx ON task_reviews (source, record_id);
-- The task runners read only the decisions not applied yet.
CREATE INDEX task_reviews_decided_idx ON task_reviews (decided_at) WHERE status <> 'pending' AND applied_at IS NULL;

ALTER TABLE model_calls DROP CONSTRAINT model_calls_purpose_check;
ALTER TABLE model_calls ADD CONSTRAINT model_calls_purpose_check
    CHECK (purpose IN ('evaluate', 'replay', 'briefing', 'review'));

CREATE OR REPLACE VIEW report_task_runs AS
SELECT t.id,
       t.source,
       t.task,
       t.record_id,
       t.title,
       t.run_id,
       t.status,
       t.attempt,
       t.executions,
       t.failures                                        AS retry_count,
       t.executions > 1                                  AS executed_more_than_once,
       t.claimed_by,
       t.claimed_at,
       t.claim_expires_at,
       t.started_at,
       t.finished_at,
       t.finished_at - t.started_at                      AS ran_for,
       t.executor,
       t.exit_code,
       t.result,
       t.last_error,
       t.retry_at,
       t.tool_action IS NULL                             AS tool_in_sync,
       t.tool_error,
       t.idempotency_key,
       t.sync_run_id,
       d.owner,
       t.correction_count,
       r.status                                          AS review_status,
       r.score                                           AS review_score,
       r.criteria                                        AS review,
       r.last_error                                      AS review_held_because
FROM task_runs t
LEFT JOIN source_definitions d ON d.name = t.source
LEFT JOIN LATERAL (SELECT * FROM task_reviews r WHERE r.task_run_id = t.id ORDER BY r.attempt DESC LIMIT 1) r ON true
ORDER BY t.updated_at DESC, t.id DESC;
COMMENT ON VIEW report_task_runs IS 'task watches: every task run, who claimed it, how long it ran, what the executor returned, attempts, why it failed, whether it ran more than once, the owner of its source, its corrections and its last review';
