package mcp_test

import (
	"context"
	"strings"
	"testing"

	"github.com/lookout-dev/lookout/internal/control"
)

// report_task_runs over MCP: alice sees the task runs of her task watch,
// with its review columns; bob sees none of them; an admin sees every
// one; a bad limit is a tool error naming the argument.
func TestReportTaskRunsTool(t *testing.T) {
	t.Parallel()
	f := setup(t)
	_, err := f.pool.Exec(context.Background(), `
		INSERT INTO watches (source, name, owner, managed_by, definition, definition_hash, version)
		VALUES ('releases', 'fix', 'alice', 'api', '{}', 'h1', 1), ('releases', 'triage', 'bob', 'api', '{}', 'h2', 1);
		INSERT INTO task_runs (source, task, record_id, record_version, content_version, idempotency_key, run_id, status,
		                       claimed_by, claimed_at, claim_expires_at, executor, last_error)
		VALUES ('releases', 'fix', '7', 1, 'v1', 'k1', 'r1', 'failed', 'syncer-1', now(), now(), 'command', 'review failed: tests'),
		       ('releases', 'triage', '8', 1, 'v1', 'k2', 'r2', 'completed', 'syncer-1', now(), now(), 'command', NULL);
		UPDATE task_runs SET correction_count = 1 WHERE task = 'fix';
		INSERT INTO task_reviews (task_run_id, attempt, source, task, record_id, status, score, criteria, retry_at, created_at)
		SELECT id, 1, source, task, record_id, 'failed', 3, '[{"name": "tests", "pass": false, "score": 3}]', now(), now()
		FROM task_runs WHERE task = 'fix'`)
	if err != nil {
		t.Fatal(err)
	}
	alice := f.connect("alice", nil)
	got := call[control.TaskRunPage](t, alice, "report_task_runs", map[string]any{})
	if len(got.Items) != 1 {
		t.Fatalf("alice sees %+v, want her task run only", got.Items)
	}
	r := got.Items[0]
	if r.Task != "fix" || r.Owner != "alice" || r.CorrectionCount != 1 || r.ReviewStatus != "failed" || r.ReviewScore == nil || *r.ReviewScore != 3 ||
		!strings.Contains(string(r.Review), `"tests"`) || r.LastError != "review failed: tests" {
		t.Errorf("alice's task run %+v", r)
	}
	bob := call[control.TaskRunPage](t, f.connect("bob", nil), "report_task_runs", map[string]any{"task": "fix"})
	if len(bob.Items) != 0 {
		t.Errorf("bob sees alice's task run: %+v", bob.Items)
	}
	root := call[control.TaskRunPage](t, f.connect("root", nil), "report_task_runs", map[string]any{"limit": 1})
	if len(root.Items) != 1 || root.NextCursor == "" {
		t.Fatalf("admin's first page %+v", root)
	}
	next := call[control.TaskRunPage](t, f.connect("root", nil), "report_task_runs", map[string]any{"limit": 1, "cursor": root.NextCursor})
	if len(next.Items) != 1 || next.Items[0].ID == root.Items[0].ID || next.NextCursor != "" {
		t.Errorf("admin's second page %+v", next)
	}
	if msg := toolError(t, alice, "report_task_runs", map[string]any{"limit": 500}); !strings.Contains(msg, "limit must be between 1 and 200") {
		t.Errorf("limit 500: %s", msg)
	}
}
