package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/lookout-dev/lookout/internal/config"
)

const taskSource = `name: tasks
connector: file
file:
  paths: [data/*.jsonl]
fields:
  extra:
    priority: item.priority
tasks:
  - name: execute
    when: record.status == "Todo"
    order: [extra.priority desc, created_at]
    lease: 10m
    command: [/bin/true]
`

// A task watch gets its defaults once, at load.
func TestTaskDefaults(t *testing.T) {
	t.Parallel()
	cfg, err := config.Load(writeDir(t, validGlobal, taskSource))
	if err != nil {
		t.Fatal(err)
	}
	tk := cfg.Sources[0].Tasks[0]
	if tk.Take != 1 || tk.Timeout != 5*time.Minute || tk.MaxAttempts != 3 || tk.OnExpiry != "retry" ||
		tk.Backoff.Min != time.Minute || tk.Backoff.Max != time.Hour {
		t.Errorf("defaults: %+v, backoff %+v", tk, tk.Backoff)
	}
	o, err := config.ParseTaskOrder(tk.Order[0])
	if err != nil || o.Field != "extra.priority" || !o.Desc {
		t.Errorf("order %q: %+v, %v", tk.Order[0], o, err)
	}
}

// Every key of a task watch is checked where it is written.
func TestTaskErrors(t *testing.T) {
	t.Parallel()
	replace := func(old, new string) string {
		if !strings.Contains(taskSource, old) {
			t.Fatalf("test bug: %q not in the source", old)
		}
		return strings.Replace(taskSource, old, new, 1)
	}
	for _, tt := range []struct{ name, source, want string }{
		{"no executor", replace("    command: [/bin/true]\n", ""),
			`sources/tasks.yaml:9: tasks[0] needs an executor: command (argv) or webhook (url, secret)`},
		{"two executors", replace("    command: [/bin/true]\n", "    command: [/bin/true]\n    webhook: {url: \"https://agent.example/run\", secret: s}\n"),
			`sources/tasks.yaml:13: tasks[0].command and webhook are exclusive: set one executor`},
		{"no when", replace("    when: record.status == \"Todo\"\n", ""),
			`sources/tasks.yaml:9: tasks[0].when is required: which records are tasks (e.g. record.status == "Todo")`},
		{"unknown field in when", replace(`record.status == "Todo"`, `record.stauts == "Todo"`),
			`sources/tasks.yaml:10: tasks[0].when: unknown field record.stauts (did you mean record.status?)`},
		{"change in when", replace(`record.status == "Todo"`, `change.kind == "created"`),
			`sources/tasks.yaml:10: tasks[0].when: unknown name change (known: record, source)`},
		{"bad order", replace("created_at]", "created_at upward]"),
			`sources/tasks.yaml:11: tasks[0].order[1] must be a record field optionally followed by asc or desc (e.g. "extra.priority desc"), not "created_at upward"`},
		{"unknown order field", replace("extra.priority desc", "extra.prio desc"),
			`sources/tasks.yaml:11: tasks[0].order[0] names an unknown field "extra.prio" (fields.extra declares priority)`},
		{"timeout past the lease", replace("    lease: 10m\n", "    lease: 10m\n    timeout: 10m\n"),
			`sources/tasks.yaml:13: tasks[0].timeout (10m0s) must be shorter than the lease (10m0s): a claim must not expire while its task runs`},
		{"bad on_expiry", replace("    lease: 10m\n", "    lease: 10m\n    on_expiry: ignore\n"),
			`sources/tasks.yaml:13: tasks[0].on_expiry must be retry or fail, not "ignore"`},
		{"webhook without secret", replace("    command: [/bin/true]\n", "    webhook: {url: \"https://agent.example/run\"}\n"),
			`sources/tasks.yaml:13: tasks[0].webhook.secret is required (as ${ENV_VAR}): the agent verifies the task came from lookout`},
		{"unknown key", replace("    lease: 10m\n", "    lease: 10m\n    tkae: 2\n"),
			`sources/tasks.yaml:13: tasks[0].tkae is not a known key (known: backoff, command, lease, max_attempts, name, on_expiry, order, review, take, timeout, webhook, when)`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := config.Load(writeDir(t, validGlobal, tt.source))
			if err == nil || err.Error() != tt.want {
				t.Errorf("error:\n got: %v\nwant: %s", err, tt.want)
			}
		})
	}
}
