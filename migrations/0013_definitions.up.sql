-- lookout schema, version 13: definitions in the database. Sources and
-- watches, with their owner and who manages them, are the single truth the
-- daemons read; the configuration directory is loaded into them (see
-- docs/schema.md#definitions and docs/config.md#reload). Owned by package
-- definitions.

-- config_version: one row, bumped in the transaction of every change to a
-- definition. The row lock orders the changes: a reader that sees version
-- V sees every change up to V. NOTIFY on '<schema>.config' is only a
-- wake-up; daemons catch up by version.
CREATE TABLE config_version (
    id          boolean     PRIMARY KEY DEFAULT true CHECK (id),
    version     bigint      NOT NULL DEFAULT 0,
    changed_at  timestamptz NOT NULL DEFAULT now()
);
INSERT INTO config_version (id, version) VALUES (true, 0);

-- source_definitions: one row per source, the validated definition as a
-- source file's keys (watches apart), ${ENV} references unexpanded. The
-- sources table keeps the syncer's state of each (schedule, lease, cursor).
CREATE TABLE source_definitions (
    name            text        PRIMARY KEY,
    -- the user the source belongs to; '' for a shared source declared by
    -- the operator (every file-managed source).
    owner           text        NOT NULL DEFAULT '',
    -- 'file:sources/acme.yaml' or 'api'.
    managed_by      text        NOT NULL,
    connector       text        NOT NULL,
    definition      jsonb       NOT NULL,
    definition_hash text        NOT NULL,
    paused          boolean     NOT NULL DEFAULT false,
    paused_reason   text,
    -- config_version.version of the last change to the row.
    version         bigint      NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX source_definitions_version_idx ON source_definitions (version);
CREATE INDEX source_definitions_owner_idx ON source_definitions (owner, name);
CREATE INDEX source_definitions_managed_by_idx ON source_definitions (managed_by);

-- watches: one row per watch of a source (names are unique per source,
-- whoever owns them). A shared source may carry watches of many owners.
CREATE TABLE watches (
    source          text        NOT NULL REFERENCES source_definitions (name) ON DELETE CASCADE,
    name            text        NOT NULL,
    owner           text        NOT NULL DEFAULT '',
    managed_by      text        NOT NULL,
    definition      jsonb       NOT NULL,
    definition_hash text        NOT NULL,
    paused          boolean     NOT NULL DEFAULT false,
    paused_reason   text,
    version         bigint      NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (source, name)
);
CREATE INDEX watches_version_idx ON watches (version);
CREATE INDEX watches_owner_idx ON watches (owner, source, name);

-- definition_deletions: what was deleted at which version, so that a
-- daemon catching up by version drops it too. (watch '' is the source
-- itself, with its watches.)
CREATE TABLE definition_deletions (
    version     bigint      NOT NULL,
    source      text        NOT NULL,
    watch       text        NOT NULL DEFAULT '',
    owner       text        NOT NULL DEFAULT '',
    managed_by  text        NOT NULL,
    deleted_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX definition_deletions_version_idx ON definition_deletions (version);

-- The owner of the watch that decided, notified or asked ('' for shared
-- operator watches and for rows written before version 13).
ALTER TABLE evaluations ADD COLUMN owner text NOT NULL DEFAULT '';
ALTER TABLE notifications ADD COLUMN owner text NOT NULL DEFAULT '';
ALTER TABLE model_calls ADD COLUMN owner text NOT NULL DEFAULT '';
CREATE INDEX notifications_owner_idx ON notifications (owner, id) WHERE owner <> '';

-- The owner in the reports where a row belongs to one watch (appended:
-- the existing columns keep their places).
CREATE OR REPLACE VIEW report_dead_letters AS
SELECT id, sink, source, watch, record_id, dedupe_key, kind, title, attempts, last_error,
       created_at, last_attempt_at, dead_at, manual_retries, owner
FROM notifications
WHERE status = 'dead'
ORDER BY dead_at DESC NULLS LAST, id DESC;

CREATE OR REPLACE VIEW report_expensive_evaluations AS
SELECT mc.id AS model_call_id,
       mc.created_at,
       mc.purpose,
       mc.source,
       mc.watch,
       mc.record_id,
       mc.change_id,
       mc.model,
       mc.model_digest,
       mc.prompt_version,
       mc.outcome,
       mc.attempt,
       mc.latency_ms,
       mc.prompt_tokens,
       mc.output_tokens,
       mc.prompt_tokens + mc.output_tokens AS total_tokens,
       e.decision,
       e.reason,
       mc.owner
FROM model_calls mc
LEFT JOIN evaluations e ON e.model_call_id = mc.id AND e.change_id = mc.change_id AND e.step = 'model'
ORDER BY mc.latency_ms DESC, mc.prompt_tokens + mc.output_tokens DESC;
