package config

import (
	"strings"
	"testing"
	"time"
)

const webhookSource = `name: s
connector: github
github: {repo: octo/hello}
webhook:
  provider: github
  secret: ${LOOKOUT_TEST_HOOK_SECRET}
`

func TestWebhookDefaults(t *testing.T) {
	t.Setenv("LOOKOUT_TEST_HOOK_SECRET", "It's a Secret to Everybody")
	cfg, err := Load(writeDir(t, "", webhookSource))
	if err != nil {
		t.Fatal(err)
	}
	s := cfg.Sources[0]
	w := s.Webhook
	if w.Secret != "It's a Secret to Everybody" || w.ReconcileEvery != 6*time.Hour || *w.SilenceAlert != 24*time.Hour ||
		w.MaxBody != 5<<20 || strings.Join(w.Events, ",") != "issues,pull_request,issue_comment" {
		t.Errorf("webhook defaults: %+v", w)
	}
	if s.Every != 6*time.Hour || *s.Jitter != 36*time.Minute {
		t.Errorf("a webhook source polls every reconcile_every: every %s, jitter %s", s.Every, *s.Jitter)
	}
	if !w.Maps("issues") || w.Maps("push") {
		t.Errorf("Maps: issues %t, push %t", w.Maps("issues"), w.Maps("push"))
	}
	got, err := ParseWebhook("source s", s.Definition)
	if err != nil || got.Secret != w.Secret || got.ReconcileEvery != w.ReconcileEvery || got.Provider != "github" {
		t.Errorf("ParseWebhook of the stored definition = %+v, %v", got, err)
	}
	if got, err := ParseWebhook("source t", []byte(`{"name": "t", "connector": "file"}`)); got != nil || err != nil {
		t.Errorf("ParseWebhook without a block = %+v, %v", got, err)
	}
}

func TestWebhookValidation(t *testing.T) {
	t.Setenv("LOOKOUT_TEST_HOOK_SECRET", "s3cret")
	t.Setenv("LOOKOUT_TEST_WHSEC", "whsec_not base64!")
	tests := []struct {
		name, block, extra, want string
	}{
		{"provider missing", "  secret: x\n", "", "sources/s.yaml:4: webhook.provider is required (one of github, standard, hmac)"},
		{"provider unknown", "  provider: gitlab\n  secret: x\n", "", `sources/s.yaml:5: webhook.provider must be one of github, standard, hmac, not "gitlab"`},
		{"secret missing", "  provider: github\n", "", "sources/s.yaml:4: webhook.secret is required (write it as ${ENV_VAR})"},
		{"secret unset", "  provider: github\n  secret: ${LOOKOUT_TEST_UNSET_SECRET}\n", "", "sources/s.yaml:6: webhook.secret refers to ${LOOKOUT_TEST_UNSET_SECRET}, which is not set in the environment"},
		{"bad whsec", "  provider: standard\n  secret: ${LOOKOUT_TEST_WHSEC}\n", "", "sources/s.yaml:6: webhook.secret starts with whsec_ but the rest is not a standard base64 key"},
		{"header on github", "  provider: github\n  secret: x\n  header: X-Sig\n", "", "sources/s.yaml:7: webhook.header is for the hmac provider only (github signs with its own headers)"},
		{"tolerance on hmac", "  provider: hmac\n  secret: x\n  tolerance: 1m\n", "", "sources/s.yaml:7: webhook.tolerance is for the standard provider only"},
		{"github event", "  provider: github\n  secret: x\n  events: [issues, push]\n", "", `sources/s.yaml:7: webhook.events[1] "push" is not an event a github webhook maps (issues, pull_request, issue_comment)`},
		{"event twice", "  provider: standard\n  secret: x\n  events: [a, a]\n", "", `sources/s.yaml:7: webhook.events[1] names "a" twice`},
		{"reconcile too fast", "  provider: github\n  secret: x\n  reconcile_every: 10s\n", "", "sources/s.yaml:7: webhook.reconcile_every must be at least 1m"},
		{"silence negative", "  provider: github\n  secret: x\n  silence_alert: -1h\n", "", "sources/s.yaml:7: webhook.silence_alert must be positive (0 turns the alert off)"},
		{"max body", "  provider: github\n  secret: x\n  max_body: 100000000\n", "", "sources/s.yaml:7: webhook.max_body must be between 1 and 26214400 bytes, not 100000000"},
		{"unknown key", "  provider: github\n  secret: x\n  secrets: y\n", "", "sources/s.yaml:7: webhook.secrets is not a known key"},
		{"every and webhook", "  provider: github\n  secret: x\n", "every: 1m\n", "every is replaced by webhook.reconcile_every on a webhook source: set one schedule"},
		{"cron and webhook", "  provider: github\n  secret: x\n", "cron: '0 * * * *'\n", "cron is replaced by webhook.reconcile_every on a webhook source: set one schedule"},
		{"github provider, file connector", "  provider: github\n  secret: x\n", "", `webhook.provider github needs connector: github (its events are mapped by the github connector), not "file"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := "name: s\nconnector: github\ngithub: {repo: octo/hello}\nwebhook:\n" + tt.block + tt.extra
			if strings.HasPrefix(tt.name, "github provider") {
				src = "name: s\nconnector: file\nfile: {paths: [a.json]}\nwebhook:\n" + tt.block
			}
			_, err := Load(writeDir(t, "", src))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error:\n got: %v\nwant: %s", err, tt.want)
			}
		})
	}
}
