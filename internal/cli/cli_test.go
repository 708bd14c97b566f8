package cli

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lookout-dev/lookout/internal/config"
	_ "github.com/lookout-dev/lookout/internal/connectors/file"
	_ "github.com/lookout-dev/lookout/internal/connectors/httpjson"
	"github.com/lookout-dev/lookout/internal/evaluator"
	"github.com/lookout-dev/lookout/internal/syncer"
)

func runCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), "syncer", "test", []Command{CheckCommand(buildBoth), MigrateCommand()}, args, &out, &errb)
	return code, out.String(), errb.String()
}

// buildBoth is both binaries' sides of the config check together.
func buildBoth(cfg *config.Config) error {
	return errors.Join(syncer.Build(cfg), evaluator.Build(cfg))
}

func TestCheckExampleConfig(t *testing.T) {
	code, out, stderr := runCLI(t, "--config", "../../examples/config", "check")
	if code != 0 {
		t.Fatalf("check of the example exited %d: %s", code, stderr)
	}
	if !strings.Contains(out, "is valid: 1 sources, 2 watches, 1 sinks") {
		t.Errorf("output = %q", out)
	}
}

func TestCheckBadConfigExitsNonZero(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "sources"), 0o755); err != nil {
		t.Fatal(err)
	}
	src := "name: x\nconnector: file\nfile: {paths: [a.jsonl]}\nfields:\n  title: item.title +\nwatches:\n  - name: w\n    when: record.title ==\n"
	if err := os.WriteFile(filepath.Join(dir, "sources", "x.yaml"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runCLI(t, "--config", dir, "check")
	if code != 1 {
		t.Errorf("exit code = %d, want 1", code)
	}
	for _, want := range []string{
		`sources/x.yaml:5: fields.title expression "item.title +": unexpected token EOF (at 1:12)`,
		`sources/x.yaml:8: watches[0].when: unexpected token EOF (at 1:15)`,
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
}

func TestUsage(t *testing.T) {
	if code, _, stderr := runCLI(t, "frobnicate"); code != 2 || !strings.Contains(stderr, `unknown command "frobnicate"`) {
		t.Errorf("unknown command: exit %d, %q", code, stderr)
	}
	if code, _, stderr := runCLI(t); code != 2 || !strings.Contains(stderr, "Commands:") {
		t.Errorf("no command: exit %d, %q", code, stderr)
	}
}

// TestLoggerRedactsSecrets: the daemons' logger hides the value of every
// ${ENV} reference of the configuration, in text and JSON formats.
func TestLoggerRedactsSecrets(t *testing.T) {
	t.Setenv("LOOKOUT_TEST_CLI_TOKEN", "cli-token-31415")
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "sources"), 0o755); err != nil {
		t.Fatal(err)
	}
	global := "sinks:\n  hook: {type: webhook, url: 'https://hooks.example/in', headers: {Authorization: 'Bearer ${LOOKOUT_TEST_CLI_TOKEN}'}}\n"
	if err := os.WriteFile(filepath.Join(dir, "lookout.yaml"), []byte(global), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, format := range []string{"text", "json"} {
		var buf bytes.Buffer
		env := &Env{ConfigDir: dir, Stderr: &buf, LogFormat: format}
		cfg, err := env.Load()
		if err != nil {
			t.Fatal(err)
		}
		env.Logger(cfg, "test").Error("upstream said cli-token-31415", "error", errors.New("echo: Bearer cli-token-31415"))
		if out := buf.String(); strings.Contains(out, "cli-token-31415") || strings.Count(out, "[REDACTED]") != 2 {
			t.Errorf("%s log: %s", format, out)
		}
	}
}
