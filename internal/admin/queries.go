package admin

import "time"

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
	// cursor ($6, $7: created_at and id of the last row shown), and to the
	// evaluations of the count ($8, one of driftCounts: the FILTER of the
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

	// queryOwners lists the owners of definitions (the owner filter).
	queryOwners = `
		SELECT owner FROM source_definitions WHERE owner <> ''
		UNION
		SELECT owner FROM watches WHERE owner <> ''
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

// driftCounts are the counts of the drift table: queryDriftRows' $8.
var driftCounts = map[string]bool{"evaluations": true, "judged": true, "cache_hits": true, "notify": true, "skip": true}

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
var rowQueries = map[string]rowQuery{
	"runs": {title: "Runs", sql: `
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
		LIMIT 201`, owned: true, keys: keyset{{col: "started_at", desc: true}, {col: "id", field: "run_id", desc: true}}, filters: []rowFilter{
		{name: "id", number: true, key: true},
		// The failed runs a source's failure_count counts: those since its
		// last success (querySourceLastSuccess, the window's start; a resume
		// or a changed definition also resets the count, and the runs
		// before it still show).
		{name: "since_success", flag: true, key: true, needsSource: true},
		{name: "status", list: true},
	}},
	"quiet": {title: "Quiet runs", sql: `
		SELECT source, hour, runs, not_modified, items_seen, last_started_at,
		       round((lateness_seconds_sum / runs)::numeric, 3) AS avg_late_s, round(lateness_seconds_max::numeric, 3) AS max_late_s
		FROM sync_run_hours
		WHERE hour >= $1 AND hour < $2 AND ($3::text IS NULL OR source = $3)
		  AND ($4::text IS NULL OR source IN (SELECT name FROM source_definitions WHERE owner = $4))
		  AND ($6::text IS NULL OR hour < $5::timestamptz OR (hour = $5 AND source > $6))
		ORDER BY hour DESC, source
		LIMIT 201`, owned: true, keys: keyset{{col: "hour", desc: true}, {col: "source"}}},
	"changes": {title: "Changes", sql: `
		SELECT id AS change_id, source, record_id, kind, version, changed_fields, created_at, run_id, eval_status
		FROM changes
		WHERE created_at >= $1 AND created_at < $2 AND ($3::text IS NULL OR source = $3)
		  AND ($4::text IS NULL OR source IN (SELECT name FROM source_definitions WHERE owner = $4))
		  AND ($5::text[] IS NULL OR kind = ANY($5))
		  AND ($6::bigint IS NULL OR run_id = $6)
		  AND ($8::bigint IS NULL OR (created_at, id) < ($7, $8))
		ORDER BY created_at DESC, id DESC
		LIMIT 201`, owned: true, keys: keyset{{col: "created_at", desc: true}, {col: "id", field: "change_id", desc: true}}, filters: []rowFilter{
		{name: "kind", list: true},
		// A run's changes (changes_run_brin).
		{name: "run_id", number: true, key: true},
	}},
	"evaluations": {title: "Evaluations", sql: `
		SELECT id AS evaluation_id, change_id, source, record_id, watch, step, decision, reason, urgency, created_at
		FROM evaluations
		WHERE created_at >= $1 AND created_at < $2 AND ($3::text IS NULL OR source = $3) AND ($4::text IS NULL OR owner = $4)
		  AND ($5::text[] IS NULL OR decision = ANY($5))
		  AND ($7::bigint IS NULL OR (created_at, id) < ($6, $7))
		ORDER BY created_at DESC, id DESC
		LIMIT 201`, owned: true, keys: keyset{{col: "created_at", desc: true}, {col: "id", field: "evaluation_id", desc: true}}, filters: []rowFilter{
		{name: "decision", list: true},
	}},
	"notifications": {title: "Notifications", sql: `
		SELECT id, kind, status, source, watch, record_id, sink, change_id, attempts, created_at, delivered_at, last_error
		FROM notifications
		WHERE created_at >= $1 AND created_at < $2 AND ($3::text IS NULL OR source = $3) AND ($4::text IS NULL OR owner = $4)
		  AND ($5::bigint IS NULL OR id = $5)
		  AND ($7::bigint IS NULL OR (created_at, id) < ($6, $7))
		ORDER BY created_at DESC, id DESC
		LIMIT 201`, owned: true, keys: keyset{{col: "created_at", desc: true}, {col: "id", desc: true}}, filters: []rowFilter{
		// One notification: the row its attempts and duplicates are
		// counted on.
		{name: "id", number: true, key: true},
	}},
	"model_calls": {title: "Model calls", sql: `
		SELECT id AS model_call_id, purpose, source, watch, record_id, change_id, model, outcome, round(latency_ms) AS ms,
		       prompt_tokens, output_tokens, created_at
		FROM model_calls
		WHERE created_at >= $1 AND created_at < $2 AND ($3::text IS NULL OR source = $3) AND ($4::text IS NULL OR owner = $4)
		  AND ($6::bigint IS NULL OR (created_at, id) < ($5, $6))
		ORDER BY created_at DESC, id DESC
		LIMIT 201`, owned: true, keys: keyset{{col: "created_at", desc: true}, {col: "id", field: "model_call_id", desc: true}}},
	"pending_changes": {title: "Pending changes", sql: `
		SELECT id AS change_id, source, record_id, kind, version, created_at, eval_attempts, eval_next_at, eval_owner, eval_error
		FROM changes
		WHERE eval_status = 'pending' AND ($1::text IS NULL OR source = $1)
		  AND ($2::text IS NULL OR source IN (SELECT name FROM source_definitions WHERE owner = $2))
		  AND ($3::bigint IS NULL OR id > $3)
		ORDER BY id
		LIMIT 201`, untimed: true, owned: true, keys: keyset{{col: "id", field: "change_id"}}},
	"pending_notifications": {title: "Pending and held notifications", sql: `
		SELECT id, status, source, watch, record_id, sink, attempts, next_attempt_at, digest_due_at, lease_owner, last_error
		FROM notifications
		WHERE (status = 'pending' OR status = 'held') AND ($1::text IS NULL OR source = $1) AND ($2::text IS NULL OR owner = $2)
		  AND ($3::text[] IS NULL OR status = ANY($3))
		  AND ($4::bigint IS NULL OR id > $4)
		ORDER BY id
		LIMIT 201`, untimed: true, owned: true, keys: keyset{{col: "id"}}, filters: []rowFilter{
		{name: "status", list: true},
	}},
}

// rowQuery is a list of rows behind a number.
type rowQuery struct {
	title, sql string
	// untimed queries take only the source ($1): pending work has no hour.
	untimed bool
	// owned queries take an owner (after the source, NULL for all).
	owned bool
	// filters narrow the list by query parameter: the statement's
	// parameters after the owner, in this order.
	filters []rowFilter
	// keys is the list's ORDER BY: the keyset of its pages (after=, the
	// statement's last parameters).
	keys keyset
}

// rowFilter is a condition of a list of rows, given by a query parameter.
type rowFilter struct {
	// name is the query parameter.
	name string
	// list takes a comma-separated list of values (a text[]); number an
	// integer; flag no value at all (a bool: the parameter only turns the
	// condition on).
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

// sourcesFilter is querySources' parameters.
type sourcesFilter struct {
	// After is the name of the last source of the page before ("" for the
	// first page).
	After string
	// Status, State and Owner narrow the list ("" for any).
	Status, State, Owner string
	// Failing keeps the sources whose failure_count is above 0; Due the
	// sources due now.
	Failing, Due bool
}

func (f sourcesFilter) args() []any {
	return []any{f.After, opt(f.Status), opt(f.State), opt(f.Owner), f.Failing, f.Due}
}

// deadFilter is the parameters of queryDead and queryDeadCount.
type deadFilter struct {
	// Sink, Source and Owner narrow the list ("" for any; the counts per
	// sink take Source and Owner).
	Sink, Source, Owner string
	// AfterAt and AfterID are the dead_at (nil: none) and id of the last
	// row of the page before (AfterID 0: the first page).
	AfterAt *time.Time
	AfterID int64
}

func (f deadFilter) args() []any {
	var at, id any
	if f.AfterID != 0 {
		id = f.AfterID
		if f.AfterAt != nil {
			at = *f.AfterAt
		}
	}
	return []any{opt(f.Sink), opt(f.Source), opt(f.Owner), at, id}
}

func (f deadFilter) countArgs() []any { return []any{opt(f.Source), opt(f.Owner)} }

// driftRowsFilter is queryDriftRows' parameters: the cell of the drift
// table (its day, model, digest, prompt version, owner: "" for all, and
// count, one of driftCounts) and the page's end (BeforeAt, BeforeID).
type driftRowsFilter struct {
	Day                                 time.Time
	Model, Digest, Prompt, Owner, Count string
	BeforeAt                            time.Time
	BeforeID                            int64
}

func (f driftRowsFilter) args() []any {
	return []any{f.Day, f.Model, f.Digest, f.Prompt, f.Owner, f.BeforeAt, f.BeforeID, f.Count}
}
