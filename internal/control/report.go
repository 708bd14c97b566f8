package control

import (
	"context"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/explain"
)

// ReportQuery is one of the admin page's read-only statements (over the
// report_* views and the tables' indexes), whose rows are T's: one of the
// Report* variables of this package, the closed set of statements Report
// runs. Its fields are control's: no caller makes one with its own SQL,
// and Report refuses any query that is not one of the set (a zero value
// included).
type ReportQuery[T any] struct {
	name, sql string
}

// Name names the statement.
func (q ReportQuery[T]) Name() string { return q.name }

// SQL is the statement's text, as the admin page shows it under "SQL of
// this page".
func (q ReportQuery[T]) SQL() string { return q.sql }

// reportQueries are the statements of the set, by name.
var reportQueries = map[string]string{}

// reportQuery adds a statement to the set; a second statement of a name
// panics.
func reportQuery[T any](name, sql string) ReportQuery[T] {
	if _, dup := reportQueries[name]; dup || name == "" || sql == "" {
		panic("control: report query " + strconv.Quote(name) + " is empty or registered twice")
	}
	reportQueries[name] = sql
	return ReportQuery[T]{name: name, sql: sql}
}

// ReportRows runs q with args for an admin and returns its rows, each
// scanned into a T by column name (every column a field of T: a column
// that T lacks is an error, so a view's new column is seen by the tests).
// See Report for the transaction.
func ReportRows[T any](ctx context.Context, s *Service, p Principal, q ReportQuery[T], args ...any) ([]T, error) {
	var out []T
	err := s.report(ctx, p, q.name, q.sql, args, func(rows pgx.Rows) error {
		var err error
		out, err = pgx.CollectRows(rows, pgx.RowToStructByNameLax[T])
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("report %s: %w", q.name, err)
	}
	return out, nil
}

// report runs one of the admin page's statements (one of the set of
// ReportQuery) for an admin, in a read-only transaction that control
// begins and ends: scan reads its rows. JIT is off (the pages read a few
// thousand rows at most, and the planner, which cannot know how many
// rows "the last 24 hours" holds, would otherwise spend seconds
// compiling them), every plan is a custom one, made for the arguments
// given (an optional filter written `$1::text IS NULL OR col = $1` is
// folded away when it is not given), and no plan starts parallel workers
// (a statement that reads a few hundred rows through indexes gains
// nothing from them, and on a busy machine waits for their start: the
// overview took 3.0-3.4 s with them and 1.4 s without, alternated at load
// 50; docs/benchmarks.md (9)). A user is refused (ForbiddenError):
// the admin page is the admin's. A statement that is not of the set is
// refused with an error naming it.
func (s *Service) report(ctx context.Context, p Principal, name, sql string, args []any, scan func(pgx.Rows) error) error {
	if !p.Admin {
		return &ForbiddenError{Detail: "the admin page's reports need a token with the admin scope"}
	}
	return s.readOnly(ctx, name, sql, args, scan)
}

// DeliveryAttempts returns the delivery attempts of notification id,
// oldest first (ReportDeliveryAttempts, run as Report runs it): any
// notification's for an admin, only one of the caller's own watches for
// a user. A notification the caller cannot see, or that does not exist,
// is a NotFoundError, the same for both (a foreign id tells nothing).
func (s *Service) DeliveryAttempts(ctx context.Context, p Principal, id int64) ([]DeliveryAttemptRow, error) {
	var owner *string
	if !p.Admin {
		if p.Owner == "" {
			return nil, &NotFoundError{Kind: "notification", Name: strconv.FormatInt(id, 10)}
		}
		owner = &p.Owner
	}
	q := ReportDeliveryAttempts
	var rows []DeliveryAttemptRow
	err := s.readOnly(ctx, q.name, q.sql, []any{id, owner}, func(r pgx.Rows) error {
		var err error
		rows, err = pgx.CollectRows(r, pgx.RowToStructByNameLax[DeliveryAttemptRow])
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("delivery attempts of notification %d: %w", id, err)
	}
	if len(rows) == 0 {
		return nil, &NotFoundError{Kind: "notification", Name: strconv.FormatInt(id, 10)}
	}
	out := rows[:0]
	for _, r := range rows {
		if r.Attempt != nil {
			out = append(out, r)
		}
	}
	return out, nil
}

// reportSettings are the settings of a report's transaction (see report).
const reportSettings = `SET LOCAL jit = off; SET LOCAL plan_cache_mode = force_custom_plan; SET LOCAL max_parallel_workers_per_gather = 0`

// readOnly runs one of the set's statements in a read-only transaction
// (see report); scan reads its rows.
func (s *Service) readOnly(ctx context.Context, name, sql string, args []any, scan func(pgx.Rows) error) error {
	if known, ok := reportQueries[name]; !ok || known != sql {
		return fmt.Errorf("report query %q is not one of control's named report queries", name)
	}
	return s.inReport(ctx, sql, args, scan)
}

// inReport runs sql in a report's read-only transaction (see report).
func (s *Service) inReport(ctx context.Context, sql string, args []any, scan func(pgx.Rows) error) error {
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		return fmt.Errorf("begin a report: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	// One round trip (no arguments: the simple protocol, several
	// statements).
	if _, err := tx.Exec(ctx, reportSettings); err != nil {
		return fmt.Errorf("begin a report: %w", err)
	}
	rows, err := tx.Query(ctx, sql, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	if err := scan(rows); err != nil {
		return err
	}
	rows.Close()
	return rows.Err()
}

// ExplainRecord returns the decision trails of a record's newest changes
// (at most limit) for an admin: what `evaluator explain SOURCE RECORD_ID`
// prints, the watches named from cfg when it is given.
func (s *Service) ExplainRecord(ctx context.Context, p Principal, cfg *config.Config, source, recordID string, limit int) ([]explain.Trail, error) {
	if !p.Admin {
		return nil, &ForbiddenError{Detail: "explaining any record needs a token with the admin scope"}
	}
	trails, err := explain.Trails(ctx, s.pool, cfg, explain.Query{Source: source, RecordID: recordID, Limit: limit})
	if err != nil {
		return nil, fmt.Errorf("explain record %s/%s: %w", source, recordID, err)
	}
	return trails, nil
}
