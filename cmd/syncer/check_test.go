package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lookout-dev/lookout/internal/cli"
	"github.com/lookout-dev/lookout/internal/connectors/notion/notiontest"
	"github.com/lookout-dev/lookout/internal/pgtest"
)

// writeConfig writes a configuration directory of files (path: content).
func writeConfig(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// `syncer check` builds what the syncer runs: a bad field mapping fails it
// with file, line and key; the evaluator's side is not its to check.
func TestCheckBuildsTheSyncerSide(t *testing.T) {
	const head = "name: x\nconnector: http\nhttp: {url: \"https://example.com/api\"}\n"
	bad := writeConfig(t, map[string]string{"sources/x.yaml": head + "fields:\n  title: item.title +\n"})
	var out bytes.Buffer
	err := cli.CheckCommand(check).Run(context.Background(), &cli.Env{ConfigDir: bad, Stdout: &out, Stderr: &out})
	if want := `sources/x.yaml:5: fields.title expression "item.title +": unexpected token EOF`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("check of a bad mapping = %v, want %q", err, want)
	}
	good := writeConfig(t, map[string]string{"sources/x.yaml": head + "watches:\n  - name: w\n    when: record.title != \"\"\n"})
	out.Reset()
	if err := cli.CheckCommand(check).Run(context.Background(), &cli.Env{ConfigDir: good, Stdout: &out, Stderr: &out}); err != nil {
		t.Fatalf("check of a valid directory: %v", err)
	}
	if !strings.Contains(out.String(), "is valid: 1 sources, 1 watches, 1 sinks") {
		t.Errorf("output = %q", out.String())
	}
}

