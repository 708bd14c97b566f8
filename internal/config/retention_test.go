package config

import (
	"strings"
	"testing"
	"time"
)

func TestRetentionAndStuckAfterDefaults(t *testing.T) {
	t.Parallel()
	cfg, err := Load(writeDir(t, "", fileSource))
	if err != nil {
		t.Fatal(err)
	}
	// Retention is on when lookout.yaml says nothing.
	want := Retention{Changes: 720 * time.Hour, SyncRuns: 720 * time.Hour, Evaluations: 720 * time.Hour,
		Notifications: 2160 * time.Hour, DeliveryAttempts: 2160 * time.Hour, ModelCalls: 2160 * time.Hour,
		TaskRuns: 2160 * time.Hour, InboundEvents: 720 * time.Hour, IdempotencyKeys: 24 * time.Hour,
		DefinitionDeletions: 720 * time.Hour, SignInLinks: 720 * time.Hour, AuditLog: 8760 * time.Hour, ModelBudgets: 2160 * time.Hour,
		Briefings: 2160 * time.Hour, Verdicts: 2160 * time.Hour, SyncRunHours: 720 * time.Hour,
		ActivityHourTotals: 2160 * time.Hour, DriftEmbeddings: 8760 * time.Hour, BatchSize: 5000, Interval: time.Hour}
	if r := cfg.Global.Retention; r != want || !r.Enabled() {
		t.Errorf("retention defaults: %+v, want %+v", r, want)
	}
	// 0s written out keeps a table forever; the others keep their defaults.
	cfg, err = Load(writeDir(t, "retention: {changes: 0s, sync_runs: 0s, evaluations: 0s, notifications: 0s, model_calls: 0s,\n"+
		"  task_runs: 0s, inbound_events: 0s, idempotency_keys: 0s, definition_deletions: 0s, audit_log: 0s,\n"+
		"  model_budgets: 0s, briefings: 0s, verdicts: 0s, drift_embeddings: 0s, sync_run_hours: 0s, activity_hour_totals: 0s,\n"+
		"  sign_in_links: 0s}\n", fileSource))
	if err != nil {
		t.Fatal(err)
	}
	if r := cfg.Global.Retention; r.Enabled() || r.BatchSize != 5000 {
		t.Errorf("retention with every window 0s: %+v, want off", r)
	}
	cfg, err = Load(writeDir(t, "retention: {changes: 0s}\n", fileSource))
	if err != nil {
		t.Fatal(err)
	}
	if r := cfg.Global.Retention; r.Changes != 0 || r.Evaluations != 720*time.Hour || r.Notifications != 2160*time.Hour {
		t.Errorf("retention with changes 0s: %+v", r)
	}
	// delivery_attempts follows notifications unless written out.
	for _, tc := range []struct {
		global string
		want   time.Duration
	}{
		{"retention: {notifications: 720h}\n", 720 * time.Hour},
		{"retention: {notifications: 0s}\n", 0},
		{"retention: {notifications: 720h, delivery_attempts: 48h}\n", 48 * time.Hour},
	} {
		cfg, err = Load(writeDir(t, tc.global, fileSource))
		if err != nil {
			t.Fatal(err)
		}
		if got := cfg.Global.Retention.DeliveryAttempts; got != tc.want {
			t.Errorf("%q: delivery_attempts %s, want %s", tc.global, got, tc.want)
		}
	}
	// The default notifications window stretches to a longer dedupe window.
	cfg, err = Load(writeDir(t, "", fileSource+"watches:\n  - name: w\n    dedupe: 4000h\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Global.Retention.Notifications; got != 4000*time.Hour {
		t.Errorf("default notifications window with a 4000h dedupe window: %s", got)
	}
	if cfg.Global.Defaults.StuckAfter != 30*time.Minute || cfg.Sources[0].StuckAfter != 30*time.Minute {
		t.Errorf("stuck_after defaults: %s, source %s", cfg.Global.Defaults.StuckAfter, cfg.Sources[0].StuckAfter)
	}
}

func TestRetentionAndStuckAfterSettings(t *testing.T) {
	t.Parallel()
	global := `
defaults: {stuck_after: 2h}
retention:
  changes: 720h
  sync_runs: 2160h
  evaluations: 720h
  notifications: 720h
  model_calls: 48h
  task_runs: 720h
  inbound_events: 72h
  idempotency_keys: 48h
  definition_deletions: 168h
  sign_in_links: 24h
  delivery_attempts: 360h
  audit_log: 17520h
  model_budgets: 720h
  briefings: 336h
  verdicts: 4320h
  drift_embeddings: 4000h
  sync_run_hours: 2160h
  activity_hour_totals: 168h
  batch_size: 1000
  interval: 10m
`
	dir := writeDir(t, global, fileSource)
	cfg, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := Retention{Changes: 720 * time.Hour, SyncRuns: 2160 * time.Hour, Evaluations: 720 * time.Hour,
		Notifications: 720 * time.Hour, DeliveryAttempts: 360 * time.Hour, ModelCalls: 48 * time.Hour,
		TaskRuns: 720 * time.Hour, InboundEvents: 72 * time.Hour, IdempotencyKeys: 48 * time.Hour,
		DefinitionDeletions: 168 * time.Hour, SignInLinks: 24 * time.Hour, AuditLog: 17520 * time.Hour, ModelBudgets: 720 * time.Hour,
		Briefings: 336 * time.Hour, Verdicts: 4320 * time.Hour, SyncRunHours: 2160 * time.Hour,
		ActivityHourTotals: 168 * time.Hour, DriftEmbeddings: 4000 * time.Hour, BatchSize: 1000, Interval: 10 * time.Minute}
	if r := cfg.Global.Retention; r != want || !r.Enabled() {
		t.Errorf("retention = %+v, want %+v", r, want)
	}
	if got := cfg.Sources[0].StuckAfter; got != 2*time.Hour {
		t.Errorf("source stuck_after = %s, want defaults.stuck_after 2h", got)
	}
	cfg, err = Load(writeDir(t, global, fileSource+"stuck_after: 45m\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Sources[0].StuckAfter; got != 45*time.Minute {
		t.Errorf("source stuck_after = %s, want 45m", got)
	}
}

func TestRetentionValidation(t *testing.T) {
	t.Parallel()
	windowed := fileSource + "watches:\n  - name: w\n    dedupe: 1000h\n"
	for _, tc := range []struct {
		name, global, source, want string
	}{
		{"negative", "retention: {changes: -1h}\n", fileSource,
			"lookout.yaml:1: retention.changes must not be negative (0 keeps rows forever)"},
		{"model_calls", "retention:\n  model_calls: 1h\n", fileSource,
			"lookout.yaml:2: retention.model_calls (1h0m0s) must be at least 24h: watch budgets count the current day's calls"},
		{"negative task_runs", "retention:\n  task_runs: -1h\n", fileSource,
			"lookout.yaml:2: retention.task_runs must not be negative (0 keeps rows forever)"},
		{"inbound_events", "retention:\n  inbound_events: 1h\n", fileSource,
			"lookout.yaml:2: retention.inbound_events (1h0m0s) must be at least 24h: a provider's redelivery must still find its delivery id"},
		{"idempotency_keys", "retention:\n  idempotency_keys: 23h\n", fileSource,
			"lookout.yaml:2: retention.idempotency_keys (23h0m0s) must be at least 24h: a retry within 24h gets the first answer"},
		{"sync_run_hours", "retention:\n  sync_run_hours: 2h\n", fileSource,
			"lookout.yaml:2: retention.sync_run_hours (2h0m0s) must be at least 24h: runs still roll up into the hours of the last day"},
		{"activity_hour_totals", "retention:\n  activity_hour_totals: 24h\n", fileSource,
			"lookout.yaml:2: retention.activity_hour_totals (24h0m0s) must be at least 48h: the admin overview reads the last 24 hours"},
		{"batch_size", "retention: {batch_size: 200000}\n", fileSource,
			"lookout.yaml:1: retention.batch_size must be between 1 and 100000"},
		{"interval", "retention: {interval: 10ms}\n", fileSource,
			"lookout.yaml:1: retention.interval must be at least 1s"},
		{"dedupe window", "retention:\n  notifications: 720h\n", windowed,
			"lookout.yaml:2: retention.notifications (720h0m0s) must be at least the dedupe window of watch w of sources/s.yaml (1000h0m0s, watches[0].dedupe): a pruned notification no longer suppresses duplicates"},
		{"stuck_after", "", fileSource + "stuck_after: 10ms\n",
			"sources/s.yaml:4: stuck_after must be at least 1s"},
		{"defaults.stuck_after", "defaults: {stuck_after: -1m}\n", fileSource,
			"lookout.yaml:1: defaults.stuck_after must be at least 1s"},
		{"unknown key", "retention: {changs: 1h}\n", fileSource,
			"retention.changs is not a known key"},
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
