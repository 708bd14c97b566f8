package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/lookout-dev/lookout/internal/cli"
	"github.com/lookout-dev/lookout/internal/pgtest"
	"github.com/lookout-dev/lookout/internal/tasks"
)

// `syncer tasks [SOURCE [RECORD_ID]]` lists task runs, newest first, with
// their status, attempt, claimer and last error.
func TestTasksCommand(t *testing.T) {
	_, url := pgtest.Schema(t)
	t.Setenv("DATABASE_URL", url)
	pool := pgtest.PoolFor(t, url)
	ctx := context.Background()
	for _, rec := range []string{"page-1", "page-2"} {
		r, err := tasks.ClaimTask(ctx, pool, tasks.Claim{Source: "notion-tasks", Task: "execute", RecordID: rec, RecordVersion: 1,
			ContentVersion: "ab", IdempotencyKey: "notion-tasks:" + rec + ":vab:execute", By: "lookout@syncer-1", At: time.Now(),
			Lease: time.Minute, Executor: "command"})
		if err != nil || r == nil {
			t.Fatalf("claim: %v %v", r, err)
		}
		if rec == "page-2" {
			if _, err := tasks.EndAttempt(ctx, pool, r, tasks.End{Status: tasks.StatusFailed, At: time.Now(),
				Error: "agent exited with status 2: no such repository"}, tasks.StatusClaimed); err != nil {
				t.Fatal(err)
			}
		}
	}
	run := func(args ...string) string {
		t.Helper()
		var out bytes.Buffer
		if err := taskRuns(ctx, &cli.Env{Args: args, Stdout: &out, Stderr: &out}); err != nil {
			t.Fatalf("tasks %v: %v", args, err)
		}
		return out.String()
	}
	out := run()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "ID ") || !strings.Contains(lines[1], "page-2") ||
		!strings.Contains(lines[1], "failed") || !strings.Contains(lines[1], "no such repository") || !strings.Contains(lines[2], "run-1.1") {
		t.Errorf("tasks:\n%s", out)
	}
	if out := run("notion-tasks", "page-1", "--limit", "5"); strings.Count(out, "\n") != 2 || !strings.Contains(out, "lookout@syncer-1") {
		t.Errorf("tasks notion-tasks page-1:\n%s", out)
	}
	var buf bytes.Buffer
	if err := taskRuns(ctx, &cli.Env{Args: []string{"a", "b", "c"}, Stdout: &buf, Stderr: &buf}); err == nil {
		t.Error("three arguments accepted")
	}
}
