package deploy

import (
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// root is the module's root: the tests run in deploy/.
const root = ".."

// binDir holds the binaries built the Dockerfile's way, for every test of
// the package; TestMain removes it.
var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "lookout-deploy-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// dockerBuild is what the Dockerfile's build stage runs: the binaries it
// builds, the environment and arguments of its `go build`, and where the
// final stage copies them.
type dockerBuild struct {
	binaries []string
	env      []string // NAME=value before `go build`
	args     []string // after `go build`, with $b for the binary
	destDir  string   // where the final stage puts the binaries
	stages   int
	user     string // the final stage's USER
}

var (
	argRE      = regexp.MustCompile(`^ARG BINARIES="([^"]+)"`)
	goBuildRE  = regexp.MustCompile(`((?:[A-Z_]+=\S+\s+)*)go build (.*?)\s*(?:\|\||;|&&|$)`)
	copyBinsRE = regexp.MustCompile(`^COPY --from=build /out/ (\S+)$`)
)

// readDockerfile parses the parts of the Dockerfile the tests rely on,
// joining continued lines.
func readDockerfile(t *testing.T) dockerBuild {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	var cur strings.Builder
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(l, "#") {
			continue
		}
		if s, ok := strings.CutSuffix(l, `\`); ok {
			cur.WriteString(s + " ")
			continue
		}
		cur.WriteString(l)
		if cur.Len() > 0 {
			lines = append(lines, cur.String())
		}
		cur.Reset()
	}
	var d dockerBuild
	for _, l := range lines {
		switch {
		case strings.HasPrefix(l, "FROM "):
			d.stages++
		case strings.HasPrefix(l, "USER "):
			d.user = strings.TrimPrefix(l, "USER ")
		}
		if m := argRE.FindStringSubmatch(l); m != nil {
			d.binaries = strings.Fields(m[1])
		}
		if m := copyBinsRE.FindStringSubmatch(l); m != nil {
			d.destDir = m[1]
		}
		if strings.HasPrefix(l, "RUN ") && strings.Contains(l, "go build ") {
			m := goBuildRE.FindStringSubmatch(l)
			if m == nil {
				t.Fatalf("Dockerfile: cannot read the go build line %q", l)
			}
			d.env = strings.Fields(m[1])
			d.args = shellWords(t, m[2])
		}
	}
	if len(d.binaries) == 0 || d.args == nil || d.destDir == "" {
		t.Fatalf("Dockerfile: want ARG BINARIES=\"...\", a RUN with go build and COPY --from=build /out/ DIR; got %+v", d)
	}
	return d
}

// shellWords splits a command line the way sh does for the plain words and
// double-quoted strings the Dockerfile uses.
func shellWords(t *testing.T, s string) []string {
	t.Helper()
	var words []string
	var w strings.Builder
	inWord, quoted := false, false
	for _, r := range s {
		switch {
		case r == '"':
			quoted, inWord = !quoted, true
		case r == ' ' && !quoted:
			if inWord {
				words = append(words, w.String())
				w.Reset()
				inWord = false
			}
		default:
			w.WriteRune(r)
			inWord = true
		}
	}
	if quoted {
		t.Fatalf("unbalanced quotes in %q", s)
	}
	if inWord {
		words = append(words, w.String())
	}
	return words
}

var (
	buildOnce sync.Once
	buildErr  error
)

// binaries builds every binary of the Dockerfile with its own go build
// line (CGO_ENABLED=0, -trimpath, ...) into binDir, once per test binary,
// and returns binDir.
func binaries(t *testing.T) string {
	t.Helper()
	d := readDockerfile(t)
	buildOnce.Do(func() {
		for _, b := range d.binaries {
			args := []string{"build"}
			for _, a := range d.args {
				a = strings.ReplaceAll(a, "$b", b)
				a = strings.Replace(a, "/out/", binDir+"/", 1)
				args = append(args, a)
			}
			// Bounded by the test binary's own -timeout (less a margin to
			// report the failure), not by a fixed time: a cold build of
			// every dependency with these flags took more than 10 minutes
			// on the 2-core machine at load 40 (CI beside a Citus run).
			ctx, cancel := context.WithCancel(context.Background())
			if deadline, ok := t.Deadline(); ok {
				ctx, cancel = context.WithDeadline(context.Background(), deadline.Add(-30*time.Second))
			}
			cmd := exec.CommandContext(ctx, "go", args...)
			cmd.Dir = root
			cmd.Env = append(os.Environ(), d.env...)
			out, err := cmd.CombinedOutput()
			cancel()
			if err != nil {
				buildErr = fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out)
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binDir
}

// TestDockerfile checks the image's shape and builds its binaries with the
// Dockerfile's go build line: static (no interpreter, no shared library),
// one per deployment, run by a numeric non-root user.
func TestDockerfile(t *testing.T) {
	d := readDockerfile(t)
	if d.stages < 2 {
		t.Errorf("Dockerfile has %d FROM, want a multi-stage build", d.stages)
	}
	if !slices.Contains(d.env, "CGO_ENABLED=0") {
		t.Errorf("go build runs with %v, want CGO_ENABLED=0 (static binaries)", d.env)
	}
	if uid, _, _ := strings.Cut(d.user, ":"); !regexp.MustCompile(`^[1-9][0-9]*$`).MatchString(uid) {
		t.Errorf("USER %q: want a numeric non-root uid (runAsNonRoot can only verify numbers)", d.user)
	}
	// The image carries every daemon of cmd/ (the bench tool stays out).
	entries, err := os.ReadDir(filepath.Join(root, "cmd"))
	if err != nil {
		t.Fatal(err)
	}
	var cmds []string
	for _, e := range entries {
		if e.IsDir() && e.Name() != "lookout-bench" {
			cmds = append(cmds, e.Name())
		}
	}
	if got := slices.Sorted(slices.Values(d.binaries)); !slices.Equal(got, cmds) {
		t.Errorf("Dockerfile builds %v, cmd/ has %v", got, cmds)
	}
	dir := binaries(t)
	for _, b := range d.binaries {
		f, err := elf.Open(filepath.Join(dir, b))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				t.Errorf("%s has a program interpreter: it is dynamically linked", b)
			}
		}
		libs, err := f.ImportedLibraries()
		if err != nil {
			t.Fatal(err)
		}
		if len(libs) > 0 {
			t.Errorf("%s needs shared libraries %v", b, libs)
		}
		f.Close()
	}
}

// usage is what a binary says about itself: its commands, its global
// flags and each command's flags.
type usage struct {
	commands map[string]bool
	global   map[string]bool
	flags    map[string]map[string]bool // command → its flags (from `cmd --help`)
}

var (
	usageMu    sync.Mutex
	usageCache = map[string]*usage{}
	flagLineRE = regexp.MustCompile(`^\s+-([a-z][a-z0-9-]*)\b`)
	cmdLineRE  = regexp.MustCompile(`^  ([a-z][a-z0-9-]*)\s+`)
)

// binaryUsage runs `bin --help` (and `bin CMD --help` for each command
// asked about) and reads the usage text.
func binaryUsage(t *testing.T, bin string) *usage {
	t.Helper()
	usageMu.Lock()
	defer usageMu.Unlock()
	if u, ok := usageCache[bin]; ok {
		return u
	}
	out := runHelp(t, bin)
	u := &usage{commands: map[string]bool{}, global: map[string]bool{}, flags: map[string]map[string]bool{}}
	section := ""
	for _, l := range strings.Split(out, "\n") {
		switch strings.TrimSpace(l) {
		case "Commands:", "Flags:":
			section = strings.TrimSpace(l)
			continue
		}
		if m := cmdLineRE.FindStringSubmatch(l); m != nil && section == "Commands:" {
			u.commands[m[1]] = true
		}
		if m := flagLineRE.FindStringSubmatch(l); m != nil && section == "Flags:" {
			u.global[m[1]] = true
		}
	}
	if len(u.commands) == 0 || !u.global["config"] {
		t.Fatalf("%s --help: cannot read the commands and flags in:\n%s", bin, out)
	}
	usageCache[bin] = u
	return u
}

// commandFlags returns the flags `bin CMD --help` lists.
func commandFlags(t *testing.T, bin, command string) map[string]bool {
	t.Helper()
	u := binaryUsage(t, bin)
	usageMu.Lock()
	defer usageMu.Unlock()
	if f, ok := u.flags[command]; ok {
		return f
	}
	f := map[string]bool{}
	for _, l := range strings.Split(runHelp(t, bin, command), "\n") {
		if m := flagLineRE.FindStringSubmatch(l); m != nil {
			f[m[1]] = true
		}
	}
	u.flags[command] = f
	return f
}

func runHelp(t *testing.T, bin string, args ...string) string {
	t.Helper()
	// Build first: the minute is --help's, not the build's (the first
	// caller builds the three binaries, minutes on a busy machine).
	path := filepath.Join(binaries(t), bin)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, append(args, "--help")...)
	cmd.Env = []string{} // --help reads no database and no configuration
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("%s %v --help: %v", bin, args, err)
	}
	return out.String()
}

// invocation is a container's command line read against the binaries.
type invocation struct {
	bin     string
	command string
	flags   map[string]string // the command's flags and their values
	global  map[string]string
}

// checkInvocation checks that argv (command + args of a container or a
// compose service) runs a binary of the image with a global flag set, a
// command and command flags that exist, and returns what it runs.
func checkInvocation(t *testing.T, where string, argv []string) invocation {
	t.Helper()
	d := readDockerfile(t)
	if len(argv) == 0 {
		t.Fatalf("%s: no command", where)
	}
	dir, bin := filepath.Split(argv[0])
	if filepath.Clean(dir) != filepath.Clean(d.destDir) || !slices.Contains(d.binaries, bin) {
		t.Fatalf("%s: command %s is not a binary of the image (%s/{%s})", where, argv[0], filepath.Clean(d.destDir), strings.Join(d.binaries, ","))
	}
	u := binaryUsage(t, bin)
	inv := invocation{bin: bin, flags: map[string]string{}, global: map[string]string{}}
	rest := argv[1:]
	target := inv.global
	known := u.global
	for i := 0; i < len(rest); i++ {
		a := rest[i]
		if !strings.HasPrefix(a, "-") {
			if inv.command != "" {
				t.Errorf("%s: unexpected argument %q after %s %s", where, a, bin, inv.command)
				continue
			}
			if !u.commands[a] {
				t.Errorf("%s: %s has no command %q (it has %v)", where, bin, a, keys(u.commands))
				return inv
			}
			inv.command = a
			target, known = inv.flags, commandFlags(t, bin, a)
			continue
		}
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !known[name] {
			t.Errorf("%s: %s %s has no flag --%s (it has %v)", where, bin, inv.command, name, keys(known))
			continue
		}
		if !hasVal && i+1 < len(rest) && !strings.HasPrefix(rest[i+1], "-") && !boolFlags[name] {
			val = rest[i+1]
			i++
		}
		target[name] = val
	}
	if inv.command == "" {
		t.Errorf("%s: %v names no command of %s", where, argv, bin)
	}
	return inv
}

// boolFlags are the flags that take no value.
var boolFlags = map[string]bool{"status": true, "dry-run": true, "no-model": true, "all": true}

func keys[V any](m map[string]V) []string {
	return slices.Sorted(func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	})
}
