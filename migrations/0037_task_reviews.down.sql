DROP VIEW report_task_runs;
CREATE VIEW report_task_runs AS
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
       d.owner
FROM task_runs t
LEFT JOIN source_definitions d ON d.name = t.source
ORDER BY t.updated_at DESC, t.id DESC;
COMMENT ON VIEW report_task_runs IS 'task watches: every task run, who claimed it, how long it ran, what the executor returned, attempts, why it failed, whether it ran more than once, the owner of its source';
DELETE FROM model_calls WHERE purpose = 'review';
ALTER TABLE model_calls DROP CONSTRAINT model_calls_purpose_check;
ALTER TABLE model_calls ADD CONSTRAINT model_calls_purpose_check
    CHECK (purpose IN ('evaluate', 'replay', 'briefing'));
DROP TABLE task_reviews;
-- An attempt waiting for its review is completed without it.
UPDATE task_runs SET status = 'completed', tool_action = 'complete', tool_due_at = now() WHERE status = 'reviewing';
ALTER TABLE task_runs DROP COLUMN correction_count;
ALTER TABLE task_runs DROP CONSTRAINT task_runs_status_check;
ALTER TABLE task_runs ADD CONSTRAINT task_runs_status_check
    CHECK (status IN ('claimed', 'confirming', 'running', 'completed', 'failed', 'released', 'lost', 'expired'));
