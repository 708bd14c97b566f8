-- lookout schema, version 57: the evaluations' hourly activity and model
-- drift are counted by their writer, not by statement triggers on insert.
--
-- evaluations_activity_insert (migration 18) and
-- evaluations_model_drift_insert (migration 44) summed each statement's
-- rows through a transition table. A transition table of an insert on a
-- partitioned table makes COPY insert row by row (PostgreSQL's CopyFrom
-- gives up its multi-insert), and the rows are kept a second time for the
-- triggers: a COPY of 4,000 evaluations, the evaluator's batch of 2,000
-- changes with two watches, took 0.5 to 0.9 s without the two triggers
-- against 1.0 to 1.8 s with them (docs/benchmarks.md, (4) on branch
-- eval-backlog), as migration 27 found for changes.
--
-- count_evaluations adds rows to activity_hour_totals and model_drift_days
-- as the triggers did (the hour and day of each created_at, the writer's
-- pg_backend_pid(), each model and cache step's model call probed by id):
-- internal/evaluator, the one writer of evaluations, calls it in the
-- transaction that inserts them, with the columns of the rows it inserted
-- (not those a held decision's update replaced: the update triggers stay
-- and add the difference). SQL that inserts evaluations outside the
-- evaluator (fixtures, the admin benchmark's fill) calls it too.
DROP TRIGGER evaluations_activity_insert ON evaluations;
DROP TRIGGER evaluations_model_drift_insert ON evaluations;

CREATE FUNCTION count_evaluations(created_at timestamptz[], decision text[], step text[], owner text[],
                                  confidence float8[], model_call_id bigint[]) RETURNS void LANGUAGE plpgsql AS $$
-- The arguments are named as the columns they fill: a bare name is the
-- column, an argument is written count_evaluations.<name>.
#variable_conflict use_column
BEGIN
    -- On Citus nothing is counted, as before (the step that distributes the
    -- tables dropped the triggers; docs/scaling.md): the model calls
    -- joined below are distributed, the totals local to the coordinator.
    IF coalesce(cardinality(count_evaluations.created_at), 0) = 0
       OR EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus') THEN
        RETURN;
    END IF;
    INSERT INTO activity_hour_totals AS t (hour, backend, evaluations, notify_decisions)
    SELECT date_trunc('hour', r.created_at, 'UTC'), pg_backend_pid(), count(*), count(*) FILTER (WHERE r.decision = 'notify')
    FROM unnest(count_evaluations.created_at, count_evaluations.decision) AS r(created_at, decision)
    GROUP BY 1
    ORDER BY 1
    ON CONFLICT (hour, backend) DO UPDATE SET
        evaluations = t.evaluations + excluded.evaluations,
        notify_decisions = t.notify_decisions + excluded.notify_decisions;
    IF NOT ('model' = ANY (count_evaluations.step) OR 'cache' = ANY (count_evaluations.step)) THEN
        RETURN;
    END IF;
    -- The model call of each counted row is probed by id (LATERAL, OFFSET
    -- 0): the statement's few model steps, never a scan of model_calls.
    INSERT INTO model_drift_days AS t (day, model, model_digest, prompt_version, owner, backend,
                                       evaluations, judged, cache_hits, notify, skip, confidence_sum, confidence_n)
    SELECT date_trunc('day', r.created_at, 'UTC'), mc.model, mc.model_digest, mc.prompt_version, r.owner, pg_backend_pid(),
           count(*), count(*) FILTER (WHERE r.step = 'model'), count(*) FILTER (WHERE r.step = 'cache'),
           count(*) FILTER (WHERE r.decision IN ('notify', 'duplicate')), count(*) FILTER (WHERE r.decision = 'skip'),
           coalesce(sum(r.confidence), 0), count(r.confidence)
    FROM unnest(count_evaluations.created_at, count_evaluations.decision, count_evaluations.step, count_evaluations.owner,
                count_evaluations.confidence, count_evaluations.model_call_id)
         AS r(created_at, decision, step, owner, confidence, model_call_id)
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
END $$;

COMMENT ON FUNCTION count_evaluations(timestamptz[], text[], text[], text[], float8[], bigint[]) IS
    'adds inserted evaluations (their created_at, decision, step, owner, confidence and model_call_id) to activity_hour_totals and model_drift_days; called by their writer in the inserting transaction (migration 57)';
