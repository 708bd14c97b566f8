package config_test

import (
	"strings"
	"testing"
	"time"
)

func TestDriftDefaults(t *testing.T) {
	t.Parallel()
	cfg, err := load(t, "sinks:\n  log: {type: log}\nalerts: {notify: [log]}\n", semanticSource)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Global.Ollama.Drift != nil {
		t.Fatalf("drift is on without an ollama.drift block: %+v", cfg.Global.Ollama.Drift)
	}
	cfg, err = load(t, "sinks:\n  log: {type: log}\nalerts: {notify: [log]}\nollama:\n  drift: {embed_model: nomic-embed-text, baseline_week: 2026-11-05}\n", semanticSource)
	if err != nil {
		t.Fatal(err)
	}
	d := cfg.Global.Ollama.Drift
	if d.EmbedModel != "nomic-embed-text" || d.Threshold != 0.1 || d.MinSamples != 20 || d.Batch != 32 || d.Every != time.Minute ||
		d.Timeout != 30*time.Second || len(d.Notify) != 1 || d.Notify[0] != "log" {
		t.Errorf("defaults: %+v", d)
	}
	// 2026-11-05 is a Thursday: its week starts on Monday 2 November.
	if want := time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC); !d.Baseline().Equal(want) {
		t.Errorf("baseline %s, want %s", d.Baseline(), want)
	}
}

func TestDriftValidation(t *testing.T) {
	t.Parallel()
	const sinks = "sinks:\n  log: {type: log}\n"
	tests := []struct{ name, drift, want string }{
		{"embed model", "{threshold: 0.2}", "lookout.yaml:4: ollama.drift.embed_model is required: name the Ollama embedding model (e.g. nomic-embed-text), or remove ollama.drift to turn drift off"},
		{"baseline", "{embed_model: e, baseline_week: 'week 45'}", `lookout.yaml:4: ollama.drift.baseline_week must be a date (YYYY-MM-DD) in the baseline week, not "week 45"`},
		{"threshold", "{embed_model: e, threshold: 0}", "lookout.yaml:4: ollama.drift.threshold must be a cosine distance in (0, 2], not 0"},
		{"threshold high", "{embed_model: e, threshold: 2.5}", "lookout.yaml:4: ollama.drift.threshold must be a cosine distance in (0, 2], not 2.5"},
		{"min samples", "{embed_model: e, min_samples: -3}", "lookout.yaml:4: ollama.drift.min_samples must be >= 1, not -3"},
		{"batch", "{embed_model: e, batch: 1000}", "lookout.yaml:4: ollama.drift.batch must be between 1 and 256, not 1000"},
		{"every", "{embed_model: e, every: 10ms}", "lookout.yaml:4: ollama.drift.every must be at least 1s, not 10ms"},
		{"notify", "{embed_model: e, notify: [pager]}", `lookout.yaml:4: ollama.drift.notify[0] names sink "pager", which lookout.yaml does not declare (declared: log)`},
		{"unknown key", "{embed_model: e, window: 3}", "lookout.yaml:4: ollama.drift.window"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := load(t, sinks+"ollama:\n  drift: "+tt.drift+"\n", semanticSource)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error:\n%v\nwant it to contain:\n%s", err, tt.want)
			}
		})
	}
}
