-- Back to version 27: recreate changes_pending_record_idx as migration 5
-- made it (on every partition of changes).
CREATE INDEX IF NOT EXISTS changes_pending_record_idx ON changes (source, record_id, id) WHERE eval_status = 'pending';
