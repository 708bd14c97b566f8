package outbox

import (
	"strconv"
	"strings"
	"time"
)

// The named queries of the notifications, notification_keys and
// delivery_attempts tables. Nothing outside this package writes them
// (retention's age-based DELETE of notifications excepted, see
// internal/retention).

// channelSuffix ends the NOTIFY channel of the outbox: <schema>.outbox.
const channelSuffix = ".outbox"

// queryWake signals the deliverers of the current schema; it is delivered
// when the caller's transaction commits.
const queryWake = `SELECT pg_notify(current_schema() || '` + channelSuffix + `', '')`

// queryWakeAsync is queryWake as a transaction of its own that commits
// without waiting for its WAL flush (WakeAfterCommit).
const queryWakeAsync = `SELECT set_config('synchronous_commit', 'off', true), pg_notify(current_schema() || '` + channelSuffix + `', '')`

// enqueueInsert takes the dedupe keys of rows from parallel arrays, in
// input order, and inserts a notification for each key it took, with the
// id and time the key row names (ids grow with the input order). The dedupe
// rule is notification_keys' primary key (dedupe_key, sink): notifications
// is partitioned by time, and a unique index there could only be unique
// within a partition. A key that exists is taken by nobody: it returns no
// row here (enqueueDuplicates then counts it).
const enqueueInsert = `
	WITH u AS (
	    SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::bigint[], $8::text[],
	                         $9::text[], $10::text[], $11::text[], $12::text[], $13::text[], $14::text[], $15::timestamptz[],
	                         $16::int[], $17::text[])
	         WITH ORDINALITY AS u(key, sink, source, record_id, watch, kind, change_id, hash, title, body, urgency, reason,
	                              payload, status, due, count, owner, ord)
	), k AS (
	    INSERT INTO notification_keys (dedupe_key, sink, notification_id, created_at)
	    SELECT u.key, u.sink, nextval(pg_get_serial_sequence('notifications', 'id')), now() FROM u ORDER BY u.ord
	    ON CONFLICT (dedupe_key, sink) DO NOTHING
	    RETURNING dedupe_key, sink, notification_id, created_at
	), ins AS (
	    INSERT INTO notifications (id, created_at, dedupe_key, sink, source, record_id, watch, kind, change_id, content_hash,
	                               title, body, urgency, reason, payload, status, digest_due_at, digest_count, owner)
	    SELECT k.notification_id, k.created_at, u.key, u.sink, u.source, u.record_id, u.watch, u.kind, u.change_id,
	           NULLIF(u.hash, ''), u.title, u.body, u.urgency, u.reason, u.payload::jsonb, u.status, u.due, u.count, u.owner
	    FROM (SELECT DISTINCT ON (key, sink) * FROM u ORDER BY key, sink, ord) u
	    JOIN k ON k.dedupe_key = u.key AND k.sink = u.sink
	    ORDER BY u.ord
	    RETURNING 1
	)
	SELECT notification_id, dedupe_key, sink, true FROM k`

// enqueueDuplicates counts a suppressed duplicate on the rows of the
// existing keys ($1, $2) and returns the ids the keys name. It runs after
// enqueueInsert, in a statement of its own, so that it sees a key another
// transaction committed while enqueueInsert waited on it. A key whose row
// was pruned (a dedupe: record key outlives its row) returns the id and
// counts nothing.
const enqueueDuplicates = `
	WITH k AS (
	    SELECT k.dedupe_key, k.sink, k.notification_id, k.created_at
	    FROM notification_keys k JOIN unnest($1::text[], $2::text[]) AS u(key, sink)
	         ON k.dedupe_key = u.key AND k.sink = u.sink
	), counted AS (
	    UPDATE notifications n SET duplicates_suppressed = n.duplicates_suppressed + 1, last_duplicate_at = now()
	    FROM k WHERE n.id = k.notification_id AND n.created_at = k.created_at
	    RETURNING 1
	)
	SELECT notification_id, dedupe_key, sink, false FROM k`

// querySuppressRecent counts a duplicate on the newest row of (source,
// record, watch, sink) created within the window ($5) and returns its id.
const querySuppressRecent = `
	UPDATE notifications SET duplicates_suppressed = duplicates_suppressed + 1, last_duplicate_at = now()
	WHERE id = (
	    SELECT id FROM notifications
	    WHERE source = $1 AND record_id = $2 AND watch = $3 AND sink = $4 AND created_at > now() - $5::interval
	    ORDER BY created_at DESC LIMIT 1)
	RETURNING id`

