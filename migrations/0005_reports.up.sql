-- lookout schema, version 5: the reporting surface and the indexes of the
-- daemons' loops. See docs/cookbook.md (the seven questions, every report_*
-- view) and docs/performance.md (the hot queries and their plans).

-- Why a run ran: the time it was due and why it was due then (the
-- sources.interval_reason in force when it was claimed: "every 5m0s",
-- "backoff after 3 consecutive failure(s)", "deferred: ..."). Copied by the
-- syncer's claim; NULL on runs recorded before version 5.
ALTER TABLE sync_runs
    ADD COLUMN due_at     timestamptz,
    ADD COLUMN due_reason text;

-- Indexes of the daemons' loops -------------------------------------------

-- The evaluator's claim checks, for every candidate change, that no earlier
-- change of the same record is still pending. changes_record_idx covers the
-- whole history of the record (a record with 10,000 evaluated changes made
-- the check read 10,000 heap rows); this one holds pending rows only.
CREATE INDEX changes_pending_record_idx ON changes (source, record_id, id) WHERE eval_status = 'pending';

-- "What did run N change?": changes by run. Runs write their changes in a
-- contiguous stretch of the append-only table, so a BRIN index answers it for
-- almost nothing on the syncer's write path.
CREATE INDEX changes_run_brin ON changes USING brin (run_id) WITH (autosummarize = on);

-- The syncer's claim takes due sources OR sources an operator asked to run;
-- with this the OR is two index scans instead of a scan of every source.
CREATE INDEX sources_run_requested_idx ON sources (run_requested_at) WHERE run_requested_at IS NOT NULL;

-- "What ran in the last 24 hours?" (docs/cookbook.md, question 1) reads
-- runs by start time across sources.
CREATE INDEX sync_runs_started_idx ON sync_runs (started_at);

-- report_recent_failures and report_overview read the failures of the last
-- day: a small partial index per table instead of a scan of its history.
CREATE INDEX sync_runs_failed_idx ON sync_runs (started_at) WHERE status IN ('failed', 'deferred', 'abandoned');
CREATE INDEX evaluations_failed_idx ON evaluations (created_at) WHERE decision IN ('error', 'hold');
CREATE INDEX notifications_failed_idx ON notifications (last_attempt_at) WHERE last_error IS NOT NULL;

-- Retention deletes model calls; each deleted call sets the model_call_id
-- of the verdicts it produced to NULL (ON DELETE SET NULL), a lookup by
-- model_call_id.
CREATE INDEX verdicts_model_call_idx ON verdicts (model_call_id) WHERE model_call_id IS NOT NULL;

-- Reports ------------------------------------------------------------------

-- Active sources: schedule, next run and interval (with its reason), last
-- runs, failures, lease.
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

-- Stuck work: claims whose holder stopped renewing them, runs in progress
-- longer than their source's stuck_after_seconds, and changes and
-- notifications waiting longer than it. One row per stuck thing, oldest
-- first; a healthy system shows none.
CREATE VIEW report_stuck AS
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
) stuck
ORDER BY since, kind, id;

-- Failures of the last 24 hours, newest first: runs that failed, were
-- deferred or abandoned; evaluations that ended in error or were held;
-- model calls that did not answer; delivery attempts that failed.
CREATE VIEW report_recent_failures AS
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
           r.error
    FROM sync_runs r
    WHERE r.status IN ('failed', 'deferred', 'abandoned') AND r.started_at > now() - interval '24 hours'
    UNION ALL
    SELECT 'evaluation', e.source, e.watch, NULL, e.change_id, e.record_id, e.decision || ' (' || e.step || ')',
           e.created_at, NULL, e.reason
    FROM evaluations e
    WHERE e.decision IN ('error', 'hold') AND e.created_at > now() - interval '24 hours'
    UNION ALL
    SELECT 'model_call', mc.source, mc.watch, NULL, mc.id, mc.record_id, mc.outcome, mc.created_at, mc.attempt,
           coalesce(mc.error, mc.outcome)
    FROM model_calls mc
    WHERE mc.outcome <> 'ok' AND mc.created_at > now() - interval '24 hours'
    UNION ALL
    SELECT 'delivery', n.source, n.watch, n.sink, n.id, n.record_id,
           CASE WHEN n.status = 'pending' THEN 'retrying' ELSE n.status END,
           n.last_attempt_at, n.attempts, n.last_error
    FROM notifications n
    WHERE n.last_error IS NOT NULL AND n.last_attempt_at > now() - interval '24 hours'
) f
ORDER BY at DESC, kind, id DESC;

