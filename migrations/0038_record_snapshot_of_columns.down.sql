CREATE OR REPLACE VIEW changes_with_record AS
SELECT c.id, c.source, c.record_id, c.kind, c.version, c.old_hash, c.new_hash, c.changed_fields,
       coalesce(c.record, record_snapshot(r)) AS record,
       c.previous, c.run_id, c.created_at,
       c.eval_status, c.eval_owner, c.eval_lease_expires_at, c.eval_attempts, c.eval_next_at,
       c.eval_error, c.evaluated_at
FROM changes c
LEFT JOIN records r ON c.record IS NULL AND r.source = c.source AND r.record_id = c.record_id
                   AND r.version = c.version;
DROP FUNCTION IF EXISTS record_snapshot_of(text, text, text, text, text, text, text[], timestamptz, timestamptz, jsonb);
