package definitions

import "github.com/lookout-dev/lookout/internal/sources"

// The named queries of the definitions tables (source_definitions,
// watches, config_version and config_version_seq, definition_deletions).
// Only this package
// writes them.

const (
	// queryNextVersion takes the version of a change from the sequence:
	// no lock, so that changes of different owners commit in parallel.
	// Versions are unique and grow in the order they are taken, not in
	// the order they commit: followers track MVCC snapshots (xid), not
	// numbers.
	queryNextVersion = `SELECT nextval('config_version_seq')`

	// queryNotify wakes the daemons following the definitions when the
	// transaction commits; the payload (the version) is a hint only.
	queryNotify = `SELECT pg_notify(current_schema() || '.config', $1::text)`

	// queryWake wakes the daemons following the definitions after changes
	// committed (waker): a transaction of its own, committed without
	// waiting for its WAL flush (a wake-up lost in a crash is caught up by
	// the followers' reconnect), so that it holds PostgreSQL's NOTIFY queue
	// lock only briefly. The payload, the last version taken, is a hint only.
	queryWake = `SELECT set_config('synchronous_commit', 'off', true),
		pg_notify(current_schema() || '.config', (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM config_version_seq)::text)`

	// queryVersion is the last version taken (0 before any).
	queryVersion = `SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM config_version_seq`

	// queryFollowState starts a follower's catch-up, the first statement
	// of its repeatable-read transaction: the transaction's snapshot, the
	// highest version committed in it (a pruned deletion's included), the
	// highest transaction of a deletion pruned, and whether a deletion
	// the previous snapshot $1 may not have seen was pruned since the
	// follower read $2: a pruned transaction at or past the snapshot's
	// xmin (NULL $1: the first load).
	queryFollowState = `SELECT pg_current_snapshot()::text,
	       greatest((SELECT max(version) FROM source_definitions), (SELECT max(version) FROM watches),
	                (SELECT max(version) FROM definition_deletions), deletions_pruned_through, 0),
	       deletions_pruned_xid::text,
	       coalesce(deletions_pruned_xid > $2::xid8 AND deletions_pruned_xid >= pg_snapshot_xmin($1::pg_snapshot), false)
	FROM config_version`

	// since is the condition of a row written by a transaction snapshot
	// $1 did not see (committed since): xid is indexed, and a transaction
	// before the snapshot's xmin is one it saw.
	since = `(xid >= pg_snapshot_xmin($1::pg_snapshot) AND NOT pg_visible_in_snapshot(xid, $1::pg_snapshot))`

	// queryBehind tells whether the caller's snapshot sees a change to
	// the definitions that snapshot $1 did not (or a deletion pruned
	// since the follower read $2 that it may not have seen): the
	// evaluator's probe in its claim transaction, three index lookups.
	queryBehind = `SELECT EXISTS (SELECT 1 FROM source_definitions WHERE ` + since + `)
	    OR EXISTS (SELECT 1 FROM watches WHERE ` + since + `)
	    OR EXISTS (SELECT 1 FROM definition_deletions WHERE ` + since + `)
	    OR (SELECT deletions_pruned_xid > $2::xid8 AND deletions_pruned_xid >= pg_snapshot_xmin($1::pg_snapshot) FROM config_version)`

	// queryApplyLock serializes the loads of the configuration directory
	// by every replica of every daemon (a transaction-scoped advisory lock
	// named after the schema).
	queryApplyLock = `SELECT pg_advisory_xact_lock(hashtext(current_schema() || '.definitions'))`

	sourceColumns = `name, owner, managed_by, connector, definition, definition_hash, paused,
	       coalesce(paused_reason, ''), version, created_at, updated_at, orphaned_at`

	watchColumns = `source, name, owner, managed_by, definition, definition_hash, paused,
	       coalesce(paused_reason, ''), version, created_at, updated_at`
	// watchBareColumns are watchColumns with a NULL definition (scanWatch
	// reads it as nil).
	watchBareColumns = `source, name, owner, managed_by, NULL::jsonb, definition_hash, paused,
	       coalesce(paused_reason, ''), version, created_at, updated_at`

	queryGetSource       = `SELECT ` + sourceColumns + ` FROM source_definitions WHERE name = $1`
	queryGetSourceLocked = queryGetSource + ` FOR UPDATE`
	// queryGetSourceShared reads a source that a watch is created on:
	// its definition cannot change, nor the source be orphaned or
	// deleted, until the transaction ends, while watches of other owners
	// are created on it at the same time.
	queryGetSourceShared = queryGetSource + ` FOR SHARE`

	// queryListSources lists the sources an actor sees: every one for an
	// admin ($1), else its own ($2) and the shared ones, by name after $3.
	queryListSources = `SELECT ` + sourceColumns + ` FROM source_definitions
	WHERE ($1 OR owner = $2 OR owner = '') AND name > $3
	ORDER BY name LIMIT $4`

	queryInsertSource = `INSERT INTO source_definitions (name, owner, managed_by, connector, definition, definition_hash, version)
	VALUES ($1, $2, $3, $4, $5, $6, $7)
	RETURNING ` + sourceColumns

	// queryUpdateSource replaces a source's definition; a source Apply
	// finds orphaned is adopted by it (orphaned_at cleared).
	queryUpdateSource = `UPDATE source_definitions
	SET owner = $2, managed_by = $3, connector = $4, definition = $5, definition_hash = $6, version = $7, updated_at = now(),
	    orphaned_at = NULL
	WHERE name = $1
	RETURNING ` + sourceColumns

	queryPauseSource = `UPDATE source_definitions
	SET paused = $2, paused_reason = $3, version = $4, updated_at = now()
	WHERE name = $1
	RETURNING ` + sourceColumns

	// queryDeleteSource deletes a source without watches: the foreign
	// key of watches refuses the deletion of a watched one (migration 29:
	// no cascade), so that no path deletes a user's watch by the way.
	queryDeleteSource = `DELETE FROM source_definitions WHERE name = $1`

	// queryOrphanSource marks a file source that left the directory while
	// users still watch it (Apply): kept, not run.
	queryOrphanSource = `UPDATE source_definitions SET orphaned_at = now(), version = $2, updated_at = now() WHERE name = $1`

	// queryOrphaned reads which of the sources in $1 are orphaned (the
	// watches' source_orphaned_at).
	queryOrphaned = `SELECT name, orphaned_at FROM source_definitions WHERE name = ANY($1) AND orphaned_at IS NOT NULL`

	queryGetWatch       = `SELECT ` + watchColumns + ` FROM watches WHERE source = $1 AND name = $2`
	queryGetWatchLocked = queryGetWatch + ` FOR UPDATE`

	// queryListWatches lists the watches an actor sees (an admin's $1:
	// all; else its own $2), optionally of one source ($3), after
	// (source, name) = ($4, $5).
	queryListWatches = `SELECT ` + watchColumns + ` FROM watches
	WHERE ($1 OR owner = $2) AND ($3 = '' OR source = $3) AND (source, name) > ($4, $5)
	ORDER BY source, name LIMIT $6`

	queryWatchesOf = `SELECT ` + watchColumns + ` FROM watches WHERE source = $1 ORDER BY name`

	// queryCreateWatch is a watch's create through the API: the config
	// version taken in the insert, and a name in use inserts nothing
	// (createWatchRow then reads the watch that holds it).
	queryCreateWatch = `INSERT INTO watches (source, name, owner, managed_by, definition, definition_hash, version)
	VALUES ($1, $2, $3, $4, $5, $6, nextval('config_version_seq'))
	ON CONFLICT (source, name) DO NOTHING
	RETURNING ` + watchColumns

	// queryCreateWatchOnSource is queryCreateWatch on a source known
	// from an earlier create (sourceCache): it inserts only when source
	// $1, locked FOR SHARE as queryGetSourceShared does, still has owner
	// $7 and definition hash $8 and is not orphaned; else it inserts
	// nothing, like a name in use, and CreateWatch reads the source.
	queryCreateWatchOnSource = `WITH src AS (
	    SELECT name FROM source_definitions
	    WHERE name = $1 AND owner = $7 AND definition_hash = $8 AND orphaned_at IS NULL
	    FOR SHARE)
	INSERT INTO watches (source, name, owner, managed_by, definition, definition_hash, version)
	SELECT src.name, $2, $3, $4, $5, $6, nextval('config_version_seq') FROM src
	ON CONFLICT (source, name) DO NOTHING
	RETURNING ` + watchColumns

	queryInsertWatch = `INSERT INTO watches (source, name, owner, managed_by, definition, definition_hash, version)
	VALUES ($1, $2, $3, $4, $5, $6, $7)
	RETURNING ` + watchColumns

	// queryUpdateSources is Apply's bulk update of a directory's
	// changed sources: the columns as arrays ($1 names, $2 owners,
	// $3 managed_by, $4 connectors, $5 definitions as text, $6 hashes),
	// one version $7 for all. An updated source found orphaned is
	// adopted (orphaned_at cleared). Added ones are copied
	// (copySourceColumns).
	queryUpdateSources = `UPDATE source_definitions s
	SET owner = t.o, managed_by = t.m, connector = t.c, definition = t.d::jsonb, definition_hash = t.h, version = $7, updated_at = now(),
	    orphaned_at = NULL
	FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[]) AS t(n, o, m, c, d, h)
	WHERE s.name = t.n`

	// queryUpdateWatches is Apply's bulk update of a directory's changed
	// watches: $1 sources, $2 names, $3 owners, $4 managed_by,
	// $5 definitions as text, $6 hashes, one version $7. Added ones are
	// copied (copyWatchColumns).
	queryUpdateWatches = `UPDATE watches w
	SET owner = t.o, managed_by = t.m, definition = t.d::jsonb, definition_hash = t.h, version = $7, updated_at = now()
	FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[]) AS t(s, n, o, m, d, h)
	WHERE w.source = t.s AND w.name = t.n`

	queryUpdateWatch = `UPDATE watches
	SET owner = $3, managed_by = $4, definition = $5, definition_hash = $6, version = $7, updated_at = now()
	WHERE source = $1 AND name = $2
	RETURNING ` + watchColumns

	queryPauseWatch = `UPDATE watches
	SET paused = $3, paused_reason = $4, version = $5, updated_at = now()
	WHERE source = $1 AND name = $2
	RETURNING ` + watchColumns

	queryDeleteWatch = `DELETE FROM watches WHERE source = $1 AND name = $2`

	// queryDeleteWatchesOf deletes the watches of the owner's source
	// Store.DeleteSource deletes (the owner's own act), returning them
	// for the tombstones.
	queryDeleteWatchesOf = `DELETE FROM watches WHERE source = $1 RETURNING name, owner, managed_by`

	// queryRecordDeletion records a deleted source (watch '') or watch
	// for the daemons catching up (its xid is stamped by a trigger).
	queryRecordDeletion = `INSERT INTO definition_deletions (version, source, watch, owner, managed_by) VALUES ($1, $2, $3, $4, $5)`

	// The catch-up of a follower, in one repeatable-read snapshot: the
	// sources written by a transaction its previous snapshot $1 did not
	// see, the watches likewise or of a source in $2 (a changed source is
	// re-read with all its watches), and the deletions likewise. Every
	// row's xid is stamped by a trigger (migration 33).
	querySourcesSince   = `SELECT ` + sourceColumns + ` FROM source_definitions WHERE ` + since + ` ORDER BY name`
	queryWatchesSince   = `SELECT ` + watchColumns + ` FROM watches WHERE ` + since + ` OR source = ANY($2) ORDER BY source, name`
	queryDeletionsSince = `SELECT version, source, watch FROM definition_deletions WHERE ` + since + ` ORDER BY version`

	// A follower's first load (and a Snapshot): everything.
	queryAllSources = `SELECT ` + sourceColumns + ` FROM source_definitions ORDER BY name`
	queryAllWatches = `SELECT ` + watchColumns + ` FROM watches ORDER BY source, name`

	// A first load that reuses the directory's parse (Follower.Reuse):
	// every watch without its definition (NULL), then the definitions of
	// the sources whose rows are not the directory's ($1).
	queryAllWatchesBare = `SELECT ` + watchBareColumns + ` FROM watches ORDER BY source, name`
	queryWatchesOfAny   = `SELECT ` + watchColumns + ` FROM watches WHERE source = ANY($1) ORDER BY source, name`

	// The current state Apply diffs the directory against.
	queryApplySources = `SELECT name, owner, managed_by, definition_hash, orphaned_at IS NOT NULL FROM source_definitions`
	queryApplyWatches = `SELECT source, name, owner, managed_by, definition_hash FROM watches`
)