// queryClaim leases up to $2 due rows of sink $1 to owner $3 for $4 and
// counts the attempt. The UPDATE finds the rows by the arrays of their ids
// and times as well as by the join: with a backlog the planner expects a
// hundred rows from due, and would otherwise read every partition whole to
// hash-join them. On one PostgreSQL it runs as claimStatement writes it,
// its limit in the text.
const queryClaim = `
	WITH due AS (
	    SELECT id, created_at, lease_owner IS NOT NULL AS expired FROM notifications` + claimDue + `
	    LIMIT $2
	    FOR UPDATE SKIP LOCKED
	)
	UPDATE notifications n SET lease_owner = $3, lease_expires_at = now() + $4::interval, attempts = attempts + 1
	FROM due
	WHERE n.id = due.id AND n.created_at = due.created_at
	  AND n.id = ANY(ARRAY(SELECT id FROM due)) AND n.created_at = ANY(ARRAY(SELECT created_at FROM due))
	  AND ($5::text[] IS NULL OR n.source = ANY($5::text[])) AND $2::int IS NOT NULL
	RETURNING n.id, n.dedupe_key, n.sink, n.source, n.record_id, n.watch, n.kind, n.title, n.body, n.urgency,
	          n.reason, n.payload, n.attempts, n.created_at, due.expired`

// claimStatement is the text of a claim and its arguments. On Citus,
// whose claims run once per shard with that shard's candidates
// (restricted), it is queryClaim and its parameters. On one PostgreSQL
// (unrestricted) it is queryClaim with its arguments written in as
// literals (sink, limit, owner, lease, no restriction) and no parameter
// at all: a lane claims with the same values every time, so that is one
// statement per lane on each pooled connection, and PostgreSQL plans a
// prepared statement without parameters once, with the values in view
// (the plan a custom plan would be), and again only when something it
// reads changes (an ANALYZE of notifications). With parameters it makes
// five custom plans on each connection before it weighs the generic
// one, and keeps the generic one only while it is costed no higher than
// the custom ones' mean: in the CI smoke (a backlog of 1,000, analyzed
// before each run) the claims were planned 63 times in 72 (1–4 ms
// each, for 2–5 ms of execution), in lookout-bench's (5) 34 times in
// 156; without parameters 15 and 9 (TestClaimIsPlannedOnce). Before
// the limit was written in, a generic LIMIT $2 was costed for a tenth
// of the pending rows and never kept.
func claimStatement(sink string, limit int, owner string, lease time.Duration, restriction any, restricted bool) (string, []any) {
	if restricted {
		return queryClaim, []any{sink, limit, owner, lease, restriction}
	}
	return strings.NewReplacer(
		"$1", literal(sink),
		"$2", strconv.Itoa(limit),
		"$3", literal(owner),
		"$4", "'"+strconv.FormatInt(lease.Microseconds(), 10)+" microseconds'",
		"$5", "NULL",
	).Replace(queryClaim), nil
}

