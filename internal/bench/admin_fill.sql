-- The admin measurement's dataset (internal/bench/admin.go RunAdmin): a lookout
-- that ran for 30 days; $1::int sources, $2::int changes. A benchmark's
-- generated history, written straight into the tables, like the plan test's.
SET maintenance_work_mem = '512MB';
CREATE TEMP TABLE set_aside AS
SELECT i.indexname, i.indexdef FROM pg_indexes i
WHERE i.schemaname = current_schema()
  AND i.tablename IN ('changes', 'evaluations', 'notifications', 'sync_runs', 'model_calls', 'records', 'sync_run_hours', 'sources')
  AND i.indexname NOT IN (SELECT conname FROM pg_constraint WHERE connamespace = current_schema()::regnamespace);
DO $$ DECLARE r record; BEGIN
    FOR r IN SELECT indexname FROM set_aside LOOP EXECUTE format('DROP INDEX %I', r.indexname); END LOOP;
END $$;

-- Every week of the history gets its partition before the rows come
-- (named the way internal/retention names them, migration 16), so that no
-- row lands in the default partition and has to be moved by the pruner.
DO $$ DECLARE t record; wk timestamptz; BEGIN
    FOR t IN SELECT * FROM (VALUES ('changes'), ('evaluations'), ('notifications'), ('sync_runs'), ('model_calls')) v(tbl) LOOP
        wk := date_trunc('week', (now() - interval '31 days') AT TIME ZONE 'UTC') AT TIME ZONE 'UTC';
        WHILE wk <= now() LOOP
            EXECUTE format('CREATE TABLE IF NOT EXISTS %I PARTITION OF %I FOR VALUES FROM (%L) TO (%L)',
                           t.tbl || '_p' || to_char(wk AT TIME ZONE 'UTC', 'YYYYMMDD'), t.tbl, wk, wk + interval '1 week');
            wk := wk + interval '1 week';
        END LOOP;
    END LOOP;
END $$;

INSERT INTO sources (name, connector, config_hash, schedule, interval_seconds, interval_reason, next_run_at, last_run_at,
                     last_success_at, status, status_reason, status_changed_at, failure_count, last_error)
SELECT 'src-' || i, 'http', 'h', 'every 5m0s', 300, 'every 5m0s',
       now() + (i % 300) * interval '1 second' - CASE WHEN i % 1000 = 3 THEN interval '10 minutes' ELSE interval '0' END,
       now() - interval '4 minutes', now() - interval '4 minutes',
       CASE WHEN i % 200 = 0 THEN 'paused' WHEN i % 201 = 0 THEN 'disabled' ELSE 'active' END,
       CASE WHEN i % 200 = 0 THEN 'paused by operator' WHEN i % 201 = 0 THEN '401 Unauthorized' END,
       CASE WHEN i % 200 = 0 OR i % 201 = 0 THEN now() - interval '1 day' END,
       CASE WHEN i % 100 = 7 THEN 3 ELSE 0 END, CASE WHEN i % 100 = 7 THEN '503 Service Unavailable' END
FROM generate_series(1, $1::int) i;

-- Half of the sources were made through the API by 1,000 owners (owner-0
-- to owner-998, even numbers: 100 sources each at 100,000 sources), the
-- other half are shared ones from the configuration directory.
INSERT INTO source_definitions (name, owner, managed_by, connector, definition, definition_hash, version)
SELECT 'src-' || i, CASE WHEN i % 2 = 0 THEN 'owner-' || (i % 1000) ELSE '' END,
       CASE WHEN i % 2 = 0 THEN 'api' ELSE 'file:sources/src-' || i || '.yaml' END, 'http', '{}', 'h', 1
FROM generate_series(1, $1::int) i;

INSERT INTO sync_runs (source, owner, reason, status, started_at, finished_at, duration_ms, pages, items_seen, items_updated,
                       error, due_at, due_reason)
SELECT 'src-' || (1 + i % $1::int), 'syncer-1', 'schedule', CASE WHEN i % 100 = 0 THEN 'failed' ELSE 'succeeded' END,
       now() - (r.n - i) * (interval '30 days' / r.n), now() - (r.n - i) * (interval '30 days' / r.n) + interval '1 second',
       1000, 1, 10, 10, CASE WHEN i % 100 = 0 THEN 'boom' END,
       now() - (r.n - i) * (interval '30 days' / r.n) - (i % 7) * interval '1 second', 'every 5m0s'
FROM (SELECT greatest($2::int / 10, 1) AS n) r, generate_series(1, greatest($2::int / 10, 1)) i;

INSERT INTO sync_run_hours (source, hour, runs, not_modified, requests, items_seen, first_started_at, last_started_at,
                            last_finished_at, duration_ms_sum, lateness_seconds_sum, lateness_seconds_max)
SELECT 'src-' || s, h.hour, 12, 12, 12, 120, h.hour, h.hour + interval '55 minutes', h.hour + interval '56 minutes',
       12 * 150, 12 * 0.4, 2.5
FROM generate_series(1, $1::int) s,
     generate_series(date_trunc('hour', now(), 'UTC') - interval '24 hours', date_trunc('hour', now(), 'UTC'), interval '1 hour') h(hour);

