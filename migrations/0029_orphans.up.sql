-- lookout schema, version 29: what a user made outlives the operator's
-- files (docs/config.md#orphaned-sources, docs/schema.md#definitions).
--
-- 1. watches no longer follow their source's deletion. Migration 13's
--    ON DELETE CASCADE deleted every watch of a source whose file left
--    the configuration directory, the ones users made through the API
--    included, with no audit row: a daemon started with another
--    directory (a wrong ConfigMap, a laptop) erased them. The foreign key
--    stays, without the cascade: a source is deleted only after its
--    watches, by the code that owns them (definitions.Apply deletes the
--    operator's own and orphans a source users still watch;
--    Store.DeleteSource deletes the watches of the owner's source).
--    A release-v0.1.0 binary removing a file source still sends one
--    DELETE for the source and counts on the cascade: on this schema it
--    fails (a foreign key violation), its apply is refused and it runs on
--    the definitions as they are, which is what a rolling upgrade wants.
--
-- 2. source_definitions.orphaned_at: set when the file of a source that
--    users still watch left the directory (the source is kept, not run
--    by the syncer, shown as orphaned by the API, MCP and the admin page);
--    cleared when a file declares it again (adopted, its watches intact).
--
-- 3. config_generations: one row per applied directory that differs from
--    the one before it, with the hash of its definitions, so that a
--    daemon whose directory differs from the applied one does not
--    silently win (`apply --force`, or a warning in its /readyz).
--
-- 4. audit_log.via gains 'config': the orphan and adopt rows written by
--    the apply of the configuration directory.
--
-- 5. report_sources appends orphaned_at, and its state says 'orphaned'
--    for such a source.
--
-- Everything is added (a nullable column, a table, a wider CHECK, a view
-- column at the end); the foreign key is re-created, which validates it
-- against watches (a scan of a small table).

ALTER TABLE watches DROP CONSTRAINT watches_source_fkey;
ALTER TABLE watches ADD CONSTRAINT watches_source_fkey
    FOREIGN KEY (source) REFERENCES source_definitions (name);

ALTER TABLE source_definitions ADD COLUMN orphaned_at timestamptz;
CREATE INDEX source_definitions_orphaned_idx ON source_definitions (name) WHERE orphaned_at IS NOT NULL;

CREATE TABLE config_generations (
    generation  bigint      PRIMARY KEY,
    -- sha256 of the directory's definitions (definitions.DirectoryHash):
    -- every source's and watch's name, file and content hash.
    hash        text        NOT NULL,
    -- config_version.version after the apply.
    version     bigint      NOT NULL,
    -- set when `apply --force` replaced a different applied generation.
    forced      boolean     NOT NULL DEFAULT false,
    -- who applied it: the binary, the host and the directory.
    applied_by  text        NOT NULL DEFAULT '',
    applied_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX config_generations_hash_idx ON config_generations (hash, generation);

ALTER TABLE audit_log DROP CONSTRAINT audit_log_via_check;
ALTER TABLE audit_log ADD CONSTRAINT audit_log_via_check CHECK (via IN ('api', 'mcp', 'cli', 'admin', 'config'));

CREATE OR REPLACE VIEW report_sources AS
SELECT s.name,
       s.connector,
       s.status,
       CASE WHEN d.orphaned_at IS NOT NULL THEN 'orphaned'
            WHEN s.lease_owner IS NOT NULL AND s.lease_expires_at >= now() THEN 'running'
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
       coalesce(d.paused, false)                            AS definition_paused,
       d.orphaned_at
FROM sources s
LEFT JOIN source_definitions d ON d.name = s.name;
