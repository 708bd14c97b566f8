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
		VALUES ('s', 'old', 'created', 1, '{}', 'done', now() - interval '2 hours'),
		       ('s', 'pending', 'created', 1, '{}', 'pending', now() - interval '2 hours'),
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

	if out := run(dir("log: {level: error}\n")); !strings.Contains(out, "retention is off") {
		t.Errorf("without retention: %q", out)
	}
	hourly := dir("log: {level: error}\nretention: {changes: 1h}\n")
	out := run(hourly, "--dry-run")
	if !strings.Contains(out, "WOULD DELETE") || !strings.Contains(out, "changes  1h0m0s") || count() != 3 {
		t.Errorf("dry run:\n%s(%d changes left)", out, count())
	}
	if f := strings.Fields(strings.Split(out, "\n")[1]); len(f) != 5 || f[3] != "1" {
		t.Errorf("dry run counts %v, want 1 change", f)
	}
	out = run(hourly)
	if f := strings.Fields(strings.Split(out, "\n")[1]); len(f) != 5 || f[3] != "1" || count() != 2 {
		t.Errorf("prune:\n%s(%d changes left, want 2: the pending and the new one)", out, count())
	}
}
