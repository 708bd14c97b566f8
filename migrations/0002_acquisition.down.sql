DROP INDEX IF EXISTS sources_status_idx;
ALTER TABLE sources DROP COLUMN IF EXISTS status_changed_at;
DROP TABLE IF EXISTS host_limits;
