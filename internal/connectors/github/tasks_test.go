package github_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/connectors/conntest"
	"github.com/lookout-dev/lookout/internal/connectors/github/githubtest"
	"github.com/lookout-dev/lookout/internal/pgtest"
	"github.com/lookout-dev/lookout/internal/syncer"
	"github.com/lookout-dev/lookout/internal/taskrunner"
	"github.com/lookout-dev/lookout/internal/tasks"
)

// The task mode on GitHub issues, through the real syncer and task
// runner: issues labelled todo are tasks, taken one per run oldest first;
// the claim is the in-progress label and a comment naming the run, a
// failure puts the todo label back with a comment, and the retry gets the
// same idempotency key although lookout's comments and labels changed the
// issue; the end is the done label.
func TestTasksOnGitHubIssues(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := githubtest.New(t)
	f.Seed(2)
	for _, n := range []int64{1, 2} {
		is := f.Get(n)
		is.Labels = []string{"bug", "todo"}
		f.Put(is)
	}
	dir := t.TempDir()
	script := filepath.Join(dir, "agent.sh")
	body := fmt.Sprintf("#!/bin/sh\nD=%q\nin=$(cat)\nprintf '%%s\\n' \"$in\" >> \"$D/calls.jsonl\"\n"+
		"if [ ! -e \"$D/first\" ]; then : > \"$D/first\"; echo 'rate limited by the model' >&2; exit 3; fi\necho '{\"ok\": true}'\n", dir)
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	src := fmt.Sprintf(`name: gh
connector: github
every: 1h
rate_limit: {per_second: 1000, burst: 1000}
github:
  repo: %s
  base_url: %s
  token: %s
  task: {}
tasks:
  - name: fix
    when: '"todo" in record.labels && record.status == "open"'
    order: [created_at asc]
    lease: 30s
    timeout: 10s
    backoff: {min: 1ms, max: 1ms}
    command: [%s]
`, f.Repo, f.Srv.URL, f.Token, script)
	cdir := conntest.WriteConfig(t, map[string]string{"lookout.yaml": "defaults:\n  host_rate_limit: {per_second: 1000, burst: 1000}\n", "sources/gh.yaml": src})
	cfg, err := config.Load(cdir)
	if err != nil {
		t.Fatal(err)
	}
	pool := pgtest.Pool(t)
	logger := slog.New(slog.DiscardHandler)
	var runner *taskrunner.Runner
	sc := syncer.FromConfig(cfg)
	sc.Owner = "syncer-1"
	sc.AfterRun = func(source string, runID int64) { runner.AfterRun(source, runID) }
	s, err := syncer.New(pool, sc, logger)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Register(ctx); err != nil {
		t.Fatal(err)
	}
	tc := taskrunner.FromConfig(cfg)
	tc.Owner = "lookout@syncer-1"
	if runner, err = taskrunner.New(pool, tc, s, logger); err != nil {
		t.Fatal(err)
	}
	sync := func() {
		t.Helper()
		if _, err := pool.Exec(ctx, `UPDATE sources SET next_run_at = now() - interval '1 second', run_requested_at = now()`); err != nil {
			t.Fatal(err)
		}
		if n, err := s.RunDue(ctx); err != nil || n != 1 {
			t.Fatalf("run due: %d, %v", n, err)
		}
		runner.Once(ctx)
	}

	sync() // #1 fails once: released
	if got := f.Get(1).Labels; !slices.Equal(got, []string{"bug", "todo"}) {
		t.Errorf("#1 labels after the failure: %v", got)
	}
	if c := f.Comments(1); len(c) < 2 || !strings.Contains(c[0], "run-1.1") || !strings.Contains(c[len(c)-1], "rate limited by the model") {
		t.Errorf("#1 comments after the failure: %q", c)
	}
	if got := f.Get(2).Labels; !slices.Equal(got, []string{"bug", "todo"}) {
		t.Errorf("#2 was touched by a take: 1 pass: %v", got)
	}
	sync() // #1 again (oldest first), now it works
	sync() // #2
	sync() // nothing left
	for _, n := range []int64{1, 2} {
		if got := f.Get(n).Labels; !slices.Equal(got, []string{"bug", "done"}) {
			t.Errorf("#%d labels at the end: %v", n, got)
		}
	}
	var calls []taskrunner.Payload
	fh, err := os.Open(filepath.Join(dir, "calls.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	sc2 := bufio.NewScanner(fh)
	for sc2.Scan() {
		var p taskrunner.Payload
		if err := json.Unmarshal(sc2.Bytes(), &p); err != nil {
			t.Fatal(err)
		}
		calls = append(calls, p)
	}
	if len(calls) != 3 || calls[0].Record["id"] != "1" || calls[1].Record["id"] != "1" || calls[2].Record["id"] != "2" {
		t.Fatalf("calls: %d %+v", len(calls), calls)
	}
	if calls[0].IdempotencyKey != calls[1].IdempotencyKey || calls[1].RetryCount != 1 {
		t.Errorf("the retry of #1 has key %q, the first attempt %q (retry count %d)", calls[1].IdempotencyKey, calls[0].IdempotencyKey, calls[1].RetryCount)
	}
	runs, err := tasks.List(ctx, pool, "gh", "", 10)
	if err != nil || len(runs) != 2 {
		t.Fatalf("task runs: %v, %v", runs, err)
	}
	for _, r := range runs {
		if r.Status != "completed" || r.ToolAction != "" {
			t.Errorf("task run of #%s: %s, tool %q", r.RecordID, r.Status, r.ToolAction)
		}
	}
}
