DELETE FROM audit_log WHERE via = 'me';
ALTER TABLE audit_log DROP CONSTRAINT audit_log_via_check;
ALTER TABLE audit_log ADD CONSTRAINT audit_log_via_check CHECK (via IN ('api', 'mcp', 'cli', 'admin', 'config'));
DROP TABLE sign_in_links;
