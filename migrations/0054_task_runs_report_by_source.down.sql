-- lookout schema, down from version 54: report_task_runs reads a run's last review by task_run_id alone, as migration 37 made it.
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
