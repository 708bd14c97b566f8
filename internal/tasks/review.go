package tasks

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lookout-dev/lookout/internal/db"
)

// Statuses of a task review (task_reviews.status).
const (
	ReviewPending = "pending" // waiting for an evaluator, or held
	ReviewPassed  = "passed"
	ReviewFailed  = "failed"
	// ReviewDropped: the task watch no longer has a review: block; the
	// result is accepted unreviewed (DropReviews).
	ReviewDropped = "dropped"
)

// Steps of a criterion's judgment (Criterion.Step).
const (
	StepCheck = "check" // the deterministic check decided it
	StepModel = "model" // the model was asked
	StepCache = "cache" // the verdict cache answered
	StepSkip  = "skipped"
)

// Criterion is one criterion's judgment in a review.
type Criterion struct {
	Name    string `json:"name"`
	Pass    bool   `json:"pass"`
	Score   int    `json:"score"`
	Comment string `json:"comment"`
	// Step is check, model, cache or skipped (a check of another
	// criterion failed first).
	Step        string `json:"step"`
	ModelCallID *int64 `json:"model_call_id,omitempty"`
}

// PendingReview is a review an evaluator claimed: the attempt whose result
// it judges.
type PendingReview struct {
	ID, TaskRunID          int64
	Attempt                int
	Source, Task, RecordID string
	Holds                  int
	Result                 json.RawMessage
	CorrectionCount        int
	Title, RunID           string
	claimedBy              string
}

// ClaimReviews leases up to limit due pending reviews to owner until
// now+lease (FOR UPDATE SKIP LOCKED: evaluators share them); a review
// whose evaluator died is claimable again once its lease lapsed.
//
// On Citus the claim is one statement per shard of its candidates
// (db.ClaimGroups), each locking with SKIP LOCKED in its shard.
func ClaimReviews(ctx context.Context, q Querier, owner string, now time.Time, lease time.Duration, limit int) ([]*PendingReview, error) {
	groups, err := db.ClaimGroups(ctx, q, "task_reviews", limit, queryClaimReviewCandidates, now, owner, limit, now.Add(lease), nil)
	if err != nil {
		return nil, fmt.Errorf("claim task reviews: %w", err)
	}
	var out []*PendingReview
	for _, g := range groups {
		got, err := claimReviews(ctx, q, owner, now, lease, g)
		if err != nil {
			return nil, err
		}
		out = append(out, got...)
	}
	return out, nil
}

// claimReviews runs one claim statement: the reviews of g's sources (nil:
// every source), at most g.Limit.
func claimReviews(ctx context.Context, q Querier, owner string, now time.Time, lease time.Duration, g db.ClaimGroup) ([]*PendingReview, error) {
	rows, err := q.Query(ctx, queryClaimReviews, now, owner, g.Limit, now.Add(lease), g.Restriction())
	if err != nil {
		return nil, fmt.Errorf("claim task reviews: %w", err)
	}
	defer rows.Close()
	var out []*PendingReview
	for rows.Next() {
		p := &PendingReview{claimedBy: owner}
		var result []byte
		if err := rows.Scan(&p.ID, &p.TaskRunID, &p.Attempt, &p.Source, &p.Task, &p.RecordID, &p.Holds, &result,
			&p.CorrectionCount, &p.Title, &p.RunID); err != nil {
			return nil, fmt.Errorf("claim task reviews: %w", err)
		}
		p.Result = result
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("claim task reviews: %w", err)
	}
	return out, nil
}

// Decision is a review's outcome.
type Decision struct {
	// Passed is the verdict.
	Passed bool
	// Score is the lowest criterion score.
	Score    int
	Criteria []Criterion
	// Final marks a failure past max_corrections: the task is Failed.
	Final bool
	At    time.Time
}

// Decide records p's decision; it reports false when p's claim was lost
// (another evaluator took it after the lease lapsed, or it was decided).
func Decide(ctx context.Context, q Querier, p *PendingReview, d Decision) (bool, error) {
	status := ReviewFailed
	if d.Passed {
		status = ReviewPassed
	}
	crit, err := json.Marshal(nonNilCriteria(d.Criteria))
	if err != nil {
		return false, fmt.Errorf("task review %d: encode the criteria: %w", p.ID, err)
	}
	tag, err := q.Exec(ctx, queryDecideReview, p.ID, p.claimedBy, status, d.Score, string(crit), d.Final, d.At, p.Source)
	if err != nil {
		return false, fmt.Errorf("task review %d: record the decision: %w", p.ID, err)
	}
	return tag.RowsAffected() == 1, nil
}

// Hold gives p back until retryAt: the model could not judge it (down,
// malformed, over budget). A held review is never passed; crit keeps what
// was judged so far, for the record.
func Hold(ctx context.Context, q Querier, p *PendingReview, why string, retryAt time.Time, crit []Criterion) error {
	b, err := json.Marshal(nonNilCriteria(crit))
	if err != nil {
		return fmt.Errorf("task review %d: encode the criteria: %w", p.ID, err)
	}
	if _, err := q.Exec(ctx, queryHoldReview, p.ID, p.claimedBy, why, retryAt, string(b), p.Source); err != nil {
		return fmt.Errorf("task review %d: hold: %w", p.ID, err)
	}
	return nil
}