// The briefing examples (examples/briefings: an inbox every morning, papers
// once a week) stay valid for this binary's check.
func TestBriefingExamplesCheck(t *testing.T) {
	t.Setenv("IMAP_PASSWORD", "example")
	var out bytes.Buffer
	if err := cli.CheckCommand(check).Run(context.Background(), &cli.Env{ConfigDir: "../../examples/briefings", Stdout: &out, Stderr: &out}); err != nil {
		t.Fatalf("check examples/briefings: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "is valid: 2 sources, 2 watches, 2 sinks") {
		t.Errorf("output = %q", out.String())
	}
}

// notionSource is a task source on the fake's database; extra is appended
// under notion: (indented by two spaces).
func notionSource(f *notiontest.Server, baseURL, extra string) string {
	return fmt.Sprintf("name: tasks\nconnector: notion\nnotion:\n  database: %s\n  token: ${LOOKOUT_TEST_NOTION_TOKEN}\n  base_url: %s\n%s"+
		"tasks:\n  - name: execute\n    when: record.status == \"Todo\"\n    command: [/bin/true]\n",
		strings.ReplaceAll(f.DatabaseID, "-", ""), baseURL, extra)
}

// `syncer check` reads the Notion database (GET /v1/databases/{id}) and
// fails on a property the source names that the database lacks, naming the
// file, line, key and the properties the database has, and on a status
// value that is not an option of the status property, naming the options.
// --offline reads nothing and says so; an unreachable API is said, not a
// failure; a refused token is a failure.
func TestCheckReadsTheNotionSchema(t *testing.T) {
	t.Setenv("LOOKOUT_TEST_NOTION_TOKEN", "secret_test")
	f := notiontest.New(t,
		notiontest.Property{Name: "Name", Type: "title"},
		notiontest.Property{Name: "Status", Type: "status", Options: []string{"Todo", "InProgress", "Complete", "Failed"}},
		notiontest.Property{Name: "Priority", Type: "number"},
		notiontest.Property{Name: "RetryCount", Type: "number"},
		notiontest.Property{Name: "LastError", Type: "rich_text"})
	db := strings.ReplaceAll(f.DatabaseID, "-", "")
	checkDir := func(dir string, args ...string) (string, error) {
		t.Helper()
		var out bytes.Buffer
		err := checkCommand().Run(context.Background(), &cli.Env{ConfigDir: dir, Args: args, Stdout: &out, Stderr: &out})
		return out.String(), err
	}
	gets := func() int { return f.Count("GET", "/v1/databases/"+db) }
	has := "LastError, Name, Priority, RetryCount, Status"

	for _, tt := range []struct {
		name, extra string
		args        []string
		want        []string // once in the error, or in the output when ok
		ok          bool
		reads       int
	}{
		{name: "valid", extra: "  task: {}\n", ok: true, reads: 1,
			want: []string{"sources/tasks.yaml: notion schema read: every property named exists", "is valid: 1 sources"}},
		{name: "missing property", extra: "  task:\n    status: State\n", reads: 1,
			want: []string{`sources/tasks.yaml:8: notion.task.status names property "State", which database ` + db + ` does not have (it has: ` + has + `)`}},
		{name: "missing property named by a field", extra: "  task: {}\nfields:\n  extra:\n    due: item.properties.Due.start\n", reads: 1,
			want: []string{`sources/tasks.yaml:10: fields.extra.due names property "Due", which database ` + db + ` does not have (it has: ` + has + `)`}},
		{name: "status value not an option", extra: "  task:\n    in_progress: Doing\n    failed: Broken\n", reads: 1,
			want: []string{`sources/tasks.yaml:8: notion.task.in_progress property "Status" has no option "Doing" (options: Todo, InProgress, Complete, Failed)`,
				`sources/tasks.yaml:9: notion.task.failed property "Status" has no option "Broken" (options: Todo, InProgress, Complete, Failed)`}},
		{name: "offline", extra: "  task:\n    status: State\n", args: []string{"--offline"}, ok: true, reads: 0,
			want: []string{"sources/tasks.yaml: notion schema not read (--offline)", "is valid: 1 sources"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before := gets()
			dir := writeConfig(t, map[string]string{"sources/tasks.yaml": notionSource(f, f.URL, tt.extra)})
			out, err := checkDir(dir, tt.args...)
			got := out
			if err != nil {
				got = err.Error()
			}
			if (err == nil) != tt.ok {
				t.Fatalf("check: err %v, want ok %v\n%s", err, tt.ok, out)
			}
			for _, w := range tt.want {
				if strings.Count(got, w) != 1 {
					t.Errorf("check said\n%s\nwant it to contain\n%s", got, w)
				}
			}
			if n := gets() - before; n != tt.reads {
				t.Errorf("%d schema reads, want %d", n, tt.reads)
			}
		})
	}

	t.Run("unreachable", func(t *testing.T) {
		gone := httptest.NewServer(http.NotFoundHandler())
		gone.Close()
		dir := writeConfig(t, map[string]string{"sources/tasks.yaml": notionSource(f, gone.URL, "  task: {}\n")})
		out, err := checkDir(dir)
		if err != nil || !strings.Contains(out, "sources/tasks.yaml: notion schema not checked, upstream unreachable (the first run checks it)") {
			t.Errorf("check with the API unreachable: %v\n%s", err, out)
		}
	})
	t.Run("refused token", func(t *testing.T) {
		t.Setenv("LOOKOUT_TEST_NOTION_TOKEN", "secret_revoked")
		dir := writeConfig(t, map[string]string{"sources/tasks.yaml": notionSource(f, f.URL, "  task: {}\n")})
		_, err := checkDir(dir)
		if want := "sources/tasks.yaml:5: notion.token: the Notion API refused it: read database " + db; err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "API token is invalid") {
			t.Errorf("check with a refused token: %v\nwant it to contain %q", err, want)
		}
	})
	t.Run("unknown database", func(t *testing.T) {
		other := "0123456789abcdef0123456789abcdef"
		dir := writeConfig(t, map[string]string{"sources/tasks.yaml": strings.Replace(notionSource(f, f.URL, "  task: {}\n"), db, other, 1)})
		_, err := checkDir(dir)
		if want := "sources/tasks.yaml:4: notion.database: database " + other + " not found, or not shared with the integration"; err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("check of an unknown database: %v\nwant it to contain %q", err, want)
		}
	})
	t.Run("rate limited", func(t *testing.T) {
		f.FailNext(1, http.StatusTooManyRequests, 30)
		dir := writeConfig(t, map[string]string{"sources/tasks.yaml": notionSource(f, f.URL, "  task: {}\n")})
		out, err := checkDir(dir)
		var ee *cli.ExitError
		if !errors.As(err, &ee) || ee.Code != cli.ExitTryLater {
			t.Fatalf("check answered 429: %v (%#v)\n%s, want an exit %d", err, err, out, cli.ExitTryLater)
		}
		if want := "sources/tasks.yaml: notion schema not checked: the upstream is rate limited or busy (429); try again after "; !strings.Contains(err.Error(), want) {
			t.Errorf("check answered 429: %v\nwant it to contain %q", err, want)
		}
		if strings.Contains(out, "unreachable") || strings.Contains(out, "is valid") {
			t.Errorf("check answered 429 said\n%s", out)
		}
	})
	t.Run("usage", func(t *testing.T) {
		var ue *cli.UsageError
		if _, err := checkDir(t.TempDir(), "--online"); !errors.As(err, &ue) {
			t.Errorf("check --online: %v, want a usage error", err)
		}
	})
}