INSERT INTO records (source, record_id, content_hash, title)
SELECT 'src-' || (1 + i % $1::int), 'r-' || i, md5(i::text), 'record ' || i
FROM generate_series(0, greatest($2::int / 5, 1) - 1) i;

INSERT INTO changes (source, record_id, kind, version, new_hash, changed_fields, record, run_id, created_at, eval_status, evaluated_at)
SELECT 'src-' || (1 + (i % r.recs) % $1::int), 'r-' || (i % r.recs), 'updated', 1 + i / r.recs, 'h' || i, '{title}',
       jsonb_build_object('title', 'record ' || (i % r.recs), 'status', 'open'), 1 + i / 10,
       now() - ($2::int - i) * (interval '30 days' / $2::int), 'done', now() - ($2::int - i) * (interval '30 days' / $2::int)
FROM (SELECT greatest($2::int / 5, 1) AS recs) r, generate_series(1, $2::int) i;
INSERT INTO changes (source, record_id, kind, version, new_hash, record, run_id, created_at)
SELECT 'src-' || (1 + i % $1::int), 'r-' || i, 'updated', 1, 'b' || i, '{}', 1, now() - interval '1 minute'
FROM generate_series(1, 200) i;

-- The model calls before their evaluations: count_evaluations, which keeps
-- model_drift_days (migrations 44, 57), joins each model step to its call.
INSERT INTO model_calls (purpose, change_id, source, record_id, watch, content_hash, model, model_digest, prompt_version,
                         input_ref, input_hash, outcome, latency_ms, prompt_tokens, output_tokens, created_at, owner)
SELECT 'evaluate', c.id, c.source, c.record_id, 'w', c.new_hash, 'llama3.2',
       CASE WHEN c.created_at > now() - interval '5 days' THEN 'sha256:bbb' ELSE 'sha256:aaa' END, 'pv-1',
       'change:' || c.id, md5(c.id::text), CASE WHEN c.id % 5000 = 0 THEN 'timeout' ELSE 'ok' END, 300 + c.id % 1000, 400, 40, c.created_at,
       CASE WHEN split_part(c.source, '-', 2)::int % 2 = 0 THEN 'owner-' || split_part(c.source, '-', 2)::int % 1000 ELSE '' END
FROM changes c WHERE c.id % 100 = 0 AND c.eval_status = 'done'
ORDER BY c.id;

-- Counted as the evaluator counts the evaluations it inserts (migration 57),
-- a day at a time.
WITH ins AS (
INSERT INTO evaluations (change_id, source, record_id, watch, content_hash, step, matched, decision, reason, evaluator, created_at,
                         confidence, model_call_id, change_created_at, owner)
SELECT c.id, c.source, c.record_id, 'w', c.new_hash, CASE WHEN c.id % 100 = 0 THEN 'model' ELSE 'filter' END, c.id % 20 = 0,
       CASE WHEN c.id % 20 = 0 THEN 'notify' ELSE 'skip' END, 'when', 'evaluator-1', c.created_at,
       CASE WHEN c.id % 100 = 0 THEN 0.8 END, CASE WHEN c.id % 100 = 0 THEN c.id / 100 END, c.created_at,
       CASE WHEN split_part(c.source, '-', 2)::int % 2 = 0 THEN 'owner-' || split_part(c.source, '-', 2)::int % 1000 ELSE '' END
FROM changes c WHERE c.eval_status = 'done'
RETURNING created_at, decision, step, owner, confidence, model_call_id)
SELECT count_evaluations(array_agg(created_at), array_agg(decision), array_agg(step), array_agg(owner), array_agg(confidence),
                         array_agg(model_call_id))
FROM ins
GROUP BY date_trunc('day', created_at, 'UTC'); -- a day's rows per call, not 10 million in one array

INSERT INTO notifications (dedupe_key, source, record_id, watch, sink, change_id, content_hash, title, payload, status,
                           attempts, created_at, delivered_at, last_attempt_at, dead_at, last_error, next_attempt_at, owner)
SELECT c.source || '/' || c.record_id || '/w/v' || c.id, c.source, c.record_id, 'w', (ARRAY['log', 'hook', 'mail'])[1 + c.id % 3],
       c.id, c.new_hash, 't', '{}', CASE WHEN c.id % 2000 = 0 THEN 'dead' ELSE 'delivered' END,
       CASE WHEN c.id % 2000 = 0 THEN 8 ELSE 1 END, c.created_at,
       CASE WHEN c.id % 2000 <> 0 THEN c.created_at + interval '1 second' END, c.created_at + interval '1 second',
       CASE WHEN c.id % 2000 = 0 THEN c.created_at + interval '1 second' END,
       CASE WHEN c.id % 2000 = 0 THEN 'gave up after 8 attempts' END, c.created_at,
       CASE WHEN split_part(c.source, '-', 2)::int % 2 = 0 THEN 'owner-' || split_part(c.source, '-', 2)::int % 1000 ELSE '' END
FROM changes c WHERE c.id % 20 = 0 AND c.eval_status = 'done';

DO $$ DECLARE r record; BEGIN
    -- An index of a partitioned table reads "ON ONLY": build it on every partition.
    FOR r IN SELECT indexdef FROM set_aside LOOP EXECUTE replace(r.indexdef, ' ON ONLY ', ' ON '); END LOOP;
END $$;
DROP TABLE set_aside;
