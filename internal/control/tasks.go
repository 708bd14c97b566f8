package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/lookout-dev/lookout/internal/tasks"
)

// TaskReport is an agent's report of a task run it accepted with 202
// (docs/tasks.md#executors).
type TaskReport struct {
	// Status is completed or failed.
	Status string
	// Result is the agent's result, a JSON object; required when completed.
	Result map[string]any
	// Error says why it failed; required when failed.
	Error string
	// Retry, when failed, says whether another attempt may help. Defaults
	// to true.
	Retry *bool
}

// UnauthorizedError is a request whose credentials do not fit the object:
// a task run's report token that is not its current attempt's.
type UnauthorizedError struct{ Detail string }

func (e *UnauthorizedError) Error() string { return e.Detail }

// ReportTaskRun stores an agent's report of task run id, authenticated by
// the attempt's report token (the bearer of the request; it is stored
// hashed). The syncer's task runner then finishes the run from it and
// writes the tool. A second identical report is a no-op (stored false); a
// different one, or a report of a run that no longer runs, is a
// ConflictError.
func (s *Service) ReportTaskRun(ctx context.Context, id int64, token string, rep TaskReport) (stored bool, err error) {
	if token == "" {
		return false, &UnauthorizedError{Detail: "a task run's report needs `Authorization: Bearer <report.token>` (the token of the task's payload)"}
	}
	r := tasks.Report{Status: rep.Status, Error: rep.Error, Retry: rep.Retry}
	switch rep.Status {
	case tasks.StatusCompleted:
		if rep.Result == nil {
			return false, Invalid("/result", "is required when status is completed: the agent's result, a JSON object")
		}
		if rep.Error != "" {
			return false, Invalid("/error", "must be empty when status is completed")
		}
		b, err := json.Marshal(rep.Result)
		if err != nil {
			return false, Invalid("/result", "is not encodable as JSON: %v", err)
		}
		r.Result = b
	case tasks.StatusFailed:
		if rep.Error == "" {
			return false, Invalid("/error", "is required when status is failed: why, in words (it becomes LastError in the tool)")
		}
	default:
		return false, Invalid("/status", "must be completed or failed, not %q", rep.Status)
	}
	stored, err = tasks.SubmitReport(ctx, s.pool, id, token, r, time.Now())
	switch {
	case errors.Is(err, tasks.ErrNotFound):
		return false, &NotFoundError{Kind: "task run", Name: strconv.FormatInt(id, 10)}
	case errors.Is(err, tasks.ErrBadToken):
		return false, &UnauthorizedError{Detail: fmt.Sprintf("the token is not the report token of task run %d's current attempt", id)}
	case errors.Is(err, tasks.ErrConflict):
		return false, &ConflictError{Detail: err.Error()}
	case err != nil:
		return false, err
	}
	return stored, nil
}
