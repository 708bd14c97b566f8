package admin

// The statements of the admin pages. Numbers come from the report_* views
// (migrations 3, 4, 5, 14, 18 and 22), so the page and a SQL user read the same
// definitions; the lists of rows behind them read the tables through the
// indexes docs/performance.md names. internal/reports' plan test runs
// EXPLAIN on every one of them (TestHotQueriesUseIndexes).

// pageSize is how many rows a list shows.
const pageSize = 50

// deadPage is how many dead letters a page lists (and its bulk retry
// retries at most).
const deadPage = 200

const (
	// queryViewDef is the definition of a report view ($1), shown under
	// the statements that read it.
	queryViewDef = `SELECT pg_get_viewdef(to_regclass($1), true)`

	queryOverview = `SELECT * FROM report_overview`

	// queryOwnerOverview is report_overview's numbers for one owner ($1;
	// migration 26).
	queryOwnerOverview = `SELECT * FROM report_owner_overview WHERE owner = $1`

	queryActivity = `SELECT * FROM report_activity_hourly`

	// querySources is a page of the source list, by name, after $1;
	// filters are added before the ORDER BY.
	querySources = `
		SELECT name, owner, managed_by, definition_paused, orphaned_at, status, state, schedule, lateness_seconds, failure_count,
		       last_run_at, next_run_at, lease_owner, lease_expires_at, run_id, last_error
		FROM report_sources
		WHERE name > $1`

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

	// queryStuck is report_stuck in the view's order, the source breaking
	// its ties (a source's rows have no id): the keyset of its pages.
	queryStuck = `SELECT * FROM report_stuck
ORDER BY since, kind, id, source
LIMIT 201`

	// queryFailures is report_recent_failures in the view's order, the
	// watch and status breaking its ties (an evaluation's id is its
	// change's): the keyset of its pages.
	queryFailures = `SELECT * FROM report_recent_failures
ORDER BY at DESC, kind, id DESC, watch, status`

	queryHighRetry = `SELECT * FROM report_high_retry LIMIT 201`

	queryDisabled = `SELECT * FROM report_disabled_sources LIMIT 201`

	queryDeadCount = `SELECT sink, count(*) AS dead FROM report_dead_letters GROUP BY sink ORDER BY sink`

	// queryDead is a page of dead letters in the view's order (dead_at
	// newest first, NULLs last, then id): the sink, source and owner
	// filters (deadFilters) and, after the first page, deadAfter come
	// before its LIMIT (deadPage rows and one to tell there are more).
	queryDead = `SELECT * FROM report_dead_letters LIMIT 201`

	// deadAfter is the keyset of the dead letters' next page: the rows
	// after the last one shown ($%[1]d its dead_at, NULL when it had
	// none; $%[2]d its id) in the view's order.
	deadAfter = `(dead_at < $%[1]d OR (dead_at = $%[1]d AND id < $%[2]d) OR (dead_at IS NULL AND ($%[1]d::timestamptz IS NOT NULL OR id < $%[2]d)))`

	// queryExpensive is the most expensive model calls of the last 24
	// hours (the view's order: slowest first).
	queryExpensive = `
		SELECT * FROM report_expensive_evaluations
		WHERE created_at > now() - interval '24 hours'
		LIMIT 51`

	// queryExpensiveOwner is queryExpensive of one owner ($1).
	queryExpensiveOwner = `
		SELECT * FROM report_expensive_evaluations
		WHERE owner = $1 AND created_at > now() - interval '24 hours'
		LIMIT 51`

	// queryDrift is the fleet's model drift per day, model digest and
	// prompt version (migration 22).
	queryDrift = `SELECT * FROM report_model_drift_daily`

	// queryDriftOwner is one owner's model drift: report_model_drift_recent's
	// rows of the owner ($1) summed over sources and watches (the average
	// confidence weighted by evaluations).
	queryDriftOwner = `
		SELECT day, model, model_digest, prompt_version, sum(evaluations)::bigint AS evaluations, sum(judged)::bigint AS judged,
		       sum(cache_hits)::bigint AS cache_hits, sum(notify)::bigint AS notify, sum(skip)::bigint AS skip,
		       round(sum(notify)::numeric / sum(evaluations), 3) AS notify_rate,
		       round(sum(avg_confidence * evaluations) / nullif(sum(evaluations) FILTER (WHERE avg_confidence IS NOT NULL), 0), 3) AS avg_confidence
		FROM report_model_drift_recent
		WHERE owner = $1
		GROUP BY 1, 2, 3, 4
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
	// cursor ($6, $7: created_at and id of the last row shown); the
	// count's own condition (driftCounts) comes before the ORDER BY
	// (driftRowsOrder).
	queryDriftRows = `
		SELECT e.id AS evaluation_id, e.change_id, e.source, e.record_id, e.watch, e.step, e.decision, e.reason,
		       e.urgency, e.confidence, e.model_call_id, e.owner, e.created_at
		FROM evaluations e
		JOIN LATERAL (SELECT mc.model, mc.model_digest, mc.prompt_version FROM model_calls mc WHERE mc.id = e.model_call_id OFFSET 0) mc ON true
		WHERE e.step IN ('model', 'cache') AND e.created_at >= date_trunc('day', now(), 'UTC') - interval '13 days'
		  AND date_trunc('day', e.created_at, 'UTC') = $1 AND e.created_at >= $1 AND e.created_at < $1 + interval '24 hours'
		  AND mc.model = $2 AND mc.model_digest = $3 AND mc.prompt_version = $4
		  AND ($5 = '' OR e.owner = $5)
		  AND e.created_at <= $6 AND (e.created_at, e.id) < ($6, $7)`

	driftRowsOrder = `
		ORDER BY e.created_at DESC, e.id DESC
		LIMIT 201`

	// queryOwners lists the owners of definitions (the owner filter).
	queryOwners = `
		SELECT owner FROM source_definitions WHERE owner <> ''
		UNION
		SELECT owner FROM watches WHERE owner <> ''
		ORDER BY 1`

	// queryTaskRuns is the task queue (migration 17), most recently
	// changed first.
	queryTaskRuns = `SELECT * FROM report_task_runs LIMIT 201`

	// queryTaskRunsAfter is the condition of the task runs' next page: the
	// rows after the last one shown ($%[1]d its id) in the view's order
	// (updated_at, then id, newest first; the view does not show
	// updated_at, so it is read back by the id: task_runs_pkey, then
	// task_runs_updated_idx).
	queryTaskRunsAfter = `id IN (SELECT t.id FROM task_runs t, task_runs l WHERE l.id = $%[1]d AND (t.updated_at, t.id) < (l.updated_at, l.id))`
)

// driftCounts are the counts of the drift table, each with the condition
// that picks its evaluations among queryDriftRows' (the FILTER of the
// views' column of that name; evaluations counts them all).
var driftCounts = map[string]string{
	"evaluations": "",
	"judged":      "\n\t\t  AND e.step = 'model'",
	"cache_hits":  "\n\t\t  AND e.step = 'cache'",
	"notify":      "\n\t\t  AND e.decision IN ('notify', 'duplicate')",
	"skip":        "\n\t\t  AND e.decision = 'skip'",
}

// Rows behind a number (/admin/rows/{what}): each reads its table by time
// through an index, newest first (the id breaks ties: a page's keyset); $1 and $2 bound the window (an hour of
// a chart, or all time for a list picked by a key filter). A source ($3,
// ” for all) narrows them, and an owner ($4, ” for all; $2 of the
// untimed ones): a row of a watch (an evaluation, a notification, a model
// call) is its watch's owner's, a row of a source (a run, a change) the
// owner's of the source's definition.
var rowQueries = map[string]rowQuery{
	"runs": {title: "Runs", sql: `
		SELECT id AS run_id, source, reason, status, started_at, round(duration_ms) AS ms, started_at - due_at AS late,
		       items_seen, items_created + items_updated + items_deleted AS changed, error
		FROM sync_runs
		WHERE started_at >= $1 AND started_at < $2 AND ($3 = '' OR source = $3)
		  AND ($4 = '' OR source IN (SELECT name FROM source_definitions WHERE owner = $4))
		ORDER BY started_at DESC, id DESC
		LIMIT 201`, owned: true, keys: keyset{{col: "started_at", desc: true}, {col: "id", field: "run_id", desc: true}}, filters: map[string]rowFilter{
		"status": {cond: "status = ANY(%s)", list: true},
		"id":     {cond: "id = %s", number: true, key: true},
		// The failed runs a source's failure_count counts: those since its
		// last success (querySourceLastSuccess, the window's start; a resume
		// or a changed definition also resets the count, and the runs
		// before it still show).
		"since_success": {cond: "status = 'failed'", flag: true, key: true, needsSource: true},
	}},
	"quiet": {title: "Quiet runs", sql: `
		SELECT source, hour, runs, not_modified, items_seen, last_started_at,
		       round((lateness_seconds_sum / runs)::numeric, 3) AS avg_late_s, round(lateness_seconds_max::numeric, 3) AS max_late_s
		FROM sync_run_hours
		WHERE hour >= $1 AND hour < $2 AND ($3 = '' OR source = $3)
		  AND ($4 = '' OR source IN (SELECT name FROM source_definitions WHERE owner = $4))
		ORDER BY hour DESC, source
		LIMIT 201`, owned: true, keys: keyset{{col: "hour", desc: true}, {col: "source"}}},
	"changes": {title: "Changes", sql: `
		SELECT id AS change_id, source, record_id, kind, version, changed_fields, created_at, run_id, eval_status
		FROM changes
		WHERE created_at >= $1 AND created_at < $2 AND ($3 = '' OR source = $3)
		  AND ($4 = '' OR source IN (SELECT name FROM source_definitions WHERE owner = $4))
		ORDER BY created_at DESC, id DESC
		LIMIT 201`, owned: true, keys: keyset{{col: "created_at", desc: true}, {col: "id", field: "change_id", desc: true}}, filters: map[string]rowFilter{
		// A run's changes (changes_run_brin).
		"run_id": {cond: "run_id = %s", number: true, key: true},
		"kind":   {cond: "kind = ANY(%s)", list: true},
	}},
	"evaluations": {title: "Evaluations", sql: `
		SELECT id AS evaluation_id, change_id, source, record_id, watch, step, decision, reason, urgency, created_at
		FROM evaluations
		WHERE created_at >= $1 AND created_at < $2 AND ($3 = '' OR source = $3) AND ($4 = '' OR owner = $4)
		ORDER BY created_at DESC, id DESC
		LIMIT 201`, owned: true, keys: keyset{{col: "created_at", desc: true}, {col: "id", field: "evaluation_id", desc: true}}, filters: map[string]rowFilter{
		"decision": {cond: "decision = ANY(%s)", list: true},
	}},
	"notifications": {title: "Notifications", sql: `
		SELECT id, kind, status, source, watch, record_id, sink, change_id, attempts, created_at, delivered_at, last_error
		FROM notifications
		WHERE created_at >= $1 AND created_at < $2 AND ($3 = '' OR source = $3) AND ($4 = '' OR owner = $4)
		ORDER BY created_at DESC, id DESC
		LIMIT 201`, owned: true, keys: keyset{{col: "created_at", desc: true}, {col: "id", desc: true}}, filters: map[string]rowFilter{
		// One notification: the row its attempts and duplicates are
		// counted on.
		"id": {cond: "id = %s", number: true, key: true},
	}},
	"model_calls": {title: "Model calls", sql: `
		SELECT id AS model_call_id, purpose, source, watch, record_id, change_id, model, outcome, round(latency_ms) AS ms,
		       prompt_tokens, output_tokens, created_at
		FROM model_calls
		WHERE created_at >= $1 AND created_at < $2 AND ($3 = '' OR source = $3) AND ($4 = '' OR owner = $4)
		ORDER BY created_at DESC, id DESC
		LIMIT 201`, owned: true, keys: keyset{{col: "created_at", desc: true}, {col: "id", field: "model_call_id", desc: true}}},
	"pending_changes": {title: "Pending changes", sql: `
		SELECT id AS change_id, source, record_id, kind, version, created_at, eval_attempts, eval_next_at, eval_owner, eval_error
		FROM changes
		WHERE eval_status = 'pending' AND ($1 = '' OR source = $1)
		  AND ($2 = '' OR source IN (SELECT name FROM source_definitions WHERE owner = $2))
		ORDER BY id
		LIMIT 201`, untimed: true, owned: true, keys: keyset{{col: "id", field: "change_id"}}},
	"pending_notifications": {title: "Pending and held notifications", sql: `
		SELECT id, status, source, watch, record_id, sink, attempts, next_attempt_at, digest_due_at, lease_owner, last_error
		FROM notifications
		WHERE (status = 'pending' OR status = 'held') AND ($1 = '' OR source = $1) AND ($2 = '' OR owner = $2)
		ORDER BY id
		LIMIT 201`, untimed: true, owned: true, keys: keyset{{col: "id"}}, filters: map[string]rowFilter{
		"status": {cond: "status = ANY(%s)", list: true},
	}},
}

// rowQuery is a list of rows behind a number.
type rowQuery struct {
	title, sql string
	// untimed queries take only the source ($1): pending work has no hour.
	untimed bool
	// owned queries take an owner (after the source, '' for all).
	owned bool
	// filters narrow the list by query parameter: their conditions come
	// before the ORDER BY, in the order of the parameters' names.
	filters map[string]rowFilter
	// keys is the list's ORDER BY: the keyset of its pages (after=,
	// whose condition comes after the filters').
	keys keyset
}

// rowFilter is a condition of a list of rows, given by a query parameter.
type rowFilter struct {
	// cond is the condition; %s stands for the parameter's placeholder.
	cond string
	// list takes a comma-separated list of values; number an integer;
	// flag no value at all (the parameter only turns cond on).
	list, number, flag bool
	// key filters pick rows by identity: given one without since=, the
	// list spans all time instead of the current hour.
	key bool
	// needsSource filters are meaningless without source=.
	needsSource bool
}

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
