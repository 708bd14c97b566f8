ALTER TABLE config_version DROP COLUMN deletions_pruned_xid;
COMMENT ON COLUMN config_version.version IS NULL;
DROP TRIGGER definition_deletions_stamp_xid ON definition_deletions;
DROP TRIGGER watches_stamp_xid ON watches;
DROP TRIGGER source_definitions_stamp_xid ON source_definitions;
ALTER TABLE definition_deletions DROP COLUMN xid;
ALTER TABLE watches DROP COLUMN xid;
ALTER TABLE source_definitions DROP COLUMN xid;
DROP FUNCTION definitions_stamp_xid();
-- The binaries before 33 bump config_version: it goes on after the
-- versions the sequence handed out.
UPDATE config_version SET version = greatest(version, (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM config_version_seq));
DROP SEQUENCE config_version_seq;
