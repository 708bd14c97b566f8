-- History that stays bounded: the large append-only tables become
-- partitioned by time (native declarative range partitions, one per UTC
-- week starting on Monday, plus a DEFAULT partition that catches rows of
-- a week without its partition), so that retention drops whole partitions
-- instead of deleting rows. lookout's maintenance (internal/retention)
-- creates the partitions ahead and drops them past their window; see
-- docs/schema.md#partitioned-tables and docs/config.md#retention.
--
--   changes        PARTITION BY RANGE (created_at)         PRIMARY KEY (id, created_at)
--   evaluations    PARTITION BY RANGE (change_created_at)  PRIMARY KEY (id, change_created_at)
--                  (change_created_at, new: the created_at of the change decided, so that
--                  UNIQUE (change_id, watch, change_created_at) is still one decision per
--                  change and watch, and a change's evaluations sit in its week)
--   notifications  PARTITION BY RANGE (created_at)         PRIMARY KEY (id, created_at)
--                  (the dedupe rule UNIQUE (dedupe_key, sink) moves to notification_keys)
--   sync_runs      PARTITION BY RANGE (started_at)         PRIMARY KEY (id, started_at)
--   model_calls    PARTITION BY RANGE (created_at)         PRIMARY KEY (id, created_at)
--
-- A primary key of a partitioned table must hold the partition key; ids
-- still come from each table's one sequence, so an id names one row. The
-- foreign keys into these tables (model_calls.change_id,
-- verdicts.model_call_id, briefings.model_call_id,
-- notifications.digest_id) cannot point at a partitioned table's id alone:
-- they become plain ids, like evaluations.change_id always was.
--
-- The conversion rewrites each table (create the partitioned parent, move
-- the rows, drop the old table), recreating its indexes from their
-- definitions and the views that read it from theirs, so views and
-- indexes added by any earlier migration carry over. It holds an ACCESS
-- EXCLUSIVE lock on the five tables meanwhile: stop the daemons (or accept
-- they wait); docs/performance.md gives its time on 2 million changes.

-- notification_keys: the dedupe rule, one row per (dedupe_key, sink) ever
-- enqueued and not yet pruned, written by outbox.Enqueue in the
-- notification's statement; (notification_id, created_at) is the row it
-- suppresses duplicates into (its primary key: the lookup prunes
-- partitions).
CREATE TABLE notification_keys (
    dedupe_key      text        NOT NULL,
    sink            text        NOT NULL,
    notification_id bigint      NOT NULL,
    created_at      timestamptz NOT NULL,
    PRIMARY KEY (dedupe_key, sink)
);
INSERT INTO notification_keys (dedupe_key, sink, notification_id, created_at)
SELECT dedupe_key, sink, id, created_at FROM notifications;

-- The week partition of t holding time ts: t_pYYYYMMDD (its Monday, UTC).
CREATE FUNCTION pg_temp.lookout_week(ts timestamptz) RETURNS timestamptz
LANGUAGE sql IMMUTABLE AS $$ SELECT date_trunc('week', ts AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' $$;

-- Views reading the five tables (and views over those), to recreate after.
CREATE TEMP TABLE lookout_views AS
WITH RECURSIVE dep(oid) AS (
    SELECT r.ev_class FROM pg_rewrite r
    JOIN pg_depend d ON d.classid = 'pg_rewrite'::regclass AND d.objid = r.oid
    WHERE d.refobjid IN ('changes'::regclass, 'evaluations'::regclass, 'notifications'::regclass,
                         'sync_runs'::regclass, 'model_calls'::regclass)
      AND r.ev_class <> d.refobjid
    UNION
    SELECT r.ev_class FROM pg_rewrite r
    JOIN pg_depend d ON d.classid = 'pg_rewrite'::regclass AND d.objid = r.oid
    JOIN dep ON d.refobjid = dep.oid
    WHERE r.ev_class <> dep.oid
)
SELECT c.oid, c.relname::text AS name, pg_get_viewdef(c.oid) AS def,
       obj_description(c.oid, 'pg_class') AS comment
FROM (SELECT DISTINCT oid FROM dep) v JOIN pg_class c ON c.oid = v.oid AND c.relkind = 'v';

DO $$
DECLARE
    v record;
BEGIN
    FOR v IN SELECT name FROM lookout_views ORDER BY oid LOOP
        EXECUTE format('DROP VIEW IF EXISTS %I CASCADE', v.name);
    END LOOP;
END $$;

-- Foreign keys into the five tables become plain ids.
DO $$
DECLARE
    fk record;
BEGIN
    FOR fk IN
        SELECT conname, conrelid::regclass AS tbl FROM pg_constraint
        WHERE contype = 'f' AND confrelid IN ('changes'::regclass, 'evaluations'::regclass, 'notifications'::regclass,
                                              'sync_runs'::regclass, 'model_calls'::regclass)
    LOOP
        EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', fk.tbl, fk.conname);
    END LOOP;
END $$;

-- lookout_partition rebuilds table tbl partitioned by range of key, with
-- primary key pk (and the unique constraints uniques, name => columns),
-- extra columns extra_cols, rows from select_sql (default: every row of
-- the old table). Indexes that back no constraint and foreign keys to
-- other tables are recreated from their definitions.
CREATE FUNCTION pg_temp.lookout_partition(tbl text, key text, pk text, uniques text[], extra_cols text, select_sql text)
RETURNS void LANGUAGE plpgsql AS $f$
DECLARE
    old text := tbl || '_unpartitioned';
    idx record;
    defs text[] := '{}';
    fks text[] := '{}';
    d text;
    seq text;
    lo timestamptz;
    wk timestamptz;
    i int;
BEGIN
    SELECT array_agg(pg_get_indexdef(x.indexrelid) ORDER BY x.indexrelid) INTO defs
    FROM pg_index x
    WHERE x.indrelid = tbl::regclass
      AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = x.indexrelid AND c.conrelid = tbl::regclass);
    SELECT array_agg(format('ALTER TABLE %I ADD CONSTRAINT %I %s', tbl, conname, pg_get_constraintdef(oid))) INTO fks
    FROM pg_constraint WHERE contype = 'f' AND conrelid = tbl::regclass;
    FOR idx IN SELECT x.indexrelid::regclass AS name FROM pg_index x
               WHERE x.indrelid = tbl::regclass
                 AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = x.indexrelid AND c.conrelid = tbl::regclass)
    LOOP
        EXECUTE format('DROP INDEX %s', idx.name);
    END LOOP;
    FOR idx IN SELECT conname FROM pg_constraint WHERE conrelid = tbl::regclass AND contype IN ('p', 'u', 'f') LOOP
        EXECUTE format('ALTER TABLE %I DROP CONSTRAINT %I', tbl, idx.conname);
    END LOOP;
    seq := pg_get_serial_sequence(tbl, 'id');

    EXECUTE format('ALTER TABLE %I RENAME TO %I', tbl, old);
    EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING STORAGE INCLUDING COMMENTS%s) PARTITION BY RANGE (%I)',
                   tbl, old, coalesce(', ' || extra_cols, ''), key);
    EXECUTE format('ALTER SEQUENCE %s OWNED BY %I.id', seq, tbl);

    -- A partition per week from the oldest row's (at most two years back)
    -- to three weeks ahead; older rows go to the default partition.
    IF select_sql IS NULL THEN
        EXECUTE format('SELECT min(%I) FROM %I', key, old) INTO lo;
    ELSE
        EXECUTE format('SELECT min(%I) FROM (%s) s', key, select_sql) INTO lo;
    END IF;
    lo := greatest(coalesce(lo, now()), now() - interval '104 weeks');
    wk := pg_temp.lookout_week(lo);
    WHILE wk <= pg_temp.lookout_week(now()) + interval '3 weeks' LOOP
        EXECUTE format('CREATE TABLE %I PARTITION OF %I FOR VALUES FROM (%L) TO (%L)',
                       tbl || '_p' || to_char(wk AT TIME ZONE 'UTC', 'YYYYMMDD'), tbl, wk, wk + interval '1 week');
        wk := wk + interval '1 week';
    END LOOP;
    EXECUTE format('CREATE TABLE %I PARTITION OF %I DEFAULT', tbl || '_default', tbl);

    EXECUTE format('INSERT INTO %I %s', tbl, coalesce(select_sql, format('SELECT * FROM %I', old)));
    EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I PRIMARY KEY (%s)', tbl, tbl || '_pkey', pk);
    IF uniques IS NOT NULL THEN
        FOR i IN 1 .. array_length(uniques, 1) BY 2 LOOP
            EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I UNIQUE (%s)', tbl, uniques[i], uniques[i + 1]);
        END LOOP;
    END IF;
    FOREACH d IN ARRAY coalesce(defs, '{}') LOOP
        EXECUTE d;
    END LOOP;
    FOREACH d IN ARRAY coalesce(fks, '{}') LOOP
        EXECUTE d;
    END LOOP;
    EXECUTE format('DROP TABLE %I', old);
    EXECUTE format('ANALYZE %I', tbl);
