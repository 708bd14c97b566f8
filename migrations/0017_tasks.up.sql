-- Task watches (docs/tasks.md): claims and executions of the tasks a
-- source's tasks: block takes. One row per task version and task watch (the
-- idempotency key); a retry is a new attempt of the same row. Owned by
-- internal/tasks (named queries in internal/tasks/queries.go).
CREATE TABLE task_runs (
    id                bigserial   PRIMARY KEY,
    source            text        NOT NULL,
    task              text        NOT NULL,
    record_id         text        NOT NULL,
    record_version    integer     NOT NULL,
    content_version   text        NOT NULL,
    idempotency_key   text        NOT NULL UNIQUE,
    title             text,
    attempt           integer     NOT NULL DEFAULT 1,
    run_id            text        NOT NULL,
    sync_run_id       bigint,
    status            text        NOT NULL DEFAULT 'claimed'
                      CHECK (status IN ('claimed', 'confirming', 'running', 'completed', 'failed', 'released', 'lost', 'expired')),
    claimed_by        text        NOT NULL,
    claimed_at        timestamptz NOT NULL,
    claim_expires_at  timestamptz NOT NULL,
    started_at        timestamptz,
    finished_at       timestamptz,
    executions        integer     NOT NULL DEFAULT 0,
    failures          integer     NOT NULL DEFAULT 0,
    retry_at          timestamptz,
    executor          text        NOT NULL CHECK (executor IN ('command', 'webhook')),
    exit_code         integer,
    result            jsonb,
    stderr_tail       text,
    last_error        text,
    tool_action       text        CHECK (tool_action IN ('claim', 'complete', 'fail', 'release')),
    tool_error        text,
    tool_due_at       timestamptz,
    report_token_hash text,
    report            jsonb,
    reported_at       timestamptz,
    history           jsonb       NOT NULL DEFAULT '[]'::jsonb,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now()
);

