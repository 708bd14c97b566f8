package admin

import (
	"context"

	"github.com/lookout-dev/lookout/internal/control"
)

// The lists of the admin pages. Their statements are control's named
// report queries (internal/control/report_queries.go: the page holds no
// SQL); this file holds what the page does with them: page sizes, the
// lists of rows behind a number, their filters and their keysets.

// pageSize is how many rows a list shows.
const pageSize = 50

// deadPage is how many dead letters a page lists (and its bulk retry
// retries at most).
const deadPage = 200

// Rows behind a number (/admin/rows/{what}): each reads its table by time
// through an index, newest first (control.ReportRows*: the parameters are
// the window, the source, the owner, the list's filters in the order of
// rowQuery.filters, then the cursor of the page).
var rowQueries = map[string]rowQuery{
	"runs": {title: "Runs", list: listOf(control.ReportRowsRuns), owned: true, keys: keyset{{col: "started_at", desc: true}, {col: "id", field: "run_id", desc: true}}, filters: []rowFilter{
		{name: "id", number: true, key: true},
		// The failed runs a source's failure_count counts: those since its
		// last success (querySourceLastSuccess, the window's start; a resume
		// or a changed definition also resets the count, and the runs
		// before it still show).
		{name: "since_success", flag: true, key: true, needsSource: true},
		{name: "status", list: true},
	}},
	"quiet": {title: "Quiet runs", list: listOf(control.ReportRowsQuiet), owned: true, keys: keyset{{col: "hour", desc: true}, {col: "source"}}},
	"changes": {title: "Changes", list: listOf(control.ReportRowsChanges), owned: true, keys: keyset{{col: "created_at", desc: true}, {col: "id", field: "change_id", desc: true}}, filters: []rowFilter{
		{name: "kind", list: true},
		// A run's changes (changes_run_brin).
		{name: "run_id", number: true, key: true},
	}},
	"evaluations": {title: "Evaluations", list: listOf(control.ReportRowsEvaluations), owned: true, keys: keyset{{col: "created_at", desc: true}, {col: "id", field: "evaluation_id", desc: true}}, filters: []rowFilter{
		{name: "decision", list: true},
	}},
	"notifications": {title: "Notifications", list: listOf(control.ReportRowsNotifications), owned: true, keys: keyset{{col: "created_at", desc: true}, {col: "id", desc: true}}, filters: []rowFilter{
		// One notification: the row its attempts and duplicates are
		// counted on.
		{name: "id", number: true, key: true},
	}},
	"model_calls":     {title: "Model calls", list: listOf(control.ReportRowsModelCalls), owned: true, keys: keyset{{col: "created_at", desc: true}, {col: "id", field: "model_call_id", desc: true}}},
	"pending_changes": {title: "Pending changes", list: listOf(control.ReportRowsPendingChanges), untimed: true, owned: true, keys: keyset{{col: "id", field: "change_id"}}},
	"pending_notifications": {title: "Pending and held notifications", list: listOf(control.ReportRowsPendingNotifications), untimed: true, owned: true, keys: keyset{{col: "id"}}, filters: []rowFilter{
		{name: "status", list: true},
	}},
}

// rowQuery is a list of rows behind a number.
type rowQuery struct {
	title string
	// list runs the list's statement.
	list rowLister
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

// rowLister runs a list's statement and returns the table the page shows.
type rowLister func(ctx context.Context, a *Admin, p *page, title string, args []any, limit int, link linker) (*table, error)

// listOf is the rowLister of q.
func listOf[T any](q control.ReportQuery[T]) rowLister {
	return func(ctx context.Context, a *Admin, p *page, title string, args []any, limit int, link linker) (*table, error) {
		_, t, err := list(ctx, a, p, title, q, args, limit, link)
		return t, err
	}
}
