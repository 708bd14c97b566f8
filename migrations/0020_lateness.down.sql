-- Back to the views before version 20 (the columns it added go).
DROP VIEW report_overview;
DROP VIEW report_active_sources;
CREATE VIEW report_active_sources AS
SELECT s.name,
       s.connector,
       s.status,
       CASE WHEN s.lease_owner IS NOT NULL AND s.lease_expires_at >= now() THEN 'running'
            WHEN s.lease_owner IS NOT NULL THEN 'lease expired'
            WHEN s.run_requested_at IS NOT NULL THEN 'requested'
            WHEN s.next_run_at <= now() THEN 'due'
            ELSE 'scheduled' END                        AS state,
       s.schedule,
       s.interval_seconds,
       s.interval_reason,
       s.next_run_at,
       s.run_requested_at,
       s.last_run_at,
       s.last_success_at,
       s.last_change_at,
       s.failure_count,
       s.last_error,
       CASE WHEN s.lease_owner IS NOT NULL
            THEN s.lease_owner || ' (run ' || coalesce(s.run_id::text, '?') || ', until '
                 || to_char(s.lease_expires_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') || ')'
       END                                              AS lease,
       s.lease_owner,
       s.lease_expires_at,
       s.run_id,
       s.stuck_after_seconds
FROM sources s
WHERE s.status = 'active'
ORDER BY s.next_run_at, s.name;

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
                                                        AS detail
