package retention

// The named prune queries of the tables without an owner package that the
// pruner deletes from by rows (rows.go): the hourly rollups. An hour is
// pruned when it ended before the cutoff ($1); the current UTC hour never
// is, whatever the window. Each batch locks at most $2 rows (SKIP LOCKED:
// a row a writer holds is left for the next prune) through the table's
// hour index and deletes them by ctid.

// pruneRunHours deletes the quiet runs' rollups of old hours. It reads
// sync_run_hours_hour_idx. The rollups' triggers count inserts and
// updates only: activity_hour_totals keeps its own hours.
const pruneRunHours = `
	DELETE FROM sync_run_hours WHERE ctid = ANY (ARRAY(
	    SELECT ctid FROM sync_run_hours
	    WHERE hour <= $1::timestamptz - interval '1 hour' AND hour < date_trunc('hour', now(), 'UTC')
	    ORDER BY hour
	    LIMIT $2
	    FOR UPDATE SKIP LOCKED))`

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
