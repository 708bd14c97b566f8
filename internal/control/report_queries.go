package control

import (
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

// The statements of the admin pages (internal/admin), which control runs
// for an admin (Report). Numbers come from the report_* views
// (migrations 3, 4, 5, 14, 18 and 22), so the page and a SQL user read the same
// definitions; the lists of rows behind them read the tables through the
// indexes docs/performance.md names. internal/reports' plan test runs
// EXPLAIN on every one of them (TestHotQueriesUseIndexes).

const (
	// queryViewDef is the definition of a report view ($1), shown under
	// the statements that read it.
	queryViewDef = `SELECT coalesce(pg_get_viewdef(to_regclass($1), true), '') AS definition`

	queryOverview = `SELECT * FROM report_overview`

	// queryOwnerOverview is report_overview's numbers for one owner ($1;
	// migration 26).
	queryOwnerOverview = `SELECT * FROM report_owner_overview WHERE owner = $1`

	queryActivity = `SELECT * FROM report_activity_hourly`

	// querySources is a page of the source list, by name, after $1,
	// narrowed by the filters given (NULL or false: not given): status
	// ($2), state ($3), owner ($4), failing ($5: failure_count > 0) and
	// due now ($6: report_overview's sources_due: active sources past
	// their next run or asked to run, whose lease, if any, expired; the
	// names of the due sources are read first, through the indexes of the
	// two ways of being due, sources_due_idx and sources_run_requested_idx,
	// so that no plan reads every source to find a few due ones). A state
	// is restated in conditions an index answers (the view's state is a
	// CASE no index holds): due and scheduled sources are active ones by
	// next_run_at (sources_due_idx), requested ones have run_requested_at
	// (sources_run_requested_idx), running ones and expired leases have a
	// lease (sources_lease_expires_idx). Every plan is made for its
	// arguments (control.Report), so the conditions of a filter not given
	// fold away.
	querySources = `
		SELECT name, owner, managed_by, definition_paused, orphaned_at, status, state, schedule, lateness_seconds, failure_count,
		       last_run_at, next_run_at, lease_owner, lease_expires_at, run_id, last_error
		FROM report_sources
		WHERE name > $1
		  AND ($2::text IS NULL OR status = $2)
		  AND ($3::text IS NULL OR state = $3)
		  AND ($4::text IS NULL OR owner = $4)
		  AND (NOT $5::bool OR failure_count > 0)
		  AND (NOT $6::bool OR (name = ANY(ARRAY(SELECT name FROM sources WHERE status = 'active' AND next_run_at <= now()
		                                       UNION SELECT name FROM sources WHERE status = 'active' AND run_requested_at IS NOT NULL))
		                        AND (lease_expires_at IS NULL OR lease_expires_at < now())))
		  AND ($3 IS DISTINCT FROM 'due' OR (status = 'active' AND next_run_at <= now()))
		  AND ($3 IS DISTINCT FROM 'scheduled' OR (status = 'active' AND next_run_at > now()))
		  AND ($3 IS DISTINCT FROM 'requested' OR run_requested_at IS NOT NULL)
		  AND ($3 IS DISTINCT FROM 'running' OR (lease_owner IS NOT NULL AND lease_expires_at >= now()))
		  AND ($3 IS DISTINCT FROM 'lease expired' OR (lease_owner IS NOT NULL AND lease_expires_at < now()))
		  AND ($3 IS DISTINCT FROM 'orphaned' OR orphaned_at IS NOT NULL)
		ORDER BY name
		LIMIT 51`

	querySource = `SELECT * FROM report_sources WHERE name = $1`

	// querySourceLastSuccess is when a source last succeeded: the start
	// of the failed runs its failure_count counts.
	querySourceLastSuccess = `SELECT last_success_at FROM sources WHERE name = $1`

	// querySourceRuns is a source's recorded runs, newest first
	// (sync_runs_source_started_idx).
	querySourceRuns = `
		SELECT id AS run_id, reason, status, started_at, round(duration_ms) AS ms,
		       started_at - due_at AS late, items_seen, items_created, items_updated, items_deleted, error
		FROM sync_runs
		WHERE source = $1
		ORDER BY started_at DESC
		LIMIT 26`

	// querySourceQuiet is a source's quiet runs per hour, newest first.
	querySourceQuiet = `
		SELECT hour, runs, not_modified, items_seen,
		       round((lateness_seconds_sum / runs)::numeric, 3) AS avg_late_s, round(lateness_seconds_max::numeric, 3) AS max_late_s
		FROM sync_run_hours
		WHERE source = $1
		ORDER BY hour DESC
		LIMIT 25`

	// querySourceRecords is a page of a source's records by id, after $2
	// (records_pkey).
	querySourceRecords = `
		SELECT record_id, title, version, status, synced_at, deleted_at
		FROM records
		WHERE source = $1 AND record_id > $2
		ORDER BY record_id
		LIMIT 51`

	// queryRecord is a record as mirrored now.
	queryRecord = `
		SELECT source, record_id, version, title, url, status, author, labels, first_seen_at, synced_at, deleted_at, last_run_id
		FROM records
		WHERE source = $1 AND record_id = $2`

	// queryRecordChanges is a record's changes, newest first
	// (changes_record_idx).
	queryRecordChanges = `
		SELECT id AS change_id, kind, version, changed_fields, created_at, run_id, eval_status, eval_attempts, evaluated_at, eval_error
		FROM changes
		WHERE source = $1 AND record_id = $2
		ORDER BY id DESC
		LIMIT 21`

	// The report pages: each a report view in its order, narrowed by the
	// page's filters (NULL: not given; the parameters in the order of the
	// page's filters), and, after the first page, to the rows after the
	// last one shown (the cursor: the values of the keyset's columns, in
	// order, NULL on the first page). A cursor value of a column that may
	// be NULL is NULL when the last row's was; nothing sorts strictly after
	// a NULL in its column (NULLs sort last).

	// queryStuck is report_stuck in the view's order, the source breaking
	// its ties (a source's rows have no id): filters kind ($1), source
	// ($2), owner ($3: definition_owner; the view's owner is a lease's
	// holder); the cursor since, kind, id, source ($4-$7).
	queryStuck = `SELECT * FROM report_stuck
WHERE ($1::text IS NULL OR kind = $1)
  AND ($2::text IS NULL OR source = $2)
  AND ($3::text IS NULL OR definition_owner = $3)
  AND ($5::text IS NULL
       OR ($4::timestamptz IS NOT NULL AND (since > $4 OR since IS NULL))
       OR (since IS NOT DISTINCT FROM $4 AND kind > $5)
       OR (since IS NOT DISTINCT FROM $4 AND kind = $5 AND $6::bigint IS NOT NULL AND (id > $6 OR id IS NULL))
       OR (since IS NOT DISTINCT FROM $4 AND kind = $5 AND id IS NOT DISTINCT FROM $6 AND source > $7::text))
ORDER BY since, kind, id, source
LIMIT 201`

	// queryFailures is report_recent_failures in the view's order, the
	// watch and status breaking its ties (an evaluation's id is its
	// change's): filters kind, source, watch, sink, owner ($1-$5); the
	// cursor at, kind, id, watch, status ($6-$10).
	queryFailures = `SELECT * FROM report_recent_failures
WHERE ($1::text IS NULL OR kind = $1)
  AND ($2::text IS NULL OR source = $2)
  AND ($3::text IS NULL OR watch = $3)
  AND ($4::text IS NULL OR sink = $4)
  AND ($5::text IS NULL OR owner = $5)
  AND ($7::text IS NULL
       OR at < $6::timestamptz
       OR (at = $6 AND kind > $7)
       OR (at = $6 AND kind = $7 AND id < $8::bigint)
       OR (at = $6 AND kind = $7 AND id = $8 AND $9::text IS NOT NULL AND (watch > $9 OR watch IS NULL))
       OR (at = $6 AND kind = $7 AND id = $8 AND watch IS NOT DISTINCT FROM $9 AND status > $10::text))
ORDER BY at DESC, kind, id DESC, watch, status
LIMIT 201`

	// queryHighRetry is report_high_retry in the view's order: filters
	// kind, source, owner ($1-$3); the cursor attempts, kind, source, id
	// ($4-$7).
	queryHighRetry = `SELECT * FROM report_high_retry
WHERE ($1::text IS NULL OR kind = $1)
  AND ($2::text IS NULL OR source = $2)
  AND ($3::text IS NULL OR owner = $3)
  AND ($5::text IS NULL
       OR attempts < $4::int
       OR (attempts = $4 AND kind > $5)
       OR (attempts = $4 AND kind = $5 AND source > $6::text)
       OR (attempts = $4 AND kind = $5 AND source = $6 AND $7::bigint IS NOT NULL AND (id > $7 OR id IS NULL)))
LIMIT 201`

	// queryDisabled is report_disabled_sources in the view's order:
	// filters status, owner ($1, $2); the cursor since, name ($3, $4).
	queryDisabled = `SELECT * FROM report_disabled_sources
WHERE ($1::text IS NULL OR status = $1)
  AND ($2::text IS NULL OR owner = $2)
  AND ($4::text IS NULL
       OR ($3::timestamptz IS NOT NULL AND (since < $3 OR since IS NULL))
       OR (since IS NOT DISTINCT FROM $3 AND name > $4))
LIMIT 201`

	// queryDeadCount is the dead letters per sink, of a source ($1) and
	// an owner ($2) when given: each chip's number is the rows its link
	// lists.
	queryDeadCount = `SELECT sink, count(*) AS dead FROM report_dead_letters
WHERE ($1::text IS NULL OR source = $1)
  AND ($2::text IS NULL OR owner = $2)
GROUP BY sink ORDER BY sink`

	// queryDead is a page of dead letters in the view's order (dead_at
	// newest first, NULLs last, then id): filters sink, source, owner
	// ($1-$3, deadFilters) and, after the first page, the rows after the
	// last one shown ($4 its dead_at, NULL when it had none; $5 its id,
	// NULL on the first page); deadPage rows and one to tell there are
	// more.
	queryDead = `SELECT * FROM report_dead_letters
WHERE ($1::text IS NULL OR sink = $1)
  AND ($2::text IS NULL OR source = $2)
  AND ($3::text IS NULL OR owner = $3)
  AND ($5::bigint IS NULL
       OR dead_at < $4::timestamptz
       OR (dead_at = $4 AND id < $5)
       OR (dead_at IS NULL AND ($4 IS NOT NULL OR id < $5)))
LIMIT 201`

	// queryExpensive is the most expensive model calls of the last 24
	// hours: report_expensive_evaluations' rows in its order (slowest
	// first), its definition restated so that the 51 slowest calls are
	// picked first (model_calls_created_idx) and only they probe their
	// evaluation (the evaluations' index on model_call_id). The view joins
	// every model call to its evaluation before the LIMIT: a merge of the
	// model steps of every evaluation partition, 100,000 rows on the admin
	// benchmark's dataset (docs/benchmarks.md, (9)). A model call has at
	// most one model step (one watch, one change), so the rows are the
	// view's.
	queryExpensive = `
		-- report_expensive_evaluations, the 51 slowest calls first
		SELECT mc.id AS model_call_id, mc.created_at, mc.purpose, mc.source, mc.watch, mc.record_id, mc.change_id, mc.model,
		       mc.model_digest, mc.prompt_version, mc.outcome, mc.attempt, mc.latency_ms, mc.prompt_tokens, mc.output_tokens,
		       mc.prompt_tokens + mc.output_tokens AS total_tokens, e.decision, e.reason, mc.owner
		FROM (SELECT * FROM model_calls
		      WHERE created_at > now() - interval '24 hours' AND ($1::text IS NULL OR owner = $1)
		      ORDER BY latency_ms DESC, prompt_tokens + output_tokens DESC
		      LIMIT 51) mc
		LEFT JOIN LATERAL (SELECT e.decision, e.reason FROM evaluations e
		                   WHERE e.model_call_id = mc.id AND e.change_id = mc.change_id AND e.step = 'model' OFFSET 0) e ON true
		ORDER BY mc.latency_ms DESC, mc.prompt_tokens + mc.output_tokens DESC`

	// queryDrift is the fleet's model drift per day, model digest and
	// prompt version (migration 22; since migration 44 the sums of
	// model_drift_days, kept as the evaluations are written).
	queryDrift = `SELECT * FROM report_model_drift_daily`

	// queryDriftOwner is one owner's model drift ($1): the owner's rows
	// of model_drift_days (migration 44) of the last 14 days, summed per
	// day, model digest and prompt version as report_model_drift_daily
	// sums the fleet's (model_drift_days_owner_idx): days × digests ×
	// prompt versions × writers, not the owner's evaluations.
	queryDriftOwner = `
		SELECT day, model, model_digest, prompt_version, sum(evaluations)::bigint AS evaluations, sum(judged)::bigint AS judged,
		       sum(cache_hits)::bigint AS cache_hits, sum(notify)::bigint AS notify, sum(skip)::bigint AS skip,
		       round(sum(notify)::numeric / nullif(sum(evaluations), 0), 3) AS notify_rate,
		       round((sum(confidence_sum) / nullif(sum(confidence_n), 0))::numeric, 3) AS avg_confidence
		FROM model_drift_days
		WHERE owner = $1 AND day >= date_trunc('day', now(), 'UTC') - interval '13 days'
		GROUP BY 1, 2, 3, 4
		HAVING sum(evaluations) > 0
		ORDER BY 1, 2, 3, 4`

	// queryDriftRows lists the evaluations behind a count of the drift
	// table (/admin/rows/drift): the rows report_model_drift_daily and
	// report_model_drift_recent count, with their conditions as the views
	// write them — the model-judged steps of the last 14 days, the UTC day
	// ($1), each joined to its model call by id — narrowed to a model ($2),
	// model digest ($3) and prompt version ($4), and to an owner ($5, ''
	// for all). The day is restated as a range for the evaluations'
	// index (evaluations_judged_created_idx); each evaluation's model call
	// is probed by its primary key (OFFSET 0 keeps the planner from
	// reading model_calls whole: on the admin benchmark's 10 million
	// changes a plain join did, 400 ms for a day of 1,000 evaluations
	// against 5 ms). A page ends before the
	// cursor ($6, $7: created_at and id of the last row shown), and to the
	// evaluations of the count ($8, one of DriftCounts: the FILTER of the
	// views' column of that name; evaluations counts them all).
	queryDriftRows = `
		SELECT e.id AS evaluation_id, e.change_id, e.source, e.record_id, e.watch, e.step, e.decision, e.reason,
		       e.urgency, e.confidence, e.model_call_id, e.owner, e.created_at
		FROM evaluations e
		JOIN LATERAL (SELECT mc.model, mc.model_digest, mc.prompt_version FROM model_calls mc WHERE mc.id = e.model_call_id OFFSET 0) mc ON true
		WHERE e.step IN ('model', 'cache') AND e.created_at >= date_trunc('day', now(), 'UTC') - interval '13 days'
		  AND date_trunc('day', e.created_at, 'UTC') = $1 AND e.created_at >= $1 AND e.created_at < $1 + interval '24 hours'
		  AND mc.model = $2 AND mc.model_digest = $3 AND mc.prompt_version = $4
		  AND ($5 = '' OR e.owner = $5)
		  AND e.created_at <= $6 AND (e.created_at, e.id) < ($6, $7)
		  AND ($8::text <> 'judged' OR e.step = 'model')
		  AND ($8 <> 'cache_hits' OR e.step = 'cache')
		  AND ($8 <> 'notify' OR e.decision IN ('notify', 'duplicate'))
		  AND ($8 <> 'skip' OR e.decision = 'skip')
		ORDER BY e.created_at DESC, e.id DESC
		LIMIT 201`

	// queryOwners lists the owners of definitions (the owner filter, on
	// every page): each table's distinct owners read by skipping through
	// its owner index (source_definitions_owner_idx, watches_owner_idx),
	// one probe per owner, instead of reading every definition (100,000
	// sources on the admin benchmark's dataset). owner > '' is owner <>
	// '': '' sorts first.
	queryOwners = `
		WITH RECURSIVE d AS (
		    (SELECT owner FROM source_definitions WHERE owner > '' ORDER BY owner LIMIT 1)
		    UNION ALL
		    SELECT (SELECT s.owner FROM source_definitions s WHERE s.owner > d.owner ORDER BY s.owner LIMIT 1) FROM d WHERE d.owner IS NOT NULL
		), w AS (
		    (SELECT owner FROM watches WHERE owner > '' ORDER BY owner LIMIT 1)
		    UNION ALL
		    SELECT (SELECT x.owner FROM watches x WHERE x.owner > w.owner ORDER BY x.owner LIMIT 1) FROM w WHERE w.owner IS NOT NULL
		)
		SELECT owner FROM d WHERE owner IS NOT NULL
		UNION
		SELECT owner FROM w WHERE owner IS NOT NULL
		ORDER BY 1`

	// queryTaskRuns is the task queue (migration 17), most recently
	// changed first: filters id, source, status, record_id, owner
	// ($1-$5); its first page. queryTaskRunsAfter is a next page: the same
	// filters and the rows after the last one shown ($6 its id) in the
	// view's order (updated_at, then id, newest first; the view does not
	// show updated_at, so it is read back by the id: task_runs_pkey, then
	// task_runs_updated_idx). Two statements, not one with "$6 IS NULL
	// OR": under an OR the IN cannot become a join, and PostgreSQL may
	// hash the whole subquery (every task run older than the cursor).
	queryTaskRuns = `SELECT * FROM report_task_runs
WHERE ($1::bigint IS NULL OR id = $1)
  AND ($2::text IS NULL OR source = $2)
  AND ($3::text IS NULL OR status = $3)
  AND ($4::text IS NULL OR record_id = $4)
  AND ($5::text IS NULL OR owner = $5)
LIMIT 201`
	queryTaskRunsAfter = `SELECT * FROM report_task_runs
WHERE ($1::bigint IS NULL OR id = $1)
  AND ($2::text IS NULL OR source = $2)
  AND ($3::text IS NULL OR status = $3)
  AND ($4::text IS NULL OR record_id = $4)
  AND ($5::text IS NULL OR owner = $5)
  AND id IN (SELECT t.id FROM task_runs t, task_runs l WHERE l.id = $6 AND (t.updated_at, t.id) < (l.updated_at, l.id))
LIMIT 201`
)

// The statements of the gaps issue 29 found: the activity of a range,
// search by name or id, a notification's whole row and its retries.
const (
	// queryActivityRange is report_activity_hourly over the last $1
	// (an interval: 1 hour to 30 days), hour by hour: the same sums of
	// activity_hour_totals (activity_hour_totals_pkey).
	queryActivityRange = `
		WITH hours AS (
		    SELECT generate_series(date_trunc('hour', now(), 'UTC') - $1::interval + interval '1 hour', date_trunc('hour', now(), 'UTC'), interval '1 hour') AS hour
		), t AS (
		    SELECT hour, sum(runs)::bigint AS runs, sum(failed_runs)::bigint AS failed_runs, sum(timed_runs) AS timed_runs,
		           sum(lateness_seconds_sum) AS late_sum, max(lateness_seconds_max) AS late_max, sum(changes)::bigint AS changes,
		           sum(evaluations)::bigint AS evaluations, sum(notify_decisions)::bigint AS notify_decisions,
		           sum(notifications)::bigint AS notifications, sum(model_calls)::bigint AS model_calls,
		           sum(failed_model_calls)::bigint AS failed_model_calls
		    FROM activity_hour_totals
		    WHERE hour >= date_trunc('hour', now(), 'UTC') - $1::interval + interval '1 hour'
		    GROUP BY hour
		)
		SELECT h.hour, coalesce(t.runs, 0) AS runs, coalesce(t.failed_runs, 0) AS failed_runs, coalesce(t.changes, 0) AS changes,
		       coalesce(t.evaluations, 0) AS evaluations, coalesce(t.notify_decisions, 0) AS notify_decisions,
		       coalesce(t.notifications, 0) AS notifications, coalesce(t.model_calls, 0) AS model_calls,
		       coalesce(t.failed_model_calls, 0) AS failed_model_calls,
		       round((t.late_sum / nullif(t.timed_runs, 0))::numeric, 3) AS avg_lateness_seconds,
		       round(t.late_max::numeric, 3) AS max_lateness_seconds
		FROM hours h LEFT JOIN t ON t.hour = h.hour
		ORDER BY h.hour`

	// querySearchSources is the sources whose name holds $1 (a LIKE
	// pattern, its wildcards escaped: SearchFilter), the exact name first,
	// then by name; 50 and one to tell there are more.
	querySearchSources = `
		SELECT s.name, d.owner, d.managed_by, s.status, s.connector, s.last_run_at, s.last_error
		FROM sources s LEFT JOIN source_definitions d ON d.name = s.name
		WHERE s.name ILIKE $1
		ORDER BY s.name <> $2, s.name
		LIMIT 51`

	// querySearchWatches is the watches whose name holds $1, or whose
	// owner is $2.
	querySearchWatches = `
		SELECT source, name AS watch, owner, managed_by
		FROM watches
		WHERE name ILIKE $1 OR owner = $2
		ORDER BY source, name
		LIMIT 51`

	// querySearchIDs is the rows whose id is $1 (NULL: the text is not a
	// number), each table by its primary key: a run, a change, an
	// evaluation, a model call, a notification, a task run.
	querySearchIDs = `
		SELECT 'sync_run' AS kind, id, source, NULL::text AS record_id FROM sync_runs WHERE id = $1
		UNION ALL SELECT 'change', id, source, record_id FROM changes WHERE id = $1
		UNION ALL SELECT 'evaluation', id, source, record_id FROM evaluations WHERE id = $1
		UNION ALL SELECT 'model_call', id, source, record_id FROM model_calls WHERE id = $1
		UNION ALL SELECT 'notification', id, source, record_id FROM notifications WHERE id = $1
		UNION ALL SELECT 'task_run', id, source, record_id FROM task_runs WHERE id = $1`

	// queryNotification is one notification's row ($1), whole: what it
	// says (title, body), what its sink is sent (payload) and what the
	// row keeps of its attempts.
	queryNotification = `
		SELECT id AS notification_id, kind, status, sink, source, watch, record_id, change_id, owner, dedupe_key, urgency, reason,
		       title, body, payload, attempts, manual_retries, duplicates_suppressed, created_at, last_attempt_at, next_attempt_at,
		       delivered_at, dead_at, lease_owner, lease_expires_at, last_error
		FROM notifications
		WHERE id = $1`

	// queryDeliveryAttempts is the delivery attempts of notification $1
	// (delivery_attempts, one row per attempt, oldest first), of owner $2
	// only (NULL: an admin, any owner's). It is a LEFT JOIN from the
	// notification, so that a notification of the owner without attempts
	// yet is one row of NULL attempt columns and one the owner cannot see
	// is no row (DeliveryAttempts: a NotFoundError). The attempts are read
	// by (notification_id, attempt) (delivery_attempts_notification_idx)
	// and by the notification's source, which is their distribution
	// column on Citus.
	queryDeliveryAttempts = `
		SELECT n.id AS notification_id, a.attempt, a.started_at, a.duration_ms, a.outcome, a.http_status, a.error, a.response
		FROM notifications n
		LEFT JOIN delivery_attempts a ON a.notification_id = n.id AND a.source = n.source
		WHERE n.id = $1 AND ($2::text IS NULL OR n.owner = $2)
		ORDER BY a.attempt, a.id`

	// queryNotificationRetries is the manual retries of a notification
	// ($1) in the audit log: a retry of the one row, or of a page of
	// listed rows that held it.
	queryNotificationRetries = `
		SELECT id AS audit_id, at, actor, via, target, after
		FROM audit_log
		WHERE kind = 'notification' AND action = 'retry_dead'
		  AND (target = $1::bigint::text OR after -> 'ids' @> to_jsonb($1::bigint))
		ORDER BY id`
)

// SearchFilter is the parameters of the search statements: Text as the
// person typed it.
type SearchFilter struct {
	Text string
}

// Pattern is the LIKE pattern of the names that hold Text (its % and _
// escaped).
func (f SearchFilter) Pattern() string {
	r := strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`)
	return "%" + r.Replace(f.Text) + "%"
}

// SourcesArgs are ReportSearchSources' arguments.
func (f SearchFilter) SourcesArgs() []any { return []any{f.Pattern(), f.Text} }

// WatchesArgs are ReportSearchWatches' arguments.
func (f SearchFilter) WatchesArgs() []any { return []any{f.Pattern(), f.Text} }

// IDArgs are ReportSearchIDs' arguments: the text as an id, NULL when it
// is not one.
func (f SearchFilter) IDArgs() []any {
	n, err := strconv.ParseInt(strings.TrimPrefix(strings.TrimSpace(f.Text), "#"), 10, 64)
	if err != nil || n <= 0 {
		return []any{nil}
	}
	return []any{n}
}

// DriftCounts are the counts of the drift table: ReportDriftRows' count
// (DriftRowsFilter.Count).
var DriftCounts = map[string]bool{"evaluations": true, "judged": true, "cache_hits": true, "notify": true, "skip": true}

// Rows behind a number (/admin/rows/{what}): each reads its table by time
// through an index, newest first (the id breaks ties: a page's keyset); $1 and $2 bound the window (an hour of
// a chart, or all time for a list picked by a key filter). A source ($3,
// NULL for all) narrows them, and an owner ($4, NULL for all; $2 of the
// untimed ones): a row of a watch (an evaluation, a notification, a model
// call) is its watch's owner's, a row of a source (a run, a change) the
// owner's of the source's definition. The list's filters follow (NULL,
// or false for a flag: not given), in the order of rowQuery.filters, then
// the cursor of the page (the values of its keyset's columns, NULL on the
// first page).
const (
	// queryRowsRuns is the list of runs.
	queryRowsRuns = `
		SELECT id AS run_id, source, reason, status, started_at, round(duration_ms) AS ms, started_at - due_at AS late,
		       items_seen, items_created + items_updated + items_deleted AS changed, error
		FROM sync_runs
		WHERE started_at >= $1 AND started_at < $2 AND ($3::text IS NULL OR source = $3)
		  AND ($4::text IS NULL OR source IN (SELECT name FROM source_definitions WHERE owner = $4))
		  AND ($5::bigint IS NULL OR id = $5)
		  AND (NOT $6::bool OR status = 'failed')
		  AND ($7::text[] IS NULL OR status = ANY($7))
		  AND ($9::bigint IS NULL OR (started_at, id) < ($8, $9))
		ORDER BY started_at DESC, id DESC
		LIMIT 201`
	// queryRowsQuiet is the list of quiet.
	queryRowsQuiet = `
		SELECT source, hour, runs, not_modified, items_seen, last_started_at,
		       round((lateness_seconds_sum / runs)::numeric, 3) AS avg_late_s, round(lateness_seconds_max::numeric, 3) AS max_late_s
		FROM sync_run_hours
		WHERE hour >= $1 AND hour < $2 AND ($3::text IS NULL OR source = $3)
		  AND ($4::text IS NULL OR source IN (SELECT name FROM source_definitions WHERE owner = $4))
		  AND ($6::text IS NULL OR hour < $5::timestamptz OR (hour = $5 AND source > $6))
		ORDER BY hour DESC, source
		LIMIT 201`
	// queryRowsChanges is the list of changes.
	queryRowsChanges = `
		SELECT id AS change_id, source, record_id, kind, version, changed_fields, created_at, run_id, eval_status
		FROM changes
		WHERE created_at >= $1 AND created_at < $2 AND ($3::text IS NULL OR source = $3)
		  AND ($4::text IS NULL OR source IN (SELECT name FROM source_definitions WHERE owner = $4))
		  AND ($5::text[] IS NULL OR kind = ANY($5))
		  AND ($6::bigint IS NULL OR run_id = $6)
		  AND ($8::bigint IS NULL OR (created_at, id) < ($7, $8))
		ORDER BY created_at DESC, id DESC
		LIMIT 201`
	// queryRowsEvaluations is the list of evaluations.
	queryRowsEvaluations = `
		SELECT id AS evaluation_id, change_id, source, record_id, watch, step, decision, reason, urgency, created_at
		FROM evaluations
		WHERE created_at >= $1 AND created_at < $2 AND ($3::text IS NULL OR source = $3) AND ($4::text IS NULL OR owner = $4)
		  AND ($5::text[] IS NULL OR decision = ANY($5))
		  AND ($7::bigint IS NULL OR (created_at, id) < ($6, $7))
		ORDER BY created_at DESC, id DESC
		LIMIT 201`
	// queryRowsNotifications is the list of notifications.
	queryRowsNotifications = `
		SELECT id, kind, status, source, watch, record_id, sink, change_id, attempts, created_at, delivered_at, last_error
		FROM notifications
		WHERE created_at >= $1 AND created_at < $2 AND ($3::text IS NULL OR source = $3) AND ($4::text IS NULL OR owner = $4)
		  AND ($5::bigint IS NULL OR id = $5)
		  AND ($7::bigint IS NULL OR (created_at, id) < ($6, $7))
		ORDER BY created_at DESC, id DESC
		LIMIT 201`
	// queryRowsModelCalls is the list of model calls.
	queryRowsModelCalls = `
		SELECT id AS model_call_id, purpose, source, watch, record_id, change_id, model, outcome, round(latency_ms) AS ms,
		       prompt_tokens, output_tokens, created_at
		FROM model_calls
		WHERE created_at >= $1 AND created_at < $2 AND ($3::text IS NULL OR source = $3) AND ($4::text IS NULL OR owner = $4)
		  AND ($6::bigint IS NULL OR (created_at, id) < ($5, $6))
		ORDER BY created_at DESC, id DESC
		LIMIT 201`
	// queryRowsPendingChanges is the list of pending changes.
	queryRowsPendingChanges = `
		SELECT id AS change_id, source, record_id, kind, version, created_at, eval_attempts, eval_next_at, eval_owner, eval_error
		FROM changes
		WHERE eval_status = 'pending' AND ($1::text IS NULL OR source = $1)
		  AND ($2::text IS NULL OR source IN (SELECT name FROM source_definitions WHERE owner = $2))
		  AND ($3::bigint IS NULL OR id > $3)
		ORDER BY id
		LIMIT 201`
	// queryRowsPendingNotifications is the list of pending notifications.
	queryRowsPendingNotifications = `
		SELECT id, status, source, watch, record_id, sink, attempts, next_attempt_at, digest_due_at, lease_owner, last_error
		FROM notifications
		WHERE (status = 'pending' OR status = 'held') AND ($1::text IS NULL OR source = $1) AND ($2::text IS NULL OR owner = $2)
		  AND ($3::text[] IS NULL OR status = ANY($3))
		  AND ($4::bigint IS NULL OR id > $4)
		ORDER BY id
		LIMIT 201`
)

// The decision trail of a record's changes (the record page): what each
// watch decided about each change, the model calls it made and the
// notifications it enqueued — the rows `evaluator explain` prints.
const (
	queryTrailEvaluations = `
		SELECT change_id, watch, step, matched, decision, reason, urgency, confidence, model_call_id, notification_id, evaluator, created_at
		FROM evaluations
		WHERE change_id = ANY($1)
		ORDER BY change_id DESC, id`

	queryTrailModelCalls = `
		SELECT id AS model_call_id, change_id, watch, purpose, model, model_digest, prompt_version, outcome, attempt,
		       round(latency_ms) AS ms, prompt_tokens, output_tokens, error, created_at
		FROM model_calls
		WHERE change_id = ANY($1)
		ORDER BY change_id DESC, id`

	queryTrailNotifications = `
		SELECT id AS notification_id, change_id, watch, sink, status, attempts, duplicates_suppressed, dedupe_key,
		       next_attempt_at, delivered_at, last_error
		FROM notifications
		WHERE change_id = ANY($1)
		ORDER BY change_id DESC, id`
)

// SourcesFilter is the parameters of ReportSources.
type SourcesFilter struct {
	// After is the name of the last source of the page before ("" for the
	// first page).
	After string
	// Status, State and Owner narrow the list ("" for any).
	Status, State, Owner string
	// Failing keeps the sources whose failure_count is above 0; Due the
	// sources due now.
	Failing, Due bool
}

// Args are the statement's arguments, in order.
func (f SourcesFilter) Args() []any {
	return []any{f.After, opt(f.Status), opt(f.State), opt(f.Owner), f.Failing, f.Due}
}

// DeadFilter is the parameters of ReportDead (Args) and ReportDeadCount
// (CountArgs).
type DeadFilter struct {
	// Sink, Source and Owner narrow the list ("" for any; the counts per
	// sink take Source and Owner).
	Sink, Source, Owner string
	// AfterAt and AfterID are the dead_at (nil: none) and id of the last
	// row of the page before (AfterID 0: the first page).
	AfterAt *time.Time
	AfterID int64
}

// Args are ReportDead's arguments, in order.
func (f DeadFilter) Args() []any {
	var at, id any
	if f.AfterID != 0 {
		id = f.AfterID
		if f.AfterAt != nil {
			at = *f.AfterAt
		}
	}
	return []any{opt(f.Sink), opt(f.Source), opt(f.Owner), at, id}
}

// CountArgs are ReportDeadCount's arguments, in order.
func (f DeadFilter) CountArgs() []any { return []any{opt(f.Source), opt(f.Owner)} }

// DriftRowsFilter is ReportDriftRows' parameters: the cell of the drift
// table (its day, model, digest, prompt version, owner: "" for all, and
// count, one of driftCounts) and the page's end (BeforeAt, BeforeID).
type DriftRowsFilter struct {
	Day                                 time.Time
	Model, Digest, Prompt, Owner, Count string
	BeforeAt                            time.Time
	BeforeID                            int64
}

// Args are the statement's arguments, in order.
func (f DriftRowsFilter) Args() []any {
	return []any{f.Day, f.Model, f.Digest, f.Prompt, f.Owner, f.BeforeAt, f.BeforeID, f.Count}
}

// The admin page's statements, each with the type of its rows: the closed
// set of statements Report runs (admin holds no SQL; a ReportQuery is made
// here only).
var (
	ReportViewDef                  = reportQuery[ViewDefRow]("view definition", queryViewDef)
	ReportOverview                 = reportQuery[OverviewRow]("overview", queryOverview)
	ReportOwnerOverview            = reportQuery[OverviewRow]("owner overview", queryOwnerOverview)
	ReportActivity                 = reportQuery[ActivityHourRow]("activity", queryActivity)
	ReportSources                  = reportQuery[SourceListRow]("sources", querySources)
	ReportSource                   = reportQuery[SourceRow]("source", querySource)
	ReportSourceLastSuccess        = reportQuery[LastSuccessRow]("source last success", querySourceLastSuccess)
	ReportSourceRuns               = reportQuery[SourceRunRow]("source runs", querySourceRuns)
	ReportSourceQuiet              = reportQuery[SourceQuietRow]("source quiet runs", querySourceQuiet)
	ReportSourceRecords            = reportQuery[SourceRecordRow]("source records", querySourceRecords)
	ReportRecord                   = reportQuery[RecordRow]("record", queryRecord)
	ReportRecordChanges            = reportQuery[RecordChangeRow]("record changes", queryRecordChanges)
	ReportStuck                    = reportQuery[StuckRow]("stuck", queryStuck)
	ReportFailures                 = reportQuery[FailureRow]("failures", queryFailures)
	ReportHighRetry                = reportQuery[HighRetryRow]("high retry", queryHighRetry)
	ReportDisabled                 = reportQuery[DisabledRow]("disabled", queryDisabled)
	ReportDeadCount                = reportQuery[DeadCountRow]("dead per sink", queryDeadCount)
	ReportDead                     = reportQuery[DeadRow]("dead letters", queryDead)
	ReportExpensive                = reportQuery[ExpensiveRow]("expensive model calls", queryExpensive)
	ReportDrift                    = reportQuery[DriftRow]("model drift", queryDrift)
	ReportDriftOwner               = reportQuery[DriftRow]("owner's model drift", queryDriftOwner)
	ReportDriftRows                = reportQuery[DriftEvaluationRow]("drift rows", queryDriftRows)
	ReportOwners                   = reportQuery[OwnerRow]("owners", queryOwners)
	ReportTaskRuns                 = reportQuery[TaskRunRow]("task runs", queryTaskRuns)
	ReportTaskRunsAfter            = reportQuery[TaskRunRow]("task runs after", queryTaskRunsAfter)
	ReportTrailEvaluations         = reportQuery[TrailEvaluationRow]("trail evaluations", queryTrailEvaluations)
	ReportTrailModelCalls          = reportQuery[TrailModelCallRow]("trail model calls", queryTrailModelCalls)
	ReportTrailNotifications       = reportQuery[TrailNotificationRow]("trail notifications", queryTrailNotifications)
	ReportRowsRuns                 = reportQuery[RunRow]("rows: runs", queryRowsRuns)
	ReportRowsQuiet                = reportQuery[QuietRow]("rows: quiet runs", queryRowsQuiet)
	ReportRowsChanges              = reportQuery[ChangeRow]("rows: changes", queryRowsChanges)
	ReportRowsEvaluations          = reportQuery[EvaluationRow]("rows: evaluations", queryRowsEvaluations)
	ReportRowsNotifications        = reportQuery[NotificationRow]("rows: notifications", queryRowsNotifications)
	ReportRowsModelCalls           = reportQuery[ModelCallRow]("rows: model calls", queryRowsModelCalls)
	ReportRowsPendingChanges       = reportQuery[PendingChangeRow]("rows: pending changes", queryRowsPendingChanges)
	ReportRowsPendingNotifications = reportQuery[PendingNotificationRow]("rows: pending notifications", queryRowsPendingNotifications)
	ReportActivityRange            = reportQuery[ActivityHourRow]("activity of a range", queryActivityRange)
	ReportSearchSources            = reportQuery[SearchSourceRow]("search: sources", querySearchSources)
	ReportSearchWatches            = reportQuery[SearchWatchRow]("search: watches", querySearchWatches)
	ReportSearchIDs                = reportQuery[SearchIDRow]("search: ids", querySearchIDs)
	ReportNotification             = reportQuery[NotificationDetailRow]("notification", queryNotification)
	ReportNotificationRetries      = reportQuery[NotificationRetryRow]("notification retries", queryNotificationRetries)
	ReportDeliveryAttempts         = reportQuery[DeliveryAttemptRow]("delivery attempts", queryDeliveryAttempts)
)

// SearchSourceRow is a source whose name holds the text searched
// (ReportSearchSources).
type SearchSourceRow struct {
	Name      string     `db:"name"`
	Owner     *string    `db:"owner"`
	ManagedBy *string    `db:"managed_by"`
	Status    string     `db:"status"`
	Connector string     `db:"connector"`
	LastRunAt *time.Time `db:"last_run_at"`
	LastError *string    `db:"last_error"`
}

// SearchWatchRow is a watch whose name holds the text searched, or whose
// owner it is (ReportSearchWatches).
type SearchWatchRow struct {
	Source    string `db:"source"`
	Watch     string `db:"watch"`
	Owner     string `db:"owner"`
	ManagedBy string `db:"managed_by"`
}

// SearchIDRow is a row whose id is the number searched (ReportSearchIDs).
type SearchIDRow struct {
	Kind     string  `db:"kind"`
	ID       int64   `db:"id"`
	Source   string  `db:"source"`
	RecordID *string `db:"record_id"`
}

// NotificationDetailRow is a notification's whole row (ReportNotification).
type NotificationDetailRow struct {
	NotificationID       int64      `db:"notification_id"`
	Kind                 string     `db:"kind"`
	Status               string     `db:"status"`
	Sink                 string     `db:"sink"`
	Source               string     `db:"source"`
	Watch                string     `db:"watch"`
	RecordID             string     `db:"record_id"`
	ChangeID             *int64     `db:"change_id"`
	Owner                string     `db:"owner"`
	DedupeKey            string     `db:"dedupe_key"`
	Urgency              *string    `db:"urgency"`
	Reason               *string    `db:"reason"`
	Title                *string    `db:"title"`
	Body                 *string    `db:"body"`
	Payload              []byte     `db:"payload"`
	Attempts             int32      `db:"attempts"`
	ManualRetries        int32      `db:"manual_retries"`
	DuplicatesSuppressed int32      `db:"duplicates_suppressed"`
	CreatedAt            time.Time  `db:"created_at"`
	LastAttemptAt        *time.Time `db:"last_attempt_at"`
	NextAttemptAt        time.Time  `db:"next_attempt_at"`
	DeliveredAt          *time.Time `db:"delivered_at"`
	DeadAt               *time.Time `db:"dead_at"`
	LeaseOwner           *string    `db:"lease_owner"`
	LeaseExpiresAt       *time.Time `db:"lease_expires_at"`
	LastError            *string    `db:"last_error"`
}

// DeliveryAttemptRow is one delivery attempt of a notification
// (ReportDeliveryAttempts, DeliveryAttempts): its number, when it
// started, how long it took, its outcome (delivered, retry, dead or
// refused: the egress policy refused the connection), the receiver's
// HTTP status, the error (secrets redacted) and the start of the
// receiver's answer. The attempt's columns are NULL on the one row of a
// notification without attempts yet (DeliveryAttempts leaves it out).
type DeliveryAttemptRow struct {
	NotificationID int64      `db:"notification_id"`
	Attempt        *int32     `db:"attempt"`
	StartedAt      *time.Time `db:"started_at"`
	DurationMS     *float64   `db:"duration_ms"`
	Outcome        *string    `db:"outcome"`
	HTTPStatus     *int32     `db:"http_status"`
	Error          *string    `db:"error"`
	Response       *string    `db:"response"`
}

// NotificationRetryRow is a manual retry of a notification in the audit
// log (ReportNotificationRetries).
type NotificationRetryRow struct {
	AuditID int64     `db:"audit_id"`
	At      time.Time `db:"at"`
	Actor   string    `db:"actor"`
	Via     string    `db:"via"`
	Target  string    `db:"target"`
	After   []byte    `db:"after"`
}

// ViewDefRow is the definition of a report view (ReportViewDef).
type ViewDefRow struct {
	Definition string `db:"definition"`
}

// OverviewRow is a row of report_overview, or of report_owner_overview (Owner set) (ReportOverview, ReportOwnerOverview).
type OverviewRow struct {
	// Owner is the owner of report_owner_overview's numbers ("" for the whole system's).
	Owner                 string          `db:"owner"`
	ActiveSources         *int64          `db:"active_sources"`
	InactiveSources       *int64          `db:"inactive_sources"`
	SourcesDue            *int64          `db:"sources_due"`
	RunsInProgress        *int64          `db:"runs_in_progress"`
	FailedRuns24h         *int64          `db:"failed_runs_24h"`
	PendingChanges        *int64          `db:"pending_changes"`
	OldestPendingChangeAt *time.Time      `db:"oldest_pending_change_at"`
	PendingNotifications  *int64          `db:"pending_notifications"`
	HeldNotifications     *int64          `db:"held_notifications"`
	DeadNotifications     *int64          `db:"dead_notifications"`
	Stuck                 *int64          `db:"stuck"`
	MostOverdue           pgtype.Interval `db:"most_overdue"`
}

// ActivityHourRow is an hour of report_activity_hourly (ReportActivity).
type ActivityHourRow struct {
	Hour               time.Time      `db:"hour"`
	Runs               *int64         `db:"runs"`
	FailedRuns         *int64         `db:"failed_runs"`
	Changes            *int64         `db:"changes"`
	Evaluations        *int64         `db:"evaluations"`
	NotifyDecisions    *int64         `db:"notify_decisions"`
	Notifications      *int64         `db:"notifications"`
	ModelCalls         *int64         `db:"model_calls"`
	FailedModelCalls   *int64         `db:"failed_model_calls"`
	AvgLatenessSeconds pgtype.Numeric `db:"avg_lateness_seconds"`
	MaxLatenessSeconds pgtype.Numeric `db:"max_lateness_seconds"`
}

// SourceListRow is a source of the source list (ReportSources).
type SourceListRow struct {
	Name             string         `db:"name"`
	Owner            *string        `db:"owner"`
	ManagedBy        *string        `db:"managed_by"`
	DefinitionPaused *bool          `db:"definition_paused"`
	OrphanedAt       *time.Time     `db:"orphaned_at"`
	Status           *string        `db:"status"`
	State            *string        `db:"state"`
	Schedule         *string        `db:"schedule"`
	LatenessSeconds  pgtype.Numeric `db:"lateness_seconds"`
	FailureCount     *int32         `db:"failure_count"`
	LastRunAt        *time.Time     `db:"last_run_at"`
	NextRunAt        *time.Time     `db:"next_run_at"`
	LeaseOwner       *string        `db:"lease_owner"`
	LeaseExpiresAt   *time.Time     `db:"lease_expires_at"`
	RunID            *int64         `db:"run_id"`
	LastError        *string        `db:"last_error"`
}

// SourceRow is a row of report_sources: one source (ReportSource).
type SourceRow struct {
	Name             *string        `db:"name"`
	Connector        *string        `db:"connector"`
	Status           *string        `db:"status"`
	State            *string        `db:"state"`
	StatusReason     *string        `db:"status_reason"`
	Schedule         *string        `db:"schedule"`
	IntervalReason   *string        `db:"interval_reason"`
	NextRunAt        *time.Time     `db:"next_run_at"`
	LatenessSeconds  pgtype.Numeric `db:"lateness_seconds"`
	LastRunAt        *time.Time     `db:"last_run_at"`
	LastSuccessAt    *time.Time     `db:"last_success_at"`
	LastChangeAt     *time.Time     `db:"last_change_at"`
	FailureCount     *int32         `db:"failure_count"`
	LastError        *string        `db:"last_error"`
	LeaseOwner       *string        `db:"lease_owner"`
	LeaseExpiresAt   *time.Time     `db:"lease_expires_at"`
	RunID            *int64         `db:"run_id"`
	RunRequestedAt   *time.Time     `db:"run_requested_at"`
	Owner            *string        `db:"owner"`
	ManagedBy        *string        `db:"managed_by"`
	DefinitionPaused *bool          `db:"definition_paused"`
	OrphanedAt       *time.Time     `db:"orphaned_at"`
}

// LastSuccessRow is when a source last succeeded (ReportSourceLastSuccess).
type LastSuccessRow struct {
	LastSuccessAt *time.Time `db:"last_success_at"`
}

// SourceRunRow is a recorded run of a source (ReportSourceRuns).
type SourceRunRow struct {
	RunID        int64           `db:"run_id"`
	Reason       string          `db:"reason"`
	Status       string          `db:"status"`
	StartedAt    time.Time       `db:"started_at"`
	MS           *float64        `db:"ms"`
	Late         pgtype.Interval `db:"late"`
	ItemsSeen    int32           `db:"items_seen"`
	ItemsCreated int32           `db:"items_created"`
	ItemsUpdated int32           `db:"items_updated"`
	ItemsDeleted int32           `db:"items_deleted"`
	Error        *string         `db:"error"`
}

// SourceQuietRow is an hour of a source's quiet runs (ReportSourceQuiet).
type SourceQuietRow struct {
	Hour        time.Time      `db:"hour"`
	Runs        int32          `db:"runs"`
	NotModified int32          `db:"not_modified"`
	ItemsSeen   int64          `db:"items_seen"`
	AvgLateS    pgtype.Numeric `db:"avg_late_s"`
	MaxLateS    pgtype.Numeric `db:"max_late_s"`
}

// SourceRecordRow is a record of a source's list of records (ReportSourceRecords).
type SourceRecordRow struct {
	RecordID  string     `db:"record_id"`
	Title     *string    `db:"title"`
	Version   int32      `db:"version"`
	Status    *string    `db:"status"`
	SyncedAt  time.Time  `db:"synced_at"`
	DeletedAt *time.Time `db:"deleted_at"`
}

// RecordRow is a record as mirrored now (ReportRecord).
type RecordRow struct {
	Source      string     `db:"source"`
	RecordID    string     `db:"record_id"`
	Version     int32      `db:"version"`
	Title       *string    `db:"title"`
	URL         *string    `db:"url"`
	Status      *string    `db:"status"`
	Author      *string    `db:"author"`
	Labels      []string   `db:"labels"`
	FirstSeenAt time.Time  `db:"first_seen_at"`
	SyncedAt    time.Time  `db:"synced_at"`
	DeletedAt   *time.Time `db:"deleted_at"`
	LastRunID   *int64     `db:"last_run_id"`
}

// RecordChangeRow is a change of a record (ReportRecordChanges).
type RecordChangeRow struct {
	ChangeID      int64      `db:"change_id"`
	Kind          string     `db:"kind"`
	Version       int32      `db:"version"`
	ChangedFields []string   `db:"changed_fields"`
	CreatedAt     time.Time  `db:"created_at"`
	RunID         *int64     `db:"run_id"`
	EvalStatus    string     `db:"eval_status"`
	EvalAttempts  int32      `db:"eval_attempts"`
	EvaluatedAt   *time.Time `db:"evaluated_at"`
	EvalError     *string    `db:"eval_error"`
}

// StuckRow is a row of report_stuck (ReportStuck).
type StuckRow struct {
	Kind              *string         `db:"kind"`
	Source            *string         `db:"source"`
	ID                *int64          `db:"id"`
	RecordID          *string         `db:"record_id"`
	Owner             *string         `db:"owner"`
	Since             *time.Time      `db:"since"`
	Age               pgtype.Interval `db:"age"`
	StuckAfterSeconds *int32          `db:"stuck_after_seconds"`
	Detail            *string         `db:"detail"`
	DefinitionOwner   *string         `db:"definition_owner"`
}

// FailureRow is a row of report_recent_failures (ReportFailures).
type FailureRow struct {
	Kind     *string    `db:"kind"`
	Source   *string    `db:"source"`
	Watch    *string    `db:"watch"`
	Sink     *string    `db:"sink"`
	ID       *int64     `db:"id"`
	RecordID *string    `db:"record_id"`
	Status   *string    `db:"status"`
	At       *time.Time `db:"at"`
	Attempts *int32     `db:"attempts"`
	Error    *string    `db:"error"`
	Owner    *string    `db:"owner"`
}

// HighRetryRow is a row of report_high_retry (ReportHighRetry).
type HighRetryRow struct {
	Kind          *string    `db:"kind"`
	Source        *string    `db:"source"`
	ID            *int64     `db:"id"`
	RecordID      *string    `db:"record_id"`
	Watch         *string    `db:"watch"`
	Sink          *string    `db:"sink"`
	Attempts      *int32     `db:"attempts"`
	Status        *string    `db:"status"`
	NextAttemptAt *time.Time `db:"next_attempt_at"`
	LastError     *string    `db:"last_error"`
	Owner         *string    `db:"owner"`
}

// DisabledRow is a row of report_disabled_sources (ReportDisabled).
type DisabledRow struct {
	Name          *string         `db:"name"`
	Connector     *string         `db:"connector"`
	Status        *string         `db:"status"`
	StatusReason  *string         `db:"status_reason"`
	Since         *time.Time      `db:"since"`
	ForHowLong    pgtype.Interval `db:"for_how_long"`
	FailureCount  *int32          `db:"failure_count"`
	LastError     *string         `db:"last_error"`
	LastRunAt     *time.Time      `db:"last_run_at"`
	LastSuccessAt *time.Time      `db:"last_success_at"`
	ResumeWith    *string         `db:"resume_with"`
	Owner         *string         `db:"owner"`
}

// DeadCountRow is the number of dead letters of a sink (ReportDeadCount).
type DeadCountRow struct {
	Sink string `db:"sink"`
	Dead int64  `db:"dead"`
}

// DeadRow is a row of report_dead_letters (ReportDead).
type DeadRow struct {
	ID            int64      `db:"id"`
	Sink          *string    `db:"sink"`
	Source        *string    `db:"source"`
	Watch         *string    `db:"watch"`
	RecordID      *string    `db:"record_id"`
	DedupeKey     *string    `db:"dedupe_key"`
	Kind          *string    `db:"kind"`
	Title         *string    `db:"title"`
	Attempts      *int32     `db:"attempts"`
	LastError     *string    `db:"last_error"`
	CreatedAt     *time.Time `db:"created_at"`
	LastAttemptAt *time.Time `db:"last_attempt_at"`
	DeadAt        *time.Time `db:"dead_at"`
	ManualRetries *int32     `db:"manual_retries"`
	Owner         *string    `db:"owner"`
}

// ExpensiveRow is a row of report_expensive_evaluations (ReportExpensive).
type ExpensiveRow struct {
	ModelCallID   *int64     `db:"model_call_id"`
	CreatedAt     *time.Time `db:"created_at"`
	Purpose       *string    `db:"purpose"`
	Source        *string    `db:"source"`
	Watch         *string    `db:"watch"`
	RecordID      *string    `db:"record_id"`
	ChangeID      *int64     `db:"change_id"`
	Model         *string    `db:"model"`
	ModelDigest   *string    `db:"model_digest"`
	PromptVersion *string    `db:"prompt_version"`
	Outcome       *string    `db:"outcome"`
	Attempt       *int32     `db:"attempt"`
	LatencyMS     *float64   `db:"latency_ms"`
	PromptTokens  *int32     `db:"prompt_tokens"`
	OutputTokens  *int32     `db:"output_tokens"`
	TotalTokens   *int32     `db:"total_tokens"`
	Decision      *string    `db:"decision"`
	Reason        *string    `db:"reason"`
	Owner         *string    `db:"owner"`
}

// DriftRow is a day, model digest and prompt version of the model drift (ReportDrift, ReportDriftOwner).
type DriftRow struct {
	Day           *time.Time     `db:"day"`
	Model         *string        `db:"model"`
	ModelDigest   *string        `db:"model_digest"`
	PromptVersion *string        `db:"prompt_version"`
	Evaluations   *int64         `db:"evaluations"`
	Judged        *int64         `db:"judged"`
	CacheHits     *int64         `db:"cache_hits"`
	Notify        *int64         `db:"notify"`
	Skip          *int64         `db:"skip"`
	NotifyRate    pgtype.Numeric `db:"notify_rate"`
	AvgConfidence pgtype.Numeric `db:"avg_confidence"`
}

// DriftEvaluationRow is an evaluation behind a count of the drift table (ReportDriftRows).
type DriftEvaluationRow struct {
	EvaluationID int64     `db:"evaluation_id"`
	ChangeID     int64     `db:"change_id"`
	Source       string    `db:"source"`
	RecordID     string    `db:"record_id"`
	Watch        string    `db:"watch"`
	Step         string    `db:"step"`
	Decision     string    `db:"decision"`
	Reason       string    `db:"reason"`
	Urgency      *string   `db:"urgency"`
	Confidence   *float64  `db:"confidence"`
	ModelCallID  *int64    `db:"model_call_id"`
	Owner        string    `db:"owner"`
	CreatedAt    time.Time `db:"created_at"`
}

// OwnerRow is an owner of definitions (ReportOwners).
type OwnerRow struct {
	Owner string `db:"owner"`
}

// TaskRunRow is a row of report_task_runs (ReportTaskRuns, ReportTaskRunsAfter).
type TaskRunRow struct {
	ID                   *int64          `db:"id"`
	Source               *string         `db:"source"`
	Task                 *string         `db:"task"`
	RecordID             *string         `db:"record_id"`
	Title                *string         `db:"title"`
	RunID                *string         `db:"run_id"`
	Status               *string         `db:"status"`
	Attempt              *int32          `db:"attempt"`
	Executions           *int32          `db:"executions"`
	RetryCount           *int32          `db:"retry_count"`
	ExecutedMoreThanOnce *bool           `db:"executed_more_than_once"`
	ClaimedBy            *string         `db:"claimed_by"`
	ClaimedAt            *time.Time      `db:"claimed_at"`
	ClaimExpiresAt       *time.Time      `db:"claim_expires_at"`
	StartedAt            *time.Time      `db:"started_at"`
	FinishedAt           *time.Time      `db:"finished_at"`
	RanFor               pgtype.Interval `db:"ran_for"`
	Executor             *string         `db:"executor"`
	ExitCode             *int32          `db:"exit_code"`
	Result               any             `db:"result"`
	LastError            *string         `db:"last_error"`
	RetryAt              *time.Time      `db:"retry_at"`
	ToolInSync           *bool           `db:"tool_in_sync"`
	ToolError            *string         `db:"tool_error"`
	IdempotencyKey       *string         `db:"idempotency_key"`
	SyncRunID            *int64          `db:"sync_run_id"`
	Owner                *string         `db:"owner"`
	// The review of the result (migration 37): the corrections asked so
	// far and the latest review's status, lowest score, criteria and why
	// it is held.
	CorrectionCount   *int32  `db:"correction_count"`
	ReviewStatus      *string `db:"review_status"`
	ReviewScore       *int32  `db:"review_score"`
	Review            any     `db:"review"`
	ReviewHeldBecause *string `db:"review_held_because"`
}

// TrailEvaluationRow is what a watch decided about a change (ReportTrailEvaluations).
type TrailEvaluationRow struct {
	ChangeID       int64     `db:"change_id"`
	Watch          string    `db:"watch"`
	Step           string    `db:"step"`
	Matched        bool      `db:"matched"`
	Decision       string    `db:"decision"`
	Reason         string    `db:"reason"`
	Urgency        *string   `db:"urgency"`
	Confidence     *float64  `db:"confidence"`
	ModelCallID    *int64    `db:"model_call_id"`
	NotificationID *int64    `db:"notification_id"`
	Evaluator      string    `db:"evaluator"`
	CreatedAt      time.Time `db:"created_at"`
}

// TrailModelCallRow is a model call of a change (ReportTrailModelCalls).
type TrailModelCallRow struct {
	ModelCallID   int64     `db:"model_call_id"`
	ChangeID      *int64    `db:"change_id"`
	Watch         string    `db:"watch"`
	Purpose       string    `db:"purpose"`
	Model         string    `db:"model"`
	ModelDigest   string    `db:"model_digest"`
	PromptVersion string    `db:"prompt_version"`
	Outcome       string    `db:"outcome"`
	Attempt       int32     `db:"attempt"`
	MS            *float64  `db:"ms"`
	PromptTokens  int32     `db:"prompt_tokens"`
	OutputTokens  int32     `db:"output_tokens"`
	Error         *string   `db:"error"`
	CreatedAt     time.Time `db:"created_at"`
}

// TrailNotificationRow is a notification of a change (ReportTrailNotifications).
type TrailNotificationRow struct {
	NotificationID       int64      `db:"notification_id"`
	ChangeID             *int64     `db:"change_id"`
	Watch                string     `db:"watch"`
	Sink                 string     `db:"sink"`
	Status               string     `db:"status"`
	Attempts             int32      `db:"attempts"`
	DuplicatesSuppressed int32      `db:"duplicates_suppressed"`
	DedupeKey            string     `db:"dedupe_key"`
	NextAttemptAt        time.Time  `db:"next_attempt_at"`
	DeliveredAt          *time.Time `db:"delivered_at"`
	LastError            *string    `db:"last_error"`
}

// RunRow is a recorded run of the rows behind a number (ReportRowsRuns).
type RunRow struct {
	RunID     int64           `db:"run_id"`
	Source    string          `db:"source"`
	Reason    string          `db:"reason"`
	Status    string          `db:"status"`
	StartedAt time.Time       `db:"started_at"`
	MS        *float64        `db:"ms"`
	Late      pgtype.Interval `db:"late"`
	ItemsSeen int32           `db:"items_seen"`
	Changed   *int32          `db:"changed"`
	Error     *string         `db:"error"`
}

// QuietRow is an hour of a source's quiet runs of the rows behind a number (ReportRowsQuiet).
type QuietRow struct {
	Source        string         `db:"source"`
	Hour          time.Time      `db:"hour"`
	Runs          int32          `db:"runs"`
	NotModified   int32          `db:"not_modified"`
	ItemsSeen     int64          `db:"items_seen"`
	LastStartedAt time.Time      `db:"last_started_at"`
	AvgLateS      pgtype.Numeric `db:"avg_late_s"`
	MaxLateS      pgtype.Numeric `db:"max_late_s"`
}

// ChangeRow is a change of the rows behind a number (ReportRowsChanges).
type ChangeRow struct {
	ChangeID      int64     `db:"change_id"`
	Source        string    `db:"source"`
	RecordID      string    `db:"record_id"`
	Kind          string    `db:"kind"`
	Version       int32     `db:"version"`
	ChangedFields []string  `db:"changed_fields"`
	CreatedAt     time.Time `db:"created_at"`
	RunID         *int64    `db:"run_id"`
	EvalStatus    string    `db:"eval_status"`
}

// EvaluationRow is an evaluation of the rows behind a number (ReportRowsEvaluations).
type EvaluationRow struct {
	EvaluationID int64     `db:"evaluation_id"`
	ChangeID     int64     `db:"change_id"`
	Source       string    `db:"source"`
	RecordID     string    `db:"record_id"`
	Watch        string    `db:"watch"`
	Step         string    `db:"step"`
	Decision     string    `db:"decision"`
	Reason       string    `db:"reason"`
	Urgency      *string   `db:"urgency"`
	CreatedAt    time.Time `db:"created_at"`
}

// NotificationRow is a notification of the rows behind a number (ReportRowsNotifications).
type NotificationRow struct {
	ID          int64      `db:"id"`
	Kind        string     `db:"kind"`
	Status      string     `db:"status"`
	Source      string     `db:"source"`
	Watch       string     `db:"watch"`
	RecordID    string     `db:"record_id"`
	Sink        string     `db:"sink"`
	ChangeID    *int64     `db:"change_id"`
	Attempts    int32      `db:"attempts"`
	CreatedAt   time.Time  `db:"created_at"`
	DeliveredAt *time.Time `db:"delivered_at"`
	LastError   *string    `db:"last_error"`
}

// ModelCallRow is a model call of the rows behind a number (ReportRowsModelCalls).
type ModelCallRow struct {
	ModelCallID  int64     `db:"model_call_id"`
	Purpose      string    `db:"purpose"`
	Source       string    `db:"source"`
	Watch        string    `db:"watch"`
	RecordID     string    `db:"record_id"`
	ChangeID     *int64    `db:"change_id"`
	Model        string    `db:"model"`
	Outcome      string    `db:"outcome"`
	MS           *float64  `db:"ms"`
	PromptTokens int32     `db:"prompt_tokens"`
	OutputTokens int32     `db:"output_tokens"`
	CreatedAt    time.Time `db:"created_at"`
}

// PendingChangeRow is a change waiting for the evaluator (ReportRowsPendingChanges).
type PendingChangeRow struct {
	ChangeID     int64              `db:"change_id"`
	Source       string             `db:"source"`
	RecordID     string             `db:"record_id"`
	Kind         string             `db:"kind"`
	Version      int32              `db:"version"`
	CreatedAt    time.Time          `db:"created_at"`
	EvalAttempts int32              `db:"eval_attempts"`
	EvalNextAt   pgtype.Timestamptz `db:"eval_next_at"`
	EvalOwner    *string            `db:"eval_owner"`
	EvalError    *string            `db:"eval_error"`
}

// PendingNotificationRow is a pending or held notification (ReportRowsPendingNotifications).
type PendingNotificationRow struct {
	ID            int64      `db:"id"`
	Status        string     `db:"status"`
	Source        string     `db:"source"`
	Watch         string     `db:"watch"`
	RecordID      string     `db:"record_id"`
	Sink          string     `db:"sink"`
	Attempts      int32      `db:"attempts"`
	NextAttemptAt time.Time  `db:"next_attempt_at"`
	DigestDueAt   *time.Time `db:"digest_due_at"`
	LeaseOwner    *string    `db:"lease_owner"`
	LastError     *string    `db:"last_error"`
}

// opt is an optional filter's argument: NULL when it is not given.
func opt(v string) any {
	if v == "" {
		return nil
	}
	return v
}
