package config_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/lookout-dev/lookout/internal/config"
)

// billionLaughs is nine levels of lists of nine aliases under
// fields.extra: 9^9 = 387,420,489 values once expanded, in 1 KiB.
func billionLaughs() string {
	var b strings.Builder
	b.WriteString(validSource)
	b.WriteString("x0: &a0 [\"lol\"]\n")
	for i := 1; i <= 9; i++ {
		refs := strings.TrimSuffix(strings.Repeat(fmt.Sprintf("*a%d, ", i-1), 9), ", ")
		fmt.Fprintf(&b, "x%d: &a%d [%s]\n", i, i, refs)
	}
	b.WriteString("fields:\n  extra:\n    boom: *a9\n")
	return b.String()
}

// TestBillionLaughs: a document whose aliases expand exponentially is an
// error at the alias that passes the bound, found quickly and with little
// memory, through every reader of YAML: the directory (check, reload),
// a definition (the API, the stored rows) and DefinitionJSON.
func TestBillionLaughs(t *testing.T) {
	doc := billionLaughs()
	want := fmt.Sprintf(" x5[6] alias *a4 makes the document expand to more than %d values", config.MaxDocumentValues)
	readers := map[string]func() error{
		"Load": func() error {
			_, err := config.Load(writeDir(t, validGlobal, doc))
			return err
		},
		"ParseSource": func() error {
			_, err := config.ParseSource("definition", []byte(doc), &config.Global{})
			return err
		},
		"DefinitionJSON": func() error {
			_, err := config.DefinitionJSON([]byte(doc))
			return err
		},
		"lookout.yaml": func() error {
			_, err := config.Load(writeDir(t, validGlobal+strings.TrimPrefix(doc, validSource), validSource))
			return err
		},
	}
	for name, read := range readers {
		t.Run(name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- read() }()
			var err error
			select {
			case err = <-done:
			case <-ctx.Done():
				t.Fatal("still reading the document after 10s")
			}
			runtime.ReadMemStats(&after)
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("error = %v, want one containing %q", err, want)
			}
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 64<<20 {
				t.Errorf("allocated %d MiB reading a 1 KiB document", alloc>>20)
			}
		})
	}
}

// TestAliasesWithinBounds: aliases are still allowed, and an alias of a
// value that contains it is an error, not an endless walk.
func TestAliasesWithinBounds(t *testing.T) {
	t.Parallel()
	src := strings.Replace(validSource, "notify: [log]\n", "notify: &sinks [log]\n", 1) +
		"  - name: also\n    when: record.status == \"closed\"\n    notify: *sinks\n"
	cfg, err := config.Load(writeDir(t, validGlobal, src))
	if err != nil {
		t.Fatalf("an alias within bounds: %v", err)
	}
	if got := cfg.Sources[0].Watches[1].Notify; len(got) != 1 || got[0] != "log" {
		t.Errorf("notify of the aliased watch = %v", got)
	}
	_, err = config.ParseSource("definition", []byte("name: x\nconnector: file\nfields: &f\n  extra:\n    self: *f\n"), &config.Global{})
	if err == nil || !strings.Contains(err.Error(), "definition:5: fields.extra.self alias *f refers to a value that contains it") {
		t.Errorf("cycle: %v", err)
	}
}

// TestDocumentTooLarge: a file over MaxDocumentBytes is refused without
// being read whole, naming the file.
func TestDocumentTooLarge(t *testing.T) {
	t.Parallel()
	big := validSource + "# " + strings.Repeat("x", config.MaxDocumentBytes) + "\n"
	_, err := config.Load(writeDir(t, validGlobal, big))
	want := "sources/tasks.yaml: is larger than 1048576 bytes (1 MiB), the limit of a configuration document"
	if err == nil || err.Error() != want {
		t.Errorf("source file: %v, want %q", err, want)
	}
	_, err = config.ParseSource("definition", []byte(big), &config.Global{})
	if err == nil || !strings.Contains(err.Error(), "definition: is larger than") {
		t.Errorf("definition: %v", err)
	}
	_, err = config.Load(writeDir(t, validGlobal+"# "+strings.Repeat("x", config.MaxDocumentBytes)+"\n", validSource))
	if err == nil || !strings.HasPrefix(err.Error(), "lookout.yaml: is larger than") {
		t.Errorf("lookout.yaml: %v", err)
	}
}

