-- Back to version 21: report_model_drift_recent joins by id alone again.
DROP VIEW report_model_drift_daily;
DROP INDEX sync_run_hours_hour_idx;
CREATE INDEX sync_run_hours_hour_idx ON sync_run_hours (hour);

CREATE OR REPLACE VIEW report_model_drift_recent AS
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
       round(avg(e.confidence)::numeric, 3)              AS avg_confidence,
       e.owner
FROM evaluations e
JOIN model_calls mc ON mc.id = e.model_call_id
WHERE e.step IN ('model', 'cache') AND e.created_at >= date_trunc('day', now(), 'UTC') - interval '13 days'
GROUP BY 1, 2, 3, 4, 5, 6, e.owner
ORDER BY 1, 2, 3, 5, 6, e.owner;

COMMENT ON VIEW report_model_drift_recent IS 'model decisions of the last 14 days per day, watch, model digest and prompt version: notify rate, confidence';
