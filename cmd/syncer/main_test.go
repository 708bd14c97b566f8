package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lookout-dev/lookout/internal/cli"
	"github.com/lookout-dev/lookout/internal/pgtest"
)

func TestOperatorCommands(t *testing.T) {
	_, url := pgtest.Schema(t)
	t.Setenv("DATABASE_URL", url)
	pool := pgtest.PoolFor(t, url)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `INSERT INTO sources (name, connector, config_hash, schedule, next_run_at)
		VALUES ('inbox', 'file', 'h', 'every 5m0s', now() + interval '5 minutes')`); err != nil {
		t.Fatal(err)
	}
	run := func(cmd func(context.Context, *cli.Env) error, args ...string) (string, error) {
		var out bytes.Buffer
		err := cmd(ctx, &cli.Env{Args: args, Stdout: &out, Stderr: &out})
		return out.String(), err
	}
	query := func(sql string) string {
		var v string
		if err := pool.QueryRow(ctx, sql).Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}

	if out, err := run(pause, "inbox", "--reason", "holiday"); err != nil || out != "paused inbox\n" {
		t.Fatalf("pause: %q %v", out, err)
	}
	if got := query(`SELECT status || ':' || status_reason FROM sources`); got != "paused:holiday" {
		t.Errorf("after pause: %s", got)
	}
	out, err := run(status)
	if err != nil || !strings.Contains(out, "inbox") || !strings.Contains(out, "paused") || !strings.Contains(out, "inbox is paused: holiday") {
		t.Errorf("status: %v\n%s", err, out)
	}
	if _, err := run(runNow, "inbox"); err == nil || !strings.Contains(err.Error(), "resume it first") {
		t.Errorf("run-now on a paused source: %v", err)
	}
	if out, err := run(resume, "inbox"); err != nil || out != "resumed inbox (was paused); it is due now\n" {
		t.Fatalf("resume: %q %v", out, err)
	}
	if out, err := run(runNow, "inbox"); err != nil || !strings.Contains(out, "requested a run of inbox") {
		t.Fatalf("run-now: %q %v", out, err)
	}
	if got := query(`SELECT (run_requested_at IS NOT NULL)::text FROM sources`); got != "true" {
		t.Errorf("run_requested_at not set")
	}
	if _, err := run(pause, "nope"); err == nil || !strings.Contains(err.Error(), `"nope" (known: inbox)`) {
		t.Errorf("unknown source: %v", err)
	}
	var ue *cli.UsageError
	if _, err := run(pause); !errors.As(err, &ue) {
		t.Errorf("pause without a source: %v, want a usage error", err)
	}
	if _, err := run(resume, "a", "b"); !errors.As(err, &ue) {
		t.Errorf("resume with two sources: %v, want a usage error", err)
	}
}

// once exits 0 when every run succeeded, 1 when a run failed (naming the
// source), 2 when it cannot run (configuration or database).
func TestOnceExitCodes(t *testing.T) {
	_, url := pgtest.Schema(t)
	t.Setenv("DATABASE_URL", url)
	dir := t.TempDir()
	write := func(name, body string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("sources/good.yaml", "name: good\nconnector: file\nfile: {paths: [good.jsonl]}\n")
	write("sources/bad.yaml", "name: bad\nconnector: file\nfile: {paths: [bad.jsonl]}\n")
	write("good.jsonl", `{"id": "1"}`+"\n")
	write("bad.jsonl", `{"id": "1"}`+"\n")
	once := func() (int, string) {
		t.Helper()
		var out, errb bytes.Buffer
		code := cli.Run(context.Background(), "syncer", "test", []cli.Command{{Name: "once", Run: runOnce}},
			[]string{"--config", dir, "--log-format", "json", "once"}, &out, &errb)
		return code, out.String() + errb.String()
	}
	due := func() {
		t.Helper()
		pool := pgtest.PoolFor(t, url)
		if _, err := pool.Exec(context.Background(), `UPDATE sources SET run_requested_at = now()`); err != nil {
			t.Fatal(err)
		}
	}

	if code, out := once(); code != 0 {
		t.Fatalf("every run succeeded: exit %d\n%s", code, out)
	}
	write("bad.jsonl", `{"id": "1", "title": "unterminated}`+"\n")
	due()
	code, out := once()
	if code != 1 || !strings.Contains(out, "syncer once: 1 of 2 run(s) failed: bad") {
		t.Errorf("a run failed: exit %d, want 1 naming the source\n%s", code, out)
	}
	write("sources/bad.yaml", "name: bad\nconnector: file\nfile: {paths: [bad.jsonl]}\nbogus: 1\n")
	if code, out := once(); code != 2 || !strings.Contains(out, "bogus") {
		t.Errorf("a configuration error: exit %d, want 2\n%s", code, out)
	}
	write("sources/bad.yaml", "name: bad\nconnector: file\nfile: {paths: [bad.jsonl]}\n")
	t.Setenv("DATABASE_URL", "postgres://nobody@127.0.0.1:1/none?sslmode=disable&connect_timeout=5")
	if code, out := once(); code != 2 {
		t.Errorf("no database: exit %d, want 2\n%s", code, out)
	}
}
