package sources

import "strings"

// The named queries of the sources and sync_runs tables that the syncer
// runs: registration, claims, leases, outcomes. The syncer sends them with
// its arguments; no other package writes these tables (the architecture
// test, TestOneOwnerPerTable). A change here is a change of the syncer's
// hot path: run the benchmarks (make bench).

// claimCTE picks up to $2 active sources: first those an operator asked
// to run (oldest request first), then those due at $6 (oldest first),
// skipping rows another replica has locked and sources whose lease is
// still held, and locks them. Each arm walks its own partial index in
// order and stops at the limit, so a claim costs the same with ten or a
// hundred thousand sources due. $1 restricts the claim to the sources this
// replica knows, when the table holds others (NULL: no restriction). The
// arms return the state of the locked row versions.
const claimCTE = `
WITH req AS (
    SELECT name, cursor, lease_owner, lease_expires_at, run_id, run_requested_at, next_run_at, interval_reason,
           failure_count, interval_seconds, last_change_at, last_success_at, last_run_at, created_at
    FROM sources
    WHERE run_requested_at IS NOT NULL AND status = 'active'
      AND (lease_expires_at IS NULL OR lease_expires_at < $4)
      AND ($1::text[] IS NULL OR name = ANY ($1::text[]))
    ORDER BY run_requested_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
), due AS (
    SELECT name, cursor, lease_owner, lease_expires_at, run_id, run_requested_at, next_run_at, interval_reason,
           failure_count, interval_seconds, last_change_at, last_success_at, last_run_at, created_at
    FROM sources
    WHERE status = 'active' AND next_run_at <= $6 AND run_requested_at IS NULL
      AND (lease_expires_at IS NULL OR lease_expires_at < $4)
      AND ($1::text[] IS NULL OR name = ANY ($1::text[]))
    ORDER BY next_run_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
), picked AS (
    SELECT * FROM req
    UNION ALL
    (SELECT * FROM due LIMIT $2 - (SELECT count(*) FROM req))
)`

// QueryClaim leases the picked sources: their lease (owner, expiry, run id
// from sync_runs' sequence) is written and committed at once, so a run
// can go on as long as it renews it. The sync_runs row itself is written
// only if the run turns out to be worth a row
// (docs/acquisition.md#quiet-runs).
//
// The run ids are drawn in a CTE, not in the UPDATE's SET: Citus refuses a
// volatile function there ("functions used in UPDATE queries on
// distributed tables must not be VOLATILE").
const QueryClaim = claimCTE + `, ids AS (
    SELECT name, nextval('sync_runs_id_seq') AS run_id FROM picked
)
UPDATE sources s
SET lease_owner = $3, lease_expires_at = $4::timestamptz + $5::interval, run_requested_at = NULL,
    run_id = ids.run_id
FROM picked JOIN ids USING (name)
WHERE s.name = picked.name
RETURNING s.name, s.run_id, picked.cursor, coalesce(picked.lease_owner, ''), picked.run_id, picked.lease_expires_at,
          picked.run_requested_at, picked.next_run_at, coalesce(picked.interval_reason, ''), picked.failure_count,
          picked.interval_seconds, picked.last_change_at, picked.last_success_at, picked.last_run_at, picked.created_at,
          s.lease_expires_at`

// QueryLock only locks the picked sources, in a transaction that stays open
// while their runs fetch (a claim batch): a run that ends quietly within
// it is completed in it, and its source row is written once, by the
// completion. $3 and $5 are unused; the lease expiry returned is NULL.
const QueryLock = claimCTE + `
SELECT picked.name, nextval('sync_runs_id_seq'), picked.cursor, coalesce(picked.lease_owner, ''), picked.run_id,
       picked.lease_expires_at, picked.run_requested_at, picked.next_run_at, coalesce(picked.interval_reason, ''),
       picked.failure_count, picked.interval_seconds, picked.last_change_at, picked.last_success_at, picked.last_run_at,
       picked.created_at, NULL::timestamptz
FROM picked
WHERE $3::text IS NOT NULL AND $5::interval IS NOT NULL`

