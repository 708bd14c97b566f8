package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writeDir writes lookout.yaml (when global is not empty) and one source.
func writeDir(t *testing.T, global, source string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, SourcesDir), 0o755); err != nil {
		t.Fatal(err)
	}
	if global != "" {
		if err := os.WriteFile(filepath.Join(dir, GlobalFile), []byte(global), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, SourcesDir, "s.yaml"), []byte(source), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

const fileSource = "name: s\nconnector: file\nfile: {paths: [a.json]}\n"

func TestAcquisitionDefaults(t *testing.T) {
	t.Parallel()
	cfg, err := Load(writeDir(t, "", fileSource))
	if err != nil {
		t.Fatal(err)
	}
	g := cfg.Global
	if g.Syncer.Backoff != (Backoff{Min: 30 * time.Second, Max: time.Hour}) || g.Syncer.MaxWait != 30*time.Second || g.Syncer.RunTimeout != time.Hour {
		t.Errorf("syncer defaults: %+v", g.Syncer)
	}
	if g.Defaults.HostRateLimit != (RateLimit{PerSecond: 2, Burst: 4}) || *g.Defaults.MaxFailures != 20 {
		t.Errorf("defaults: %+v max_failures %d", g.Defaults.HostRateLimit, *g.Defaults.MaxFailures)
	}
	s := cfg.Sources[0]
	if s.Stop == nil || s.Stop.MaxFailures == nil || *s.Stop.MaxFailures != 20 {
		t.Errorf("source stop: %+v", s.Stop)
	}
}

func TestAcquisitionSettings(t *testing.T) {
	t.Parallel()
	global := `
defaults:
  max_failures: 3
  host_rate_limit: {per_second: 0.5}
hosts:
  API.GitHub.com: {per_second: 1, burst: 5}
  "127.0.0.1:8080": {per_second: 10}
syncer:
  backoff: {min: 1s, max: 10s}
  max_wait: 5s
  run_timeout: 10m
  rollup_every: 2m
  tasks_interval: 2s
`
	src := fileSource + "cron: '0 9 * * 1-5'\ntimezone: Europe/Paris\nstop: {max_failures: 0, after: 2030-01-01T00:00:00Z, when: 'run.seen > 0'}\n"
	cfg, err := Load(writeDir(t, global, src))
	if err != nil {
		t.Fatal(err)
	}
	g := cfg.Global
	for host, want := range map[string]RateLimit{
		"api.github.com":     {PerSecond: 1, Burst: 5},
		"API.GITHUB.COM:443": {PerSecond: 1, Burst: 5},
		"127.0.0.1:8080":     {PerSecond: 10, Burst: 1},
		"127.0.0.1:9090":     {PerSecond: 0.5, Burst: 1},
		"example.org":        {PerSecond: 0.5, Burst: 1},
	} {
		if got := g.HostLimit(host); got != want {
			t.Errorf("HostLimit(%s) = %+v, want %+v", host, got, want)
		}
	}
	// Written defaults apply to loopback hosts too; the built-in default
	// does not (one's own machine).
	builtIn, err := Load(writeDir(t, "", fileSource))
	if err != nil {
		t.Fatal(err)
	}
	for host, want := range map[string]RateLimit{
		"127.0.0.1:9090":  {},
		"localhost:80":    {},
		"[::1]:8080":      {},
		"example.org":     HostRateLimitDefault,
		"10.0.0.7:8080":   HostRateLimitDefault,
		"127.example.org": HostRateLimitDefault,
	} {
		if got := builtIn.Global.HostLimit(host); got != want {
			t.Errorf("built-in default: HostLimit(%s) = %+v, want %+v", host, got, want)
		}
	}
	if g.Syncer.Backoff.Max != 10*time.Second || g.Syncer.MaxWait != 5*time.Second || g.Syncer.RunTimeout != 10*time.Minute || g.Syncer.RollupEvery != 2*time.Minute {
		t.Errorf("syncer: %+v", g.Syncer)
	}
	if builtIn.Global.Syncer.RollupEvery != RollupEveryDefault {
		t.Errorf("syncer.rollup_every defaults to %s, want %s", builtIn.Global.Syncer.RollupEvery, RollupEveryDefault)
	}
	for _, bad := range []string{"500ms", "2h", "-1m"} {
		_, err := Load(writeDir(t, "syncer: {rollup_every: "+bad+"}\n", fileSource))
		if err == nil || !strings.Contains(err.Error(), "lookout.yaml:1") || !strings.Contains(err.Error(), "syncer.rollup_every") {
			t.Errorf("rollup_every %s: %v, want an error naming lookout.yaml:1 and syncer.rollup_every", bad, err)
		}
	}
	if g.Syncer.TasksInterval != 2*time.Second || g.Syncer.TasksGrace != TasksGraceDefault {
		t.Errorf("syncer tasks_interval %s, tasks_grace %s", g.Syncer.TasksInterval, g.Syncer.TasksGrace)
	}
	s := cfg.Sources[0]
	if *s.Stop.MaxFailures != 0 || s.Stop.When != "run.seen > 0" || !s.Stop.After.Equal(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("stop: %+v", s.Stop)
	}
	if s.Every != 0 || *s.Jitter != 0 {
		t.Errorf("a cron source has every %s jitter %s", s.Every, *s.Jitter)
	}
}

func TestAcquisitionValidation(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, global, source, want string
	}{
		{"host per_second", "hosts: {api.github.com: {per_second: 0}}\n", fileSource,
			"lookout.yaml:1: hosts.api.github.com.per_second must be > 0"},
		{"host with scheme", "hosts: {'https://api.github.com': {per_second: 1}}\n", fileSource,
			"lookout.yaml:1: hosts.https://api.github.com must be a host name or host:port, without scheme or path"},
		{"max_failures", "defaults: {max_failures: -1}\n", fileSource,
			"lookout.yaml:1: defaults.max_failures must not be negative (0 never disables)"},
		{"backoff", "syncer: {backoff: {min: 1h, max: 1m}}\n", fileSource,
			"lookout.yaml:1: syncer.backoff needs 0 < min <= max"},
		{"tasks_interval", "syncer: {tasks_interval: 100ms}\n", fileSource,
			"lookout.yaml:1: syncer.tasks_interval must be at least 1s, not 100ms"},
		{"tasks_grace", "syncer: {tasks_grace: -1s}\n", fileSource,
			"lookout.yaml:1: syncer.tasks_grace must not be negative"},
		{"cron", "", fileSource + "cron: '61 * * * *'\n",
			`sources/s.yaml:4: cron "61 * * * *": end of range (61) above maximum (59): 61`},
		{"cron tz inside", "", fileSource + "cron: 'CRON_TZ=Asia/Tokyo 0 9 * * *'\n",
			`sources/s.yaml:4: cron "CRON_TZ=Asia/Tokyo 0 9 * * *": set the zone with timezone, not inside the expression`},
		{"adaptive with cron", "", fileSource + "cron: '@daily'\nadaptive: {min: 1m, max: 1h}\n",
			"sources/s.yaml:5: adaptive needs an every schedule, not cron"},
		{"stop.max_failures", "", fileSource + "stop:\n  max_failures: -2\n",
			"sources/s.yaml:5: stop.max_failures must not be negative (0 never disables)"},
		{"stop.after", "", fileSource + "stop: {after: tomorrow}\n",
			`sources/s.yaml:4: stop.after must be a time (RFC 3339, e.g. 2026-12-31T00:00:00Z), not "tomorrow"`},
		{"max_delete_fraction", "", fileSource + "max_delete_fraction: 1.5\n",
			"sources/s.yaml:4: max_delete_fraction must be between 0 and 1 (1 turns the deletion guard off), not 1.5"},
		{"negative max_delete_fraction", "", fileSource + "max_delete_fraction: -0.1\n",
			"sources/s.yaml:4: max_delete_fraction must be between 0 and 1 (1 turns the deletion guard off), not -0.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := Load(writeDir(t, tc.global, tc.source))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v\nwant %s", err, tc.want)
			}
		})
	}
}
