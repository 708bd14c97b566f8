ALTER TABLE sync_runs DROP COLUMN IF EXISTS items_repaired;
