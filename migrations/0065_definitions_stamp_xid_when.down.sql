-- Back to migration 33's triggers: the xid stamped on every insert and
-- update, the WHEN of version 65 dropped.
DROP TRIGGER source_definitions_stamp_xid ON source_definitions;
DROP TRIGGER watches_stamp_xid ON watches;
DROP TRIGGER definition_deletions_stamp_xid ON definition_deletions;
CREATE TRIGGER source_definitions_stamp_xid BEFORE INSERT OR UPDATE ON source_definitions
    FOR EACH ROW EXECUTE FUNCTION definitions_stamp_xid();
CREATE TRIGGER watches_stamp_xid BEFORE INSERT OR UPDATE ON watches
    FOR EACH ROW EXECUTE FUNCTION definitions_stamp_xid();
CREATE TRIGGER definition_deletions_stamp_xid BEFORE INSERT OR UPDATE ON definition_deletions
    FOR EACH ROW EXECUTE FUNCTION definitions_stamp_xid();
