package modelspec

import (
	"strings"
	"testing"
	"time"

	"github.com/lookout-dev/lookout/internal/config"
)

func testOllama(host string) Config {
	return Config{
		Host: host, Model: "llama3.2", Timeout: 5 * time.Second, Concurrency: 2,
		Options:   map[string]any{"temperature": 0, "seed": 42},
		PerSecond: 1000, Burst: 10, HoldMin: 30 * time.Second, HoldMax: 15 * time.Minute,
		DigestTTL: time.Minute, ReasonMaxChars: 200,
	}
}

func mustQuestion(t *testing.T, o Config, w *config.Watch) *Question {
	t.Helper()
	q, err := NewQuestion(o, w)
	if err != nil {
		t.Fatalf("NewQuestion: %v", err)
	}
	return q
}

func TestPromptVersion(t *testing.T) {
	t.Parallel()
	o := testOllama("http://127.0.0.1:1")
	base := mustQuestion(t, o, &config.Watch{Ask: "Is it urgent?"})
	if again := mustQuestion(t, o, &config.Watch{Ask: "  Is it urgent?\n"}); again.Version != base.Version {
		t.Errorf("same ask gave versions %s and %s", base.Version, again.Version)
	}
	if !strings.HasPrefix(base.Version, "pv-") || len(base.Version) != 19 {
		t.Errorf("version %q is not pv-<16 hex>", base.Version)
	}
	// Anything that changes what the model is asked changes the version.
	o2 := testOllama("http://127.0.0.1:1")
	o2.Options = map[string]any{"temperature": 0, "seed": 7}
	o3 := testOllama("http://127.0.0.1:1")
	o3.ReasonMaxChars = 50
	variants := map[string]*Question{
		"ask":             mustQuestion(t, o, &config.Watch{Ask: "Is it very urgent?"}),
		"examples":        mustQuestion(t, o, &config.Watch{Ask: "Is it urgent?", Examples: []string{"server down"}}),
		"counterexamples": mustQuestion(t, o, &config.Watch{Ask: "Is it urgent?", CounterExamples: []string{"newsletter"}}),
		"global options":  mustQuestion(t, o2, &config.Watch{Ask: "Is it urgent?"}),
		"watch options":   mustQuestion(t, o, &config.Watch{Ask: "Is it urgent?", Model: &config.WatchModel{Options: map[string]any{"num_predict": 64}}}),
		"reason length":   mustQuestion(t, o3, &config.Watch{Ask: "Is it urgent?"}),
	}
	seen := map[string]string{base.Version: "base"}
	for name, q := range variants {
		if prev, dup := seen[q.Version]; dup {
			t.Errorf("%s has the same prompt version as %s", name, prev)
		}
		seen[q.Version] = name
	}
	// The model name is not part of the version: the digest is in the cache key.
	if q := mustQuestion(t, o, &config.Watch{Ask: "Is it urgent?", Model: &config.WatchModel{Name: "qwen2.5"}}); q.Version != base.Version || q.Model != "qwen2.5" {
		t.Errorf("model override: version %s (base %s), model %s", q.Version, base.Version, q.Model)
	}
}

func TestQuestionSettings(t *testing.T) {
	t.Parallel()
	o := testOllama("http://127.0.0.1:1")
	q := mustQuestion(t, o, &config.Watch{Ask: "a", Model: &config.WatchModel{Timeout: time.Second, Options: map[string]any{"num_predict": 64, "seed": 1}}})
	if q.Timeout != time.Second || q.Model != "llama3.2" {
		t.Errorf("timeout %s model %s", q.Timeout, q.Model)
	}
	want := map[string]any{"temperature": float64(0), "seed": float64(1), "num_predict": float64(64)}
	for k, v := range want {
		if q.Options[k] != v {
			t.Errorf("option %s = %#v, want %#v", k, q.Options[k], v)
		}
	}
	if !strings.Contains(q.System(), "The user's condition:\na\n") || !strings.Contains(q.System(), string(q.Schema())) {
		t.Errorf("system message lacks the ask or the schema:\n%s", q.System())
	}
}

func TestQuestionOptionErrors(t *testing.T) {
	t.Parallel()
	o := testOllama("http://127.0.0.1:1")
	for opts, want := range map[*map[string]any]string{
		{"temprature": 0}:        `model option "temprature" is not an Ollama option (known: `,
		{"num_predict": "lots"}:  `model options: option "num_predict" must be of type integer`,
		{"temperature": "cold"}:  `model options: option "temperature" must be of type float32`,
		{"stop": []any{"a", 1}}:  `model options: option "stop" must be of an array of strings`,
		{"use_mmap": "sometime"}: `model options: option "use_mmap" must be of type boolean`,
	} {
		_, err := NewQuestion(o, &config.Watch{Ask: "a", Model: &config.WatchModel{Options: *opts}})
		if err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("options %v: error %v, want prefix %q", *opts, err, want)
		}
	}
}

func TestUserMessage(t *testing.T) {
	t.Parallel()
	rec := map[string]any{"id": "T-1", "title": "Server down", "status": "open", "labels": []any{"ops"},
		"extra": map[string]any{"views": float64(10), "priority": "p1"}}
	prev := map[string]any{"id": "T-1", "title": "Server slow", "status": "new", "labels": []any{},
		"extra": map[string]any{"views": float64(3), "priority": "p2"}}
	in := Input{Source: "tasks", Kind: "updated", ChangedFields: []string{"status", "title", "extra.priority", "extra.views"},
		Record: rec, Previous: prev, Omit: []string{"extra.views"}}
	msg, hash := in.UserMessage()
	for _, want := range []string{
		"Source: tasks\n",
		"Change: the record was updated.\n",
		"Changed fields: status, title, extra.priority\n",
		`"title":"Server down"`,
		"Previous values of the changed fields:\n" + `{"extra.priority":"p2","status":"new","title":"Server slow"}`,
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("message lacks %q:\n%s", want, msg)
		}
	}
	if strings.Contains(msg, "views") {
		t.Errorf("volatile field shown to the model:\n%s", msg)
	}
	// The hash covers the content only: a volatile field does not move it,
	// a real field does.
	rec2 := map[string]any{"id": "T-1", "title": "Server down", "status": "open", "labels": []any{"ops"},
		"extra": map[string]any{"views": float64(99), "priority": "p1"}}
	in2 := in
	in2.Record = rec2
	if _, h2 := in2.UserMessage(); h2 != hash {
		t.Errorf("volatile change moved the input hash")
	}
	in2.Kind = "created"
	in2.Previous = nil
	if _, h3 := in2.UserMessage(); h3 == hash {
		t.Errorf("a different change kind kept the input hash")
	}
	// Long strings are cut.
	long := Input{Source: "s", Kind: "created", Record: map[string]any{"body": strings.Repeat("é", MaxFieldChars+5)}}
	if m, _ := long.UserMessage(); !strings.Contains(m, "…[5 more characters]") || strings.Count(m, "é") != MaxFieldChars {
		t.Errorf("long body not cut to %d characters", MaxFieldChars)
	}
}
