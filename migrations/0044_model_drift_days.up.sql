-- lookout schema, version 44: the model drift per day, summed as it happens.
--
-- report_model_drift_daily (migration 22), the models page's drift table and
-- charts, read every model-judged evaluation of 14 days and its model call
-- on each request: 45,000 evaluations and as many model calls on the admin
-- benchmark's 10 million changes, the largest part of the page's 100 to
-- 240 ms (docs/benchmarks.md, (9)), growing with the history. The counts
-- are now kept per UTC day, model, model digest, prompt version, owner and
-- database backend in model_drift_days by statement triggers on
-- evaluations, as migration 18 keeps activity_hour_totals: each
-- statement's model and cache steps joined to their model calls (by id,
-- one probe each: a model call of any age, as a cache hit's may be) and
-- added to their rows, one row per writer backend (pg_backend_pid()) so
-- that concurrent evaluators never wait on each other's row; an update
-- (a held decision replaced) adds the difference. Deletes (retention) are
-- not subtracted: the views read 14 days, which evaluations' retention
-- (30 days by default) does not prune. An evaluation whose model call
-- does not exist when it is written is not counted, as the join of the
-- view before did not count it.
--
-- report_model_drift_daily and the owner's drift (internal/control's
-- queryDriftOwner) sum the rows of 14 days: days × digests × prompt
-- versions × owners × writers, not evaluations. report_model_drift_recent
-- (per source and watch) still reads the evaluations.
CREATE TABLE model_drift_days (
    day            timestamptz      NOT NULL,  -- start of the UTC day of the evaluations' created_at
    model          text             NOT NULL,
    model_digest   text             NOT NULL,
    prompt_version text             NOT NULL,
    owner          text             NOT NULL,  -- the evaluations' owner ('' for none)
    backend        integer          NOT NULL,  -- pg_backend_pid() of the writer (0: summed by this migration)
    evaluations    bigint           NOT NULL DEFAULT 0,  -- model and cache steps
    judged         bigint           NOT NULL DEFAULT 0,  -- model steps
    cache_hits     bigint           NOT NULL DEFAULT 0,  -- cache steps
    notify         bigint           NOT NULL DEFAULT 0,  -- decisions notify or duplicate
    skip           bigint           NOT NULL DEFAULT 0,  -- decisions skip
    confidence_sum double precision NOT NULL DEFAULT 0,  -- the confidences given, summed
    confidence_n   bigint           NOT NULL DEFAULT 0,  -- the evaluations with a confidence
    PRIMARY KEY (day, model, model_digest, prompt_version, owner, backend)
);
CREATE INDEX model_drift_days_owner_idx ON model_drift_days (owner, day);

COMMENT ON TABLE model_drift_days IS 'model and cache steps of evaluations per UTC day, model, digest, prompt version, owner and writer backend (kept by triggers on evaluations; report_model_drift_daily sums them)';

