-- A created change no longer copies the record's snapshot: while the record
-- is still at the change's version, records holds that version, and
-- changes.record is NULL. The writer (internal/changes) materializes the
-- snapshot into the change in the transaction that moves the record on (an
-- update or a deletion), so every change still describes its own version.
-- record_snapshot(records) is the snapshot a change stores, built from the
-- record's columns; changes_with_record shows every change with its
-- snapshot, whichever of the two places holds it.
ALTER TABLE changes ALTER COLUMN record DROP NOT NULL;

-- A time as the canonical snapshot writes it (Go's RFC 3339 with
-- nanoseconds, in UTC: no trailing zeros in the fraction, no fraction
-- when it is zero).
CREATE FUNCTION record_snapshot_time(t timestamptz) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS')
           || coalesce('.' || nullif(rtrim(to_char(t AT TIME ZONE 'UTC', 'US'), '0'), ''), '')
           || 'Z'
$$;

-- The canonical snapshot of a record row (normalize.Record.Fields): the
-- same jsonb value a change would have stored. NULL for a NULL row (the
-- missing side of an outer join).
CREATE FUNCTION record_snapshot(r records) RETURNS jsonb
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN r.record_id IS NOT NULL THEN jsonb_build_object(
        'id', r.record_id,
        'title', coalesce(r.title, ''),
        'body', coalesce(r.body, ''),
        'url', coalesce(r.url, ''),
        'author', coalesce(r.author, ''),
        'status', coalesce(r.status, ''),
        'labels', to_jsonb(r.labels),
        'created_at', record_snapshot_time(r.external_created_at),
        'updated_at', record_snapshot_time(r.external_updated_at),
        'extra', r.extra) END
$$;

-- Every change with the snapshot of its version in record: the stored one,
-- or for a created change whose record is still at that version, the
-- record's. Read this instead of changes when you want record.
CREATE VIEW changes_with_record AS
SELECT c.id, c.source, c.record_id, c.kind, c.version, c.old_hash, c.new_hash, c.changed_fields,
       coalesce(c.record, record_snapshot(r)) AS record,
       c.previous, c.run_id, c.created_at,
       c.eval_status, c.eval_owner, c.eval_lease_expires_at, c.eval_attempts, c.eval_next_at,
       c.eval_error, c.evaluated_at
FROM changes c
LEFT JOIN records r ON c.record IS NULL AND r.source = c.source AND r.record_id = c.record_id
                   AND r.version = c.version;

COMMENT ON VIEW changes_with_record IS 'changes with the snapshot of the version each describes in record (a created change whose record has not changed since stores none: the record holds it)';
