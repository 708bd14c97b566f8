-- lookout schema, version 33: changes to the definitions commit in
-- parallel. Until now every change bumped the one config_version row,
-- whose row lock, held until the commit, ordered the changes: creates of
-- every owner ran one at a time. The version a change carries now comes
-- from a sequence (no lock), and a daemon follows the definitions by
-- MVCC snapshot instead of by number: every row records the transaction
-- that wrote it last (xid), and a follower reads the rows whose
-- transaction its previous snapshot did not see, so a change that
-- commits late with a smaller version is not missed (see
-- docs/schema.md#definitions and internal/definitions). Owned by package
-- definitions.

-- config_version_seq: the version of each change (display, logs,
-- metrics): the next one after the versions config_version handed out.
CREATE SEQUENCE config_version_seq;
SELECT setval('config_version_seq', greatest(version, 1), version > 0) FROM config_version;

-- xid: the transaction that wrote the row last, stamped by a trigger on
-- every insert and update, whoever writes (a binary, an operator's SQL).
CREATE FUNCTION definitions_stamp_xid() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.xid := pg_current_xact_id();
    RETURN NEW;
END
$$;

ALTER TABLE source_definitions ADD COLUMN xid xid8 NOT NULL DEFAULT pg_current_xact_id();
ALTER TABLE watches ADD COLUMN xid xid8 NOT NULL DEFAULT pg_current_xact_id();
ALTER TABLE definition_deletions ADD COLUMN xid xid8 NOT NULL DEFAULT pg_current_xact_id();
CREATE INDEX source_definitions_xid_idx ON source_definitions (xid);
CREATE INDEX watches_xid_idx ON watches (xid);
CREATE INDEX definition_deletions_xid_idx ON definition_deletions (xid);
CREATE TRIGGER source_definitions_stamp_xid BEFORE INSERT OR UPDATE ON source_definitions
    FOR EACH ROW EXECUTE FUNCTION definitions_stamp_xid();
CREATE TRIGGER watches_stamp_xid BEFORE INSERT OR UPDATE ON watches
    FOR EACH ROW EXECUTE FUNCTION definitions_stamp_xid();
CREATE TRIGGER definition_deletions_stamp_xid BEFORE INSERT OR UPDATE ON definition_deletions
    FOR EACH ROW EXECUTE FUNCTION definitions_stamp_xid();

-- The highest transaction of a definition deletion pruned: a follower
-- whose snapshot may not have seen it (its xmin is not past it) loads the
-- definitions whole instead of catching up. deletions_pruned_through
-- (by version) is kept for the binaries before this migration.
ALTER TABLE config_version ADD COLUMN deletions_pruned_xid xid8 NOT NULL DEFAULT '0';

COMMENT ON COLUMN config_version.version IS 'the config version of the binaries before schema 33; since, the version of a change comes from config_version_seq';
