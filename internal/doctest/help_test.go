package doctest

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

var (
	tableRow   = regexp.MustCompile(`^\|\s*(.*?)\s*\|`)
	codeSpan   = regexp.MustCompile("`([^`]+)`")
	flagRE     = regexp.MustCompile(`--([a-z][a-z-]*)`)
	helpFlag   = regexp.MustCompile(`(?m)^\s+-([a-z][a-z-]*)\b`)
	commandRow = regexp.MustCompile(`(?m)^  ([a-z][a-z-]*)\s{2,}`)
)

// docCommand is a command a docs table names: `syncer pause SOURCE
// [--reason TEXT]` is syncer, [pause], [reason].
type docCommand struct {
	where string
	bin   string
	path  []string
	flags []string
}

// commandTables reads the rows of the docs' tables whose first cell names a
// command: `syncer …`, `evaluator …`, `api …`; and README.md's table of the
// commands syncer and evaluator share (`run`, `once`, `migrate`, `check`).
func commandTables(t *testing.T, files []string) []docCommand {
	t.Helper()
	var out []docCommand
	for _, f := range files {
		raw, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(raw), "\n") {
			m := tableRow.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			for _, span := range codeSpan.FindAllStringSubmatch(m[1], -1) {
				words := strings.Fields(span[1])
				bins := []string{}
				switch {
				case len(words) == 0:
					continue
				case words[0] == "syncer" || words[0] == "evaluator" || words[0] == "api":
					bins, words = []string{words[0]}, words[1:]
				case f == "README.md" && len(words) == 1 && regexp.MustCompile(`^[a-z]+$`).MatchString(words[0]) && strings.Count(line, "|") >= 3:
					bins = []string{"syncer", "evaluator"}
				default:
					continue
				}
				var path []string
				for _, w := range words {
					if !regexp.MustCompile(`^[a-z][a-z-]*$`).MatchString(w) {
						break
					}
					path = append(path, w)
				}
				if len(path) == 0 {
					continue
				}
				var flags []string
				for _, fm := range flagRE.FindAllStringSubmatch(span[1], -1) {
					flags = append(flags, fm[1])
				}
				for _, bin := range bins {
					out = append(out, docCommand{where: f + ":" + strconv.Itoa(i+1), bin: bin, path: path, flags: flags})
				}
			}
		}
	}
	return out
}

// help runs `bin args... --help` and returns what it printed.
func help(bin string, args ...string) string {
	out, _ := exec.Command(bin, append(args, "--help")...).CombinedOutput()
	return string(out)
}

// checkHelp compares the docs' command tables with the binaries: every
// command a table names is in its binary's command list, every flag it
// names is in the command's --help; and every command of a binary's list
// is named somewhere in the docs as `binary command`.
func checkHelp(t *testing.T, bins binaries, files []string) {
	paths := map[string]string{"syncer": bins.syncer, "evaluator": bins.evaluator, "api": bins.api}
	listed := map[string][]string{}
	for name, bin := range paths {
		out, _ := exec.Command(bin).CombinedOutput()
		for _, m := range commandRow.FindAllStringSubmatch(string(out), -1) {
			listed[name] = append(listed[name], m[1])
		}
		if len(listed[name]) == 0 {
			t.Fatalf("%s without arguments lists no commands:\n%s", name, out)
		}
	}
	cmds := commandTables(t, files)
	if len(cmds) < 15 {
		t.Fatalf("the docs' tables name %d commands, want at least 15", len(cmds))
	}
	for _, c := range cmds {
		if !contains(listed[c.bin], c.path[0]) {
			t.Errorf("%s: %s %s: %s has no command %s (its commands: %s)", c.where, c.bin, strings.Join(c.path, " "), c.bin, c.path[0], strings.Join(listed[c.bin], ", "))
			continue
		}
		if len(c.flags) == 0 {
			continue
		}
		out := help(paths[c.bin], c.path...)
		var have []string
		for _, m := range helpFlag.FindAllStringSubmatch(out, -1) {
			have = append(have, m[1])
		}
		for _, f := range c.flags {
			if !contains(have, f) {
				t.Errorf("%s: %s %s --%s: not in its --help (flags: %s)", c.where, c.bin, strings.Join(c.path, " "), f, strings.Join(have, ", "))
			}
		}
	}
	var all strings.Builder
	for _, f := range files {
		raw, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		all.Write(raw)
	}
	text := regexp.MustCompile(`\s+`).ReplaceAllString(all.String(), " ")
	for name, commands := range listed {
		for _, c := range commands {
			if !strings.Contains(text, name+" "+c) && !strings.Contains(text, "`"+c+"`") {
				t.Errorf("%s %s: in the binary's command list, named nowhere in README.md or docs/", name, c)
			}
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
