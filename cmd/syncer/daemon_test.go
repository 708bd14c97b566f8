package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lookout-dev/lookout/internal/cli"
	"github.com/lookout-dev/lookout/internal/clitest"
	"github.com/lookout-dev/lookout/internal/pgtest"
)

// The run command serves /metrics, /healthz and /readyz while it syncs.
func TestRunServesMetricsAndHealth(t *testing.T) {
	_, url := pgtest.Schema(t)
	t.Setenv("DATABASE_URL", url)
	d := clitest.StartDaemon(t, "../../examples/config", runDaemon)

	if code, _ := d.Get("/healthz"); code != http.StatusOK {
		t.Errorf("healthz = %d", code)
	}
	// The LISTEN connection of the definitions comes up in the background.
	d.WaitFor("ready", func() bool { code, _ := d.Get("/readyz"); return code == http.StatusOK })
	code, body := d.Get("/readyz")
	var r struct {
		Status string                  `json:"status"`
		Checks []struct{ Name string } `json:"checks"`
	}
	if err := json.Unmarshal([]byte(body), &r); err != nil || code != http.StatusOK || r.Status != "ready" || len(r.Checks) != 5 {
		t.Errorf("readyz = %d %s (%v)", code, body, err)
	}
	d.WaitFor("a succeeded run in /metrics", func() bool {
		_, m := d.Get("/metrics")
		return clitest.Value(m, `lookout_polls_finished_total{connector="file",status="succeeded"}`) >= 1
	})
	_, m := d.Get("/metrics")
	for _, want := range []string{`lookout_sources{status="active"} 1`, `lookout_database_up 1`, `lookout_records_changed_total{connector="file",kind="created"} 3`,
		`lookout_sources_failing{connector="file"} 0`} {
		if !clitest.Has(m, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	// Without metrics.per_source, no series names a source.
	if strings.Contains(m, `source="`) {
		t.Errorf("a series carries a source label:\n%s", m)
	}
	d.Stop()
	if !strings.Contains(d.Logs(), `"msg":"run finished"`) {
		t.Errorf("no run finished in the logs:\n%s", d.Logs())
	}
}

// With metrics.per_source: true in lookout.yaml, the syncer also serves
// the two gauges of every active source.
func TestRunServesPerSourceGaugesWhenAsked(t *testing.T) {
	_, url := pgtest.Schema(t)
	t.Setenv("DATABASE_URL", url)
	dir := t.TempDir()
	if err := os.CopyFS(filepath.Join(dir, "config"), os.DirFS("../../examples/config")); err != nil {
		t.Fatal(err)
	}
	if err := os.CopyFS(filepath.Join(dir, "data"), os.DirFS("../../examples/data")); err != nil {
		t.Fatal(err)
	}
	global := filepath.Join(dir, "config", "lookout.yaml")
	b, err := os.ReadFile(global)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(global, append(b, "\nmetrics:\n  per_source: true\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	d := clitest.StartDaemon(t, filepath.Join(dir, "config"), runDaemon)
	d.WaitFor("a last success of tasks in /metrics", func() bool {
		_, m := d.Get("/metrics")
		return clitest.Value(m, `lookout_source_last_success_timestamp_seconds{source="tasks"}`) > 0
	})
	_, m := d.Get("/metrics")
	if !clitest.Has(m, `lookout_source_consecutive_failures{source="tasks"} 0`) {
		t.Errorf("metrics lack the consecutive failures of tasks:\n%s", m)
	}
}

// A configuration directory of lookout.yaml alone (no sources/: the
// Kubernetes base, a deployment whose sources are all made through the
// API) is valid: `syncer check` says so and the daemon starts and gets
// ready on it.
func TestNoSourcesDirectory(t *testing.T) {
	_, url := pgtest.Schema(t)
	t.Setenv("DATABASE_URL", url)
	dir := writeConfig(t, map[string]string{"lookout.yaml": "sinks:\n  log: {type: log}\n"})
	var out strings.Builder
	if err := checkCommand().Run(context.Background(), &cli.Env{ConfigDir: dir, Args: []string{"--offline"}, Stdout: &out, Stderr: &out}); err != nil {
		t.Fatalf("check of a directory without sources/: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "is valid: 0 sources") {
		t.Errorf("check said %q", out.String())
	}
	d := clitest.StartDaemon(t, dir, runDaemon)
	d.WaitFor("ready", func() bool { code, _ := d.Get("/readyz"); return code == http.StatusOK })
	// sources/ made later is watched from then on: its first file is
	// applied without a restart.
	if err := os.MkdirAll(filepath.Join(dir, "sources"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "sources", "late.yaml"), []byte("name: late\nconnector: file\nevery: 1h\nfile: {paths: [data/none.jsonl]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	pool := pgtest.PoolFor(t, url)
	d.WaitFor("sources/late.yaml applied", func() bool {
		var n int
		_ = pool.QueryRow(context.Background(), `SELECT count(*) FROM source_definitions WHERE name = 'late'`).Scan(&n)
		return n == 1
	})
	d.Stop()
}
