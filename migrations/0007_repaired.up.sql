-- Items whose text PostgreSQL cannot store (invalid UTF-8, NUL) are kept
-- with U+FFFD in place of the bad bytes; each run counts them.
ALTER TABLE sync_runs ADD COLUMN items_repaired integer NOT NULL DEFAULT 0;