-- Work that keeps failing and is being retried, most attempts first:
-- sources by consecutive failures, pending changes by claims, pending
-- notifications by delivery attempts.
CREATE VIEW report_high_retry AS
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
           s.last_error
    FROM sources s
    WHERE s.failure_count > 0
    UNION ALL
    SELECT 'change', c.source, c.id, c.record_id, NULL, NULL, c.eval_attempts,
           CASE WHEN c.eval_next_at > now() THEN 'held' ELSE 'pending' END,
           greatest(c.eval_next_at, c.created_at), c.eval_error
    FROM changes c
    WHERE c.eval_status = 'pending' AND (c.eval_attempts > 1 OR c.eval_error IS NOT NULL)
    UNION ALL
    SELECT 'notification', n.source, n.id, n.record_id, n.watch, n.sink, n.attempts, n.status,
           n.next_attempt_at, n.last_error
    FROM notifications n
    WHERE n.status = 'pending' AND n.attempts > 0 AND n.last_error IS NOT NULL
) r
ORDER BY attempts DESC, kind, source, id;

-- Sources that are not polled: disabled (by failures, 401/403), completed
-- (stop conditions) or paused (by an operator), why and since when.
CREATE VIEW report_disabled_sources AS
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
       'syncer resume ' || s.name          AS resume_with
FROM sources s
WHERE s.status <> 'active'
ORDER BY s.status_changed_at DESC NULLS LAST, s.name;

-- Did anything run twice? One row per check: "problem" checks count what
-- must never happen (0 in a healthy system); "prevented" counts repeats the
-- dedupe keys absorbed; "possible" counts deliveries a receiver may have
-- seen more than once (it can tell by the Idempotency-Key).
CREATE VIEW report_ran_twice AS
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

-- The whole system at a glance: one row.
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

COMMENT ON VIEW report_overview IS 'the whole system at a glance: sources, runs, pending work, dead letters, stuck things';
COMMENT ON VIEW report_active_sources IS 'active sources: state, schedule, interval and why, next and last runs, failures, lease';
COMMENT ON VIEW report_stuck IS 'expired leases, runs longer than stuck_after, changes and notifications waiting longer than it';
COMMENT ON VIEW report_recent_failures IS 'failed, deferred and abandoned runs, evaluation errors and holds, failed model calls and delivery attempts of the last 24h';
COMMENT ON VIEW report_high_retry IS 'failing sources, retried changes and notifications, most attempts first';
COMMENT ON VIEW report_disabled_sources IS 'disabled, completed and paused sources: why and since when';
COMMENT ON VIEW report_ran_twice IS 'did anything run twice: overlapping runs, repeated changes and notifications (problems), suppressed duplicates, retried deliveries';
COMMENT ON VIEW report_dead_letters IS 'notifications that died: sink, attempts, last error (evaluator retry-dead sends them back)';
COMMENT ON VIEW report_duplicates_suppressed IS 'per source, watch and sink: notifications and the duplicates their dedupe keys suppressed';
COMMENT ON VIEW report_delivery_status IS 'the outbox per sink: pending, retrying, held, delivered, digested, dead';
COMMENT ON VIEW report_expensive_evaluations IS 'model calls, slowest first, with tokens, outcome and the decision they led to';
COMMENT ON VIEW report_model_drift IS 'model decisions per day, watch, model digest and prompt version: notify rate, confidence';
COMMENT ON VIEW report_model_usage IS 'model calls and tokens per UTC day, watch and purpose (what budgets count)';
