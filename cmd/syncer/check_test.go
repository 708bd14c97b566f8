package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lookout-dev/lookout/internal/cli"
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