// literal quotes s as an SQL string literal, whatever
// standard_conforming_strings says: quotes doubled, and backslashes
// doubled in an escape string (E'...') when s holds one.
func literal(s string) string {
	q := "'" + strings.ReplaceAll(s, "'", "''") + "'"
	if strings.Contains(s, `\`) {
		return "E" + strings.ReplaceAll(q, `\`, `\\`)
	}
	return q
}

// claimDue is which rows queryClaim takes, in its order. $5 restricts
// them to the notifications of those sources (NULL: every source): on
// Citus a claim runs once per shard with the sources of that shard's
// candidates (db.ClaimGroups), a router query, where Citus takes row
// locks (docs/scaling.md, "Claims on Citus").
const claimDue = `
	    WHERE sink = $1 AND status = 'pending' AND next_attempt_at <= now()
	      AND (lease_expires_at IS NULL OR lease_expires_at < now())
	      AND ($5::text[] IS NULL OR source = ANY($5::text[]))
	    ORDER BY next_attempt_at, id`

// queryClaimCandidates is queryClaim's pick without its locks: the source
// of each row it would take now, in its order ($3, $4 unused, $5 NULL).
const queryClaimCandidates = `
	SELECT source FROM (
	    SELECT source FROM notifications` + claimDue + `
	    LIMIT $2) c
	WHERE $3::text IS NOT NULL AND $4::interval IS NOT NULL`

// queryClaimFair is queryClaim for a sink shared by many owners (the
// users of the watches): $5 is the most rows of one owner in flight. Each
// owner's window is its first $5 due rows in due order, leased ones
// included, and only a row of its window may be claimed, so an owner with
// $5 rows leased gets nothing more until one is recorded. The owners are
// walked one index descent each (a loose scan of
// notifications_owner_due_idx), each window read in due order and
// stopped at $5, so the cost grows with the owners that have pending rows,
// never with one owner's backlog. The claimable rows are taken turn by
// turn — every owner's first before anyone's second — then in due order:
// twice $2 of them are picked, then locked in that order up to $2 as
// queryClaim does (the conditions on n are checked again on a row another
// claim changed meanwhile). The window is chosen before the lock, so a
// row another claim holds is skipped, never replaced by the next one of
// its owner. Rows are found by the arrays of their ids and times, as in
// queryClaim, so that no estimate makes the plan read partitions whole.
//
// $6 restricts it to the notifications of those sources, as $5 does
// queryClaim: on Citus it runs once per shard of the candidates
// (queryClaimCandidates), and an owner's window is then its rows in that
// shard: an owner whose rows lie in k shards may have up to k × $5 rows
// in flight there (docs/scaling.md, "Claims on Citus").
const queryClaimFair = `
	WITH RECURSIVE owners AS (
	    (SELECT owner FROM notifications WHERE sink = $1 AND status = 'pending' AND ($6::text[] IS NULL OR source = ANY($6::text[]))
	     ORDER BY owner LIMIT 1)
	    UNION ALL
	    SELECT (SELECT n.owner FROM notifications n
	            WHERE n.sink = $1 AND n.status = 'pending' AND n.owner > o.owner AND ($6::text[] IS NULL OR n.source = ANY($6::text[]))
	            ORDER BY n.owner LIMIT 1)
	    FROM owners o WHERE o.owner IS NOT NULL
	), windows AS (
	    SELECT w.id, w.created_at, w.next_attempt_at, w.free,
	           row_number() OVER (PARTITION BY w.owner ORDER BY w.next_attempt_at, w.id) AS turn
	    FROM owners o CROSS JOIN LATERAL (
	        SELECT n.id, n.created_at, n.owner, n.next_attempt_at,
	               n.lease_expires_at IS NULL OR n.lease_expires_at < now() AS free
	        FROM notifications n
	        WHERE n.sink = $1 AND n.owner = o.owner AND n.status = 'pending' AND n.next_attempt_at <= now()
	          AND ($6::text[] IS NULL OR n.source = ANY($6::text[]))
	        ORDER BY n.next_attempt_at, n.id
	        LIMIT $5) w
	), picked AS (
	    SELECT id, created_at, turn, next_attempt_at FROM windows WHERE free
	    ORDER BY turn, next_attempt_at, id
	    LIMIT 2 * $2
	), due AS (
	    SELECT n.id, n.created_at, n.lease_owner IS NOT NULL AS expired, p.turn, p.next_attempt_at
	    FROM notifications n JOIN picked p ON n.id = p.id AND n.created_at = p.created_at
	    WHERE n.id = ANY(ARRAY(SELECT id FROM picked)) AND n.created_at = ANY(ARRAY(SELECT created_at FROM picked))
	      AND n.sink = $1 AND n.status = 'pending' AND n.next_attempt_at <= now()
	      AND ($6::text[] IS NULL OR n.source = ANY($6::text[]))
	      AND (n.lease_expires_at IS NULL OR n.lease_expires_at < now())
	    ORDER BY p.turn, p.next_attempt_at, p.id
	    LIMIT $2
	    FOR UPDATE OF n SKIP LOCKED
	)
	UPDATE notifications n SET lease_owner = $3, lease_expires_at = now() + $4::interval, attempts = attempts + 1
	FROM due
	WHERE n.id = due.id AND n.created_at = due.created_at
	  AND n.id = ANY(ARRAY(SELECT id FROM due)) AND n.created_at = ANY(ARRAY(SELECT created_at FROM due))
	  AND ($6::text[] IS NULL OR n.source = ANY($6::text[]))
	RETURNING n.id, n.dedupe_key, n.sink, n.source, n.record_id, n.watch, n.kind, n.title, n.body, n.urgency,
	          n.reason, n.payload, n.attempts, n.created_at, due.expired, due.turn, due.next_attempt_at`

// queryRecord writes attempt outcomes of rows still leased to owner $1,
// and appends the delivery_attempts row of each attempt it recorded
// (every outcome but unclaim) in the same statement: the UPDATE returns
// the rows it changed with their attempt's columns, which the INSERT
// takes. Rows are found by their whole key (id, created_at), so that each
// is looked up in its own partition (run-time pruning) rather than in
// every partition's index.
//
// The time of an unclaimed row's next attempt is read once, in a CTE:
// Citus refuses now() in the CASE of an UPDATE of a distributed table
// ("non-IMMUTABLE functions are not allowed in CASE or COALESCE
// statements"). The outcomes' arrays are unnested in a CTE too (which
// PostgreSQL inlines): Citus gives the columns an UPDATE returns from a
// function in its FROM the wrong types in the rows it hands the INSERT
// ("operator does not exist: bigint <> text" on outcome), and the right
// ones when they come from a subquery.
const queryRecord = `
	WITH t AS (SELECT now() AS now), u AS (
	    SELECT * FROM unnest($2::bigint[], $3::text[], $4::text[], $5::timestamptz[], $6::timestamptz[], $7::timestamptz[],
	                         $8::timestamptz[], $9::float8[], $10::text[], $11::int[], $12::text[])
	         AS u(id, kind, err, next, at, created_at, started, duration_ms, outcome, http_status, response)
	), recorded AS (
	    UPDATE notifications n SET
	        status = CASE WHEN u.kind = 'unclaim' THEN 'pending' ELSE u.kind END,
	        delivered_at = CASE WHEN u.kind = 'delivered' THEN u.at ELSE n.delivered_at END,
	        dead_at = CASE WHEN u.kind = 'dead' THEN u.at ELSE n.dead_at END,
	        dead_alerted_at = CASE WHEN u.kind = 'dead' THEN NULL ELSE n.dead_alerted_at END,
	        last_attempt_at = coalesce(u.at, n.last_attempt_at),
	        last_error = CASE WHEN u.kind = 'delivered' THEN NULL WHEN u.kind = 'unclaim' THEN n.last_error ELSE u.err END,
	        next_attempt_at = CASE WHEN u.kind = 'pending' THEN u.next
	                               WHEN u.kind = 'unclaim' THEN t.now ELSE n.next_attempt_at END,
	        attempts = CASE WHEN u.kind = 'unclaim' THEN n.attempts - 1 ELSE n.attempts END,
	        lease_owner = NULL, lease_expires_at = NULL
	    FROM u, t
	    WHERE n.id = u.id AND n.created_at = u.created_at AND n.lease_owner = $1
	    RETURNING n.id, n.created_at, n.source, n.sink, n.attempts, coalesce(u.started, u.at, t.now) AS started,
	              u.duration_ms, u.outcome, u.http_status, u.err, u.response
	)
	INSERT INTO delivery_attempts (source, notification_id, notification_created_at, sink, attempt, started_at, duration_ms,
	                               outcome, http_status, error, response)
	SELECT source, id, created_at, sink, attempts, started, duration_ms, outcome, http_status, err, response
	FROM recorded
	WHERE outcome <> ''`

// queryRetryDead sends dead rows back to pending; the filter's conditions
// are appended.
const queryRetryDead = `
	UPDATE notifications SET status = 'pending', attempts = 0, next_attempt_at = now(), dead_at = NULL,
	       lease_owner = NULL, lease_expires_at = NULL, manual_retries = manual_retries + 1
	WHERE status = 'dead' AND `

// queryList lists rows; the filter's conditions, the order and the limit
// are appended.
const queryList = `
	SELECT id, status, kind, sink, source, watch, record_id, dedupe_key, title, attempts, duplicates_suppressed,
	       created_at, next_attempt_at, delivered_at, digest_due_at, dead_at, last_error
	FROM notifications WHERE `

// queryMarkDeadAlerted marks the dead rows not yet alerted (alert rows
// never are) and returns them per sink with up to $1 examples, newest first.
const queryMarkDeadAlerted = `
	WITH marked AS (
	    UPDATE notifications SET dead_alerted_at = now()
	    WHERE status = 'dead' AND dead_alerted_at IS NULL AND kind <> 'alert'
	    RETURNING id, sink, watch, title, coalesce(dead_at, last_attempt_at, created_at) AS dead_at, coalesce(last_error, '') AS last_error
	)
	SELECT sink, count(*)::int, min(dead_at), max(dead_at), max(id),
	       (array_agg(id ORDER BY id DESC))[1:$1], (array_agg(watch ORDER BY id DESC))[1:$1],
	       (array_agg(title ORDER BY id DESC))[1:$1], (array_agg(last_error ORDER BY id DESC))[1:$1]
	FROM marked GROUP BY sink ORDER BY sink`

// queryLockHeld locks up to $1 held rows whose digest period ended,
// grouped by (source, watch, sink, period end).
const queryLockHeld = `
	SELECT id, source, watch, sink, digest_due_at, title, urgency, reason, payload, created_at, owner
	FROM notifications` + heldDue + `
	LIMIT $1
	FOR UPDATE SKIP LOCKED`

// heldDue is which rows queryLockHeld locks, in its order; $2 restricts
// them to the notifications of those sources (NULL: every source), as $5
// does queryClaim's.
const heldDue = `
	WHERE status = 'held' AND digest_due_at <= now()
	  AND ($2::text[] IS NULL OR source = ANY($2::text[]))
	ORDER BY source, watch, sink, digest_due_at, id`

// queryHeldCandidates is queryLockHeld's pick without its locks: the
// source of each row it would lock now, in its order ($2 NULL).
const queryHeldCandidates = `
	SELECT source FROM notifications` + heldDue + `
	LIMIT $1`

// queryMarkDigested marks held rows $1 digested into summary $2.
const queryMarkDigested = `
	UPDATE notifications SET status = 'digested', digest_id = $2
	WHERE id = ANY($1) AND status = 'held'`

// pageColumns and pageScope are shared by the API's listings: the rows of
// owner $2 (notifications_owner_idx), or with $1 every row (an admin;
// pageAll replaces pageOwner); $6 source and $7 watch filter.
const (
	pageColumns = `id, kind, status, source, record_id, watch, sink, dedupe_key, change_id, title, body, urgency, reason,
	       payload, created_at, delivered_at`
	pageOwner = `owner = $2 AND $1::boolean IS NOT NULL`
	pageAll   = `$1::boolean AND $2::text IS NOT NULL`
	pageScope = pageOwner + ` AND ($6 = '' OR source = $6) AND ($7 = '' OR watch = $7)`
)

// queryPageNewest lists rows newest first, below the cursor $3 (0: from
// the newest); $4 and $5 are unused.
const queryPageNewest = `
	SELECT ` + pageColumns + ` FROM notifications
	WHERE ` + pageScope + ` AND ($3 = 0 OR id < $3) AND $4::bigint IS NOT NULL AND $5::interval IS NOT NULL
	ORDER BY id DESC LIMIT $8`

// queryPageAfter lists rows above the cursor $4, or created within $5,
// oldest first; $3 is unused.
const queryPageAfter = `
	SELECT ` + pageColumns + ` FROM notifications
	WHERE ` + pageScope + ` AND $3::bigint IS NOT NULL
	  AND (id > $4 OR ($5 > '0'::interval AND now() - $5::interval < created_at))
	ORDER BY id LIMIT $8`

// queryAttempts is the delivery attempts of notification $2 of source $1,
// oldest first (delivery_attempts_notification_idx; on Citus a router
// query, by the source).
const queryAttempts = `
	SELECT id, source, notification_id, sink, attempt, started_at, duration_ms, outcome, http_status, error, response
	FROM delivery_attempts
	WHERE source = $1 AND notification_id = $2
	ORDER BY attempt, id`

// queryPruneAttempts deletes up to $2 delivery attempts that started
// before $1, in no particular order: delivery_attempts_started_idx is a
// BRIN index (migration 64), which finds the block ranges that hold them
// but cannot return them in order, and sorting every prunable attempt for
// each batch would make a long backlog's prune quadratic. A prune runs
// until a batch is short, so every attempt past the window goes. $3
// restricts it to the attempts of those sources (NULL: every source): on
// Citus it runs once per shard of its candidates
// (queryPruneAttemptCandidates, db.ClaimGroups), a router statement,
// where Citus takes row locks.
const queryPruneAttempts = `
	DELETE FROM delivery_attempts WHERE ($3::text[] IS NULL OR source = ANY($3::text[])) AND id = ANY (ARRAY(
	    SELECT id FROM delivery_attempts
	    WHERE started_at < $1 AND ($3::text[] IS NULL OR source = ANY($3::text[]))
	    LIMIT $2
	    FOR UPDATE SKIP LOCKED))`

// queryPruneAttemptCandidates is queryPruneAttempts' pick without its
// locks: the source of each of up to $2 attempts it may delete now.
const queryPruneAttemptCandidates = `
	SELECT source FROM delivery_attempts WHERE started_at < $1 LIMIT $2`

// queryCountPrunableAttempts counts what queryPruneAttempts deletes.
const queryCountPrunableAttempts = `SELECT count(*) FROM delivery_attempts WHERE started_at < $1`
