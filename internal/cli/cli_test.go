package cli

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lookout-dev/lookout/internal/config"
	_ "github.com/lookout-dev/lookout/internal/connectors/file"
	_ "github.com/lookout-dev/lookout/internal/connectors/httpjson"
	"github.com/lookout-dev/lookout/internal/syncer"
	"github.com/lookout-dev/lookout/internal/watchspec"
)

func runCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), "syncer", "test", []Command{CheckCommand(buildBoth), MigrateCommand()}, args, &out, &errb)
	return code, out.String(), errb.String()
}

// buildBoth is both binaries' sides of the config check together.
func buildBoth(cfg *config.Config) error {
	return errors.Join(syncer.Build(cfg), watchspec.Check(cfg))
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

// --help anywhere in a command's arguments prints its help to stdout and
// runs nothing past its Parse; a group lists its subcommands; a command
// that would act before parsing is stopped at cli.Open and exits 1.
func TestHelpActsNever(t *testing.T) {
	acted := false
	var opened error
	cmds := []Command{
		{Name: "work", Summary: "do the work", Run: func(ctx context.Context, env *Env) error {
			fs := flag.NewFlagSet("work", flag.ContinueOnError)
			fs.Bool("hard", false, "work `hard`")
			if err := env.Parse(fs, env.Args); err != nil {
				return err
			}
			acted = true
			return nil
		}},
		{Name: "rude", Summary: "acts first", Run: func(ctx context.Context, env *Env) error {
			_, opened = Open(ctx, false)
			return opened
		}},
		{Name: "group", Summary: "a group", Commands: []Command{{Name: "sub", Summary: "the sub", Run: func(ctx context.Context, env *Env) error {
			if err := env.NoArgs("sub"); err != nil {
				return err
			}
			acted = true
			return nil
		}}}},
	}
	for _, tt := range []struct {
		args []string
		code int
		out  string
	}{
		{[]string{"--help"}, 0, "Usage: x [flags] <command> [args]\n\nx — test\n\nCommands:\n  group "},
		{[]string{"work", "-h"}, 0, "Usage: x [global flags] work [flags] [args]\n\ndo the work\n\nFlags:\n  -hard hard\n"},
		{[]string{"work", "arg", "--hard", "--help"}, 0, "Usage: x [global flags] work"},
		{[]string{"group", "--help"}, 0, "Usage: x [global flags] group <command> [flags] [args]\n\na group\n\nCommands:\n  sub          the sub\n"},
		{[]string{"group", "sub", "-help"}, 0, "Usage: x [global flags] group sub [flags] [args]\n\nthe sub\n"},
		{[]string{"rude", "--help"}, 1, ""},
	} {
		var out, errb bytes.Buffer
		code := run(context.Background(), "x", "test", cmds, tt.args, &out, &errb)
		if code != tt.code || !strings.HasPrefix(out.String(), tt.out) || acted {
			t.Errorf("%q: exit %d, acted %t, stdout:\n%s\nstderr:\n%s", tt.args, code, acted, out.String(), errb.String())
		}
	}
	if opened == nil || !strings.Contains(opened.Error(), "--help opens no database") {
		t.Errorf("Open during --help: %v", opened)
	}
	// Without --help the commands run.
	var out, errb bytes.Buffer
	if code := run(context.Background(), "x", "test", cmds, []string{"group", "sub"}, &out, &errb); code != 0 || !acted {
		t.Errorf("group sub: exit %d, acted %t: %s", code, acted, errb.String())
	}
	if code := run(context.Background(), "x", "test", cmds, []string{"group", "nope"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), `x group: unknown command "nope" (want sub)`) {
		t.Errorf("group nope: exit %d: %s", code, errb.String())
	}
}