// The columns Apply copies the added definitions into (COPY: the xid is
// stamped by the tables' trigger, created_at and updated_at default).
var (
	copySourceColumns = []string{"name", "owner", "managed_by", "connector", "definition", "definition_hash", "version"}
	copyWatchColumns  = []string{"source", "name", "owner", "managed_by", "definition", "definition_hash", "version"}
)

// The generations of the configuration directory (config_generations),
// read and written under queryApplyLock.
const (
	queryAppliedGeneration = `SELECT generation, hash, version, forced, applied_by, applied_at
	FROM config_generations ORDER BY generation DESC LIMIT 1`

	// queryGenerationOf is the last generation that had hash $1 (0: none).
	queryGenerationOf = `SELECT coalesce(max(generation), 0) FROM config_generations WHERE hash = $1`

	// queryInsertGeneration takes the next number in a CTE: Citus
	// deparses an INSERT … SELECT max(…) FROM the same reference table
	// without its FROM ("missing FROM-clause entry for table
	// config_generations"); the CTE form runs on both.
	queryInsertGeneration = `WITH last AS (SELECT coalesce(max(generation), 0) + 1 AS next FROM config_generations)
	INSERT INTO config_generations (generation, hash, version, forced, applied_by)
	SELECT last.next, $1, $2, $3, $4 FROM last
	RETURNING generation, hash, version, forced, applied_by, applied_at`
)

