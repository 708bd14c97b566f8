DROP VIEW IF EXISTS report_sources;
CREATE VIEW report_sources AS
SELECT s.name,
       s.connector,
       s.status,
       CASE WHEN s.lease_owner IS NOT NULL AND s.lease_expires_at >= now() THEN 'running'
            WHEN s.status <> 'active' THEN s.status
            WHEN s.lease_owner IS NOT NULL THEN 'lease expired'
            WHEN s.run_requested_at IS NOT NULL THEN 'requested'
            WHEN s.next_run_at <= now() THEN 'due'
            ELSE 'scheduled' END                            AS state,
       s.status_reason,
       s.schedule,
       s.interval_reason,
       s.next_run_at,
       CASE WHEN s.status = 'active' AND s.next_run_at < now()
                 AND (s.lease_owner IS NULL OR s.lease_expires_at < now())
            THEN round(extract(epoch FROM now() - s.next_run_at)::numeric, 3) ELSE 0 END AS lateness_seconds,
       s.last_run_at,
       s.last_success_at,
       s.last_change_at,
       s.failure_count,
       s.last_error,
       s.lease_owner,
       s.lease_expires_at,
       s.run_id,
       s.run_requested_at,
       coalesce(d.owner, '')                                AS owner,
       d.managed_by,
       coalesce(d.paused, false)                            AS definition_paused
FROM sources s
LEFT JOIN source_definitions d ON d.name = s.name;
COMMENT ON VIEW report_sources IS 'every source with its status, state, schedule, lateness, failures, lease and last error';

DELETE FROM audit_log WHERE via = 'config';
ALTER TABLE audit_log DROP CONSTRAINT audit_log_via_check;
ALTER TABLE audit_log ADD CONSTRAINT audit_log_via_check CHECK (via IN ('api', 'mcp', 'cli', 'admin'));

DROP TABLE IF EXISTS config_generations;

DROP INDEX IF EXISTS source_definitions_orphaned_idx;
ALTER TABLE source_definitions DROP COLUMN IF EXISTS orphaned_at;

ALTER TABLE watches DROP CONSTRAINT watches_source_fkey;
ALTER TABLE watches ADD CONSTRAINT watches_source_fkey
    FOREIGN KEY (source) REFERENCES source_definitions (name) ON DELETE CASCADE;
