package config_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lookout-dev/lookout/internal/config"
	_ "github.com/lookout-dev/lookout/internal/notify/all"
	"github.com/lookout-dev/lookout/internal/notify/email"
	"github.com/lookout-dev/lookout/internal/notify/webhook"
)

const deliveryGlobal = `sinks:
  hook:
    type: webhook
    url: https://example.com/hook
    secret: s3cret
  mail:
    type: email
    smtp:
      host: smtp.example.com
      username: lookout
      password: pw
      from: lookout@example.com
      to: [ops@example.com]
  script:
    type: command
    command: [/bin/true]
delivery:
  lease: 1m
`

const deliverySource = `name: tasks
connector: file
file:
  paths: [x.json]
watches:
  - name: w
    notify: [hook, mail]
    digest:
      cron: "0 8 * * 1-5"
      timezone: Europe/Paris
`

// loadDelivery loads a configuration directory of global and one source
// file, tasks.yaml, with every sink type linked.
func loadDelivery(t *testing.T, global, source string) (*config.Config, error) {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, config.SourcesDir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, config.GlobalFile), []byte(global), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, config.SourcesDir, "tasks.yaml"), []byte(source), 0o644); err != nil {
		t.Fatal(err)
	}
	return config.Load(dir)
}

func TestDeliveryDefaults(t *testing.T) {
	t.Parallel()
	cfg, err := loadDelivery(t, deliveryGlobal, deliverySource)
	if err != nil {
		t.Fatal(err)
	}
	g := cfg.Global
	if d := g.Delivery; d.Lease != time.Minute || d.BatchSize != 100 || d.PollInterval != time.Second || d.RetryMin != time.Second || d.RetryMax != time.Hour {
		t.Errorf("delivery = %+v", d)
	}
	hook := g.Sinks["hook"]
	if hook.Timeout != 10*time.Second || hook.MaxAttempts != 8 || hook.Concurrency != 4 {
		t.Errorf("hook = %+v", hook)
	}
	if st, err := webhook.Decode(hook); err != nil || st.Signature != "standard" {
		t.Errorf("webhook settings = %+v, %v", st, err)
	}
	if st, err := email.Decode(g.Sinks["mail"]); err != nil || st.SMTP.Port != 587 || st.SMTP.StartTLS != "required" {
		t.Errorf("smtp = %+v, %v", st.SMTP, err)
	}
	if dg := cfg.Sources[0].Watches[0].Digest; dg.Timezone != "Europe/Paris" {
		t.Errorf("digest = %+v", dg)
	}
}

func TestDeliveryValidation(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name           string
		global, source string // replacements: "old=>new"
		want           string
	}{
		{name: "webhook without url", global: "    url: https://example.com/hook\n=>", want: "lookout.yaml:2: sinks.hook.url is required for a webhook sink"},
		{name: "url scheme", global: "https://example.com/hook=>ftp://example.com", want: "lookout.yaml:4: sinks.hook.url must start with http:// or https://"},
		{name: "secret on a command", global: "    command: [/bin/true]=>    command: [/bin/true]\n    secret: x", want: "lookout.yaml:17: sinks.script.secret is not used by a command sink (only by webhook)"},
		{name: "smtp without host", global: "      host: smtp.example.com\n=>", want: "lookout.yaml:8: sinks.mail.smtp.host is required"},
		{name: "starttls value", global: "      username: lookout=>      starttls: maybe\n      username: lookout", want: `lookout.yaml:10: sinks.mail.smtp.starttls must be required, optional or none, not "maybe"`},
		{name: "password in clear", global: "      username: lookout=>      starttls: none\n      username: lookout", want: "lookout.yaml:10: sinks.mail.smtp.starttls must be required when smtp.username is set: credentials never travel in clear text"},
		{name: "concurrency", global: "    secret: s3cret=>    secret: s3cret\n    concurrency: 1000", want: "lookout.yaml:6: sinks.hook.concurrency must be between 1 and 256"},
		{name: "lease below a timeout", global: "    secret: s3cret=>    secret: s3cret\n    timeout: 2m", want: "lookout.yaml:19: delivery.lease (1m0s) must exceed sinks.hook.timeout (2m0s): a delivery may not outlive its claim"},
		{name: "signature scheme", global: "    secret: s3cret=>    secret: s3cret\n    signature: v2", want: `lookout.yaml:6: sinks.hook.signature must be standard, legacy or both, not "v2"`},
		{name: "signature on a command", global: "    command: [/bin/true]=>    command: [/bin/true]\n    signature: both", want: "lookout.yaml:17: sinks.script.signature is not used by a command sink (only by webhook)"},
		{name: "whsec secret not base64", global: "secret: s3cret=>secret: whsec_not*base64", want: "lookout.yaml:5: sinks.hook.secret starts with whsec_ but the rest is not a standard base64 key"},
		{name: "whsec secret empty", global: "secret: s3cret=>secret: whsec_", want: "lookout.yaml:5: sinks.hook.secret starts with whsec_ but the rest is not a standard base64 key"},
		{name: "retry bounds", global: "  lease: 1m=>  lease: 1m\n  retry_min: 1h\n  retry_max: 1m", want: "lookout.yaml:20: delivery.retry_max must not be less than delivery.retry_min (1h0m0s)"},
		{name: "unknown delivery key", global: "  lease: 1m=>  lease: 1m\n  workers: 3", want: "lookout.yaml:19: delivery.workers is not a known key"},
		{name: "digest cron", source: `"0 8 * * 1-5"=>"every morning"`, want: `sources/tasks.yaml:9: watches[0].digest.cron "every morning" is not a cron expression`},
		{name: "digest timezone", source: "Europe/Paris=>Mars/Olympus", want: `sources/tasks.yaml:10: watches[0].digest.timezone "Mars/Olympus" is not a known time zone`},
		{name: "digest without cron", source: `      cron: "0 8 * * 1-5"` + "\n=>", want: `sources/tasks.yaml:8: watches[0].digest.cron is required`},
		{name: "sink twice", source: "[hook, mail]=>[hook, hook]", want: `sources/tasks.yaml:7: watches[0].notify[1] names sink "hook" twice`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			global, source := deliveryGlobal, deliverySource
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
