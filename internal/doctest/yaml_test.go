package doctest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// binaries are the built syncer, evaluator and api, and the folder that
// holds them (put first on the shell blocks' PATH).
type binaries struct {
	dir                    string
	syncer, evaluator, api string
}

// buildBinaries builds the three binaries with one `go build` (its
// packages compiled in parallel) into one folder.
func buildBinaries(t *testing.T) binaries {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command("go", "build", "-o", dir+"/", "./cmd/syncer", "./cmd/evaluator", "./cmd/api")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return binaries{dir: dir, syncer: filepath.Join(dir, "syncer"), evaluator: filepath.Join(dir, "evaluator"), api: filepath.Join(dir, "api")}
}

var (
	envRef   = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)
	localBin = regexp.MustCompile(`/usr/local/bin/[\w.-]+`)
	pathHead = regexp.MustCompile(`^#\s*((?:lookout\.yaml|sources/[\w.-]+\.ya?ml))\b`)
)

// testValue is the value a ${NAME} of a YAML example is set to: a URL for
// *_URL, a Standard Webhooks secret for *SECRET, a token otherwise.
func testValue(name string) string {
	switch {
	case strings.HasSuffix(name, "_URL"):
		return "https://hooks.example.com/test"
	case strings.HasSuffix(name, "_DSN"):
		return "postgres://lookout_reader@db.example.com:5432/agents"
	case strings.Contains(name, "SECRET"):
		return "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	}
	return "test-" + strings.ToLower(name)
}

// fragmentHead is what the test puts before a fragment of a source file
// (<!-- fragment: source|watches|watch -->) to make it a whole one: a file
// source named after the file.
func fragmentHead(file string) string {
	name := strings.TrimSuffix(strings.TrimSuffix(path.Base(file), ".yaml"), ".yml")
	return fmt.Sprintf("name: %s\nconnector: file\nfile: {paths: [\"data/*.jsonl\"]}\n", name)
}

// dedent removes the indentation every non-blank line shares.
func dedent(s string) string {
	lines := strings.Split(s, "\n")
	min := -1
	for _, l := range lines {
		if strings.TrimSpace(l) == "" {
			continue
		}
		n := len(l) - len(strings.TrimLeft(l, " "))
		if min < 0 || n < min {
			min = n
		}
	}
	for i, l := range lines {
		if len(l) >= min && min > 0 {
			lines[i] = l[min:]
		}
	}
	return strings.Join(lines, "\n")
}

func indent(s, by string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		if l != "" {
			lines[i] = by + l
		}
	}
	return strings.Join(lines, "\n") + "\n"
}

// yamlFile is the file a YAML block is, in its configuration directory,
// and its content made whole.
func yamlFile(b *block) (string, string, error) {
	body := dedent(b.body)
	var top map[string]any
	if err := yaml.Unmarshal([]byte(body), &top); err != nil {
		var items []any
		if yaml.Unmarshal([]byte(body), &items) != nil {
			return "", "", fmt.Errorf("not YAML: %w", err)
		}
	}
	file, _ := b.marker("file")
	if m := pathHead.FindStringSubmatch(body); file == "" && m != nil {
		file = m[1]
	}
	frag, isFrag := b.marker("fragment")
	if file == "" {
		_, hasName := top["name"]
		_, hasConn := top["connector"]
		switch {
		case isFrag:
			file = "sources/fragment.yaml"
		case hasName && hasConn:
			file = fmt.Sprintf("sources/%v.yaml", top["name"])
		default:
			file = "lookout.yaml"
		}
	}
	if isFrag {
		head := fragmentHead(file)
		switch frag {
		case "source":
			body = head + body
		case "watches":
			body = head + "watches:\n" + indent(body, "  ")
		case "watch":
			body = head + "watches:\n  - name: fragment\n    when: \"true\"\n" + indent(body, "    ")
		default:
			return "", "", fmt.Errorf("<!-- fragment: %s -->: want source, watches or watch", frag)
		}
	} else if strings.HasPrefix(file, "sources/") && top["name"] == nil && top["connector"] == nil {
		return "", "", fmt.Errorf("%s has no name and connector: mark it <!-- fragment: source -->", file)
	}
	return file, body, nil
}

