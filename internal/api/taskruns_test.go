package api

import (
	"context"
	"net/http"
	"testing"

	"github.com/lookout-dev/lookout/internal/control"
)

// report_task_runs over HTTP: a user sees the task runs of the task
// watches they own, on an operator's source, with the review columns; an
// admin sees all; a bad cursor is a 422 naming it.
func TestReportTaskRuns(t *testing.T) {
	t.Parallel()
	f := setup(t)
	_, err := f.pool.Exec(context.Background(), `
		INSERT INTO source_definitions (name, owner, managed_by, connector, definition, definition_hash, version)
		VALUES ('board', '', 'file:sources/board.yaml', 'notion', '{}', 'h0', 1);
		INSERT INTO watches (source, name, owner, managed_by, definition, definition_hash, version)
		VALUES ('board', 'fix', 'alice', 'api', '{}', 'h1', 1), ('board', 'triage', 'bob', 'api', '{}', 'h2', 1);
		INSERT INTO task_runs (source, task, record_id, record_version, content_version, idempotency_key, run_id, status,
		                       claimed_by, claimed_at, claim_expires_at, executor)
		VALUES ('board', 'fix', '7', 1, 'v1', 'k1', 'r1', 'reviewing', 'syncer-1', now(), now(), 'command'),
		       ('board', 'triage', '8', 1, 'v1', 'k2', 'r2', 'completed', 'syncer-1', now(), now(), 'command');
		INSERT INTO task_reviews (task_run_id, attempt, source, task, record_id, status, last_error, retry_at, created_at)
		SELECT id, 1, source, task, record_id, 'pending', 'the model is down', now(), now() FROM task_runs WHERE task = 'fix'`)
	if err != nil {
		t.Fatal(err)
	}
	var alice control.TaskRunPage
	if resp := f.do(http.MethodGet, "/v1/reports/task-runs", "alice", nil, &alice); resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if len(alice.Items) != 1 || alice.Items[0].Task != "fix" || alice.Items[0].Owner != "alice" ||
		alice.Items[0].ReviewStatus != "pending" || alice.Items[0].ReviewHeldBecause != "the model is down" {
		t.Errorf("alice sees %+v, want her reviewing task run, its review held", alice.Items)
	}
	var root control.TaskRunPage
	if resp := f.do(http.MethodGet, "/v1/reports/task-runs?source=board", "root", nil, &root); resp.StatusCode != http.StatusOK || len(root.Items) != 2 {
		t.Errorf("admin: status %d, %d task runs, want 2", resp.StatusCode, len(root.Items))
	}
	f.problem(http.MethodGet, "/v1/reports/task-runs?cursor=nope", "alice", nil, http.StatusUnprocessableEntity)
}
