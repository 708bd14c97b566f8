-- lookout schema, version 22: the admin pages at 10 million changes.
--
-- report_model_drift_recent joined each model-judged evaluation of the last
-- 14 days to its model call by id alone. model_calls is partitioned by week
-- (migration 16) and its primary key is (id, created_at), so every
-- evaluation probed the primary key of every partition: on 10 million
-- changes (45,000 judged evaluations in 14 days, ten partitions) that was
-- 600,000 buffer reads and 0.8 s for the models page. The view now reads
-- the model calls once, from the oldest one the window's evaluations refer
-- to (an id range on each partition's primary key; partitions older than
-- it end at once), and joins them by hash: the same rows, the same columns.
--
-- report_model_drift_daily is the fleet's drift: the same decisions per
-- UTC day, model, model digest and prompt version, over every source and
-- watch (the models page's charts and table; report_model_drift_recent
-- keeps the rows per source, watch and owner).
--
-- The quiet runs of an hour (the admin page's rows behind the runs chart)
-- are listed by source from sync_run_hours_hour_idx, now on (hour DESC,
-- source): 100,000 sources make 100,000 rows an hour, which the list
-- sorted before. It serves what the index on hour alone served (the
-- pruner reads it backwards). Neither column changes when a quiet run is
-- added to its hour, so those updates stay HOT.
DROP INDEX sync_run_hours_hour_idx;
CREATE INDEX sync_run_hours_hour_idx ON sync_run_hours (hour DESC, source);

CREATE OR REPLACE VIEW report_model_drift_recent AS
WITH judged AS (
    SELECT e.created_at, e.source, e.watch, e.model_call_id, e.step, e.decision, e.confidence, e.owner
    FROM evaluations e
    WHERE e.step IN ('model', 'cache') AND e.created_at >= date_trunc('day', now(), 'UTC') - interval '13 days'
)
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
FROM judged e
JOIN model_calls mc ON mc.id = e.model_call_id AND mc.id >= (SELECT min(j.model_call_id) FROM judged j)
GROUP BY 1, 2, 3, 4, 5, 6, e.owner
ORDER BY 1, 2, 3, 5, 6, e.owner;

CREATE VIEW report_model_drift_daily AS
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

COMMENT ON VIEW report_model_drift_recent IS 'model decisions of the last 14 days per day, source, watch, model digest, prompt version and owner: notify rate, confidence';
COMMENT ON VIEW report_model_drift_daily IS 'model decisions of the last 14 days per day, model digest and prompt version, over every source and watch: notify rate, confidence';