FROM sources s
WHERE s.lease_owner IS NOT NULL AND s.lease_expires_at < now()
UNION ALL
-- A run still 'running' after stuck_after_seconds.
SELECT 'run_too_long', r.source, r.id, NULL, r.owner, r.started_at, now() - r.started_at,
       coalesce(s.stuck_after_seconds, 1800),
       'run ' || r.id || ' (' || r.reason || ') running since ' || to_char(r.started_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')
       || ', ' || r.pages || ' page(s), ' || r.items_seen || ' item(s) so far'
FROM sync_runs r
LEFT JOIN sources s ON s.name = r.source
WHERE r.status = 'running'
  AND r.started_at < now() - make_interval(secs => coalesce(s.stuck_after_seconds, 1800))
UNION ALL
-- A claimed batch of changes whose evaluator stopped before committing.
SELECT 'change_lease_expired', c.source, c.id, c.record_id, c.eval_owner, c.eval_lease_expires_at,
       now() - c.eval_lease_expires_at, coalesce(s.stuck_after_seconds, 1800),
       'claimed by ' || c.eval_owner || ' (attempt ' || c.eval_attempts || '), lease expired'
FROM changes c
LEFT JOIN sources s ON s.name = c.source
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
       || coalesce(': ' || c.eval_error, '')
FROM changes c
LEFT JOIN sources s ON s.name = c.source
WHERE c.eval_status = 'pending'
  AND c.created_at < now() - make_interval(secs => coalesce(s.stuck_after_seconds, 1800))
UNION ALL
-- A notification being sent whose deliverer stopped before recording.
SELECT 'notification_lease_expired', n.source, n.id, n.record_id, n.lease_owner, n.lease_expires_at,
       now() - n.lease_expires_at, coalesce(s.stuck_after_seconds, 1800),
       'sink ' || n.sink || ', attempt ' || n.attempts || ' claimed by ' || n.lease_owner || ', lease expired'
FROM notifications n
LEFT JOIN sources s ON s.name = n.source
WHERE n.status = 'pending' AND n.lease_owner IS NOT NULL AND n.lease_expires_at < now()
UNION ALL
-- A notification due for longer than stuck_after_seconds that no deliverer
-- claimed: no evaluator daemon runs, or none knows its sink.
SELECT 'notification_not_claimed', n.source, n.id, n.record_id, n.lease_owner, n.next_attempt_at,
       now() - n.next_attempt_at, coalesce(s.stuck_after_seconds, 1800),
       'sink ' || n.sink || ' (' || n.attempts || ' attempt(s)), due since '
       || to_char(n.next_attempt_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')
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
       || to_char(n.digest_due_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')
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
       'task ' || t.task || ' ' || t.run_id || ' (' || t.status || ', attempt ' || t.attempt || ') claim expired'
FROM task_runs t
LEFT JOIN sources s ON s.name = t.source
WHERE t.status IN ('claimed', 'confirming', 'running') AND t.claim_expires_at < now()
UNION ALL
-- A task whose state in the tool is behind task_runs for longer than
-- stuck_after_seconds: the write (claim, complete, fail, release) keeps
-- failing; tool_error says why.
SELECT 'task_tool_behind', t.source, t.id, t.record_id, t.claimed_by, t.tool_due_at,
       now() - t.tool_due_at, coalesce(s.stuck_after_seconds, 1800),
       'task ' || t.task || ' ' || t.run_id || ' is ' || t.status || ' but the tool does not show it yet (' || t.tool_action || ')'
       || coalesce(': ' || t.tool_error, '')
FROM task_runs t
LEFT JOIN sources s ON s.name = t.source
WHERE t.tool_action IS NOT NULL AND t.status NOT IN ('claimed', 'confirming', 'running')
  AND t.tool_due_at < now() - make_interval(secs => coalesce(s.stuck_after_seconds, 1800))
) stuck
ORDER BY since, kind, id;

CREATE VIEW report_overview AS
SELECT (SELECT count(*) FROM sources WHERE status = 'active')                         AS active_sources,
       (SELECT count(*) FROM sources WHERE status <> 'active')                        AS inactive_sources,
       (SELECT count(*) FROM sources WHERE status = 'active'
           AND (next_run_at <= now() OR run_requested_at IS NOT NULL)
           AND (lease_expires_at IS NULL OR lease_expires_at < now()))                AS sources_due,
       (SELECT count(*) FROM sync_runs WHERE status = 'running')                      AS runs_in_progress,
       (SELECT count(*) FROM sync_runs WHERE status IN ('failed', 'deferred', 'abandoned')
           AND started_at > now() - interval '24 hours')                              AS failed_runs_24h,
       (SELECT count(*) FROM changes WHERE eval_status = 'pending')                   AS pending_changes,
       (SELECT created_at FROM changes WHERE eval_status = 'pending' ORDER BY id LIMIT 1) AS oldest_pending_change_at,
       (SELECT count(*) FROM notifications WHERE status = 'pending')                  AS pending_notifications,
       (SELECT count(*) FROM notifications WHERE status = 'held')                     AS held_notifications,
       (SELECT count(*) FROM notifications WHERE status = 'dead')                     AS dead_notifications,
       (SELECT count(*) FROM report_stuck)                                            AS stuck;

CREATE OR REPLACE VIEW report_ran_twice AS
SELECT 'overlapping_runs'::text AS finding, 'problem'::text AS verdict, count(*) AS count,
       (array_agg(id ORDER BY id DESC))[1:10] AS examples,
       'sync_runs of one source that overlapped in time (examples: the later run ids)'::text AS meaning
FROM (
    SELECT id, started_at,
           max(coalesce(finished_at, 'infinity'::timestamptz)) OVER (
               PARTITION BY source ORDER BY started_at, id
               ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS earlier_end
    FROM sync_runs
) r
WHERE r.earlier_end > r.started_at
UNION ALL
SELECT 'change_recorded_twice', 'problem', count(*), (array_agg(last_id ORDER BY last_id DESC))[1:10],
       'the same record version and content recorded as two changes (examples: the later change ids)'
FROM (
    SELECT max(id) AS last_id
    FROM changes
    GROUP BY source, record_id, version, new_hash
    HAVING count(*) > 1
) d
UNION ALL
SELECT 'notified_twice', 'problem', count(*), (array_agg(last_id ORDER BY last_id DESC))[1:10],
       'more than one notification row for one change, watch and sink (examples: the later notification ids)'
FROM (
    SELECT max(id) AS last_id
    FROM notifications
    WHERE kind = 'single' AND change_id IS NOT NULL
    GROUP BY change_id, watch, sink
    HAVING count(*) > 1
) d
UNION ALL
SELECT 'duplicates_suppressed', 'prevented', coalesce(sum(duplicates_suppressed), 0),
       (array_agg(id ORDER BY id DESC) FILTER (WHERE duplicates_suppressed > 0))[1:10],
       'repeated decisions that found their dedupe key and sent nothing (examples: the notifications they hit)'
FROM notifications
UNION ALL
SELECT 'delivered_after_retry', 'possible', count(*), (array_agg(id ORDER BY id DESC))[1:10],
       'notifications delivered after more than one attempt: a receiver may have seen an earlier attempt'
FROM notifications
WHERE status = 'delivered' AND attempts > 1;

COMMENT ON VIEW report_overview IS 'the whole system at a glance: sources, runs, pending work, dead letters, stuck things';
COMMENT ON VIEW report_active_sources IS 'active sources: state, schedule, interval and why, next and last runs, failures, lease';
