-- lookout schema, version 34: the snapshot of a record from its columns,
-- for Citus. record_snapshot(records) (migration 11) takes the table's
-- row type; on a Citus worker a record row is a shard's
-- (records_102040), for which there is no such function ("function
-- record_snapshot(records_102040) does not exist"), so every statement
-- that called it failed there (docs/scaling.md). record_snapshot_of takes
-- the record's columns: the same jsonb value, on one PostgreSQL and on
-- every shard. It calls built-in functions only: a shard's statement
-- runs on a worker under that connection's search_path, where another
-- function of the schema (record_snapshot_time) is not found. The times
-- are written as record_snapshot_time writes them. record_snapshot(records)
-- stays for the binaries before this migration. Owned by package changes.
CREATE FUNCTION record_snapshot_of(record_id text, title text, body text, url text, author text, status text,
                                   labels text[], external_created_at timestamptz, external_updated_at timestamptz,
                                   extra jsonb) RETURNS jsonb
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN record_id IS NOT NULL THEN jsonb_build_object(
        'id', record_id,
        'title', coalesce(title, ''),
        'body', coalesce(body, ''),
        'url', coalesce(url, ''),
        'author', coalesce(author, ''),
        'status', coalesce(status, ''),
        'labels', to_jsonb(labels),
        'created_at', to_char(external_created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS')
                      || coalesce('.' || nullif(rtrim(to_char(external_created_at AT TIME ZONE 'UTC', 'US'), '0'), ''), '')
                      || 'Z',
        'updated_at', to_char(external_updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS')
                      || coalesce('.' || nullif(rtrim(to_char(external_updated_at AT TIME ZONE 'UTC', 'US'), '0'), ''), '')
                      || 'Z',
        'extra', extra) END
$$;

CREATE OR REPLACE VIEW changes_with_record AS
SELECT c.id, c.source, c.record_id, c.kind, c.version, c.old_hash, c.new_hash, c.changed_fields,
       coalesce(c.record, record_snapshot_of(r.record_id, r.title, r.body, r.url, r.author, r.status, r.labels,
                                             r.external_created_at, r.external_updated_at, r.extra)) AS record,
       c.previous, c.run_id, c.created_at,
       c.eval_status, c.eval_owner, c.eval_lease_expires_at, c.eval_attempts, c.eval_next_at,
       c.eval_error, c.evaluated_at
FROM changes c
LEFT JOIN records r ON c.record IS NULL AND r.source = c.source AND r.record_id = c.record_id
                   AND r.version = c.version;
