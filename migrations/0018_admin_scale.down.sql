-- The views of version 14, without the owner columns.
DROP VIEW report_sources;
DROP VIEW report_model_drift_recent;
CREATE VIEW report_sources AS
SELECT s.name,
       s.connector,
       s.status,
       CASE WHEN s.lease_owner IS NOT NULL AND s.lease_expires_at >= now() THEN 'running'
            WHEN s.status <> 'active' THEN s.status
            WHEN s.lease_owner IS NOT NULL THEN 'lease expired'
            WHEN s.run_requested_at IS NOT NULL THEN 'requested'
            WHEN s.next_run_at <= now() THEN 'due'
            ELSE 'scheduled' END                            AS state,
       s.status_reason,
       s.schedule,
       s.interval_reason,
       s.next_run_at,
       CASE WHEN s.status = 'active' AND s.next_run_at < now()
                 AND (s.lease_owner IS NULL OR s.lease_expires_at < now())
            THEN round(extract(epoch FROM now() - s.next_run_at)::numeric, 3) ELSE 0 END AS lateness_seconds,
       s.last_run_at,
       s.last_success_at,
       s.last_change_at,
       s.failure_count,
       s.last_error,
       s.lease_owner,
       s.lease_expires_at,
       s.run_id,
       s.run_requested_at
FROM sources s;

CREATE VIEW report_model_drift_recent AS
SELECT date_trunc('day', e.created_at, 'UTC')            AS day,
       e.source,
       e.watch,
       mc.model,
       mc.model_digest,
       mc.prompt_version,
       count(*)                                          AS evaluations,
       count(*) FILTER (WHERE e.step = 'model')          AS judged,
       count(*) FILTER (WHERE e.step = 'cache')          AS cache_hits,
       count(*) FILTER (WHERE e.decision IN ('notify', 'duplicate')) AS notify,
       count(*) FILTER (WHERE e.decision = 'skip')       AS skip,
       round((count(*) FILTER (WHERE e.decision IN ('notify', 'duplicate')))::numeric / count(*), 3) AS notify_rate,
       round(avg(e.confidence)::numeric, 3)              AS avg_confidence
FROM evaluations e
JOIN model_calls mc ON mc.id = e.model_call_id
WHERE e.step IN ('model', 'cache') AND e.created_at >= date_trunc('day', now(), 'UTC') - interval '13 days'
GROUP BY 1, 2, 3, 4, 5, 6
ORDER BY 1, 2, 3, 5, 6;

COMMENT ON VIEW report_sources IS 'every source with its status, state, schedule, lateness, failures, lease and last error';
COMMENT ON VIEW report_model_drift_recent IS 'model decisions of the last 14 days per day, watch, model digest and prompt version: notify rate, confidence';

