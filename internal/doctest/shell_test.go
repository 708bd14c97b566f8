package doctest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// runShell runs every sh block with bash (set -e, pipefail) in the
// fixture: its binaries first on PATH, DATABASE_URL, LOOKOUT_CONFIG, TOKEN
// and LOOKOUT_TOKEN set, the documented placeholders of fx.subst replaced.
// README.md's blocks run first, on a database of their own (its quick
// start mirrors the example folder, as on a fresh machine); then v2.0 of releases is published, and the
// docs' blocks run in order. An output block is compared loosely with
// what the block above it printed.
func runShell(t *testing.T, ta *tally, fx *fixture, blocks, outputs []*block) {
	printed := map[*block]string{}
	released := false
	for _, b := range blocks {
		if b.file != "README.md" && !released {
			fx.release()
			released = true
		}
		if c, ok := b.marker("client"); ok {
			ta.run(t, b, func(t *testing.T) { fx.inspector(t, c, b.body) })
			continue
		}
		script := b.body
		if b.file == "README.md" {
			script = "export DATABASE_URL='" + fx.readmeURL + "'\n" + script
		}
		ta.run(t, b, func(t *testing.T) {
			printed[b] = fx.shell(t, script)
		})
	}
	for _, b := range outputs {
		out, ok := printed[b.prev]
		if !ok {
			ta.notRun(b, fmt.Sprintf("the output of the block at line %d, which is not run", b.prev.line))
			continue
		}
		ta.run(t, b, func(t *testing.T) {
			if err := looseMatch(b.body, out); err != nil {
				t.Errorf("the output of %s does not match: %v\nit printed:\n%s", b.prev.name(), err, out)
			}
		})
	}
}

