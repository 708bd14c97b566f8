package retention

// The named prune queries of the tables without an owner package that the
// pruner deletes from by rows (rows.go): the hourly rollups. An hour is
// pruned when it ended before the cutoff ($1); the current UTC hour never
// is, whatever the window. Each batch locks at most $2 rows (SKIP LOCKED:
// a row a writer holds is left for the next prune) through the table's
// hour index and deletes them by ctid.

// pruneRunHours deletes the quiet runs' rollups of old hours. It reads
// sync_run_hours_hour_idx. The rollups' triggers count inserts and
// updates only: activity_hour_totals keeps its own hours. $3 restricts it
// to the hours of those sources (NULL: every source): on Citus, where the
// table is distributed by source, it runs once per shard of its
// candidates (pruneRunHoursCandidates, db.PruneEachShard), a router
// statement, where Citus takes row locks and a ctid is one shard's.
const pruneRunHours = `
	DELETE FROM sync_run_hours WHERE ($3::text[] IS NULL OR source = ANY($3::text[])) AND ctid = ANY (ARRAY(
	    SELECT ctid FROM sync_run_hours
	    WHERE hour <= $1::timestamptz - interval '1 hour' AND hour < date_trunc('hour', now(), 'UTC')
	      AND ($3::text[] IS NULL OR source = ANY($3::text[]))
	    ORDER BY hour
	    LIMIT $2
	    FOR UPDATE SKIP LOCKED))`

// pruneRunHoursCandidates is pruneRunHours' pick without its locks: the
// source of each hour it would delete now, in its order.
const pruneRunHoursCandidates = `
	SELECT source FROM sync_run_hours
	WHERE hour <= $1::timestamptz - interval '1 hour' AND hour < date_trunc('hour', now(), 'UTC')
	ORDER BY hour
	LIMIT $2`

// countRunHours counts what pruneRunHours deletes.
const countRunHours = `
	SELECT count(*) FROM sync_run_hours
	WHERE hour <= $1::timestamptz - interval '1 hour' AND hour < date_trunc('hour', now(), 'UTC')`

// pruneActivityHours deletes the admin page's totals of old hours. It
// reads activity_hour_totals_pkey (hour, backend).
const pruneActivityHours = `
	DELETE FROM activity_hour_totals WHERE ctid = ANY (ARRAY(
	    SELECT ctid FROM activity_hour_totals
	    WHERE hour <= $1::timestamptz - interval '1 hour' AND hour < date_trunc('hour', now(), 'UTC')
	    ORDER BY hour
	    LIMIT $2
	    FOR UPDATE SKIP LOCKED))`

// countActivityHours counts what pruneActivityHours deletes.
const countActivityHours = `
	SELECT count(*) FROM activity_hour_totals
	WHERE hour <= $1::timestamptz - interval '1 hour' AND hour < date_trunc('hour', now(), 'UTC')`
