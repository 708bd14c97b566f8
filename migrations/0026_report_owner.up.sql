-- lookout schema, version 26: the owner in the reports the admin page
-- filters by owner (?owner=, docs/admin.md).
--
-- A row of a source (a run, a source, a change, a task run) belongs to the
-- owner of the source's definition (source_definitions.owner: '' for the
-- operator's shared sources, NULL for a source without a definition); a row
-- of a watch (an evaluation, a model call, a notification) to the watch's
-- owner (its own owner column, written from the watch's definition).
--
-- report_recent_failures, report_high_retry, report_disabled_sources and
-- report_task_runs gain owner; report_stuck gains definition_owner (its
-- owner column is the holder of a lease); report_owner_overview is
-- report_overview's numbers for one owner. The columns are appended: the
-- existing ones keep their places (backward compatible for one release).

CREATE OR REPLACE VIEW report_recent_failures AS
SELECT *
FROM (
    SELECT 'sync_run'::text                    AS kind,
           r.source,
           NULL::text                          AS watch,
           NULL::text                          AS sink,
           r.id,
           NULL::text                          AS record_id,
           r.status,
           coalesce(r.finished_at, r.started_at) AS at,
           NULL::integer                       AS attempts,
           r.error,
           d.owner
    FROM sync_runs r
    LEFT JOIN source_definitions d ON d.name = r.source
    WHERE r.status IN ('failed', 'deferred', 'abandoned') AND r.started_at > now() - interval '24 hours'
    UNION ALL
    SELECT 'evaluation', e.source, e.watch, NULL, e.change_id, e.record_id, e.decision || ' (' || e.step || ')',
           e.created_at, NULL, e.reason, e.owner
    FROM evaluations e
    WHERE e.decision IN ('error', 'hold') AND e.created_at > now() - interval '24 hours'
    UNION ALL
    SELECT 'model_call', mc.source, mc.watch, NULL, mc.id, mc.record_id, mc.outcome, mc.created_at, mc.attempt,
           coalesce(mc.error, mc.outcome), mc.owner
    FROM model_calls mc
    WHERE mc.outcome <> 'ok' AND mc.created_at > now() - interval '24 hours'
    UNION ALL
    SELECT 'delivery', n.source, n.watch, n.sink, n.id, n.record_id,
           CASE WHEN n.status = 'pending' THEN 'retrying' ELSE n.status END,
           n.last_attempt_at, n.attempts, n.last_error, n.owner
    FROM notifications n
    WHERE n.last_error IS NOT NULL AND n.last_attempt_at > now() - interval '24 hours'
) f
ORDER BY at DESC, kind, id DESC;

CREATE OR REPLACE VIEW report_high_retry AS
SELECT *
FROM (
    SELECT 'source'::text       AS kind,
           s.name               AS source,
           NULL::bigint         AS id,
           NULL::text           AS record_id,
           NULL::text           AS watch,
           NULL::text           AS sink,
           s.failure_count      AS attempts,
           s.status,
           s.next_run_at        AS next_attempt_at,
           s.last_error,
           d.owner
    FROM sources s
    LEFT JOIN source_definitions d ON d.name = s.name
    WHERE s.failure_count > 0
    UNION ALL
    SELECT 'change', c.source, c.id, c.record_id, NULL, NULL, c.eval_attempts,
           CASE WHEN c.eval_next_at > now() THEN 'held' ELSE 'pending' END,
           greatest(c.eval_next_at, c.created_at), c.eval_error, d.owner
    FROM changes c
    LEFT JOIN source_definitions d ON d.name = c.source
    WHERE c.eval_status = 'pending' AND (c.eval_attempts > 1 OR c.eval_error IS NOT NULL)
    UNION ALL
    SELECT 'notification', n.source, n.id, n.record_id, n.watch, n.sink, n.attempts, n.status,
           n.next_attempt_at, n.last_error, n.owner
    FROM notifications n
    WHERE n.status = 'pending' AND n.attempts > 0 AND n.last_error IS NOT NULL
) r
ORDER BY attempts DESC, kind, source, id;

CREATE OR REPLACE VIEW report_disabled_sources AS
SELECT s.name,
       s.connector,
       s.status,
       s.status_reason,
       s.status_changed_at                 AS since,
       now() - s.status_changed_at         AS for_how_long,
       s.failure_count,
       s.last_error,
       s.last_run_at,
       s.last_success_at,
       'syncer resume ' || s.name          AS resume_with,
       d.owner
FROM sources s
LEFT JOIN source_definitions d ON d.name = s.name
WHERE s.status <> 'active'
ORDER BY s.status_changed_at DESC NULLS LAST, s.name;

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
       d.owner
FROM task_runs t
LEFT JOIN source_definitions d ON d.name = t.source
ORDER BY t.updated_at DESC, t.id DESC;

CREATE OR REPLACE VIEW report_stuck AS
SELECT * FROM (
-- A source claim whose lease expired: its holder died or hangs. The next
-- claim of an active source takes it over; a paused or disabled source
-- keeps the stale lease (and a 'running' run) until resumed.
SELECT 'source_lease_expired'::text                     AS kind,
       s.name                                           AS source,
       s.run_id                                         AS id,
       NULL::text                                       AS record_id,
       s.lease_owner                                    AS owner,
       s.lease_expires_at                               AS since,
       now() - s.lease_expires_at                       AS age,
       s.stuck_after_seconds,
       'lease of run ' || coalesce(s.run_id::text, '?') || ' held by ' || s.lease_owner || ' expired; source is ' || s.status
                                                        AS detail,
       d.owner                                          AS definition_owner
FROM sources s
LEFT JOIN source_definitions d ON d.name = s.name
WHERE s.lease_owner IS NOT NULL AND s.lease_expires_at < now()
UNION ALL
-- An active source due (or run-now requested) longer than its
-- stuck_after_seconds and not running: no syncer runs, or the replicas are
-- too few or too busy to keep up (lookout_schedule_lateness_seconds).
SELECT 'source_overdue', s.name, s.run_id, NULL, s.lease_owner, least(s.next_run_at, s.run_requested_at),
       now() - least(s.next_run_at, s.run_requested_at), s.stuck_after_seconds,
       'due since ' || to_char(least(s.next_run_at, s.run_requested_at) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')
       || ' (' || s.schedule || ') and not run: ' || coalesce(s.interval_reason, ''),
       d.owner
FROM sources s
LEFT JOIN source_definitions d ON d.name = s.name
WHERE s.status = 'active' AND (s.lease_owner IS NULL OR s.lease_expires_at < now())
  AND least(s.next_run_at, s.run_requested_at) < now() - make_interval(secs => s.stuck_after_seconds)
UNION ALL
-- A run still 'running' after stuck_after_seconds.
SELECT 'run_too_long', r.source, r.id, NULL, r.owner, r.started_at, now() - r.started_at,
       coalesce(s.stuck_after_seconds, 1800),
       'run ' || r.id || ' (' || r.reason || ') running since ' || to_char(r.started_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')
       || ', ' || r.pages || ' page(s), ' || r.items_seen || ' item(s) so far',
       d.owner
FROM sync_runs r
LEFT JOIN sources s ON s.name = r.source
LEFT JOIN source_definitions d ON d.name = r.source
WHERE r.status = 'running'
  AND r.started_at < now() - make_interval(secs => coalesce(s.stuck_after_seconds, 1800))
UNION ALL
-- A claimed batch of changes whose evaluator stopped before committing.
SELECT 'change_lease_expired', c.source, c.id, c.record_id, c.eval_owner, c.eval_lease_expires_at,
       now() - c.eval_lease_expires_at, coalesce(s.stuck_after_seconds, 1800),
       'claimed by ' || c.eval_owner || ' (attempt ' || c.eval_attempts || '), lease expired',
       d.owner
FROM changes c
LEFT JOIN sources s ON s.name = c.source
LEFT JOIN source_definitions d ON d.name = c.source
WHERE c.eval_status = 'pending' AND c.eval_owner IS NOT NULL AND c.eval_lease_expires_at < now()
UNION ALL
-- A change not evaluated stuck_after_seconds after it was recorded: no
-- evaluator runs, or it is held (model down, budget spent) or blocked
-- behind an earlier change of its record.
SELECT 'change_pending_too_long', c.source, c.id, c.record_id, c.eval_owner, c.created_at,
       now() - c.created_at, coalesce(s.stuck_after_seconds, 1800),
       c.kind || ' v' || c.version || ', ' || c.eval_attempts || ' attempt(s)'
       || CASE WHEN c.eval_next_at > now()
               THEN ', held until ' || to_char(c.eval_next_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') ELSE '' END
       || coalesce(': ' || c.eval_error, ''),
       d.owner
FROM changes c
LEFT JOIN sources s ON s.name = c.source
LEFT JOIN source_definitions d ON d.name = c.source
WHERE c.eval_status = 'pending'
  AND c.created_at < now() - make_interval(secs => coalesce(s.stuck_after_seconds, 1800))
UNION ALL
-- A notification being sent whose deliverer stopped before recording.
SELECT 'notification_lease_expired', n.source, n.id, n.record_id, n.lease_owner, n.lease_expires_at,
       now() - n.lease_expires_at, coalesce(s.stuck_after_seconds, 1800),
       'sink ' || n.sink || ', attempt ' || n.attempts || ' claimed by ' || n.lease_owner || ', lease expired',
       n.owner
FROM notifications n
LEFT JOIN sources s ON s.name = n.source
WHERE n.status = 'pending' AND n.lease_owner IS NOT NULL AND n.lease_expires_at < now()
UNION ALL
-- A notification due for longer than stuck_after_seconds that no deliverer
-- claimed: no evaluator daemon runs, or none knows its sink.
SELECT 'notification_not_claimed', n.source, n.id, n.record_id, n.lease_owner, n.next_attempt_at,
       now() - n.next_attempt_at, coalesce(s.stuck_after_seconds, 1800),
       'sink ' || n.sink || ' (' || n.attempts || ' attempt(s)), due since '
       || to_char(n.next_attempt_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
       n.owner
FROM notifications n
LEFT JOIN sources s ON s.name = n.source
WHERE n.status = 'pending' AND n.lease_owner IS NULL
  AND n.next_attempt_at < now() - make_interval(secs => coalesce(s.stuck_after_seconds, 1800))
UNION ALL
-- A digest match whose period ended stuck_after_seconds ago and that no
-- digester folded.
SELECT 'digest_overdue', n.source, n.id, n.record_id, NULL, n.digest_due_at,
       now() - n.digest_due_at, coalesce(s.stuck_after_seconds, 1800),
       'held for a digest of watch ' || n.watch || ' to sink ' || n.sink || ', period ended '
       || to_char(n.digest_due_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
       n.owner
FROM notifications n
LEFT JOIN sources s ON s.name = n.source
WHERE n.status = 'held'
  AND n.digest_due_at < now() - make_interval(secs => coalesce(s.stuck_after_seconds, 1800))
UNION ALL
-- A task claim whose claim_expires_at passed while it was claimed,
-- confirming or running: its executor crashed or its syncer died. The task
-- runner of any syncer replica recovers it (back to todo, or failed, per
-- the task's on_expiry) within a minute; listed here until then.
SELECT 'task_claim_expired', t.source, t.id, t.record_id, t.claimed_by, t.claim_expires_at,
       now() - t.claim_expires_at, coalesce(s.stuck_after_seconds, 1800),
       'task ' || t.task || ' ' || t.run_id || ' (' || t.status || ', attempt ' || t.attempt || ') claim expired',
       d.owner
FROM task_runs t
LEFT JOIN sources s ON s.name = t.source
LEFT JOIN source_definitions d ON d.name = t.source
WHERE t.status IN ('claimed', 'confirming', 'running') AND t.claim_expires_at < now()
UNION ALL
-- A task whose state in the tool is behind task_runs for longer than
-- stuck_after_seconds: the write (claim, complete, fail, release) keeps
-- failing; tool_error says why.
SELECT 'task_tool_behind', t.source, t.id, t.record_id, t.claimed_by, t.tool_due_at,
       now() - t.tool_due_at, coalesce(s.stuck_after_seconds, 1800),
       'task ' || t.task || ' ' || t.run_id || ' is ' || t.status || ' but the tool does not show it yet (' || t.tool_action || ')'
       || coalesce(': ' || t.tool_error, ''),
       d.owner
FROM task_runs t
LEFT JOIN sources s ON s.name = t.source
LEFT JOIN source_definitions d ON d.name = t.source
WHERE t.tool_action IS NOT NULL AND t.status NOT IN ('claimed', 'confirming', 'running')
  AND t.tool_due_at < now() - make_interval(secs => coalesce(s.stuck_after_seconds, 1800))
) stuck
ORDER BY since, kind, id;


-- report_overview's numbers for each owner of definitions: the sources,
-- runs and pending changes of the owner's sources, the notifications of
-- the owner's watches, the stuck rows that are the owner's
-- (report_stuck.definition_owner). Read it for one owner
-- (WHERE owner = 'alice'): each number is then counted for that owner
-- alone, through the same indexes as report_overview's.
CREATE VIEW report_owner_overview AS
SELECT o.owner,
       (SELECT count(*) FROM sources s JOIN source_definitions d ON d.name = s.name
        WHERE d.owner = o.owner AND s.status = 'active')                               AS active_sources,
       (SELECT count(*) FROM sources s JOIN source_definitions d ON d.name = s.name
        WHERE d.owner = o.owner AND s.status <> 'active')                              AS inactive_sources,
       (SELECT count(*) FROM sources s JOIN source_definitions d ON d.name = s.name
        WHERE d.owner = o.owner AND s.status = 'active'
          AND (s.next_run_at <= now() OR s.run_requested_at IS NOT NULL)
          AND (s.lease_expires_at IS NULL OR s.lease_expires_at < now()))              AS sources_due,
       (SELECT count(*) FROM sources s JOIN source_definitions d ON d.name = s.name
        WHERE d.owner = o.owner AND s.lease_owner IS NOT NULL
          AND s.lease_expires_at >= now())                                             AS runs_in_progress,
       (SELECT count(*) FROM sync_runs r JOIN source_definitions d ON d.name = r.source
        WHERE d.owner = o.owner AND r.status IN ('failed', 'deferred', 'abandoned')
          AND r.started_at > now() - interval '24 hours')                              AS failed_runs_24h,
       (SELECT count(*) FROM changes c JOIN source_definitions d ON d.name = c.source
        WHERE d.owner = o.owner AND c.eval_status = 'pending')                         AS pending_changes,
       (SELECT c.created_at FROM changes c JOIN source_definitions d ON d.name = c.source
        WHERE d.owner = o.owner AND c.eval_status = 'pending' ORDER BY c.id LIMIT 1)   AS oldest_pending_change_at,
       (SELECT count(*) FROM notifications n WHERE n.owner = o.owner AND n.status = 'pending') AS pending_notifications,
       (SELECT count(*) FROM notifications n WHERE n.owner = o.owner AND n.status = 'held')    AS held_notifications,
       (SELECT count(*) FROM notifications n WHERE n.owner = o.owner AND n.status = 'dead')    AS dead_notifications,
       (SELECT count(*) FROM report_stuck st WHERE st.definition_owner = o.owner)     AS stuck,
       (SELECT now() - min(least(s.next_run_at, s.run_requested_at))
        FROM sources s JOIN source_definitions d ON d.name = s.name
        WHERE d.owner = o.owner AND s.status = 'active'
          AND least(s.next_run_at, s.run_requested_at) < now()
          AND (s.lease_expires_at IS NULL OR s.lease_expires_at < now()))              AS most_overdue
FROM (SELECT owner FROM source_definitions UNION SELECT owner FROM watches) o;

COMMENT ON VIEW report_recent_failures IS 'failed, deferred and abandoned runs, evaluation errors and holds, failed model calls and delivery attempts of the last 24h, with their owner';
COMMENT ON VIEW report_high_retry IS 'failing sources, retried changes and notifications, most attempts first, with their owner';
COMMENT ON VIEW report_disabled_sources IS 'disabled, completed and paused sources: why and since when, and their owner';
COMMENT ON VIEW report_task_runs IS 'task watches: every task run, who claimed it, how long it ran, what the executor returned, attempts, why it failed, whether it ran more than once, the owner of its source';
COMMENT ON VIEW report_stuck IS 'expired leases and task claims, runs longer than stuck_after, changes, notifications and task writes waiting longer than it, with the owner of their definition';
COMMENT ON VIEW report_owner_overview IS 'report_overview per owner of definitions: the owner''s sources, runs, pending work, dead letters and stuck things (read it WHERE owner = ...)';
