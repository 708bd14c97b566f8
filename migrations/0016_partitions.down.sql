-- Back to plain tables: each partitioned table is rebuilt unpartitioned
-- with its rows, its primary key on id, its unique constraints and the
-- foreign keys migration 16 turned into plain ids (references to pruned
-- rows are set to NULL first, as ON DELETE SET NULL would have done);
-- indexes and views are recreated from their definitions.

DROP INDEX notifications_dedupe_idx; -- the unique constraint comes back in its place

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

-- lookout_unpartition rebuilds table tbl unpartitioned, without the
-- columns drop_cols, with primary key pk and the unique constraints
-- uniques (name => columns).
CREATE FUNCTION pg_temp.lookout_unpartition(tbl text, pk text, uniques text[], drop_cols text[])
RETURNS void LANGUAGE plpgsql AS $f$
DECLARE
    old text := tbl || '_partitioned';
    idx record;
    defs text[] := '{}';
    fks text[] := '{}';
    d text;
    cols text;
    seq text;
    i int;
BEGIN
    SELECT array_agg(replace(pg_get_indexdef(x.indexrelid), ' ON ONLY ', ' ON ') ORDER BY x.indexrelid) INTO defs
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
    EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING STORAGE INCLUDING COMMENTS)', tbl, old);
    FOREACH d IN ARRAY coalesce(drop_cols, '{}') LOOP
        EXECUTE format('ALTER TABLE %I DROP COLUMN %I', tbl, d);
    END LOOP;
    EXECUTE format('ALTER SEQUENCE %s OWNED BY %I.id', seq, tbl);
    SELECT string_agg(quote_ident(attname), ', ' ORDER BY attnum) INTO cols
    FROM pg_attribute WHERE attrelid = tbl::regclass AND attnum > 0 AND NOT attisdropped;
    EXECUTE format('INSERT INTO %I (%s) SELECT %s FROM %I', tbl, cols, cols, old);
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

SELECT pg_temp.lookout_unpartition('changes', 'id', NULL, NULL);
SELECT pg_temp.lookout_unpartition('evaluations', 'id',
    ARRAY['evaluations_change_id_watch_key', 'change_id, watch'], ARRAY['change_created_at']);
SELECT pg_temp.lookout_unpartition('notifications', 'id',
    ARRAY['notifications_dedupe_key_sink_key', 'dedupe_key, sink'], NULL);
SELECT pg_temp.lookout_unpartition('sync_runs', 'id', NULL, NULL);
SELECT pg_temp.lookout_unpartition('model_calls', 'id', NULL, NULL);

-- The foreign keys, with references to pruned rows set to NULL.
UPDATE model_calls m SET change_id = NULL
WHERE change_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM changes c WHERE c.id = m.change_id);
ALTER TABLE model_calls ADD CONSTRAINT model_calls_change_id_fkey
    FOREIGN KEY (change_id) REFERENCES changes (id) ON DELETE SET NULL;
UPDATE verdicts v SET model_call_id = NULL
WHERE model_call_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM model_calls m WHERE m.id = v.model_call_id);
ALTER TABLE verdicts ADD CONSTRAINT verdicts_model_call_id_fkey
    FOREIGN KEY (model_call_id) REFERENCES model_calls (id) ON DELETE SET NULL;
UPDATE briefings b SET model_call_id = NULL
WHERE model_call_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM model_calls m WHERE m.id = b.model_call_id);
ALTER TABLE briefings ADD CONSTRAINT briefings_model_call_id_fkey
    FOREIGN KEY (model_call_id) REFERENCES model_calls (id) ON DELETE SET NULL;
UPDATE notifications n SET digest_id = NULL
WHERE digest_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM notifications s WHERE s.id = n.digest_id);
ALTER TABLE notifications ADD CONSTRAINT notifications_digest_id_fkey
    FOREIGN KEY (digest_id) REFERENCES notifications (id) ON DELETE SET NULL;

DROP TABLE notification_keys;

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
                NULL;
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
