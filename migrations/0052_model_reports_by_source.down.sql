-- Back to version 51: the model reports join a decision and its model call
-- by the call's id alone.
CREATE OR REPLACE VIEW report_model_drift AS
SELECT date_trunc('day', e.created_at) AS day,
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
       count(*) FILTER (WHERE e.urgency = 'high')        AS urgency_high,
       min(e.created_at)                                 AS first_seen,
       max(e.created_at)                                 AS last_seen
FROM evaluations e
JOIN model_calls mc ON mc.id = e.model_call_id
WHERE e.step IN ('model', 'cache')
GROUP BY 1, 2, 3, 4, 5, 6;

CREATE OR REPLACE VIEW report_expensive_evaluations AS
SELECT mc.id AS model_call_id,
       mc.created_at,
       mc.purpose,
       mc.source,
       mc.watch,
       mc.record_id,
       mc.change_id,
       mc.model,
       mc.model_digest,
       mc.prompt_version,
       mc.outcome,
       mc.attempt,
       mc.latency_ms,
       mc.prompt_tokens,
       mc.output_tokens,
       mc.prompt_tokens + mc.output_tokens AS total_tokens,
       e.decision,
       e.reason,
       mc.owner
FROM model_calls mc
LEFT JOIN evaluations e ON e.model_call_id = mc.id AND e.change_id = mc.change_id AND e.step = 'model'
ORDER BY mc.latency_ms DESC, mc.prompt_tokens + mc.output_tokens DESC;
