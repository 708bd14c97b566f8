package config_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lookout-dev/lookout/internal/config"
	// Connector blocks are checked by the registered connectors: the
	// errors below are the ones the syncer's config check gives.
	_ "github.com/lookout-dev/lookout/internal/connectors/all"
	_ "github.com/lookout-dev/lookout/internal/notify/all"
	"github.com/lookout-dev/lookout/internal/notify/webhook"
)

const validGlobal = `sinks:
  log:
    type: log
  hook:
    type: webhook
    url: http://127.0.0.1:9/hook
defaults:
  every: 1m
`

const validSource = `name: tasks
connector: file
every: 30s
rate_limit:
  per_second: 2
  burst: 3
file:
  paths: [data/*.jsonl]
watches:
  - name: urgent
    when: record.status == "open"
    notify: [log]
`

// writeDir writes a config directory with lookout.yaml and one source file.
func writeDir(t *testing.T, global, source string) string {
	t.Helper()
	dir := t.TempDir()
	if global != "" {
		if err := os.WriteFile(filepath.Join(dir, "lookout.yaml"), []byte(global), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, "sources"), 0o755); err != nil {
		t.Fatal(err)
	}
	if source != "" {
		if err := os.WriteFile(filepath.Join(dir, "sources", "tasks.yaml"), []byte(source), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestLoadValid(t *testing.T) {
	t.Parallel()
	cfg, err := config.Load(writeDir(t, validGlobal, validSource))
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if len(cfg.Sources) != 1 {
		t.Fatalf("sources = %d, want 1", len(cfg.Sources))
	}
	s := cfg.Sources[0]
	if s.Name != "tasks" || s.Every != 30*time.Second || s.RateLimit.PerSecond != 2 || s.RateLimit.Burst != 3 {
		t.Errorf("source = %+v", s)
	}
	if *s.Jitter != 3*time.Second {
		t.Errorf("jitter default = %v, want 10%% of every (3s)", *s.Jitter)
	}
	if s.Timeout != config.TimeoutDefault {
		t.Errorf("timeout = %v, want default %v", s.Timeout, config.TimeoutDefault)
	}
	w := s.Watches[0]
	if w.Dedupe != "version" || w.OnModelError != "hold" || w.Urgency != "medium" {
		t.Errorf("watch defaults = %+v", w)
	}
	if s.Line("watches[0].when") != 11 {
		t.Errorf("line of watches[0].when = %d, want 11", s.Line("watches[0].when"))
	}
	if s.Hash == "" {
		t.Error("config hash is empty")
	}
}

func TestLoadExamples(t *testing.T) {
	t.Parallel()
	if _, err := config.Load("../../examples/config"); err != nil {
		t.Fatalf("the example configuration must load: %v", err)
	}
}

func TestLoadEnvSecrets(t *testing.T) {
	t.Setenv("LOOKOUT_TEST_SECRET", "s3cr3t")
	global := strings.Replace(validGlobal, "url: http://127.0.0.1:9/hook", "url: http://127.0.0.1:9/hook\n    secret: ${LOOKOUT_TEST_SECRET}", 1)
	cfg, err := config.Load(writeDir(t, global, validSource))
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	hook, err := webhook.Decode(cfg.Global.Sinks["hook"])
	if err != nil {
		t.Fatal(err)
	}
	if got := hook.Secret; got != "s3cr3t" {
		t.Errorf("secret = %q, want the environment value", got)
	}
}

// TestLoadErrors changes one thing of a valid configuration and checks the
// exact error: file, line, key and what is wrong.
func TestLoadErrors(t *testing.T) {
	t.Setenv("LOOKOUT_TEST_EMPTY_VAR", "")
	replace := func(old, new string) string {
		if !strings.Contains(validSource, old) {
			t.Fatalf("test bug: %q not in the valid source", old)
		}
		return strings.Replace(validSource, old, new, 1)
	}
	tests := []struct {
		name, global, source, want string
	}{
		{"unknown key", validGlobal, replace("every: 30s", "evry: 30s"),
			`sources/tasks.yaml:3: evry is not a known key (known: adaptive, connector, cron, every, fields, file, follow_redirects, github, http, imap, jitter, max_delete_fraction, name, notion, postgres, rate_limit, rss, stale_after, stop, stuck_after, tasks, timeout, timezone, volatile, watches, web, webhook)`},
		{"unknown nested key", validGlobal, replace("  burst: 3", "  brust: 3"),
			`sources/tasks.yaml:6: rate_limit.brust is not a known key (known: burst, per_second)`},
		{"unknown key in a watch", validGlobal, replace("    notify: [log]", "    notfy: [log]"),
			`sources/tasks.yaml:12: watches[0].notfy is not a known key (known: ask, body, budget, channel, counter_examples, dedupe, digest, examples, model, name, notify, on_model_error, title, urgency, webhook, when)`},
		{"wrong type", validGlobal, replace("per_second: 2", "per_second: fast"),
			`sources/tasks.yaml:5: rate_limit.per_second must be a number, not "fast"`},
		{"wrong duration", validGlobal, replace("every: 30s", "every: often"),
			`sources/tasks.yaml:3: every must be a duration (e.g. 30s, 5m, 1h), not "often"`},
		{"missing name", validGlobal, replace("name: tasks\n", ""),
			`sources/tasks.yaml:1: name is required`},
		{"missing connector", validGlobal, replace("connector: file\n", ""),
			`sources/tasks.yaml:1: connector is required (one of file, github, http, imap, notion, postgres, rss, web)`},
		{"unknown connector", validGlobal, replace("connector: file", "connector: jira"),
			`sources/tasks.yaml:2: connector "jira" is not known (known: file, github, http, imap, notion, postgres, rss, web)`},
		{"connector block missing", validGlobal, replace("connector: file", "connector: http"),
			"sources/tasks.yaml:2: connector \"http\" needs a http: block\nsources/tasks.yaml:7: file block is set but the connector is \"http\""},
		{"bad rate", validGlobal, replace("per_second: 2", "per_second: 0"),
			`sources/tasks.yaml:5: rate_limit.per_second must be > 0`},
		{"unknown sink", validGlobal, replace("notify: [log]", "notify: [pager]"),
			`sources/tasks.yaml:12: watches[0].notify[0] names sink "pager", which lookout.yaml does not declare (declared: hook, log)`},
		{"unset secret", validGlobal, replace("paths: [data/*.jsonl]", `paths: ["${LOOKOUT_TEST_UNSET_VAR}/*.jsonl"]`),
			`sources/tasks.yaml:8: file.paths[0] refers to ${LOOKOUT_TEST_UNSET_VAR}, which is not set in the environment`},
		{"bad dedupe", validGlobal, replace("    notify: [log]", "    notify: [log]\n    dedupe: sometimes"),
			`sources/tasks.yaml:13: watches[0].dedupe must be version, record or a positive duration such as 1h, not "sometimes"`},
		{"sink without type", "sinks:\n  pager: {url: http://x}\n", validSource,
			"lookout.yaml:2: sinks.pager.type is required (one of command, email, log, slack, url, webhook)\nsources/tasks.yaml:12: watches[0].notify[0] names sink \"log\", which lookout.yaml does not declare (declared: pager)"},
		{"yaml syntax", validGlobal, replace("watches:", "watches: ["),
			`sources/tasks.yaml:9: did not find expected node content`},
		{"empty file", validGlobal, " ",
			`sources/tasks.yaml: file is empty`},
		{"negative timeout", validGlobal, replace("every: 30s", "every: 30s\ntimeout: -5s"),
			`sources/tasks.yaml:4: timeout must be positive`},
		{"negative defaults.timeout", validGlobal + "  timeout: -5s\n", validSource,
			`lookout.yaml:9: defaults.timeout must be positive`},
		{"negative defaults.every", strings.Replace(validGlobal, "every: 1m", "every: -1m", 1), replace("every: 30s\n", ""),
			`lookout.yaml:8: defaults.every must be positive`},
		{"negative defaults.jitter", validGlobal + "  jitter: -1s\n", validSource,
			`lookout.yaml:9: defaults.jitter must not be negative`},
		{"empty secret", validGlobal, replace("paths: [data/*.jsonl]", `paths: ["${LOOKOUT_TEST_EMPTY_VAR}/*.jsonl"]`),
			`sources/tasks.yaml:8: file.paths[0] refers to ${LOOKOUT_TEST_EMPTY_VAR}, which is set but empty`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := config.Load(writeDir(t, tt.global, tt.source))
			if err == nil {
				t.Fatalf("Load succeeded, want error %q", tt.want)
			}
			if err.Error() != tt.want {
				t.Errorf("error:\n got: %s\nwant: %s", err, tt.want)
			}
		})
	}
}

func TestDuplicateSourceNames(t *testing.T) {
	t.Parallel()
	dir := writeDir(t, validGlobal, validSource)
	if err := os.WriteFile(filepath.Join(dir, "sources", "copy.yaml"), []byte(validSource), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := config.Load(dir)
	want := `sources/tasks.yaml:1: name "tasks" is already used by sources/copy.yaml`
	if err == nil || err.Error() != want {
		t.Errorf("error = %v, want %s", err, want)
	}
}

// TestLoadListsEveryProblem: a file with several problems of every kind —
// values of the wrong type, unknown keys, invalid values, expressions —
// gets all of them listed, in line order, each with its key; a value that
// does not decode is not reported a second time by validation.
func TestLoadListsEveryProblem(t *testing.T) {
	t.Parallel()
	global := `sinks:
  log:
    type: log
    max_attempts: [3]
defaults:
  every: -1m
  notify: log
delivery:
  batch_size: lots

`
	source := `name: [tasks]
connector: file
every: [1m]
timeout: -5s
rate_limit:
  per_second: fast
  burst: -2
file:
  paths: data/*.jsonl
watches:
  - name: urgent
    when: record.stauts == "open"
    dedupe: sometimes
    urgncy: high
  - name: urgent
    notify: [log, log]
`
	_, err := config.Load(writeDir(t, global, source))
	want := strings.Join([]string{
		`lookout.yaml:4: sinks.log.max_attempts must be an integer, not a list`,
		`lookout.yaml:6: defaults.every must be positive`,
		`lookout.yaml:7: defaults.notify must be a list, not "log"`,
		`lookout.yaml:9: delivery.batch_size must be an integer, not "lots"`,
		`sources/tasks.yaml:1: name must be a string, not a list`,
		`sources/tasks.yaml:3: every must be a duration (e.g. 30s, 5m, 1h), not a list`,
		`sources/tasks.yaml:4: timeout must be positive`,
		`sources/tasks.yaml:6: rate_limit.per_second must be a number, not "fast"`,
		`sources/tasks.yaml:7: rate_limit.burst must be >= 1`,
		`sources/tasks.yaml:9: file.paths must be a list, not "data/*.jsonl"`,
		`sources/tasks.yaml:12: watches[0].when: unknown field record.stauts (did you mean record.status?)`,
		`sources/tasks.yaml:13: watches[0].dedupe must be version, record or a positive duration such as 1h, not "sometimes"`,
		`sources/tasks.yaml:14: watches[0].urgncy is not a known key (known: ask, body, budget, channel, counter_examples, dedupe, digest, examples, model, name, notify, on_model_error, title, urgency, webhook, when)`,
		`sources/tasks.yaml:15: watches[1].name "urgent" is used by another watch of this source`,
		`sources/tasks.yaml:16: watches[1].notify[1] names sink "log" twice`,
	}, "\n")
	if err == nil || err.Error() != want {
		t.Errorf("error:\n got: %v\nwant: %s", err, want)
	}
}

// A watch's own channel is for watches made through the API (its URL is
// stored sealed): a source file that declares one is refused, naming the
// key.
func TestFileWatchChannelRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "sources"), 0o755); err != nil {
		t.Fatal(err)
	}
	src := "name: a\nconnector: file\nevery: 1h\nfile: {paths: [x.jsonl]}\nwatches:\n  - name: w\n    channel: {url: \"ntfy://ntfy.sh/t\", secret: whatever}\n"
	if err := os.WriteFile(filepath.Join(dir, "sources", "a.yaml"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := config.Load(dir)
	if err == nil || !strings.Contains(err.Error(), "sources/a.yaml:7: watches[0].channel is for watches created through the API (lookout seals its URL); in a file, declare a url sink") {
		t.Errorf("Load: %v", err)
	}
}

// A watch's own webhook is for watches made through the API: a source
// file that declares one is refused, naming the key.
func TestFileWatchWebhookRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "sources"), 0o755); err != nil {
		t.Fatal(err)
	}
	src := "name: a\nconnector: file\nevery: 1h\nfile: {paths: [x.jsonl]}\nwatches:\n  - name: w\n    webhook: {url: https://hooks.example.com/x, secret: whatever}\n"
	if err := os.WriteFile(filepath.Join(dir, "sources", "a.yaml"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := config.Load(dir)
	if err == nil || !strings.Contains(err.Error(), "sources/a.yaml:7: watches[0].webhook is for watches created through the API") {
		t.Errorf("Load: %v", err)
	}
}

// The files of sources/ are parsed on every core, yet the result is a
// parse one file after the other: the problems in file order, a
// duplicate name against the file before it, the sources sorted.
func TestLoadOfManyFilesIsInFileOrder(t *testing.T) {
	t.Parallel()
	dir := writeDir(t, validGlobal, "")
	var want []string
	for i := range 300 {
		name := fmt.Sprintf("s%03d", i)
		every := "30s"
		switch {
		case i%37 == 5:
			every = "soon"
			want = append(want, fmt.Sprintf(`sources/%s.yaml:3: every must be a duration (e.g. 30s, 5m, 1h), not "soon"`, name))
		case i == 250:
			name = "s100" // s100.yaml comes first
			want = append(want, `sources/s250.yaml:1: name "s100" is already used by sources/s100.yaml`)
		}
		y := strings.ReplaceAll(strings.Replace(validSource, "every: 30s", "every: "+every, 1), "name: tasks", "name: "+name)
		if err := os.WriteFile(filepath.Join(dir, "sources", fmt.Sprintf("s%03d.yaml", i)), []byte(y), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	_, err := config.Load(dir)
	if err == nil {
		t.Fatal("loaded a directory with problems")
	}
	if got := strings.Split(err.Error(), "\n"); !slices.Equal(got, want) {
		t.Errorf("problems:\n got: %q\nwant: %q", got, want)
	}
}