// TestDuplicateKeys: a key written twice in one mapping is an error at
// the second, naming the first's line, in source files (top level,
// nested, in a connector block, in a watch) and in lookout.yaml.
func TestDuplicateKeys(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, global, source, want string }{
		{"every twice", validGlobal, strings.Replace(validSource, "every: 30s\n", "every: 1m\nevery: 2m\n", 1),
			"sources/tasks.yaml:4: every is written twice in one mapping (first at line 3): keep one"},
		{"nested", validGlobal, strings.Replace(validSource, "  burst: 3\n", "  burst: 3\n  burst: 4\n", 1),
			"sources/tasks.yaml:7: rate_limit.burst is written twice in one mapping (first at line 6): keep one"},
		{"connector block", validGlobal, strings.Replace(validSource, "  paths: [data/*.jsonl]\n", "  paths: [data/*.jsonl]\n  paths: [other/*.jsonl]\n", 1),
			"sources/tasks.yaml:9: file.paths is written twice in one mapping (first at line 8): keep one"},
		{"watch", validGlobal, strings.Replace(validSource, "    notify: [log]\n", "    notify: [log]\n    when: \"true\"\n", 1),
			"sources/tasks.yaml:13: watches[0].when is written twice in one mapping (first at line 11): keep one"},
		{"lookout.yaml", validGlobal + "  every: 2m\n", validSource,
			"lookout.yaml:9: defaults.every is written twice in one mapping (first at line 8): keep one"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := config.Load(writeDir(t, tt.global, tt.source))
			if err == nil || err.Error() != tt.want {
				t.Errorf("error:\n got: %v\nwant: %s", err, tt.want)
			}
		})
	}
	// The same through a definition (the API's path), JSON included.
	_, err := config.ParseSource("definition", []byte(`{"name": "x", "connector": "file", "every": "1m", "every": "2m"}`), &config.Global{})
	if err == nil || !strings.Contains(err.Error(), "definition:1: every is written twice in one mapping (first at line 1)") {
		t.Errorf("JSON definition: %v", err)
	}
}

// TestBurstZero: a burst of 0 written in a file lets no request through
// ever; it is an error naming the file, the line and the key, wherever a
// rate limit is written.
func TestBurstZero(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, global, source, want string }{
		{"source", validGlobal, strings.Replace(validSource, "burst: 3", "burst: 0", 1),
			"sources/tasks.yaml:6: rate_limit.burst must be >= 1"},
		{"defaults", validGlobal + "  rate_limit: {per_second: 1, burst: 0}\n", validSource,
			"lookout.yaml:9: defaults.rate_limit.burst must be >= 1"},
		{"host default", validGlobal + "  host_rate_limit:\n    per_second: 1\n    burst: 0\n", validSource,
			"lookout.yaml:11: defaults.host_rate_limit.burst must be >= 1"},
		{"hosts", validGlobal + "hosts:\n  api.example.com: {per_second: 1, burst: 0}\n", validSource,
			"lookout.yaml:10: hosts.api.example.com.burst must be >= 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := config.Load(writeDir(t, tt.global, tt.source))
			if err == nil || err.Error() != tt.want {
				t.Errorf("error:\n got: %v\nwant: %s", err, tt.want)
			}
		})
	}
}

// TestNoSourcesDirectory: a configuration directory of lookout.yaml alone
// (a Kubernetes base, a deployment whose sources are made through the
// API) is valid and declares no source; a directory that does not exist
// is still an error.
func TestNoSourcesDirectory(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "lookout.yaml"), []byte(validGlobal), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(dir)
	if err != nil {
		t.Fatalf("Load without sources/: %v", err)
	}
	if len(cfg.Sources) != 0 || cfg.Global.Sinks["log"] == nil {
		t.Errorf("config = %+v", cfg)
	}
	if _, err := config.Load(filepath.Join(dir, "missing")); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a missing directory: %v, want an error wrapping ErrNotExist", err)
	}
}

// TestNumbersAsWritten: the stored definition keeps a number as written
// (an all-digit id of 32 digits is not rounded through float64), and a
// number field refuses YAML's other spellings, which the definition
// keeps as strings.
func TestNumbersAsWritten(t *testing.T) {
	t.Parallel()
	const id = "12345678901234567890123456789012"
	src := "name: n\nconnector: notion\nnotion:\n  database: " + id + "\n  token: t\nstop:\n  ratio: 0.50\n"
	def, err := config.DefinitionJSON([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"database":` + id, `"ratio":0.50`} {
		if !strings.Contains(string(def), want) {
			t.Errorf("definition %s lacks %s", def, want)
		}
	}
	def, err = config.DefinitionJSON([]byte("a: 0x1F\nb: 007\nc: 1e3\nd: 1_000\n"))
	if err != nil || string(def) != `{"a":"0x1F","b":"007","c":"1e3","d":"1_000"}` {
		t.Errorf("YAML spellings: %s %v", def, err)
	}
	_, err = config.Load(writeDir(t, validGlobal, strings.Replace(validSource, "burst: 3", "burst: 0x10", 1)))
	if want := "sources/tasks.yaml:6: rate_limit.burst must be an integer written as a plain decimal number (e.g. 100 or 0.5), not 0x10"; err == nil || err.Error() != want {
		t.Errorf("hex burst: %v, want %s", err, want)
	}
	for s, plain := range map[string]bool{"0": true, "42": true, "-7": true, "0.25": true, id: true, "1e3": false, "007": false, "-0": false, "+1": false, ".5": false, "1.": false} {
		if config.PlainNumber(s) != plain {
			t.Errorf("PlainNumber(%q) = %v", s, !plain)
		}
	}
}