// DropReviews drops the pending reviews of the task watches named by
// sources[i] and taskNames[i] that were written before before: those
// watches no longer have a review: block, so their results are accepted
// unreviewed. Each review becomes dropped with why as its last_error, and
// DecidedReviews hands it to the task runner as passed (Reviewed.Dropped).
// A review an evaluator holds a claim on is dropped too (its decision
// then finds the review no longer pending and is not recorded). It
// returns how many it dropped.
func DropReviews(ctx context.Context, q Querier, sources, taskNames []string, why string, before, now time.Time) (int64, error) {
	if len(sources) == 0 {
		return 0, nil
	}
	tag, err := q.Exec(ctx, queryDropReviews, sources, taskNames, why, before, now)
	if err != nil {
		return 0, fmt.Errorf("drop the task reviews of watches without review: %w", err)
	}
	return tag.RowsAffected(), nil
}

func nonNilCriteria(c []Criterion) []Criterion {
	if c == nil {
		return []Criterion{}
	}
	return c
}

// Reviewed is a reviewing run whose review is decided: the task runner
// applies it (ApplyReview).
type Reviewed struct {
	Run      *Run
	ReviewID int64
	Passed   bool
	Score    int
	Criteria []Criterion
	Final    bool
	// Dropped: the task watch lost its review: block; the result is
	// accepted unreviewed (Passed is true).
	Dropped bool
}

// DecidedReviews locks, in tx, up to limit reviewing runs of sources whose
// review is decided; the caller ends each (EndAttempt from
// StatusReviewing), marks it applied (ReviewApplied) and commits.
func DecidedReviews(ctx context.Context, tx pgx.Tx, sources []string, limit int) ([]*Reviewed, error) {
	return db.EachShard(ctx, tx, "task_runs", sources, limit, func(group []string, limit int) ([]*Reviewed, error) {
		return decidedReviews(ctx, tx, group, limit)
	})
}

func decidedReviews(ctx context.Context, tx pgx.Tx, sources []string, limit int) ([]*Reviewed, error) {
	rows, err := tx.Query(ctx, queryDecidedReviews, sources, limit)
	if err != nil {
		return nil, fmt.Errorf("read decided task reviews: %w", err)
	}
	defer rows.Close()
	var out []*Reviewed
	for rows.Next() {
		rv := &Reviewed{}
		var status string
		var crit []byte
		r, err := scanRun(rows, &rv.ReviewID, &status, &rv.Score, &crit, &rv.Final)
		if err != nil {
			return nil, fmt.Errorf("read decided task reviews: %w", err)
		}
		rv.Run, rv.Dropped = r, status == ReviewDropped
		rv.Passed = status == ReviewPassed || rv.Dropped
		if err := json.Unmarshal(crit, &rv.Criteria); err != nil {
			return nil, fmt.Errorf("task review %d: read the criteria: %w", rv.ReviewID, err)
		}
		out = append(out, rv)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read decided task reviews: %w", err)
	}
	return out, nil
}

// ReviewApplied records that review id's decision was applied to its run.
func ReviewApplied(ctx context.Context, q Querier, id int64, at time.Time) error {
	if _, err := q.Exec(ctx, queryReviewApplied, id, at); err != nil {
		return fmt.Errorf("task review %d: record it applied: %w", id, err)
	}
	return nil
}

// Failed returns the failed criteria with their comments, one per line:
// the LastError of a task a review sent back.
func (rv *Reviewed) Failed() string {
	return FailedCriteria(rv.Score, rv.Criteria)
}

// FailedCriteria words the failed criteria of a review for LastError.
func FailedCriteria(score int, crit []Criterion) string {
	var b strings.Builder
	fmt.Fprintf(&b, "review failed (score %d/10):", score)
	for _, c := range crit {
		if c.Pass || c.Step == StepSkip {
			continue
		}
		fmt.Fprintf(&b, " %s (%d/10): %s;", c.Name, c.Score, strings.TrimSpace(c.Comment))
	}
	return strings.TrimSuffix(b.String(), ";")
}

// Review is one review of a task run, as explain and the admin page show it.
type Review struct {
	Attempt              int
	Status               string
	Score                *int
	Criteria             []Criterion
	Final                bool
	Holds                int
	HeldBecause          string
	CreatedAt            time.Time
	DecidedAt, AppliedAt *time.Time
}

// ReviewsOf returns the reviews of task run id, oldest attempt first.
func ReviewsOf(ctx context.Context, q Querier, id int64) ([]Review, error) {
	rows, err := q.Query(ctx, queryReviewsOf, id)
	if err != nil {
		return nil, fmt.Errorf("task run %d: read its reviews: %w", id, err)
	}
	defer rows.Close()
	var out []Review
	for rows.Next() {
		var r Review
		var crit []byte
		if err := rows.Scan(&r.Attempt, &r.Status, &r.Score, &crit, &r.Final, &r.Holds, &r.HeldBecause, &r.CreatedAt,
			&r.DecidedAt, &r.AppliedAt); err != nil {
			return nil, fmt.Errorf("task run %d: read its reviews: %w", id, err)
		}
		if err := json.Unmarshal(crit, &r.Criteria); err != nil {
			return nil, fmt.Errorf("task run %d: read its reviews: %w", id, err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("task run %d: read its reviews: %w", id, err)
	}
	return out, nil
}