CREATE FUNCTION model_drift_days_evaluations() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- The model call of each counted row is probed by id (LATERAL, OFFSET
    -- 0): a statement's few model steps, never a scan of model_calls.
    IF TG_OP = 'INSERT' THEN
        INSERT INTO model_drift_days AS t (day, model, model_digest, prompt_version, owner, backend,
                                           evaluations, judged, cache_hits, notify, skip, confidence_sum, confidence_n)
        SELECT date_trunc('day', r.created_at, 'UTC'), mc.model, mc.model_digest, mc.prompt_version, r.owner, pg_backend_pid(),
               count(*), count(*) FILTER (WHERE r.step = 'model'), count(*) FILTER (WHERE r.step = 'cache'),
               count(*) FILTER (WHERE r.decision IN ('notify', 'duplicate')), count(*) FILTER (WHERE r.decision = 'skip'),
               coalesce(sum(r.confidence), 0), count(r.confidence)
        FROM new_rows r
        JOIN LATERAL (SELECT m.model, m.model_digest, m.prompt_version FROM model_calls m WHERE m.id = r.model_call_id OFFSET 0) mc ON true
        WHERE r.step IN ('model', 'cache')
        GROUP BY 1, 2, 3, 4, 5
        ORDER BY 1, 2, 3, 4, 5
        ON CONFLICT (day, model, model_digest, prompt_version, owner, backend) DO UPDATE SET
            evaluations = t.evaluations + excluded.evaluations,
            judged = t.judged + excluded.judged,
            cache_hits = t.cache_hits + excluded.cache_hits,
            notify = t.notify + excluded.notify,
            skip = t.skip + excluded.skip,
            confidence_sum = t.confidence_sum + excluded.confidence_sum,
            confidence_n = t.confidence_n + excluded.confidence_n;
    ELSE
        INSERT INTO model_drift_days AS t (day, model, model_digest, prompt_version, owner, backend,
                                           evaluations, judged, cache_hits, notify, skip, confidence_sum, confidence_n)
        SELECT date_trunc('day', r.created_at, 'UTC'), mc.model, mc.model_digest, mc.prompt_version, r.owner, pg_backend_pid(),
               sum(r.s)::bigint, coalesce(sum(r.s) FILTER (WHERE r.step = 'model'), 0)::bigint,
               coalesce(sum(r.s) FILTER (WHERE r.step = 'cache'), 0)::bigint,
               coalesce(sum(r.s) FILTER (WHERE r.decision IN ('notify', 'duplicate')), 0)::bigint,
               coalesce(sum(r.s) FILTER (WHERE r.decision = 'skip'), 0)::bigint,
               coalesce(sum(r.s * r.confidence), 0), coalesce(sum(r.s) FILTER (WHERE r.confidence IS NOT NULL), 0)::bigint
        FROM (SELECT n.created_at, n.owner, n.step, n.decision, n.confidence, n.model_call_id, 1 AS s FROM new_rows n
              UNION ALL
              SELECT o.created_at, o.owner, o.step, o.decision, o.confidence, o.model_call_id, -1 AS s FROM old_rows o) r
        JOIN LATERAL (SELECT m.model, m.model_digest, m.prompt_version FROM model_calls m WHERE m.id = r.model_call_id OFFSET 0) mc ON true
        WHERE r.step IN ('model', 'cache')
        GROUP BY 1, 2, 3, 4, 5
        ORDER BY 1, 2, 3, 4, 5
        ON CONFLICT (day, model, model_digest, prompt_version, owner, backend) DO UPDATE SET
            evaluations = t.evaluations + excluded.evaluations,
            judged = t.judged + excluded.judged,
            cache_hits = t.cache_hits + excluded.cache_hits,
            notify = t.notify + excluded.notify,
            skip = t.skip + excluded.skip,
            confidence_sum = t.confidence_sum + excluded.confidence_sum,
            confidence_n = t.confidence_n + excluded.confidence_n;
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER evaluations_model_drift_insert AFTER INSERT ON evaluations
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION model_drift_days_evaluations();
CREATE TRIGGER evaluations_model_drift_update AFTER UPDATE ON evaluations
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION model_drift_days_evaluations();

-- The history as it was before the triggers (the migration holds the
-- evaluations' lock from CREATE TRIGGER on: nothing is counted twice or
-- missed).
INSERT INTO model_drift_days (day, model, model_digest, prompt_version, owner, backend,
                              evaluations, judged, cache_hits, notify, skip, confidence_sum, confidence_n)
SELECT date_trunc('day', e.created_at, 'UTC'), mc.model, mc.model_digest, mc.prompt_version, e.owner, 0,
       count(*), count(*) FILTER (WHERE e.step = 'model'), count(*) FILTER (WHERE e.step = 'cache'),
       count(*) FILTER (WHERE e.decision IN ('notify', 'duplicate')), count(*) FILTER (WHERE e.decision = 'skip'),
       coalesce(sum(e.confidence), 0), count(e.confidence)
FROM evaluations e
JOIN model_calls mc ON mc.id = e.model_call_id
WHERE e.step IN ('model', 'cache')
GROUP BY 1, 2, 3, 4, 5;

CREATE OR REPLACE VIEW report_model_drift_daily AS
SELECT d.day,
       d.model,
       d.model_digest,
       d.prompt_version,
       sum(d.evaluations)::bigint                        AS evaluations,
       sum(d.judged)::bigint                             AS judged,
       sum(d.cache_hits)::bigint                         AS cache_hits,
       sum(d.notify)::bigint                             AS notify,
       sum(d.skip)::bigint                               AS skip,
       round(sum(d.notify)::numeric / nullif(sum(d.evaluations), 0), 3) AS notify_rate,
       round((sum(d.confidence_sum) / nullif(sum(d.confidence_n), 0))::numeric, 3) AS avg_confidence
FROM model_drift_days d
WHERE d.day >= date_trunc('day', now(), 'UTC') - interval '13 days'
GROUP BY 1, 2, 3, 4
HAVING sum(d.evaluations) > 0
ORDER BY 1, 2, 3, 4;

COMMENT ON VIEW report_model_drift_daily IS 'model decisions of the last 14 days per day, model digest and prompt version, over every source and watch: notify rate, confidence (from model_drift_days)';
