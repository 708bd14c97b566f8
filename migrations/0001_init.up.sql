-- lookout schema, version 1.
--
-- Every table lives in the current schema (search_path), so one database can
-- hold several independent lookout installations (and the test suite gives
-- each test a schema of its own). Column names are a contract: operators
-- query these tables directly; see docs/schema.md.

-- sources: one row per configured source, owned by the syncer. The row is
-- the poll state of the seed: definition, schedule, cursor, lease, failures.
CREATE TABLE sources (
    name              text PRIMARY KEY,
    connector         text        NOT NULL,
    config_hash       text        NOT NULL,
    status            text        NOT NULL DEFAULT 'active'
                      CHECK (status IN ('active', 'paused', 'disabled', 'completed')),
    status_reason     text,
    schedule          text        NOT NULL DEFAULT '',
    interval_seconds  double precision,
    interval_reason   text,
    next_run_at       timestamptz NOT NULL DEFAULT now(),
    last_run_at       timestamptz,
    last_success_at   timestamptz,
    last_change_at    timestamptz,
    cursor            jsonb       NOT NULL DEFAULT '{}'::jsonb,
    failure_count     integer     NOT NULL DEFAULT 0,
    last_error        text,
    lease_owner       text,
    lease_expires_at  timestamptz,
    run_id            bigint,
    run_requested_at  timestamptz,
    stuck_after_seconds integer   NOT NULL DEFAULT 1800,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now()
);

-- The syncer's claim query: active sources that are due, or whose lease expired.
CREATE INDEX sources_due_idx ON sources (next_run_at) WHERE status = 'active';

-- sync_runs: the execution record, one row per run of a source.
CREATE TABLE sync_runs (
    id               bigserial PRIMARY KEY,
    source           text        NOT NULL REFERENCES sources (name) ON DELETE CASCADE,
    owner            text        NOT NULL,
    reason           text        NOT NULL DEFAULT 'schedule',
    status           text        NOT NULL DEFAULT 'running'
                     CHECK (status IN ('running', 'succeeded', 'failed', 'not_modified', 'deferred', 'abandoned')),
    started_at       timestamptz NOT NULL DEFAULT now(),
    finished_at      timestamptz,
    duration_ms      double precision,
    pages            integer     NOT NULL DEFAULT 0,
    requests         integer     NOT NULL DEFAULT 0,
    items_seen       integer     NOT NULL DEFAULT 0,
    items_created    integer     NOT NULL DEFAULT 0,
    items_updated    integer     NOT NULL DEFAULT 0,
    items_unchanged  integer     NOT NULL DEFAULT 0,
    items_deleted    integer     NOT NULL DEFAULT 0,
    rate_limit_waits integer     NOT NULL DEFAULT 0,
    cursor_before    jsonb,
    cursor_after     jsonb,
    error            text
);

CREATE INDEX sync_runs_source_started_idx ON sync_runs (source, started_at DESC);
CREATE INDEX sync_runs_running_idx ON sync_runs (started_at) WHERE status = 'running';

-- records: the normalized mirror of external items, one row per (source, id).
-- No foreign key to sources: a per-row FK check costs as much as the row on
-- bulk mirroring; the syncer only writes records of sources it holds a
-- lease on.
CREATE TABLE records (
    source              text        NOT NULL,
    record_id           text        NOT NULL,
    version             integer     NOT NULL DEFAULT 1,
    content_hash        text        NOT NULL,
    title               text,
    body                text,
    url                 text,
    author              text,
    status              text,
    labels              text[]      NOT NULL DEFAULT '{}',
    external_created_at timestamptz,
    external_updated_at timestamptz,
    extra               jsonb       NOT NULL DEFAULT '{}'::jsonb,
    raw                 jsonb,
    first_seen_at       timestamptz NOT NULL DEFAULT now(),
    synced_at           timestamptz NOT NULL DEFAULT now(),
    deleted_at          timestamptz,
    last_run_id         bigint,
    PRIMARY KEY (source, record_id)
);

