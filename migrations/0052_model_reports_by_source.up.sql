-- lookout schema, version 52: the model reports join a decision and its
-- model call by source too.
--
-- report_model_drift and report_expensive_evaluations joined evaluations
-- and model_calls by the call's id alone. Both tables hold the source of
-- their row (a model call's is its change's), so the join by (source, id)
-- joins the same rows. On Citus (docs/scaling.md "On Citus") both are
-- distributed by source in one co-location group, and Citus joins two
-- distributed tables only on their distribution column: by id alone the
-- reports failed there ("the query contains a join that requires
-- repartitioning", "complex joins are only supported when all distributed
-- tables are co-located and joined on their distribution columns"). The
-- columns are unchanged.
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
JOIN model_calls mc ON mc.source = e.source AND mc.id = e.model_call_id
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
LEFT JOIN evaluations e ON e.source = mc.source AND e.model_call_id = mc.id AND e.change_id = mc.change_id AND e.step = 'model'
ORDER BY mc.latency_ms DESC, mc.prompt_tokens + mc.output_tokens DESC;
