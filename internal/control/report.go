package control

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/explain"
)

// Report runs one of the admin page's statements (its named queries over
// the report_* views and the tables' indexes) for an admin, in a
// read-only transaction that control begins and ends: scan reads its
// rows. JIT is off (the pages read a few thousand rows at most, and the
// planner, which cannot know how many rows "the last 24 hours" holds,
// would otherwise spend seconds compiling them) and every plan is a
// custom one, made for the arguments given (an optional filter written
// `$1::text IS NULL OR col = $1` is folded away when it is not given).
// A user is refused (ForbiddenError): the admin page is the admin's.
func (s *Service) Report(ctx context.Context, p Principal, sql string, args []any, scan func(pgx.Rows) error) error {
	if !p.Admin {
		return &ForbiddenError{Detail: "the admin page's reports need a token with the admin scope"}
	}
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		return fmt.Errorf("begin a report: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := tx.Exec(ctx, "SET LOCAL jit = off"); err != nil {
		return fmt.Errorf("begin a report: %w", err)
	}
	if _, err := tx.Exec(ctx, "SET LOCAL plan_cache_mode = force_custom_plan"); err != nil {
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