-- changes: the append-only change log. The evaluator consumes it; NOTIFY on
-- '<schema>.changes' is only a wake-up. record/previous are snapshots of the
-- normalized record after and before the change, so a change is evaluated
-- against the version it describes even when the record moved on since.
CREATE TABLE changes (
    id                bigserial PRIMARY KEY,
    source            text        NOT NULL,
    record_id         text        NOT NULL,
    kind              text        NOT NULL CHECK (kind IN ('created', 'updated', 'deleted')),
    version           integer     NOT NULL,
    old_hash          text,
    new_hash          text,
    changed_fields    text[]      NOT NULL DEFAULT '{}',
    record            jsonb       NOT NULL,
    previous          jsonb,
    run_id            bigint,
    created_at        timestamptz NOT NULL DEFAULT now(),
    -- evaluation state (owned by the evaluator)
    eval_status       text        NOT NULL DEFAULT 'pending'
                      CHECK (eval_status IN ('pending', 'done')),
    eval_owner        text,
    eval_lease_expires_at timestamptz,
    eval_attempts     integer     NOT NULL DEFAULT 0,
    eval_next_at      timestamptz NOT NULL DEFAULT '-infinity',
    eval_error        text,
    evaluated_at      timestamptz
);

-- Pending work only: the evaluator's claim scans this small index, never
-- the evaluated history. The per-record order check and the operator's
-- "what happened to this record" queries use changes_record_idx; time
-- windows (replay, retention) use a BRIN index, nearly free to maintain on
-- an append-only table.
CREATE INDEX changes_pending_idx ON changes (id) WHERE eval_status = 'pending';
CREATE INDEX changes_record_idx ON changes (source, record_id, id);
CREATE INDEX changes_created_at_brin ON changes USING brin (created_at);

-- evaluations: one row per (change, watch): which step decided and why.
CREATE TABLE evaluations (
    id             bigserial PRIMARY KEY,
    change_id      bigint      NOT NULL, -- changes.id (no FK: see records)
    source         text        NOT NULL,
    record_id      text        NOT NULL,
    watch          text        NOT NULL,
    content_hash   text,
    step           text        NOT NULL
                   CHECK (step IN ('filter', 'cache', 'model', 'budget', 'error', 'dedupe')),
    matched        boolean     NOT NULL,
    decision       text        NOT NULL
                   CHECK (decision IN ('notify', 'skip', 'duplicate', 'hold', 'error')),
    reason         text        NOT NULL DEFAULT '',
    urgency        text,
    confidence     double precision,
    model_call_id  bigint,
    notification_id bigint,
    evaluator      text        NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now(),
    UNIQUE (change_id, watch)
);

CREATE INDEX evaluations_watch_created_idx ON evaluations (watch, created_at);
CREATE INDEX evaluations_record_idx ON evaluations (source, record_id);

-- notifications: the outbox. The row is written in the evaluation's
-- transaction; delivery workers claim due rows with SKIP LOCKED.
CREATE TABLE notifications (
    id              bigserial PRIMARY KEY,
    dedupe_key      text        NOT NULL,
    source          text        NOT NULL,
    record_id       text        NOT NULL,
    watch           text        NOT NULL,
    sink            text        NOT NULL,
    change_id       bigint,      -- changes.id (no FK: see records)
    content_hash    text,
    title           text        NOT NULL,
    body            text        NOT NULL DEFAULT '',
    urgency         text        NOT NULL DEFAULT 'medium',
    reason          text        NOT NULL DEFAULT '',
    payload         jsonb       NOT NULL,
    status          text        NOT NULL DEFAULT 'pending'
                    CHECK (status IN ('pending', 'delivered', 'dead', 'digested')),
    attempts        integer     NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    lease_owner     text,
    lease_expires_at timestamptz,
    last_error      text,
    delivered_at    timestamptz,
    duplicates_suppressed integer NOT NULL DEFAULT 0,
    created_at      timestamptz NOT NULL DEFAULT now(),
    -- one row per sink: a failing sink never blocks another's delivery.
    UNIQUE (dedupe_key, sink)
);

CREATE INDEX notifications_due_idx ON notifications (next_attempt_at) WHERE status = 'pending';
CREATE INDEX notifications_record_idx ON notifications (source, record_id, watch, created_at DESC);