// QueryCandidates is the claim's pick without its locks: the names of
// the sources QueryClaim would take now, in its order, $3 and $5 unused.
// On Citus, which takes row locks only in a statement routed to one
// shard, a claim reads them first and then runs QueryClaim (or QueryLock)
// once per shard with $1 restricted to that shard's candidates
// (docs/scaling.md, "Claims on Citus").
var QueryCandidates = strings.ReplaceAll(claimCTE, "FOR UPDATE SKIP LOCKED", "") + `
SELECT name FROM picked WHERE $3::text IS NOT NULL AND $5::interval IS NOT NULL`

// quietRunsCTE is the batch of quiet runs, $1..$7.
const quietRunsCTE = `
WITH x AS (
    SELECT * FROM unnest($1::text[], $2::bigint[], $3::timestamptz[], $4::timestamptz[], $5::float8[], $6::text[], $7::jsonb[])
        AS x(name, run_id, finished_at, next_run_at, interval_seconds, interval_reason, cursor)
)`

// QueryCompleteQuiet releases the leases of quiet runs (each only if its
// lease is still the run's: the fencing check). It returns the sources
// released; their runs are then counted in the rollup (rollup.go).
const QueryCompleteQuiet = quietRunsCTE + `
UPDATE sources s
SET lease_owner = NULL, lease_expires_at = NULL, last_run_at = x.finished_at, last_success_at = x.finished_at,
    next_run_at = x.next_run_at, interval_seconds = x.interval_seconds, interval_reason = x.interval_reason,
    cursor = coalesce(x.cursor, s.cursor), failure_count = 0, last_error = NULL
FROM x
WHERE s.name = x.name AND s.lease_owner = $8 AND s.run_id = x.run_id
RETURNING s.name`

// QueryCompleteLocked records quiet runs of a claim batch, whose source rows
// the batch's transaction holds locked: it writes only what a run changes
// (no lease was written), so the row's new version differs from the old
// in three timestamps for most runs. $8 is unused.
const QueryCompleteLocked = quietRunsCTE + `
UPDATE sources s
SET last_run_at = x.finished_at, last_success_at = x.finished_at,
    next_run_at = x.next_run_at, interval_seconds = x.interval_seconds, interval_reason = x.interval_reason,
    cursor = coalesce(x.cursor, s.cursor), failure_count = 0, last_error = NULL
FROM x
WHERE s.name = x.name AND $8::text IS NOT NULL
RETURNING s.name`