// merge puts the top-level keys of b into a (both YAML documents of
// mappings): a key of both whose values are mappings gets b's keys added.
func merge(a, b string) (string, error) {
	var na, nb yaml.Node
	if err := yaml.Unmarshal([]byte(a), &na); err != nil {
		return "", err
	}
	if err := yaml.Unmarshal([]byte(b), &nb); err != nil {
		return "", err
	}
	if len(na.Content) == 0 {
		return b, nil
	}
	ma, mb := na.Content[0], nb.Content[0]
	if ma.Kind != yaml.MappingNode || mb.Kind != yaml.MappingNode {
		return "", fmt.Errorf("two blocks write one file and one of them is not a mapping")
	}
	mergeMaps(ma, mb)
	var out bytes.Buffer
	enc := yaml.NewEncoder(&out)
	enc.SetIndent(2)
	if err := enc.Encode(&na); err != nil {
		return "", err
	}
	return out.String(), nil
}

func mergeMaps(a, b *yaml.Node) {
next:
	for i := 0; i+1 < len(b.Content); i += 2 {
		k, v := b.Content[i], b.Content[i+1]
		for j := 0; j+1 < len(a.Content); j += 2 {
			if a.Content[j].Value == k.Value {
				if a.Content[j+1].Kind == yaml.MappingNode && v.Kind == yaml.MappingNode {
					mergeMaps(a.Content[j+1], v)
				} else {
					a.Content[j+1] = v
				}
				continue next
			}
		}
		a.Content = append(a.Content, k, v)
	}
}

// runYAML checks every YAML block: alone in a configuration directory, or
// with the blocks of its document that share its <!-- dir: NAME -->, by
// `syncer --config DIR check --offline` and `evaluator --config DIR check`,
// with every ${NAME} the blocks name set to a test value. Blocks marked
// <!-- parse only: REASON --> are parsed.
func runYAML(t *testing.T, ta *tally, bins binaries, blocks []*block) {
	groups := map[string][]*block{}
	var order []string
	for _, b := range blocks {
		key := b.name()
		if d, ok := b.marker("dir"); ok {
			key = b.file + "#" + d
		}
		if _, ok := groups[key]; !ok {
			order = append(order, key)
		}
		groups[key] = append(groups[key], b)
	}
	for _, key := range order {
		group := groups[key]
		for _, b := range group {
			ta.run(t, b, func(t *testing.T) {
				t.Parallel()
				if _, ok := b.marker("parse only"); ok {
					var v any
					if err := yaml.Unmarshal([]byte(b.body), &v); err != nil {
						t.Fatalf("not YAML: %v\n%s", err, b.body)
					}
					return
				}
				checkDir(t, bins, b, group)
			})
		}
	}
}

// checkDir assembles the group's blocks into a directory and checks it.
// A block of a group of several is checked with the whole group.
func checkDir(t *testing.T, bins binaries, self *block, group []*block) {
	files := map[string]string{}
	env := os.Environ()
	for _, b := range group {
		file, body, err := yamlFile(b)
		if err != nil {
			t.Fatalf("%s: %v", b.name(), err)
		}
		if prev, ok := files[file]; ok {
			if body, err = merge(prev, body); err != nil {
				t.Fatalf("%s: %s: %v", b.name(), file, err)
			}
		}
		files[file] = body
		for _, m := range envRef.FindAllStringSubmatch(b.body, -1) {
			env = append(env, m[1]+"="+testValue(m[1]))
		}
	}
	dir := t.TempDir()
	// Commands the examples name under /usr/local/bin (an agent, a
	// desktop notifier) are stubs in the test's folder: check stats them.
	stubs := filepath.Join(dir, "bin")
	for name, body := range files {
		files[name] = localBin.ReplaceAllStringFunc(body, func(p string) string {
			stub := filepath.Join(stubs, filepath.Base(p))
			if err := os.MkdirAll(stubs, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(stub, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			return stub
		})
	}
	if err := os.MkdirAll(filepath.Join(dir, "sources"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, cmd := range [][]string{{bins.syncer, "--config", dir, "check", "--offline"}, {bins.evaluator, "--config", dir, "check"}} {
		c := exec.Command(cmd[0], cmd[1:]...)
		c.Env = append(env, "DATABASE_URL=")
		if out, err := c.CombinedOutput(); err != nil {
			var listing strings.Builder
			for name, body := range files {
				fmt.Fprintf(&listing, "--- %s\n%s", name, numbered(body))
			}
			t.Errorf("%s %s: %v\n%s\nthe directory:\n%s", filepath.Base(cmd[0]), strings.Join(cmd[1:], " "), err, out, listing.String())
		}
	}
}

func numbered(s string) string {
	var b strings.Builder
	for i, l := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		fmt.Fprintf(&b, "%3d  %s\n", i+1, l)
	}
	return b.String()
}
