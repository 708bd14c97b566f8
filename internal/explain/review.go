package explain

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// TrailReview is the review of one attempt of a task of the record
// (docs/tasks.md#review): its criteria, score and decision, or why it is
// held.
type TrailReview struct {
	TaskRunID int64
	Task      string
	Attempt   int
	// Status is pending (held when HeldBecause is set), passed or failed.
	Status string
	Score  *int
	// Final is a failure past max_corrections: the task failed.
	Final       bool
	Holds       int
	HeldBecause string
	Criteria    []TrailCriterion
	CreatedAt   time.Time
	DecidedAt   *time.Time
	AppliedAt   *time.Time
}

// TrailCriterion is one criterion's judgment in a review.
type TrailCriterion struct {
	Name    string `json:"name"`
	Pass    bool   `json:"pass"`
	Score   int    `json:"score"`
	Comment string `json:"comment"`
	// Step is check, model, cache or skipped.
	Step        string `json:"step"`
	ModelCallID *int64 `json:"model_call_id,omitempty"`
}

// reviewsOf reads the reviews of the record's task runs, oldest first.
func reviewsOf(ctx context.Context, pool *pgxpool.Pool, source, recordID string) ([]TrailReview, error) {
	rows, err := pool.Query(ctx, `
		SELECT task_run_id, task, attempt, status, score, final, holds, coalesce(last_error, ''), criteria, created_at,
		       decided_at, applied_at
		FROM task_reviews WHERE source = $1 AND record_id = $2 ORDER BY task_run_id, attempt`, source, recordID)
	if err != nil {
		return nil, fmt.Errorf("read the task reviews of %s/%s: %w", source, recordID, err)
	}
	defer rows.Close()
	var out []TrailReview
	for rows.Next() {
		var r TrailReview
		var crit []byte
		if err := rows.Scan(&r.TaskRunID, &r.Task, &r.Attempt, &r.Status, &r.Score, &r.Final, &r.Holds, &r.HeldBecause, &crit,
			&r.CreatedAt, &r.DecidedAt, &r.AppliedAt); err != nil {
			return nil, fmt.Errorf("read the task reviews of %s/%s: %w", source, recordID, err)
		}
		if err := json.Unmarshal(crit, &r.Criteria); err != nil {
			return nil, fmt.Errorf("task run %d attempt %d: read its review's criteria: %w", r.TaskRunID, r.Attempt, err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the task reviews of %s/%s: %w", source, recordID, err)
	}
	return out, nil
}

// writeReviews prints the task reviews of a record.
func writeReviews(w io.Writer, reviews []TrailReview) {
	if len(reviews) == 0 {
		return
	}
	fmt.Fprintf(w, "  task reviews:\n")
	for _, r := range reviews {
		state := r.Status
		switch {
		case r.Status == "pending" && r.HeldBecause != "":
			state = fmt.Sprintf("held (%d time(s)): %s", r.Holds, r.HeldBecause)
		case r.Score != nil:
			state = fmt.Sprintf("%s, score %d/10", r.Status, *r.Score)
		}
		if r.Final {
			state += ", no corrections left"
		}
		fmt.Fprintf(w, "    task run %d attempt %d (%s) · %s · %s\n", r.TaskRunID, r.Attempt, r.Task, ts(r.CreatedAt), state)
		for _, c := range r.Criteria {
			verdict := "fail"
			if c.Pass {
				verdict = "pass"
			}
			if c.Step == "skipped" {
				verdict = "not judged"
			}
			line := fmt.Sprintf("      %s: %s %d/10 by %s", c.Name, verdict, c.Score, c.Step)
			if c.ModelCallID != nil {
				line += fmt.Sprintf(" (model call %d)", *c.ModelCallID)
			}
			if s := strings.TrimSpace(c.Comment); s != "" {
				line += ": " + s
			}
			fmt.Fprintln(w, line)
		}
	}
}