CREATE OR REPLACE VIEW report_activity_hourly AS
WITH hours AS (
    SELECT generate_series(date_trunc('hour', now(), 'UTC') - interval '23 hours', date_trunc('hour', now(), 'UTC'),
                           interval '1 hour') AS hour
),
runs AS (
    SELECT date_trunc('hour', r.started_at, 'UTC') AS hour,
           count(*) AS runs,
           count(*) FILTER (WHERE r.status IN ('failed', 'deferred', 'abandoned')) AS failed,
           count(r.due_at) AS timed,
           sum(greatest(extract(epoch FROM r.started_at - r.due_at), 0)) AS late_sum,
           max(greatest(extract(epoch FROM r.started_at - r.due_at), 0)) AS late_max
    FROM sync_runs r
    WHERE r.started_at >= date_trunc('hour', now(), 'UTC') - interval '23 hours'
    GROUP BY 1
),
quiet AS (
    SELECT h.hour, sum(h.runs) AS runs, sum(h.lateness_seconds_sum) AS late_sum, max(h.lateness_seconds_max) AS late_max
    FROM sync_run_hours h
    WHERE h.hour >= date_trunc('hour', now(), 'UTC') - interval '23 hours'
    GROUP BY 1
),
ch AS (
    SELECT date_trunc('hour', c.created_at, 'UTC') AS hour, count(*) AS n
    FROM changes c WHERE c.created_at >= date_trunc('hour', now(), 'UTC') - interval '23 hours' GROUP BY 1
),
ev AS (
    SELECT date_trunc('hour', e.created_at, 'UTC') AS hour, count(*) AS n,
           count(*) FILTER (WHERE e.decision = 'notify') AS notify
    FROM evaluations e WHERE e.created_at >= date_trunc('hour', now(), 'UTC') - interval '23 hours' GROUP BY 1
),
nt AS (
    SELECT date_trunc('hour', n.created_at, 'UTC') AS hour, count(*) AS n
    FROM notifications n WHERE n.created_at >= date_trunc('hour', now(), 'UTC') - interval '23 hours' GROUP BY 1
),
mc AS (
    SELECT date_trunc('hour', m.created_at, 'UTC') AS hour, count(*) AS n,
           count(*) FILTER (WHERE m.outcome <> 'ok') AS failed
    FROM model_calls m WHERE m.created_at >= date_trunc('hour', now(), 'UTC') - interval '23 hours' GROUP BY 1
)
SELECT h.hour,
       coalesce(runs.runs, 0) + coalesce(quiet.runs, 0)          AS runs,
       coalesce(runs.failed, 0)                                   AS failed_runs,
       coalesce(ch.n, 0)                                          AS changes,
       coalesce(ev.n, 0)                                          AS evaluations,
       coalesce(ev.notify, 0)                                     AS notify_decisions,
       coalesce(nt.n, 0)                                          AS notifications,
       coalesce(mc.n, 0)                                          AS model_calls,
       coalesce(mc.failed, 0)                                     AS failed_model_calls,
       round(((coalesce(runs.late_sum, 0) + coalesce(quiet.late_sum, 0))
              / nullif(coalesce(runs.timed, 0) + coalesce(quiet.runs, 0), 0))::numeric, 3) AS avg_lateness_seconds,
       round(greatest(runs.late_max, quiet.late_max)::numeric, 3) AS max_lateness_seconds
FROM hours h
LEFT JOIN runs ON runs.hour = h.hour
LEFT JOIN quiet ON quiet.hour = h.hour
LEFT JOIN ch ON ch.hour = h.hour
LEFT JOIN ev ON ev.hour = h.hour
LEFT JOIN nt ON nt.hour = h.hour
LEFT JOIN mc ON mc.hour = h.hour
ORDER BY h.hour;
DROP INDEX IF EXISTS sources_lease_expires_idx;
DROP INDEX IF EXISTS sources_failing_idx;
DROP INDEX IF EXISTS evaluations_model_call_decision_idx;
DROP INDEX IF EXISTS evaluations_judged_created_idx;
CREATE INDEX evaluations_judged_created_idx ON evaluations (created_at) WHERE step IN ('model', 'cache');
DROP TRIGGER IF EXISTS sync_run_hours_activity_insert ON sync_run_hours;
DROP TRIGGER IF EXISTS sync_run_hours_activity_update ON sync_run_hours;
DROP FUNCTION IF EXISTS activity_hour_totals_sync_run_hours();
DROP TRIGGER IF EXISTS sync_runs_activity_insert ON sync_runs;
DROP TRIGGER IF EXISTS sync_runs_activity_update ON sync_runs;
DROP FUNCTION IF EXISTS activity_hour_totals_sync_runs();
DROP TRIGGER IF EXISTS changes_activity_insert ON changes;
DROP TRIGGER IF EXISTS changes_activity_update ON changes;
DROP FUNCTION IF EXISTS activity_hour_totals_changes();
DROP TRIGGER IF EXISTS evaluations_activity_insert ON evaluations;
DROP TRIGGER IF EXISTS evaluations_activity_update ON evaluations;
DROP FUNCTION IF EXISTS activity_hour_totals_evaluations();
DROP TRIGGER IF EXISTS notifications_activity_insert ON notifications;
DROP TRIGGER IF EXISTS notifications_activity_update ON notifications;
DROP FUNCTION IF EXISTS activity_hour_totals_notifications();
DROP TRIGGER IF EXISTS model_calls_activity_insert ON model_calls;
DROP TRIGGER IF EXISTS model_calls_activity_update ON model_calls;
DROP FUNCTION IF EXISTS activity_hour_totals_model_calls();
DROP TABLE IF EXISTS activity_hour_totals;
