package control

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// TaskRunQuery selects report_task_runs' rows: the task runs of p's
// watches (every one for an admin), newest first.
type TaskRunQuery struct {
	// Source, Task (the task watch), Status and RecordID narrow the
	// list; "" is every one.
	Source, Task, Status, RecordID string
	// Cursor is the next_cursor of the previous page; "" is the newest.
	Cursor string
	// Limit is the page size, 1 to 200. Defaults to 50.
	Limit int
}

// TaskRun is a row of report_task_runs as report_task_runs answers it.
type TaskRun struct {
	ID                   int64           `json:"id" doc:"The task run's id (task_runs.id)."`
	Source               string          `json:"source" doc:"The task's source."`
	Task                 string          `json:"task" doc:"The task watch."`
	RecordID             string          `json:"record_id" doc:"The record the task is about."`
	Title                string          `json:"title,omitempty" doc:"The record's title when claimed."`
	Status               string          `json:"status" doc:"claimed, confirming, running, reviewing, completed, failed, released, lost or expired (docs/tasks.md)."`
	Attempt              int32           `json:"attempt" doc:"The attempt number."`
	Executions           int32           `json:"executions" doc:"How many times the executor ran."`
	RetryCount           int32           `json:"retry_count" doc:"Failed attempts so far."`
	ExecutedMoreThanOnce bool            `json:"executed_more_than_once" doc:"Whether the executor ran more than once."`
	ClaimedBy            string          `json:"claimed_by,omitempty" doc:"The syncer replica that claimed it."`
	ClaimedAt            *time.Time      `json:"claimed_at,omitempty" doc:"When it was claimed."`
	StartedAt            *time.Time      `json:"started_at,omitempty" doc:"When the last attempt started."`
	FinishedAt           *time.Time      `json:"finished_at,omitempty" doc:"When the last attempt ended."`
	RanForSeconds        *float64        `json:"ran_for_seconds,omitempty" doc:"How long the last attempt ran."`
	Executor             string          `json:"executor,omitempty" doc:"The executor kind (command, webhook)."`
	ExitCode             *int32          `json:"exit_code,omitempty" doc:"The command's exit code."`
	Result               json.RawMessage `json:"result,omitempty" doc:"What the executor returned."`
	LastError            string          `json:"last_error,omitempty" doc:"Why the last attempt failed, or the failed criteria of a review."`
	RetryAt              *time.Time      `json:"retry_at,omitempty" doc:"When the next attempt is due."`
	ToolInSync           bool            `json:"tool_in_sync" doc:"Whether the tool shows the run's state (no write-back pending)."`
	ToolError            string          `json:"tool_error,omitempty" doc:"Why the last write-back to the tool failed."`
	Owner                string          `json:"owner" doc:"The owner of the task watch."`
	CorrectionCount      int32           `json:"correction_count" doc:"How many times a review sent the result back (review:)."`
	ReviewStatus         string          `json:"review_status,omitempty" doc:"The latest review's status: pending, passed, failed, dropped."`
	ReviewScore          *int32          `json:"review_score,omitempty" doc:"The latest review's lowest criterion score (0-10)."`
	Review               json.RawMessage `json:"review,omitempty" doc:"The latest review's criteria, each with pass, score and comment."`
	ReviewHeldBecause    string          `json:"review_held_because,omitempty" doc:"Why the latest review is held (a model outage), or why it was dropped."`
}

// TaskRunPage is a page of report_task_runs.
type TaskRunPage struct {
	Items      []TaskRun `json:"items" doc:"Task runs, newest first."`
	NextCursor string    `json:"next_cursor,omitempty" doc:"Pass as cursor for the next page; absent on the last page."`
}

// queryTaskRunsOf is report_task_runs narrowed to the task runs of one
// owner's watches ($1, ” for every owner), source $2, task $3, status
// $4, record $5, before the id $6 (0: the newest), $7 rows, newest id
// first. The owner is the task watch's (watches.owner), not the
// source's: a user's task watch on an operator's source is theirs.
const queryTaskRunsOf = `
SELECT r.id, r.source, r.task, r.record_id, coalesce(r.title, ''), r.status, r.attempt, r.executions, r.retry_count,
       r.executed_more_than_once, coalesce(r.claimed_by, ''), r.claimed_at, r.started_at, r.finished_at,
       extract(epoch FROM r.ran_for)::float8, coalesce(r.executor, ''), r.exit_code, r.result, coalesce(r.last_error, ''),
       r.retry_at, r.tool_in_sync, coalesce(r.tool_error, ''), coalesce(w.owner, r.owner, ''), r.correction_count,
       coalesce(r.review_status, ''), r.review_score, r.review, coalesce(r.review_held_because, '')
FROM report_task_runs r
LEFT JOIN watches w ON w.source = r.source AND w.name = r.task
WHERE ($1 = '' OR w.owner = $1)
  AND ($2 = '' OR r.source = $2) AND ($3 = '' OR r.task = $3) AND ($4 = '' OR r.status = $4) AND ($5 = '' OR r.record_id = $5)
  AND ($6::bigint = 0 OR r.id < $6::bigint)
ORDER BY r.id DESC
LIMIT $7`

// TaskRuns lists the task runs of p's task watches (every one for an
// admin), newest first, with their review columns: the one function
// behind report_task_runs over HTTP and MCP.
func (s *Service) TaskRuns(ctx context.Context, p Principal, q TaskRunQuery) (*TaskRunPage, error) {
	before, limit, err := pageBounds(q.Cursor, q.Limit)
	if err != nil {
		return nil, err
	}
	owner := p.listOwner()
	rows, err := s.pool.Query(ctx, queryTaskRunsOf, owner, q.Source, q.Task, q.Status, q.RecordID, before, limit+1)
	if err != nil {
		return nil, fmt.Errorf("list task runs: %w", err)
	}
	runs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (TaskRun, error) {
		var t TaskRun
		var result, review []byte
		err := row.Scan(&t.ID, &t.Source, &t.Task, &t.RecordID, &t.Title, &t.Status, &t.Attempt, &t.Executions, &t.RetryCount,
			&t.ExecutedMoreThanOnce, &t.ClaimedBy, &t.ClaimedAt, &t.StartedAt, &t.FinishedAt,
			&t.RanForSeconds, &t.Executor, &t.ExitCode, &result, &t.LastError,
			&t.RetryAt, &t.ToolInSync, &t.ToolError, &t.Owner, &t.CorrectionCount,
			&t.ReviewStatus, &t.ReviewScore, &review, &t.ReviewHeldBecause)
		t.Result, t.Review = result, review
		return t, err
	})
	if err != nil {
		return nil, fmt.Errorf("list task runs: %w", err)
	}
	page := &TaskRunPage{Items: []TaskRun{}}
	for i, t := range runs {
		if i == limit {
			page.NextCursor = encodeCursor(runs[i-1].ID)
			break
		}
		page.Items = append(page.Items, t)
	}
	return page, nil
}