// What `syncer check` says about the schema, the first run says too, and
// records on the run (sync_runs.error, sources.last_error); the task pass
// does not run and no page is touched.
func TestFirstRunRecordsTheSchemaError(t *testing.T) {
	t.Setenv("LOOKOUT_TEST_NOTION_TOKEN", "secret_test")
	_, url := pgtest.Schema(t)
	t.Setenv("DATABASE_URL", url)
	pool := pgtest.PoolFor(t, url)
	f := notiontest.New(t,
		notiontest.Property{Name: "Name", Type: "title"},
		notiontest.Property{Name: "Status", Type: "status", Options: []string{"Todo", "InProgress", "Complete", "Failed"}})
	f.AddPage(map[string]any{"Name": notiontest.Title("a task"), "Status": notiontest.Status("Todo")})
	db := strings.ReplaceAll(f.DatabaseID, "-", "")
	dir := writeConfig(t, map[string]string{"lookout.yaml": "defaults:\n  jitter: 0s\n",
		"sources/tasks.yaml": notionSource(f, f.URL, "  task:\n    in_progress: Doing\n    claimed_by: Owner\n")})
	var out, errb bytes.Buffer
	code := cli.Run(context.Background(), "syncer", "test", []cli.Command{{Name: "once", Run: runOnce}},
		[]string{"--config", dir, "--log-format", "json", "once"}, &out, &errb)
	if code != 1 {
		t.Fatalf("once: exit %d, want 1 (the run failed)\n%s%s", code, out.String(), errb.String())
	}
	var runErr, lastErr string
	if err := pool.QueryRow(context.Background(), `SELECT r.error, s.last_error FROM sync_runs r JOIN sources s ON s.name = r.source
		WHERE r.source = 'tasks' AND r.status = 'failed'`).Scan(&runErr, &lastErr); err != nil {
		t.Fatalf("the failed run: %v", err)
	}
	// The run builds the source from its stored definition, whose lines
	// are not the file's: the file and the key.
	for _, w := range []string{
		`sources/tasks.yaml: notion.task.in_progress property "Status" has no option "Doing" (options: Todo, InProgress, Complete, Failed)`,
		`sources/tasks.yaml: notion.task.claimed_by names property "Owner", which database ` + db + ` does not have (it has: Name, Status)`,
	} {
		if !strings.Contains(runErr, w) || !strings.Contains(lastErr, w) {
			t.Errorf("sync_runs.error\n%s\nsources.last_error\n%s\nwant both to contain\n%s", runErr, lastErr, w)
		}
	}
	if n := f.Count("PATCH", ""); n != 0 {
		t.Errorf("%d pages written by a source whose configuration the database refuses", n)
	}
	var runs int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM task_runs`).Scan(&runs); err != nil || runs != 0 {
		t.Errorf("%d task runs (%v), want none", runs, err)
	}
}
