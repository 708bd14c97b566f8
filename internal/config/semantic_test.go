package config_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lookout-dev/lookout/internal/config"
)

func load(t *testing.T, global, source string) (*config.Config, error) {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "sources"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "lookout.yaml"), []byte(global), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "sources", "tasks.yaml"), []byte(source), 0o644); err != nil {
		t.Fatal(err)
	}
	return config.Load(dir)
}

const semanticSource = `name: tasks
connector: file
file: {paths: ["x"]}
watches:
  - name: urgent
    ask: Is it urgent?
`

func TestOllamaDefaults(t *testing.T) {
	t.Parallel()
	cfg, err := load(t, "ollama:\n  options: {num_predict: 64}\n", semanticSource)
	if err != nil {
		t.Fatal(err)
	}
	o := cfg.Global.Ollama
	if o.Host != "http://127.0.0.1:11434" || o.Model != "llama3.2" || o.Timeout != time.Minute || o.Concurrency != 2 ||
		o.DigestTTL != time.Minute || o.ReasonMaxChars != 200 {
		t.Errorf("defaults: %+v", o)
	}
	// Options left out default to a reproducible temperature and seed.
	if o.Options["temperature"] != 0 || o.Options["seed"] != 42 || o.Options["num_predict"] != 64 {
		t.Errorf("options: %v", o.Options)
	}
	if *o.RateLimit != (config.RateLimit{PerSecond: 5, Burst: 2}) || *o.HoldBackoff != (config.Backoff{Min: 30 * time.Second, Max: 15 * time.Minute}) {
		t.Errorf("rate limit %+v, hold backoff %+v", *o.RateLimit, *o.HoldBackoff)
	}
	w := cfg.Sources[0].Watches[0]
	if w.OnModelError != "hold" || w.Ask != "Is it urgent?" {
		t.Errorf("watch: %+v", w)
	}
}

func TestSemanticValidation(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, global, source, want string
	}{
		{"host", "ollama: {host: 'localhost:11434'}\n", semanticSource,
			`lookout.yaml:1: ollama.host must be an http:// or https:// URL, not "localhost:11434"`},
		{"concurrency", "ollama: {concurrency: -1}\n", semanticSource, "lookout.yaml:1: ollama.concurrency must be >= 1"},
		{"rate", "ollama: {rate_limit: {per_second: 0}}\n", semanticSource, "lookout.yaml:1: ollama.rate_limit.per_second must be > 0"},
		{"hold backoff", "ollama: {hold_backoff: {min: 1m, max: 10s}}\n", semanticSource,
			"lookout.yaml:1: ollama.hold_backoff.min must not exceed ollama.hold_backoff.max"},
		{"reason length", "ollama: {reason_max_chars: 5}\n", semanticSource,
			"lookout.yaml:1: ollama.reason_max_chars must be between 10 and 2000, not 5"},
		{"lease vs timeout", "ollama: {timeout: 5m}\nevaluator: {lease: 2m}\n", semanticSource,
			"lookout.yaml:2: evaluator.lease (2m0s) must exceed ollama.timeout (5m0s): a claim on a change must outlive a model call"},
		{"watch timeout vs lease", "", semanticSource + "    model: {timeout: 3m}\n",
			"sources/tasks.yaml:7: watches[0].model.timeout (3m0s) must be shorter than evaluator.lease (2m0s): a claim on a change must outlive a model call"},
		{"policy", "", semanticSource + "    on_model_error: retry\n",
			`sources/tasks.yaml:7: watches[0].on_model_error must be hold, notify or skip, not "retry"`},
		{"budget", "", semanticSource + "    budget: {calls_per_day: -1}\n",
			"sources/tasks.yaml:7: watches[0].budget.calls_per_day must not be negative"},
		{"examples without ask", "", "name: tasks\nconnector: file\nfile: {paths: [x]}\nwatches:\n  - name: w\n    examples: [a]\n",
			"sources/tasks.yaml:6: watches[0].examples need an ask: examples steer the model, which only a watch with an ask uses"},
		{"model without ask", "", "name: tasks\nconnector: file\nfile: {paths: [x]}\nwatches:\n  - name: w\n    model: {name: x}\n",
			"sources/tasks.yaml:6: watches[0].model is set but the watch has no ask"},
		{"empty example", "", semanticSource + "    counter_examples: ['  ']\n",
			"sources/tasks.yaml:7: watches[0].counter_examples[0] is empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := load(t, tt.global, tt.source)
			if err == nil {
				t.Fatalf("no error, want %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error:\n%v\nwant it to contain:\n%s", err, tt.want)
			}
		})
	}
}

// summarizeSource is a digest watch whose briefing the model writes;
// %s adds keys to its summarize block.
const summarizeSource = `name: tasks
connector: file
file: {paths: [x]}
watches:
  - name: morning
    digest:
      cron: "0 8 * * *"
      summarize:
%s`

const summarizeGlobal = "sinks:\n  log: {type: log}\n"

func TestSummarizeValidation(t *testing.T) {
	t.Parallel()
	cfg, err := load(t, summarizeGlobal, fmt.Sprintf(summarizeSource, "        ask: \"  What needs me today?\"\n")+"    budget: {calls_per_day: 3}\n")
	if err != nil {
		t.Fatalf("a summarized digest with a budget and no ask: %v", err)
	}
	if sm := cfg.Sources[0].Watches[0].Digest.Summarize; sm.Ask != "What needs me today?" || sm.MaxItems != config.SummarizeMaxItemsDefault || sm.Model != nil {
		t.Errorf("summarize defaults: %+v", sm)
	}
	tests := []struct{ name, keys, want string }{
		{"ask required", "        max_items: 5\n", `sources/tasks.yaml:8: watches[0].digest.summarize.ask is required`},
		{"blank ask", "        ask: '  '\n", `sources/tasks.yaml:9: watches[0].digest.summarize.ask is required`},
		{"max_items", "        ask: x\n        max_items: 101\n", "sources/tasks.yaml:10: watches[0].digest.summarize.max_items must be between 1 and 100, not 101"},
		{"negative max_items", "        ask: x\n        max_items: -1\n", "sources/tasks.yaml:10: watches[0].digest.summarize.max_items must be between 1 and 100, not -1"},
		{"timeout", "        ask: x\n        model: {timeout: -1s}\n", "sources/tasks.yaml:10: watches[0].digest.summarize.model.timeout must be positive"},
		{"unknown key", "        ask: x\n        headline: yes\n", `sources/tasks.yaml:10: watches[0].digest.summarize.headline`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := load(t, summarizeGlobal, fmt.Sprintf(summarizeSource, tt.keys))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error:\n%v\nwant it to contain:\n%s", err, tt.want)
			}
		})
	}
	_, err = load(t, summarizeGlobal, "name: tasks\nconnector: file\nfile: {paths: [x]}\nwatches:\n  - name: w\n    budget: {calls_per_day: 3}\n")
	if want := "sources/tasks.yaml:6: watches[0].budget is set but the watch has no ask and no digest.summarize"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("budget without a model: %v, want %s", err, want)
	}
}