-- The runs of a record, newest first (syncer tasks, the pass's lookup).
CREATE INDEX task_runs_record_idx ON task_runs (source, record_id, id DESC);
-- Active claims by expiry: the recovery of expired claims reads only these.
CREATE INDEX task_runs_active_idx ON task_runs (claim_expires_at)
    WHERE status IN ('claimed', 'confirming', 'running');
-- Finished runs whose state the tool does not show yet, by when the write
-- is due (the maintenance of any replica writes it).
CREATE INDEX task_runs_tool_due_idx ON task_runs (tool_due_at) WHERE tool_action IS NOT NULL;

COMMENT ON COLUMN task_runs.idempotency_key IS 'source:record_id:v<content version>:task; the same on every attempt';

-- Every task run: which task, which run, who claimed it, how long it ran,
-- what the executor returned, attempts, why it failed, and whether it was
-- executed more than once.
CREATE VIEW report_task_runs AS
SELECT t.id,
       t.source,
       t.task,
       t.record_id,
       t.title,
       t.run_id,
       t.status,
       t.attempt,
       t.executions,
       t.failures                                        AS retry_count,
       t.executions > 1                                  AS executed_more_than_once,
       t.claimed_by,
       t.claimed_at,
       t.claim_expires_at,
       t.started_at,
       t.finished_at,
       t.finished_at - t.started_at                      AS ran_for,
       t.executor,
       t.exit_code,
       t.result,
       t.last_error,
       t.retry_at,
       t.tool_action IS NULL                             AS tool_in_sync,
       t.tool_error,
       t.idempotency_key,
       t.sync_run_id
FROM task_runs t
ORDER BY t.updated_at DESC, t.id DESC;

COMMENT ON VIEW report_task_runs IS 'task watches: every task run, who claimed it, how long it ran, what the executor returned, attempts, why it failed, whether it ran more than once';

CREATE OR REPLACE VIEW report_stuck AS
SELECT * FROM (
-- A source claim whose lease expired: its holder died or hangs. The next
-- claim of an active source takes it over; a paused or disabled source
-- keeps the stale lease (and a 'running' run) until resumed.
SELECT 'source_lease_expired'::text                     AS kind,
       s.name                                           AS source,
       s.run_id                                         AS id,
       NULL::text                                       AS record_id,
       s.lease_owner                                    AS owner,
       s.lease_expires_at                               AS since,
       now() - s.lease_expires_at                       AS age,
       s.stuck_after_seconds,
       'lease of run ' || coalesce(s.run_id::text, '?') || ' held by ' || s.lease_owner || ' expired; source is ' || s.status
                                                        AS detail
FROM sources s
WHERE s.lease_owner IS NOT NULL AND s.lease_expires_at < now()
UNION ALL
-- A run still 'running' after stuck_after_seconds.
SELECT 'run_too_long', r.source, r.id, NULL, r.owner, r.started_at, now() - r.started_at,
       coalesce(s.stuck_after_seconds, 1800),
       'run ' || r.id || ' (' || r.reason || ') running since ' || to_char(r.started_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')
       || ', ' || r.pages || ' page(s), ' || r.items_seen || ' item(s) so far'
FROM sync_runs r
LEFT JOIN sources s ON s.name = r.source
WHERE r.status = 'running'
  AND r.started_at < now() - make_interval(secs => coalesce(s.stuck_after_seconds, 1800))
UNION ALL
-- A claimed batch of changes whose evaluator stopped before committing.
SELECT 'change_lease_expired', c.source, c.id, c.record_id, c.eval_owner, c.eval_lease_expires_at,
       now() - c.eval_lease_expires_at, coalesce(s.stuck_after_seconds, 1800),
       'claimed by ' || c.eval_owner || ' (attempt ' || c.eval_attempts || '), lease expired'
FROM changes c
LEFT JOIN sources s ON s.name = c.source
WHERE c.eval_status = 'pending' AND c.eval_owner IS NOT NULL AND c.eval_lease_expires_at < now()
UNION ALL
-- A change not evaluated stuck_after_seconds after it was recorded: no
-- evaluator runs, or it is held (model down, budget spent) or blocked
-- behind an earlier change of its record.
SELECT 'change_pending_too_long', c.source, c.id, c.record_id, c.eval_owner, c.created_at,
       now() - c.created_at, coalesce(s.stuck_after_seconds, 1800),
       c.kind || ' v' || c.version || ', ' || c.eval_attempts || ' attempt(s)'
       || CASE WHEN c.eval_next_at > now()
               THEN ', held until ' || to_char(c.eval_next_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') ELSE '' END
       || coalesce(': ' || c.eval_error, '')
FROM changes c
LEFT JOIN sources s ON s.name = c.source
WHERE c.eval_status = 'pending'
  AND c.created_at < now() - make_interval(secs => coalesce(s.stuck_after_seconds, 1800))
UNION ALL
-- A notification being sent whose deliverer stopped before recording.
SELECT 'notification_lease_expired', n.source, n.id, n.record_id, n.lease_owner, n.lease_expires_at,
       now() - n.lease_expires_at, coalesce(s.stuck_after_seconds, 1800),
       'sink ' || n.sink || ', attempt ' || n.attempts || ' claimed by ' || n.lease_owner || ', lease expired'
FROM notifications n
LEFT JOIN sources s ON s.name = n.source
WHERE n.status = 'pending' AND n.lease_owner IS NOT NULL AND n.lease_expires_at < now()
UNION ALL
-- A notification due for longer than stuck_after_seconds that no deliverer
-- claimed: no evaluator daemon runs, or none knows its sink.
SELECT 'notification_not_claimed', n.source, n.id, n.record_id, n.lease_owner, n.next_attempt_at,
       now() - n.next_attempt_at, coalesce(s.stuck_after_seconds, 1800),
       'sink ' || n.sink || ' (' || n.attempts || ' attempt(s)), due since '
       || to_char(n.next_attempt_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')
FROM notifications n
LEFT JOIN sources s ON s.name = n.source
WHERE n.status = 'pending' AND n.lease_owner IS NULL
  AND n.next_attempt_at < now() - make_interval(secs => coalesce(s.stuck_after_seconds, 1800))
UNION ALL
-- A digest match whose period ended stuck_after_seconds ago and that no
-- digester folded.
SELECT 'digest_overdue', n.source, n.id, n.record_id, NULL, n.digest_due_at,
       now() - n.digest_due_at, coalesce(s.stuck_after_seconds, 1800),
       'held for a digest of watch ' || n.watch || ' to sink ' || n.sink || ', period ended '
       || to_char(n.digest_due_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')
FROM notifications n
LEFT JOIN sources s ON s.name = n.source
WHERE n.status = 'held'
  AND n.digest_due_at < now() - make_interval(secs => coalesce(s.stuck_after_seconds, 1800))
UNION ALL
-- A task claim whose claim_expires_at passed while it was claimed,
-- confirming or running: its executor crashed or its syncer died. The task
-- runner of any syncer replica recovers it (back to todo, or failed, per
-- the task's on_expiry) within a minute; listed here until then.
SELECT 'task_claim_expired', t.source, t.id, t.record_id, t.claimed_by, t.claim_expires_at,
       now() - t.claim_expires_at, coalesce(s.stuck_after_seconds, 1800),
       'task ' || t.task || ' ' || t.run_id || ' (' || t.status || ', attempt ' || t.attempt || ') claim expired'
FROM task_runs t
LEFT JOIN sources s ON s.name = t.source
WHERE t.status IN ('claimed', 'confirming', 'running') AND t.claim_expires_at < now()
UNION ALL
-- A task whose state in the tool is behind task_runs for longer than
-- stuck_after_seconds: the write (claim, complete, fail, release) keeps
-- failing; tool_error says why.
SELECT 'task_tool_behind', t.source, t.id, t.record_id, t.claimed_by, t.tool_due_at,
       now() - t.tool_due_at, coalesce(s.stuck_after_seconds, 1800),
       'task ' || t.task || ' ' || t.run_id || ' is ' || t.status || ' but the tool does not show it yet (' || t.tool_action || ')'
       || coalesce(': ' || t.tool_error, '')
FROM task_runs t
LEFT JOIN sources s ON s.name = t.source
WHERE t.tool_action IS NOT NULL AND t.status NOT IN ('claimed', 'confirming', 'running')
  AND t.tool_due_at < now() - make_interval(secs => coalesce(s.stuck_after_seconds, 1800))
) stuck
ORDER BY since, kind, id;


COMMENT ON VIEW report_stuck IS 'expired leases and task claims, runs longer than stuck_after, changes, notifications and task writes waiting longer than it';
