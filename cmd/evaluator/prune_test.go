package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lookout-dev/lookout/internal/cli"
	"github.com/lookout-dev/lookout/internal/pgtest"
)

func TestPruneCommand(t *testing.T) {
	_, url := pgtest.Schema(t)
	t.Setenv("DATABASE_URL", url)
	pool := pgtest.PoolFor(t, url)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `INSERT INTO changes (source, record_id, kind, version, record, eval_status, created_at)
		VALUES ('s', 'old', 'created', 1, '{}', 'done', now() - interval '30 days'),
		       ('s', 'pending', 'created', 1, '{}', 'pending', now() - interval '30 days'),
		       ('s', 'new', 'created', 1, '{}', 'done', now())`); err != nil {
		t.Fatal(err)
	}
	dir := func(global string) string {
		d := t.TempDir()
		if err := os.MkdirAll(filepath.Join(d, "sources"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "lookout.yaml"), []byte(global), 0o644); err != nil {
			t.Fatal(err)
		}
		return d
	}
	run := func(config string, args ...string) string {
		t.Helper()
		var out bytes.Buffer
		if err := prune(ctx, &cli.Env{ConfigDir: config, Args: args, Stdout: &out, Stderr: &out}); err != nil {
			t.Fatalf("prune %v: %v\n%s", args, err, out.String())
		}
		return out.String()
	}
	count := func() int {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM changes`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	off := "retention: {changes: 0s, evaluations: 0s, notifications: 0s, sync_runs: 0s, model_calls: 0s, task_runs: 0s,\n" +
		"  inbound_events: 0s, idempotency_keys: 0s, definition_deletions: 0s, audit_log: 0s, model_budgets: 0s,\n" +
		"  briefings: 0s, verdicts: 0s, drift_embeddings: 0s, sync_run_hours: 0s, activity_hour_totals: 0s,\n" +
		"  delivery_attempts: 0s, sign_in_links: 0s}\n"
	if out := run(dir("log: {level: error}\n" + off)); !strings.Contains(out, "retention is off") {
		t.Errorf("without retention: %q", out)
	}
	weekly := dir("log: {level: error}\nretention: {changes: 168h}\n")
	line := func(out, table string) []string {
		for _, l := range strings.Split(out, "\n") {
			if f := strings.Fields(l); len(f) > 0 && f[0] == table {
				return f
			}
		}
		return nil
	}
	changesLine := func(out string) []string { return line(out, "changes") }
	out := run(weekly, "--dry-run")
	if f := changesLine(out); !strings.Contains(out, "WOULD DELETE") || len(f) < 2 || f[1] != "168h0m0s" || count() != 3 {
		t.Errorf("dry run:\n%s(%d changes left)", out, count())
	}
	// The tables pruned by rows through their owners are listed with
	// their default windows.
	if f := line(out, "audit_log"); len(f) != 7 || f[1] != "8760h0m0s" || f[5] != "0" {
		t.Errorf("dry run's audit_log line: %v, want the 8760h default and nothing to delete", f)
	}
	for table, window := range map[string]string{"delivery_attempts": "2160h0m0s", "sign_in_links": "720h0m0s"} {
		if f := line(out, table); len(f) != 7 || f[1] != window || f[5] != "0" {
			t.Errorf("dry run's %s line: %v, want the %s default and nothing to delete", table, f, window)
		}
	}
	// Before the first prune the old rows are in the default partition.
	if f := changesLine(out); len(f) != 7 || f[3] != "0" || f[5] != "1" {
		t.Errorf("dry run counts %v, want 1 change", f)
	}
	// The prune gives them their week's partition, which it keeps for the
	// pending change, deleting the other one.
	out = run(weekly)
	if f := changesLine(out); len(f) != 7 || f[3] != "0" || f[4] != "1" || f[5] != "1" || count() != 2 {
		t.Errorf("prune:\n%s(%d changes left, want 2: the pending and the new one)", out, count())
	}
}
