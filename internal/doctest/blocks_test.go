package doctest

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// root is the module root, two levels above this package.
const root = "../.."

// block is one fenced block of a document: where it is, its info string
// and the HTML comment markers on the lines just above its fence.
type block struct {
	file    string // relative to the module root: README.md, docs/api.md
	line    int    // the line of the opening fence, from 1
	info    string // the info string: "sh", "yaml", "text", ...
	lang    string // the info string's first word
	body    string
	markers []marker
	prev    *block // the block before it in the same file
}

// name is the block's subtest name and where errors point: docs/api.md:136.
func (b *block) name() string { return fmt.Sprintf("%s:%d", b.file, b.line) }

// marker is one `<!-- key: value -->` comment above a block (value empty for
// `<!-- output of the block above -->`).
type marker struct {
	key, value string
}

// Markers a block may carry, one comment each, on the lines just above its
// fence (blank lines between them and the fence are not allowed):
//
//	<!-- not run: REASON -->            the block is not run, and why
//	<!-- output of the block above -->  a text block: what the previous block prints, compared loosely
//	<!-- parse only: REASON -->         parsed (YAML, JSON) but not checked further, and why
//	<!-- file: PATH -->                 a YAML block's file in a config directory (sources/x.yaml, lookout.yaml)
//	<!-- dir: NAME -->                  YAML blocks of one document with the same NAME form one config directory
//	<!-- fragment: source|watches|watch --> a YAML block that is part of a source file (see yamlFile)
//	<!-- openapi: SCHEMA -->             a JSON example of docs/openapi.json's components.schemas.SCHEMA
//	<!-- mcp: call|answer|input schema TOOL --> an MCP tool call, its answer or its input schema
//	<!-- client: NAME -->               an MCP client's configuration (see clients)
//	<!-- payload: webhook -->           a webhook sink's body, compared loosely with one the fixture's receiver got
//	<!-- excerpt: PATH -->              a Go block whose every line is a line of PATH
var markerRE = regexp.MustCompile(`^<!--\s*([a-z ]+?)(?::\s*(.*?))?\s*-->$`)

var knownMarkers = []string{"not run", "output of the block above", "parse only", "file", "dir", "fragment", "openapi", "mcp", "client", "excerpt", "payload"}

func (b *block) marker(key string) (string, bool) {
	for _, m := range b.markers {
		if m.key == key {
			return m.value, true
		}
	}
	return "", false
}

// docs lists README.md and docs/*.md.
func docs(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	out := []string{"README.md"}
	for _, f := range files {
		out = append(out, filepath.ToSlash(strings.TrimPrefix(f, root+"/")))
	}
	return out
}

var fenceRE = regexp.MustCompile("^( *)(```+|~~~+)(.*)$")

// parse reads the fenced blocks of one document. A fence indented inside
// a list item counts; its indentation is removed from the body.
func parse(file string) ([]*block, error) {
	return parseFile(file, filepath.Join(root, file))
}

// parseFile is parse of the document at path, named file.
func parseFile(file, path string) ([]*block, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", file, err)
	}
	var out []*block
	for i := 0; i < len(lines); i++ {
		m := fenceRE.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		indent, fence, info := m[1], m[2], strings.TrimSpace(m[3])
		b := &block{file: file, line: i + 1, info: info}
		if f := strings.Fields(info); len(f) > 0 {
			b.lang = f[0]
		}
		var body []string
		j := i + 1
		for ; j < len(lines); j++ {
			if strings.TrimSpace(lines[j]) == fence {
				break
			}
			body = append(body, strings.TrimPrefix(lines[j], indent))
		}
		if j == len(lines) {
			return nil, fmt.Errorf("%s:%d: the fenced block is not closed", file, i+1)
		}
		b.body = strings.Join(body, "\n") + "\n"
		for k := i - 1; k >= 0; k-- {
			c := strings.TrimSpace(lines[k])
			mm := markerRE.FindStringSubmatch(c)
			if mm == nil {
				break
			}
			if !slices.Contains(knownMarkers, mm[1]) {
				return nil, fmt.Errorf("%s:%d: unknown marker %q (known: %s)", file, k+1, c, strings.Join(knownMarkers, ", "))
			}
			b.markers = append([]marker{{mm[1], mm[2]}}, b.markers...)
		}
		if len(out) > 0 {
			b.prev = out[len(out)-1]
		}
		out = append(out, b)
		i = j
	}
	return out, nil
}

func TestParse(t *testing.T) {
	dir := t.TempDir()
	doc := "# x\n\n<!-- not run: needs a real Slack workspace -->\n```sh\ncurl x\n```\n\n" +
		"<!-- output of the block above -->\n```text\nok\n```\n\n1. step\n   ```yaml\n   a: 1\n   ```\n"
	if err := os.WriteFile(filepath.Join(dir, "x.md"), []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	bs, err := parseFile("x.md", filepath.Join(dir, "x.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(bs) != 3 {
		t.Fatalf("%d blocks, want 3", len(bs))
	}
	if r, ok := bs[0].marker("not run"); !ok || r != "needs a real Slack workspace" || bs[0].lang != "sh" || bs[0].line != 4 || bs[0].body != "curl x\n" {
		t.Errorf("block 1: %+v", bs[0])
	}
	if _, ok := bs[1].marker("output of the block above"); !ok || bs[1].prev != bs[0] || bs[1].lang != "text" {
		t.Errorf("block 2: %+v", bs[1])
	}
	if bs[2].lang != "yaml" || bs[2].body != "a: 1\n" || len(bs[2].markers) != 0 {
		t.Errorf("block 3: %+v", bs[2])
	}
	if err := os.WriteFile(filepath.Join(dir, "x.md"), []byte("<!-- not ran: typo -->\n```sh\nx\n```\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := parseFile("x.md", filepath.Join(dir, "x.md")); err == nil || !strings.Contains(err.Error(), `:1: unknown marker "<!-- not ran: typo -->"`) {
		t.Errorf("a misspelt marker: %v", err)
	}
}