// queryGetSources reads the sources named in $1 (the sources of changed
// watches, in a follower's snapshot).
const queryGetSources = `SELECT ` + sourceColumns + ` FROM source_definitions WHERE name = ANY($1)`

// queryPruneDeletions deletes up to $2 deletions recorded before $1 and
// notes the highest transaction (and version) it deleted in
// config_version: a follower whose snapshot may not have seen it loads
// the definitions whole. It reads definition_deletions_deleted_idx.
const queryPruneDeletions = `
	WITH gone AS (
	    DELETE FROM definition_deletions WHERE ctid = ANY (ARRAY(
	        SELECT ctid FROM definition_deletions
	        WHERE deleted_at < $1
	        ORDER BY deleted_at
	        LIMIT $2
	        FOR UPDATE SKIP LOCKED))
	    RETURNING version, xid
	), mark AS (
	    UPDATE config_version SET deletions_pruned_through = greatest(deletions_pruned_through, (SELECT max(version) FROM gone)),
	        deletions_pruned_xid = greatest(deletions_pruned_xid, (SELECT max(xid) FROM gone))
	    WHERE EXISTS (SELECT 1 FROM gone)
	)
	SELECT count(*) FROM gone`

// queryCountDeletions counts what queryPruneDeletions deletes.
const queryCountDeletions = `SELECT count(*) FROM definition_deletions WHERE deleted_at < $1`

// Reseal's reads: the sources made through the API, and their watches
// with a webhook of their own (locked with FOR UPDATE in Reseal's
// transaction).
const (
	queryAPISources        = `SELECT ` + sourceColumns + ` FROM source_definitions WHERE managed_by = 'api' ORDER BY name`
	queryAPIWebhookWatches = `SELECT ` + watchColumns + ` FROM watches WHERE managed_by = 'api' AND (definition ? 'webhook' OR definition ? 'channel') ORDER BY source, name`
)

// queryMarkSourceRemoved is the sources table's owner's statement that
// marks the row of a source whose definition Apply deletes removed, in
// Apply's transaction (sources.MarkRemoved).
const queryMarkSourceRemoved = sources.QueryMarkRemoved
