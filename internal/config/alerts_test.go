package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const alertsGlobal = `sinks:
  log: {type: log}
  ops-hook:
    type: webhook
    url: https://example.com/ops
alerts:
  notify: [log, ops-hook]
  stale_after: 2h
  interval: 30s
`

const alertsSource = `name: tasks
connector: file
file:
  paths: [x.json]
every: 10m
stale_after: 45m
`

func TestAlertsDefaults(t *testing.T) {
	t.Parallel()
	cfg, err := loadDelivery(t, "sinks:\n  log: {type: log}\n", "name: tasks\nconnector: file\nfile:\n  paths: [x.json]\n")
	if err != nil {
		t.Fatal(err)
	}
	a := cfg.Global.Alerts
	if !a.On() || a.Interval != time.Minute || a.StaleAfter != 0 || len(a.Notify) != 1 || a.Notify[0] != "log" {
		t.Errorf("alerts = %+v, want on, 1m, notify [log] (defaults.notify)", a)
	}

	cfg, err = loadDelivery(t, alertsGlobal, alertsSource)
	if err != nil {
		t.Fatal(err)
	}
	a = cfg.Global.Alerts
	if !a.On() || a.Interval != 30*time.Second || a.StaleAfter != 2*time.Hour || strings.Join(a.Notify, ",") != "log,ops-hook" {
		t.Errorf("alerts = %+v", a)
	}
	if got := a.StaleAfterFor(cfg.Sources[0], time.Now()); got != 45*time.Minute {
		t.Errorf("source stale_after = %s, want the source's own 45m", got)
	}

	// Several sinks and no log sink: defaults.notify is empty, and so is
	// alerts.notify: alerts are off rather than sent nowhere.
	cfg, err = loadDelivery(t, "sinks:\n  a: {type: log}\n  b: {type: log}\n", alertsSource)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Global.Alerts.On() {
		t.Errorf("alerts on without a sink: %+v", cfg.Global.Alerts)
	}
	_, err = loadDelivery(t, "sinks:\n  a: {type: log}\n  b: {type: log}\nalerts:\n  enabled: true\n", alertsSource)
	if want := "lookout.yaml:4: alerts.notify is required: alerts.enabled is true and defaults.notify names no sink (declared: a, b)"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("error = %v, want %s", err, want)
	}

	cfg, err = loadDelivery(t, "alerts: {enabled: false}\n", alertsSource)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Global.Alerts.On() {
		t.Errorf("alerts.enabled: false left the watchdog on")
	}
}

func TestStaleAfterFor(t *testing.T) {
	t.Parallel()
	dur := func(d time.Duration) *time.Duration { return &d }
	now := time.Date(2026, 3, 6, 12, 0, 0, 0, time.UTC) // a Friday
	tests := []struct {
		name   string
		alerts Alerts
		src    Source
		want   time.Duration
	}{
		{"every", Alerts{}, Source{Every: 10 * time.Minute, Jitter: dur(time.Minute)}, 33 * time.Minute},
		{"short every gets the floor", Alerts{}, Source{Every: 2 * time.Second, Jitter: dur(0)}, StaleAfterFloor},
		{"adaptive max", Alerts{}, Source{Every: time.Minute, Jitter: dur(0), Adaptive: &Adaptive{Min: time.Minute, Max: time.Hour}}, 3 * time.Hour},
		{"cron weekdays spans the weekend", Alerts{}, Source{Cron: "0 8 * * 1-5", Timezone: "UTC"}, 3 * 72 * time.Hour},
		{"cron hourly", Alerts{}, Source{Cron: "@hourly", Timezone: "UTC"}, 3 * time.Hour},
		{"global", Alerts{StaleAfter: 2 * time.Hour}, Source{Every: 10 * time.Minute}, 2 * time.Hour},
		{"source wins", Alerts{StaleAfter: 2 * time.Hour}, Source{Every: 10 * time.Minute, StaleAfter: 20 * time.Minute}, 20 * time.Minute},
	}
	for _, tt := range tests {
		if got := tt.alerts.StaleAfterFor(&tt.src, now); got != tt.want {
			t.Errorf("%s: StaleAfterFor = %s, want %s", tt.name, got, tt.want)
		}
	}
}

func TestAlertsValidation(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name           string
		global, source string // replacements: "old=>new"
		want           string
	}{
		{name: "unknown sink", global: "[log, ops-hook]=>[log, pager]", want: `lookout.yaml:7: alerts.notify[1] names sink "pager", which lookout.yaml does not declare (declared: log, ops-hook)`},
		{name: "sink twice", global: "[log, ops-hook]=>[log, log]", want: `lookout.yaml:7: alerts.notify[1] names sink "log" twice`},
		{name: "negative interval", global: "interval: 30s=>interval: -1s", want: "lookout.yaml:9: alerts.interval must be at least 1s, not -1s"},
		{name: "tiny interval", global: "interval: 30s=>interval: 10ms", want: "lookout.yaml:9: alerts.interval must be at least 1s, not 10ms"},
		{name: "negative stale_after", global: "stale_after: 2h=>stale_after: -2h", want: "lookout.yaml:8: alerts.stale_after must be positive"},
		{name: "not a duration", global: "stale_after: 2h=>stale_after: often", want: "lookout.yaml:8"},
		{name: "unknown key", global: "interval: 30s=>interval: 30s\n  stuck_after: 1h", want: "lookout.yaml:10: alerts.stuck_after is not a known key"},
		{name: "source stale_after", source: "stale_after: 45m=>stale_after: -45m", want: "sources/tasks.yaml:6: stale_after must be positive"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			global, source := alertsGlobal, alertsSource
			if tt.global != "" {
				old, repl, _ := strings.Cut(tt.global, "=>")
				if !strings.Contains(global, old) {
					t.Fatalf("%q not in the global file", old)
				}
				global = strings.Replace(global, old, repl, 1)
			}
			if tt.source != "" {
				old, repl, _ := strings.Cut(tt.source, "=>")
				if !strings.Contains(source, old) {
					t.Fatalf("%q not in the source file", old)
				}
				source = strings.Replace(source, old, repl, 1)
			}
			_, err := loadDelivery(t, global, source)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Load error:\n got %v\nwant %s", err, tt.want)
			}
		})
	}
}

// loadDelivery loads a configuration directory of global and one source
// file, tasks.yaml. No sink type is linked here: the keys of sink types
// stay unchecked (see delivery_test.go for those).
func loadDelivery(t *testing.T, global, source string) (*Config, error) {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, SourcesDir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, GlobalFile), []byte(global), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, SourcesDir, "tasks.yaml"), []byte(source), 0o644); err != nil {
		t.Fatal(err)
	}
	return Load(dir)
}
