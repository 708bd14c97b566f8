// Package doctest runs every fenced example of README.md and docs/*.md, by
// kind (docs/development.md, "Docs are tests"): YAML blocks are assembled
// into configuration directories and checked by the built binaries, shell
// blocks run against a fixture of the real api, syncer and evaluator,
// SQL blocks run on the database that fixture filled, JSON blocks are
// validated against docs/openapi.json, the MCP tools or the published
// configuration formats of MCP clients, and Go snippets are vetted. A
// block that cannot run carries `<!-- not run: REASON -->`; an unmarked
// block that does not run fails the test.
package doctest

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
)

// tally counts what ran and what is marked not-run, per document.
type tally struct {
	mu     sync.Mutex
	ran    map[string]int
	marked map[string][]string // file -> "line: reason"
	failed []string
}

func (ta *tally) run(t *testing.T, b *block, f func(t *testing.T)) {
	t.Helper()
	ta.mu.Lock()
	ta.ran[b.file]++
	ta.mu.Unlock()
	t.Run(b.name(), func(t *testing.T) {
		// Cleanups run when the subtest is over, parallel or not.
		t.Cleanup(func() {
			if t.Failed() {
				ta.mu.Lock()
				ta.failed = append(ta.failed, b.name())
				ta.mu.Unlock()
			}
		})
		f(t)
	})
}

func (ta *tally) notRun(b *block, reason string) {
	ta.mu.Lock()
	defer ta.mu.Unlock()
	ta.marked[b.file] = append(ta.marked[b.file], fmt.Sprintf("%d: %s", b.line, reason))
}

// kind says how a block is run: "" when it is marked not-run (reason
// set), or the runner's name; err when the block is neither runnable nor
// marked.
func kind(b *block) (k, reason string, err error) {
	if r, ok := b.marker("not run"); ok {
		if r == "" {
			return "", "", fmt.Errorf("%s: <!-- not run: --> without a reason", b.name())
		}
		return "", r, nil
	}
	if _, ok := b.marker("output of the block above"); ok {
		if b.lang != "text" {
			return "", "", fmt.Errorf("%s: an output block's language is text, not %q", b.name(), b.lang)
		}
		return "output", "", nil
	}
	switch b.lang {
	case "yaml", "sh", "sql", "json", "go", "python":
		return b.lang, "", nil
	case "text", "":
		return "", "", fmt.Errorf("%s: a %q block is neither an output (<!-- output of the block above -->) nor marked <!-- not run: REASON -->", b.name(), b.lang)
	}
	return "", "", fmt.Errorf("%s: no runner for language %q: mark it <!-- not run: REASON -->", b.name(), b.lang)
}

// TestDocs runs every fenced block of README.md and docs/*.md by kind and
// ends with "N examples run, M marked not-run, F failed" per document.
func TestDocs(t *testing.T) {
	t.Parallel()
	ta := &tally{ran: map[string]int{}, marked: map[string][]string{}}
	byKind := map[string][]*block{}
	files := docs(t)
	for _, f := range files {
		bs, err := parse(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range bs {
			k, reason, err := kind(b)
			switch {
			case err != nil:
				t.Error(err)
				ta.failed = append(ta.failed, b.name())
			case k == "":
				ta.notRun(b, reason)
			default:
				byKind[k] = append(byKind[k], b)
			}
		}
	}
	bins := buildBinaries(t)
	// The groups run side by side; t.Run of "examples" returns when all
	// are over.
	t.Run("examples", func(t *testing.T) {
		t.Run("yaml", func(t *testing.T) { t.Parallel(); runYAML(t, ta, bins, byKind["yaml"]) })
		t.Run("json", func(t *testing.T) { t.Parallel(); runJSON(t, ta, byKind["json"]) })
		t.Run("code", func(t *testing.T) { t.Parallel(); runCode(t, ta, append(byKind["go"], byKind["python"]...)) })
		t.Run("help", func(t *testing.T) { t.Parallel(); checkHelp(t, bins, files) })
		t.Run("fixture", func(t *testing.T) {
			t.Parallel()
			fx := newFixture(t, bins)
			runShell(t, ta, fx, byKind["sh"], byKind["output"])
			runSQL(t, ta, fx, byKind["sql"])
			runMCP(t, ta, fx, byKind["json"])
			runPayload(t, ta, fx, byKind["json"])
		})
	})

	var total, marked int
	var b strings.Builder
	for _, f := range files {
		total += ta.ran[f]
		marked += len(ta.marked[f])
		fmt.Fprintf(&b, "%s: %d run, %d marked not-run\n", f, ta.ran[f], len(ta.marked[f]))
		for _, m := range ta.marked[f] {
			fmt.Fprintf(&b, "    %s:%s\n", f, m)
		}
	}
	sort.Strings(ta.failed)
	ta.failed = slices.Compact(ta.failed)
	t.Logf("%d examples run, %d marked not-run, %d failed\n%s", total, marked, len(ta.failed), b.String())
	if len(ta.failed) > 0 {
		t.Errorf("failed: %s", strings.Join(ta.failed, ", "))
	}
}