// inspector checks an MCP Inspector command line (<!-- client: MCP
// Inspector -->): npx @modelcontextprotocol/inspector [-e KEY=VALUE]... --
// COMMAND...; the Inspector's own launcher is not run (it needs npm), the
// server command it would start is, with those variables, and must answer
// tools/list over stdio.
func (fx *fixture) inspector(t *testing.T, client, script string) {
	if client != "MCP Inspector" {
		t.Fatalf("<!-- client: %s --> on a sh block: only MCP Inspector is a command line", client)
	}
	for _, s := range fx.subst {
		script = strings.ReplaceAll(script, s[0], s[1])
	}
	words := strings.Fields(script)
	if len(words) < 4 || words[0] != "npx" || words[1] != "@modelcontextprotocol/inspector" {
		t.Fatalf("not an Inspector command line (npx @modelcontextprotocol/inspector ...): %s", script)
	}
	env := append([]string(nil), fx.env...)
	rest := words[2:]
	for len(rest) > 1 && rest[0] == "-e" {
		if !strings.Contains(rest[1], "=") {
			t.Fatalf("-e %s: want KEY=VALUE", rest[1])
		}
		env = append(env, rest[1])
		rest = rest[2:]
	}
	if len(rest) < 2 || rest[0] != "--" {
		t.Fatalf("the server command must follow --: %s", script)
	}
	rest = rest[1:]
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	bin := rest[0]
	if p := filepath.Join(fx.bins.dir, bin); !strings.Contains(bin, "/") && fileExists(p) {
		bin = p // the built binaries come first on PATH
	}
	cmd := exec.Command(bin, rest[1:]...)
	cmd.Env = env
	session, err := mcp.NewClient(&mcp.Implementation{Name: "doctest", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("%s: %v", strings.Join(rest, " "), err)
	}
	defer session.Close()
	list, err := session.ListTools(ctx, nil)
	if err != nil {
		t.Fatalf("%s: tools/list: %v", strings.Join(rest, " "), err)
	}
	if len(list.Tools) == 0 {
		t.Fatalf("%s: tools/list: no tools", strings.Join(rest, " "))
	}
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// shell runs a script and returns what it printed (stdout and stderr).
func (fx *fixture) shell(t *testing.T, script string) string {
	t.Helper()
	for _, s := range fx.subst {
		script = strings.ReplaceAll(script, s[0], s[1])
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", "set -e -o pipefail\n"+script)
	cmd.Env = fx.env
	cmd.Dir = fx.work
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\nthe script:\n%s\nit printed:\n%s", err, numbered(script), out)
	}
	return string(out)
}

var ellipsis = regexp.MustCompile(`…|\.\.\.`)

// looseMatch checks that every non-blank line of want has a line of got
// holding each of its words (a word with an ellipsis: the part before
// it), in any order: timestamps, ids and durations of got may differ
// where want elides them.
func looseMatch(want, got string) error {
	lines := strings.Split(got, "\n")
next:
	for _, w := range strings.Split(want, "\n") {
		var words []string
		for _, f := range strings.Fields(w) {
			if loc := ellipsis.FindStringIndex(f); loc != nil {
				f = f[:loc[0]]
			}
			if f != "" {
				words = append(words, f)
			}
		}
		if len(words) == 0 {
			continue
		}
	line:
		for _, g := range lines {
			for _, word := range words {
				if !strings.Contains(g, word) {
					continue line
				}
			}
			continue next
		}
		return fmt.Errorf("no line has every word of %q", w)
	}
	return nil
}

func TestLooseMatch(t *testing.T) {
	got := `time=2026-11-30T10:00:00Z level=INFO msg="run finished" service=syncer component=syncer source=tasks run_id=1 status=succeeded seen=3 created=3 updated=0`
	if err := looseMatch(`level=INFO msg="run finished" service=syncer source=tasks run_id=1 status=succeeded seen=3 created=3 ...`, got); err != nil {
		t.Error(err)
	}
	if err := looseMatch(`level=INFO msg="run finished" source=tasks created=4 …`, got); err == nil {
		t.Error("created=4 matched created=3")
	}
}

var psqlVar = regexp.MustCompile(`:'([A-Za-z_][A-Za-z0-9_]*)'|:([A-Za-z_][A-Za-z0-9_]*)`)

// substitute replaces psql variables (:'name' quoted, :name as is) by vars,
// as internal/reports' cookbook test does; a `::` cast is left alone.
func substitute(sql string, vars map[string]string) (string, error) {
	var b strings.Builder
	last := 0
	for _, m := range psqlVar.FindAllStringSubmatchIndex(sql, -1) {
		start := m[0]
		if start > 0 && sql[start-1] == ':' {
			continue
		}
		b.WriteString(sql[last:start])
		quoted := m[2] >= 0
		name := ""
		if quoted {
			name = sql[m[2]:m[3]]
		} else {
			name = sql[m[4]:m[5]]
		}
		v, ok := vars[name]
		switch {
		case !ok:
			return "", fmt.Errorf("unknown psql variable %q (known: source, record_id, run_id)", name)
		case quoted:
			b.WriteString("'" + strings.ReplaceAll(v, "'", "''") + "'")
		default:
			b.WriteString(v)
		}
		last = m[1]
	}
	b.WriteString(sql[last:])
	return b.String(), nil
}

// runSQL runs every sql block on the fixture's database, which the
// pipeline filled (the quick start's runs, the releases' update, what the
// shell blocks did), in a transaction rolled back, with the psql
// variables source = tasks, record_id = t-1 and run_id = tasks' first run.
func runSQL(t *testing.T, ta *tally, fx *fixture, blocks []*block) {
	ctx := context.Background()
	var runID int64
	if err := fx.pool.QueryRow(ctx, `SELECT min(id) FROM sync_runs WHERE source = 'tasks'`).Scan(&runID); err != nil {
		t.Fatalf("the tasks source has no run: %v", err)
	}
	vars := map[string]string{"source": "tasks", "record_id": "t-1", "run_id": strconv.FormatInt(runID, 10)}
	for _, b := range blocks {
		ta.run(t, b, func(t *testing.T) {
			sql, err := substitute(b.body, vars)
			if err != nil {
				t.Fatal(err)
			}
			tx, err := fx.pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tx.Rollback(ctx) }()
			// No arguments: the simple protocol, several statements at once.
			if _, err := tx.Exec(ctx, sql); err != nil {
				t.Fatalf("%v\n%s", err, numbered(sql))
			}
		})
	}
}
