-- lookout schema, version 65: the definitions tables' xid triggers
-- (migration 33) fire only when the row does not already carry the
-- writing transaction's id. An insert takes the column's default,
-- pg_current_xact_id(), so the trigger had nothing to change there: its
-- WHEN now skips the call of the PL/pgSQL function on every insert that
-- leaves xid to the default (every create through the API, the
-- directory's loads). An update keeps the row's old xid in NEW unless it
-- sets one, so it still fires; an insert or update that writes another
-- xid explicitly (an operator's SQL) is still stamped. Owned by package
-- definitions.
DROP TRIGGER source_definitions_stamp_xid ON source_definitions;
DROP TRIGGER watches_stamp_xid ON watches;
DROP TRIGGER definition_deletions_stamp_xid ON definition_deletions;
CREATE TRIGGER source_definitions_stamp_xid BEFORE INSERT OR UPDATE ON source_definitions
    FOR EACH ROW WHEN (NEW.xid IS DISTINCT FROM pg_current_xact_id()) EXECUTE FUNCTION definitions_stamp_xid();
CREATE TRIGGER watches_stamp_xid BEFORE INSERT OR UPDATE ON watches
    FOR EACH ROW WHEN (NEW.xid IS DISTINCT FROM pg_current_xact_id()) EXECUTE FUNCTION definitions_stamp_xid();
CREATE TRIGGER definition_deletions_stamp_xid BEFORE INSERT OR UPDATE ON definition_deletions
    FOR EACH ROW WHEN (NEW.xid IS DISTINCT FROM pg_current_xact_id()) EXECUTE FUNCTION definitions_stamp_xid();
