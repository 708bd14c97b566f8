-- lookout schema, version 60: report_stuck reads an overdue source's
-- owner by a join, as its other rows do.
--
-- Version 45 read the owner of an overdue source (the source_overdue
-- rows) by a subquery correlated with the source. On Citus
-- (docs/scaling.md "On Citus") sources is distributed and
-- source_definitions a local table of the coordinator: Citus plans a join
-- of the two by reading the local rows first, but not a subquery
-- correlated with a distributed row, and the whole view failed there
-- ("direct joins between distributed and local tables are not
-- supported": the stuck page, the overview's count, and taskrunner
-- TestKilledExecutorClaimExpiresAndIsRetried). The LEFT JOIN by name (the
-- key of source_definitions) gives the same owner; on one PostgreSQL the
-- few overdue sources, found through sources_due_idx and
-- sources_run_requested_idx, probe source_definitions_pkey
-- (internal/reports TestStuckAndOverviewReadNoWholeSources). The
-- columns are unchanged.

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
                                                        AS detail,
       d.owner                                          AS definition_owner
FROM sources s
LEFT JOIN source_definitions d ON d.name = s.name
WHERE s.lease_owner IS NOT NULL AND s.lease_expires_at < now()
UNION ALL
-- An active source due (or run-now requested) longer than its
-- stuck_after_seconds and not running: no syncer runs, or the replicas are
-- too few or too busy to keep up (lookout_schedule_lateness_seconds).
SELECT 'source_overdue', s.name, s.run_id, NULL, s.lease_owner, least(s.next_run_at, s.run_requested_at),
       now() - least(s.next_run_at, s.run_requested_at), s.stuck_after_seconds,
       'due since ' || to_char(least(s.next_run_at, s.run_requested_at) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')
       || ' (' || s.schedule || ') and not run: ' || coalesce(s.interval_reason, ''),
       d.owner
FROM sources s
LEFT JOIN source_definitions d ON d.name = s.name
WHERE s.status = 'active' AND (s.lease_owner IS NULL OR s.lease_expires_at < now())
  AND least(s.next_run_at, s.run_requested_at) < now() - make_interval(secs => s.stuck_after_seconds)
  -- Implied by the line above (stuck_after_seconds >= 0): the bound that
  -- sources_due_idx and sources_run_requested_idx answer.
  AND (s.next_run_at < now() OR s.run_requested_at < now())
UNION ALL
-- A run still 'running' whose lease is gone or that runs past
-- stuck_after_seconds: the one definition of a stuck run, stuck_runs, which
-- the watchdog's alerts read too.
SELECT 'run_too_long', r.source, r.id, NULL, r.owner, r.started_at, now() - r.started_at,
       r.stuck_after_seconds,
       'run ' || r.id || ' (' || r.reason || ') running since ' || to_char(r.started_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')
       || ', ' || r.pages || ' page(s), ' || r.items_seen || ' item(s) so far'
       || CASE WHEN r.lease_gone THEN ', its lease is no longer held for it' ELSE '' END,
       d.owner
FROM stuck_runs r
LEFT JOIN source_definitions d ON d.name = r.source
UNION ALL
-- A claimed batch of changes whose evaluator stopped before committing.
SELECT 'change_lease_expired', c.source, c.id, c.record_id, c.eval_owner, c.eval_lease_expires_at,
       now() - c.eval_lease_expires_at, coalesce(s.stuck_after_seconds, 1800),
       'claimed by ' || c.eval_owner || ' (attempt ' || c.eval_attempts || '), lease expired',
       d.owner
FROM changes c
LEFT JOIN sources s ON s.name = c.source
LEFT JOIN source_definitions d ON d.name = c.source
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
       || coalesce(': ' || c.eval_error, ''),
       d.owner
FROM changes c
LEFT JOIN sources s ON s.name = c.source
LEFT JOIN source_definitions d ON d.name = c.source
WHERE c.eval_status = 'pending'
  AND c.created_at < now() - make_interval(secs => coalesce(s.stuck_after_seconds, 1800))
UNION ALL
-- A notification being sent whose deliverer stopped before recording.
SELECT 'notification_lease_expired', n.source, n.id, n.record_id, n.lease_owner, n.lease_expires_at,
       now() - n.lease_expires_at, coalesce(s.stuck_after_seconds, 1800),
       'sink ' || n.sink || ', attempt ' || n.attempts || ' claimed by ' || n.lease_owner || ', lease expired',
       n.owner
FROM notifications n
LEFT JOIN sources s ON s.name = n.source
WHERE n.status = 'pending' AND n.lease_owner IS NOT NULL AND n.lease_expires_at < now()
UNION ALL
-- A notification due for longer than stuck_after_seconds that no deliverer
-- claimed: no evaluator daemon runs, or none knows its sink.
SELECT 'notification_not_claimed', n.source, n.id, n.record_id, n.lease_owner, n.next_attempt_at,
       now() - n.next_attempt_at, coalesce(s.stuck_after_seconds, 1800),
       'sink ' || n.sink || ' (' || n.attempts || ' attempt(s)), due since '
       || to_char(n.next_attempt_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
       n.owner
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
       || to_char(n.digest_due_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
       n.owner
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
       'task ' || t.task || ' ' || t.run_id || ' (' || t.status || ', attempt ' || t.attempt || ') claim expired',
       d.owner
FROM task_runs t
LEFT JOIN sources s ON s.name = t.source
LEFT JOIN source_definitions d ON d.name = t.source
WHERE t.status IN ('claimed', 'confirming', 'running') AND t.claim_expires_at < now()
UNION ALL
-- A task whose state in the tool is behind task_runs for longer than
-- stuck_after_seconds: the write (claim, complete, fail, release) keeps
-- failing; tool_error says why.
SELECT 'task_tool_behind', t.source, t.id, t.record_id, t.claimed_by, t.tool_due_at,
       now() - t.tool_due_at, coalesce(s.stuck_after_seconds, 1800),
       'task ' || t.task || ' ' || t.run_id || ' is ' || t.status || ' but the tool does not show it yet (' || t.tool_action || ')'
       || coalesce(': ' || t.tool_error, ''),
       d.owner
FROM task_runs t
LEFT JOIN sources s ON s.name = t.source
LEFT JOIN source_definitions d ON d.name = t.source
WHERE t.tool_action IS NOT NULL AND t.status NOT IN ('claimed', 'confirming', 'running')
  AND t.tool_due_at < now() - make_interval(secs => coalesce(s.stuck_after_seconds, 1800))
) stuck
ORDER BY since, kind, id;
