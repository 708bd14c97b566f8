package e2e

import (
	"bytes"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/lookout-dev/lookout/internal/clitest"
)

// helpCommands returns the commands listed in the "Commands:" section of
// a help text: the first word of each indented line after it.
func helpCommands(help string) []string {
	_, list, ok := strings.Cut(help, "\nCommands:\n")
	if !ok {
		return nil
	}
	var out []string
	for _, line := range strings.Split(list, "\n") {
		if !strings.HasPrefix(line, "  ") {
			break
		}
		out = append(out, strings.Fields(line)[0])
	}
	return out
}

// Every --help and -h of every command and subcommand of every binary
// prints its help to stdout and exits 0, and does nothing: no database
// connection (DATABASE_URL, LOOKOUT_LISTEN and the Ollama host point at a
// listener of the test that counts the connections it is offered), no
// configuration read (LOOKOUT_CONFIG names no directory), nothing on
// stderr. The commands are those each binary's help lists, walked down to
// the subcommands, so a new command is covered when it is added. `syncer
// once --help` and `evaluator once --help` once ran the work.
func TestHelpNeverActs(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var dialed atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			dialed.Add(1)
			c.Close()
		}
	}()
	addr := ln.Addr().String()
	var environ []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LOOKOUT_") && !strings.HasPrefix(kv, "DATABASE_URL=") && !strings.HasPrefix(kv, "OLLAMA_") {
			environ = append(environ, kv)
		}
	}
	environ = append(environ, "DATABASE_URL=postgres://lookout@"+addr+"/lookout?sslmode=disable&connect_timeout=2",
		"LOOKOUT_CONFIG="+filepath.Join(t.TempDir(), "no-such-directory"), "LOOKOUT_LISTEN="+addr, "OLLAMA_HOST=http://"+addr)

	for _, pkg := range []string{"syncer", "evaluator", "api", "lookout-bench"} {
		t.Run(pkg, func(t *testing.T) {
			t.Parallel()
			bin := clitest.BuildBinary(t, "github.com/lookout-dev/lookout/cmd/"+pkg)
			// help runs bin with args, the help of the command path asked.
			help := func(path []string, args ...string) string {
				t.Helper()
				cmd := exec.Command(bin, args...)
				cmd.Env = environ
				var stdout, stderr bytes.Buffer
				cmd.Stdout, cmd.Stderr = &stdout, &stderr
				before := dialed.Load()
				err := cmd.Run()
				name := strings.Join(append([]string{pkg}, args...), " ")
				if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
					t.Errorf("%s: exit %d, want 0\nstdout:\n%s\nstderr:\n%s", name, ee.ExitCode(), stdout.String(), stderr.String())
				} else if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if out := stdout.String(); !strings.HasPrefix(out, "Usage: "+pkg+" ") || !strings.Contains(out, strings.Join(path, " ")+" ") {
					t.Errorf("%s: stdout is not the help of %q:\n%s", name, strings.Join(path, " "), out)
				}
				if stderr.Len() > 0 {
					t.Errorf("%s: wrote to stderr:\n%s", name, stderr.String())
				}
				if n := dialed.Load() - before; n > 0 {
					t.Errorf("%s: %d connection(s) to the database or the network", name, n)
				}
				return stdout.String()
			}
			top := help(nil, "--help")
			help(nil, "-h")
			if pkg == "lookout-bench" {
				return // flags only, no commands
			}
			var walk func(path []string, list []string)
			seen := 0
			walk = func(path []string, list []string) {
				for _, c := range list {
					p := append(slices.Clone(path), c)
					seen++
					out := help(p, append(slices.Clone(p), "--help")...)
					help(p, append(slices.Clone(p), "-h")...)
					if subs := helpCommands(out); len(subs) > 0 {
						walk(p, subs)
						continue
					}
					// Help asked after an argument, and with the --config flag.
					help(p, append(slices.Clone(p), "some-arg", "--help")...)
					help(p, append([]string{"--config", t.TempDir()}, append(slices.Clone(p), "-help")...)...)
				}
			}
			walk(nil, helpCommands(top))
			if seen < 8 {
				t.Errorf("%s --help lists %d commands:\n%s", pkg, seen, top)
			}
		})
	}
}
