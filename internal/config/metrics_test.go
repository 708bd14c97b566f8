package config

import (
	"strings"
	"testing"
)

// metrics.per_source is off unless set; an unknown key of the block is an
// error naming its line.
func TestMetricsPerSource(t *testing.T) {
	t.Parallel()
	src := "name: tasks\nconnector: file\nfile:\n  paths: [x.json]\n"
	cfg, err := loadDelivery(t, "sinks:\n  log: {type: log}\n", src)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Global.Metrics.PerSource {
		t.Error("metrics.per_source is on by default")
	}
	cfg, err = loadDelivery(t, "sinks:\n  log: {type: log}\nmetrics:\n  per_source: true\n", src)
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.Global.Metrics.PerSource {
		t.Error("metrics.per_source: true is not read")
	}
	_, err = loadDelivery(t, "sinks:\n  log: {type: log}\nmetrics:\n  per_sources: true\n", src)
	if err == nil || !strings.Contains(err.Error(), "lookout.yaml:4") || !strings.Contains(err.Error(), "per_sources") {
		t.Errorf("unknown key: err = %v, want lookout.yaml:4 naming per_sources", err)
	}
}
