-- Materialize every snapshot a created change left to its record (the
-- writer keeps them resolvable), then require it again.
UPDATE changes c SET record = record_snapshot(r)
FROM records r
WHERE c.record IS NULL AND r.source = c.source AND r.record_id = c.record_id AND r.version = c.version;
DROP VIEW IF EXISTS changes_with_record;
ALTER TABLE changes ALTER COLUMN record SET NOT NULL;
DROP FUNCTION IF EXISTS record_snapshot(records);
DROP FUNCTION IF EXISTS record_snapshot_time(timestamptz);