const (
	// QueryMarkRemoved marks a source's row removed when its definition is
	// deleted ($2: why), releasing no lease (a run in progress ends and
	// writes its outcome; the status stays removed).
	QueryMarkRemoved = `
	UPDATE sources SET status = 'removed', status_reason = $2, status_changed_at = now(), run_requested_at = NULL,
	       updated_at = now()
	WHERE name = $1`

	// QueryRegisterNew registers new configured sources (syncer.register),
	// a batch of rows in one statement: $1..$11 one array each, a source per
	// index (name, connector, config hash, schedule, interval, interval
	// reason, next run, paused, webhook, silence alert, stuck after), $12
	// DefinitionPaused, $13 the time of the registration. A source paused
	// in its definition ($8) is registered paused with DefinitionPaused. A name already
	// registered is left to QueryRegisterExisting (ON CONFLICT DO NOTHING:
	// another replica registered it meanwhile); RETURNING names the rows
	// inserted.
	//
	// One statement for a batch, not one a source: on Citus an INSERT of a
	// row is planned and routed by the coordinator, a round trip to a
	// worker each, where this INSERT … SELECT is planned once and sent to
	// each shard once (docs/scaling.md "Registration on Citus").
	QueryRegisterNew = `
	INSERT INTO sources (name, connector, config_hash, schedule, interval_seconds, interval_reason, next_run_at, status_changed_at,
	                     stuck_after_seconds, status, status_reason, webhook, silence_alert_seconds)
	SELECT x.name, x.connector, x.config_hash, x.schedule, x.interval_seconds, x.interval_reason, x.at, $13::timestamptz,
	       x.stuck_after, CASE WHEN x.paused THEN 'paused' ELSE 'active' END, CASE WHEN x.paused THEN $12::text END,
	       x.webhook, x.silence
	FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::float8[], $6::text[], $7::timestamptz[], $8::bool[],
	            $9::text[], $10::int[], $11::int[])
	     AS x(name, connector, config_hash, schedule, interval_seconds, interval_reason, at, paused, webhook, silence, stuck_after)
	ON CONFLICT (name) DO NOTHING
	RETURNING name`

	// QueryRegisterExisting brings registered sources to their
	// configuration (syncer.register), a batch in one statement: the
	// arguments of QueryRegisterNew, $7 the next run of a source whose
	// configuration changed (at the latest). A new configuration restarts
	// the interval, the failures and a disabled or completed source; a
	// source paused in its definition ($8) is paused with DefinitionPaused
	// ($12), and active again when its definition is resumed; a removed
	// source defined again is active again. It calls no function that is
	// not immutable on a column (now() is the transaction's, the
	// coordinator's): Citus refuses one in an UPDATE of a distributed table.
	QueryRegisterExisting = `
	UPDATE sources s SET
	    connector = x.connector,
	    webhook = x.webhook,
	    silence_alert_seconds = x.silence,
	    stuck_after_seconds = x.stuck_after,
	    schedule = x.schedule,
	    config_hash = x.config_hash,
	    updated_at = now(),
	    interval_seconds = CASE WHEN s.config_hash <> x.config_hash THEN x.interval_seconds ELSE s.interval_seconds END,
	    interval_reason = CASE WHEN s.config_hash <> x.config_hash
	                           THEN 'configuration changed; ' || x.interval_reason ELSE s.interval_reason END,
	    next_run_at = CASE WHEN s.config_hash <> x.config_hash THEN least(s.next_run_at, x.at) ELSE s.next_run_at END,
	    failure_count = CASE WHEN s.config_hash <> x.config_hash THEN 0 ELSE s.failure_count END,
	    status_changed_at = CASE WHEN x.paused AND s.status <> 'paused' THEN $13::timestamptz
	                             WHEN s.status = 'removed' THEN $13
	                             WHEN NOT x.paused AND s.status = 'paused' AND s.status_reason = $12 THEN $13
	                             WHEN s.config_hash <> x.config_hash AND s.status IN ('disabled', 'completed')
	                             THEN $13::timestamptz ELSE s.status_changed_at END,
	    status = CASE WHEN x.paused THEN 'paused'
	                  WHEN s.status = 'removed' THEN 'active'
	                  WHEN s.status = 'paused' AND s.status_reason = $12 THEN 'active'
	                  WHEN s.config_hash <> x.config_hash AND s.status IN ('disabled', 'completed')
	                  THEN 'active' ELSE s.status END,
	    status_reason = CASE WHEN x.paused THEN $12::text
	                         WHEN s.status = 'removed' THEN 'defined again'
	                         WHEN s.status = 'paused' AND s.status_reason = $12 THEN 'resumed in its definition'
	                         WHEN s.config_hash <> x.config_hash AND s.status IN ('disabled', 'completed')
	                         THEN 'configuration changed' ELSE s.status_reason END
	FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::float8[], $6::text[], $7::timestamptz[], $8::bool[],
	            $9::text[], $10::int[], $11::int[])
	     AS x(name, connector, config_hash, schedule, interval_seconds, interval_reason, at, paused, webhook, silence, stuck_after)
	WHERE s.name = x.name`

	// QueryCompleteExpired marks completed the active sources whose stop.after passed and whose lease is not held,
	// each with its reason ($2, written by the caller: Citus refuses to_char, a STABLE function, of a column in
	// an UPDATE of a distributed table).
	QueryCompleteExpired = `
	UPDATE sources SET status = 'completed', status_changed_at = $3, updated_at = now(), status_reason = x.reason
	FROM unnest($1::text[], $2::text[]) AS x(name, reason)
	WHERE sources.name = x.name AND sources.status = 'active'
	  AND (sources.lease_expires_at IS NULL OR sources.lease_expires_at < $3)
	RETURNING sources.name, sources.status_reason`

	// QueryLeaseBatchRuns leases the runs of a claim batch that go on past it.
	QueryLeaseBatchRuns = `
	UPDATE sources s SET lease_owner = $3, lease_expires_at = $4::timestamptz + $5::interval, run_requested_at = NULL,
	       run_id = x.run_id
	FROM unnest($1::text[], $2::bigint[]) AS x(name, run_id)
	WHERE s.name = x.name
	RETURNING s.name, s.lease_expires_at`

	// QuerySpreadOverdue moves the next runs of overdue sources (the spread after an outage) and releases their claims.
	QuerySpreadOverdue = `
	UPDATE sources s SET lease_owner = NULL, lease_expires_at = NULL, run_id = x.run_id,
	       next_run_at = x.at, interval_reason = x.reason
	FROM unnest($1::text[], $2::timestamptz[], $3::text[], $4::bigint[]) AS x(name, at, reason, run_id)
	WHERE s.name = x.name AND (s.lease_owner = $5 OR $6)`

	// QueryHandBack undoes the claim of sources of another configuration.
	QueryHandBack = `
	UPDATE sources s SET lease_owner = x.owner, lease_expires_at = x.lease_expires_at, run_id = x.run_id,
	       run_requested_at = x.run_requested_at
	FROM unnest($1::text[], $2::text[], $3::timestamptz[], $4::bigint[], $5::timestamptz[])
	    AS x(name, owner, lease_expires_at, run_id, run_requested_at)
	WHERE s.name = x.name AND s.lease_owner = $6`

	// QueryAbandonTaken records the runs whose leases a claim took over as abandoned (a row written for a run that had none).
	// The runs that have a row are read by an uncorrelated subquery: Citus refuses a correlated one (NOT EXISTS) beside
	// the CTE.
	QueryAbandonTaken = `
	WITH x AS (
	    SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::timestamptz[]) AS x(id, source, owner, started_at)
	), abandoned AS (
	    UPDATE sync_runs r SET status = 'abandoned', finished_at = $5,
	           error = 'lease expired while running; taken over by ' || $6
	    FROM x WHERE r.id = x.id AND r.source = x.source AND r.status = 'running'
	)
	INSERT INTO sync_runs (id, source, owner, reason, status, started_at, finished_at, error)
	SELECT x.id, x.source, x.owner, 'schedule', 'abandoned', x.started_at, $5,
	       'lease expired while running; taken over by ' || $6
	FROM x WHERE (x.id, x.source) NOT IN (SELECT r.id, r.source FROM sync_runs r WHERE r.id = ANY($1) AND r.source = ANY($2))`

	// QueryHeartbeat renews a run's lease and writes its running sync_runs row if it has none; it returns whether the lease is still held.
	QueryHeartbeat = `
	WITH lease AS (
	    UPDATE sources SET lease_expires_at = $4::timestamptz + $5::interval
	    WHERE name = $1 AND lease_owner = $2 AND run_id = $3
	    RETURNING 1
	), running AS (
	    INSERT INTO sync_runs (id, source, owner, reason, started_at, cursor_before, due_at, due_reason)
	    SELECT $3, $1, $2, $6, $7, $8::jsonb, $9, $10 FROM lease
	    ON CONFLICT ON CONSTRAINT sync_runs_pkey DO NOTHING
	)
	SELECT EXISTS (SELECT 1 FROM lease)`

	// QueryExtendLease renews a run's lease, stores the cursor and adds a batch's counters to the run's sync_runs row (written then if it was not yet).
	QueryExtendLease = `
	WITH lease AS (
	    UPDATE sources SET lease_expires_at = $4::timestamptz + $5::interval, cursor = coalesce($6::jsonb, cursor)
	    WHERE name = $1 AND lease_owner = $2 AND run_id = $3
	    RETURNING 1
	), counters AS (
	    INSERT INTO sync_runs AS r (id, source, owner, reason, started_at, cursor_before, due_at, due_reason,
	                                pages, items_seen, items_created, items_updated, items_unchanged, items_deleted, items_repaired,
	                                repaired)
	    SELECT $3, $1, $2, $14, $15, $16::jsonb, $17, $18, $12, $7, $8, $9, $10, $11, $13, $19
	    FROM lease
	    ON CONFLICT ON CONSTRAINT sync_runs_pkey DO UPDATE SET
	        pages = r.pages + excluded.pages, items_seen = r.items_seen + excluded.items_seen,
	        items_created = r.items_created + excluded.items_created, items_updated = r.items_updated + excluded.items_updated,
	        items_unchanged = r.items_unchanged + excluded.items_unchanged, items_deleted = r.items_deleted + excluded.items_deleted,
	        items_repaired = r.items_repaired + excluded.items_repaired, repaired = r.repaired + excluded.repaired
	    RETURNING 1
	)
	SELECT EXISTS (SELECT 1 FROM lease)`

	// QueryLeasedState locks the row of a source this replica leases for
	// run $3 and reads the state its outcome is decided from; no row: the
	// lease is another replica's by now.
	QueryLeasedState = `
	SELECT failure_count, status, interval_seconds, last_change_at, last_success_at, created_at
	FROM sources WHERE name = $1 AND lease_owner = $2 AND run_id = $3 FOR UPDATE`

	// QueryReleaseLease writes a run's outcome into its source's row and releases the lease.
	QueryReleaseLease = `
	UPDATE sources SET
	    lease_owner = NULL, lease_expires_at = NULL, last_run_at = $2,
	    last_success_at = CASE WHEN $3 THEN $2 ELSE last_success_at END,
	    last_change_at = $4,
	    failure_count = $5, last_error = $6, next_run_at = $7,
	    interval_seconds = $8, interval_reason = $9,
	    cursor = CASE WHEN $3 THEN coalesce($10::jsonb, cursor) ELSE cursor END,
	    status = $11, status_reason = coalesce($12, status_reason),
	    status_changed_at = coalesce($13, status_changed_at), updated_at = now()
	WHERE name = $1`

	// QueryRunCursorAfter records the source's cursor as the run's final cursor.
	QueryRunCursorAfter = `UPDATE sync_runs SET cursor_after = (SELECT cursor FROM sources WHERE name = $2)
	WHERE id = $1 AND source = $2 AND started_at = $3
	RETURNING cursor_after`

	// QueryRunEnd writes the end of a run into its sync_runs row, creating it (with the counters of the batches that wrote nothing) if the run had none; a row another replica marked abandoned stays so.
	QueryRunEnd = `
	INSERT INTO sync_runs AS r (id, source, owner, reason, started_at, cursor_before, due_at, due_reason,
	                            status, finished_at, duration_ms, error, requests, rate_limit_waits,
	                            pages, items_seen, items_created, items_updated, items_unchanged, items_deleted, items_repaired)
	SELECT $1, $2, $3, $4, $5, $6::jsonb, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21
	WHERE NOT EXISTS (SELECT 1 FROM sync_runs WHERE id = $1 AND started_at <> $5)
	ON CONFLICT ON CONSTRAINT sync_runs_pkey DO UPDATE SET
	    status = excluded.status, finished_at = excluded.finished_at, duration_ms = excluded.duration_ms,
	    error = excluded.error, requests = excluded.requests, rate_limit_waits = excluded.rate_limit_waits,
	    pages = r.pages + excluded.pages, items_seen = r.items_seen + excluded.items_seen,
	    items_created = r.items_created + excluded.items_created, items_updated = r.items_updated + excluded.items_updated,
	    items_unchanged = r.items_unchanged + excluded.items_unchanged, items_deleted = r.items_deleted + excluded.items_deleted,
	    items_repaired = r.items_repaired + excluded.items_repaired
	WHERE r.status = 'running'`
)