END $f$;

SELECT pg_temp.lookout_partition('changes', 'created_at', 'id, created_at', NULL, NULL, NULL);
SELECT pg_temp.lookout_partition('evaluations', 'change_created_at', 'id, change_created_at',
    ARRAY['evaluations_change_id_watch_key', 'change_id, watch, change_created_at'],
    'change_created_at timestamptz NOT NULL',
    'SELECT e.*, coalesce(c.created_at, e.created_at) AS change_created_at
     FROM evaluations_unpartitioned e LEFT JOIN changes c ON c.id = e.change_id');
SELECT pg_temp.lookout_partition('notifications', 'created_at', 'id, created_at', NULL, NULL, NULL);
SELECT pg_temp.lookout_partition('sync_runs', 'started_at', 'id, started_at', NULL, NULL, NULL);
SELECT pg_temp.lookout_partition('model_calls', 'created_at', 'id, created_at', NULL, NULL, NULL);

-- The dedupe key is no longer a unique index of notifications: a plain
-- index keeps "the rows of this key" (cookbook question 6) a lookup.
CREATE INDEX notifications_dedupe_idx ON notifications (dedupe_key, sink);

COMMENT ON COLUMN evaluations.change_created_at IS 'the created_at of the change decided: the partition key (a change''s evaluations sit in its week)';
COMMENT ON TABLE notification_keys IS 'the dedupe rule of notifications: one row per (dedupe_key, sink), written with the notification';

-- The views, in an order where each finds the views it reads.
DO $$
DECLARE
    v record;
    left_over int;
    progress boolean;
BEGIN
    LOOP
        progress := false;
        FOR v IN SELECT * FROM lookout_views ORDER BY oid LOOP
            BEGIN
                EXECUTE format('CREATE VIEW %I AS %s', v.name, v.def);
                IF v.comment IS NOT NULL THEN
                    EXECUTE format('COMMENT ON VIEW %I IS %L', v.name, v.comment);
                END IF;
                DELETE FROM lookout_views WHERE oid = v.oid;
                progress := true;
            EXCEPTION WHEN undefined_table THEN
                NULL; -- reads a view not made yet: next round
            END;
        END LOOP;
        SELECT count(*) INTO left_over FROM lookout_views;
        EXIT WHEN left_over = 0;
        IF NOT progress THEN
            RAISE EXCEPTION 'could not recreate % view(s): %', left_over, (SELECT string_agg(name, ', ') FROM lookout_views);
        END IF;
    END LOOP;
END $$;

DROP TABLE lookout_views;
