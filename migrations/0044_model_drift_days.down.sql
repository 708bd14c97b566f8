-- Back to version 43: report_model_drift_daily reads the evaluations again.
CREATE OR REPLACE VIEW report_model_drift_daily AS
WITH judged AS (
    SELECT e.created_at, e.model_call_id, e.step, e.decision, e.confidence
    FROM evaluations e
    WHERE e.step IN ('model', 'cache') AND e.created_at >= date_trunc('day', now(), 'UTC') - interval '13 days'
)
SELECT date_trunc('day', e.created_at, 'UTC')            AS day,
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
FROM judged e
JOIN model_calls mc ON mc.id = e.model_call_id AND mc.id >= (SELECT min(j.model_call_id) FROM judged j)
GROUP BY 1, 2, 3, 4
ORDER BY 1, 2, 3, 4;

COMMENT ON VIEW report_model_drift_daily IS 'model decisions of the last 14 days per day, model digest and prompt version, over every source and watch: notify rate, confidence';

DROP TRIGGER evaluations_model_drift_update ON evaluations;
DROP TRIGGER evaluations_model_drift_insert ON evaluations;
DROP FUNCTION model_drift_days_evaluations();
DROP TABLE model_drift_days;
