package config

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/lookout-dev/lookout/internal/signature"
)

// Webhook providers (webhook.provider).
const (
	// WebhookGitHub verifies X-Hub-Signature-256 and reads
	// X-GitHub-Delivery and X-GitHub-Event.
	WebhookGitHub = "github"
	// WebhookStandard verifies Standard Webhooks signatures
	// (webhook-id, webhook-timestamp, webhook-signature).
	WebhookStandard = "standard"
	// WebhookHMAC verifies a configured header holding the hex
	// HMAC-SHA256 of the raw body.
	WebhookHMAC = "hmac"
)

// WebhookProviders lists the providers, in the order errors name them.
var WebhookProviders = []string{WebhookGitHub, WebhookStandard, WebhookHMAC}

// GitHubWebhookEvents are the GitHub event types a github webhook maps
// (ping is answered and stored as ignored).
var GitHubWebhookEvents = []string{"issues", "pull_request", "issue_comment"}

// Defaults of the webhook block.
const (
	ReconcileEveryDefault = 6 * time.Hour
	SilenceAlertDefault   = 24 * time.Hour
	WebhookMaxBodyDefault = 5 << 20
	// WebhookMaxBodyLimit is the largest max_body (GitHub caps its
	// payloads at 25 MB).
	WebhookMaxBodyLimit = 25 << 20
	// HMACHeaderDefault is the signature header of the hmac provider.
	HMACHeaderDefault = "X-Signature-256"
)

// Webhook is a source's webhook block: deliveries POSTed to the api's
// /ingest/{source} are verified, stored in inbound_events and mirrored by
// the syncer through the source's connector and mapping, and the source's
// poll becomes a reconciliation every reconcile_every (docs/webhooks.md).
type Webhook struct {
	// Provider is how deliveries are signed and read: github, standard or
	// hmac. Required.
	Provider string `yaml:"provider"`
	// Secret is the signing secret, written as ${ENV_VAR}: GitHub's
	// webhook secret, a Standard Webhooks "whsec_<base64>" secret, or the
	// HMAC key of the hmac provider. Required.
	Secret string `yaml:"secret"`
	// Header is the hmac provider's signature header, holding
	// "sha256=<hex>" or the bare hex of the HMAC-SHA256 of the raw body.
	// Defaults to X-Signature-256.
	Header string `yaml:"header"`
	// IDHeader is the hmac provider's delivery id header. Defaults to
	// none: the delivery id is the body's hash.
	IDHeader string `yaml:"id_header"`
	// Events lists the event types the source maps; others are stored as
	// ignored. github: any of issues, pull_request, issue_comment.
	// standard and hmac: values of the payload's type key. Defaults to
	// github's three, or every type.
	Events []string `yaml:"events"`
	// Tolerance is how far a Standard Webhooks timestamp may be from now
	// (replay protection), standard provider only. Defaults to 5m.
	Tolerance time.Duration `yaml:"tolerance"`
	// ReconcileEvery is the interval of the source's reconciliation poll,
	// which repairs missed events; it replaces every (a webhook source
	// sets no every, cron or adaptive). Defaults to 6h.
	ReconcileEvery time.Duration `yaml:"reconcile_every"`
	// SilenceAlert is how long the source may receive no event while its
	// reconciliation polls still find changes before the watchdog alerts.
	// 0 turns the alert off. Defaults to 24h.
	SilenceAlert *time.Duration `yaml:"silence_alert"`
	// MaxBody bounds a delivery's body in bytes; a larger one is answered
	// 413. At most 25 MiB. Defaults to 5 MiB.
	MaxBody int64 `yaml:"max_body"`
}

// check applies the block's defaults and checks it; keys are reported
// under webhook.
func (w *Webhook) check(s *Source) []error {
	var errs []error
	bad := func(key, format string, args ...any) { errs = append(errs, s.Errorf("webhook."+key, format, args...)) }
	switch {
	case w.Provider == "":
		bad("provider", "is required (one of %s)", strings.Join(WebhookProviders, ", "))
	case !slices.Contains(WebhookProviders, w.Provider):
		bad("provider", "must be one of %s, not %q", strings.Join(WebhookProviders, ", "), w.Provider)
	}
	switch {
	case w.Secret == "":
		bad("secret", "is required (write it as ${ENV_VAR})")
	case w.Provider == WebhookStandard:
		// The value is a secret: say what is wrong, never what it is.
		if _, err := signature.Key(w.Secret); err != nil {
			bad("secret", "starts with whsec_ but the rest is not a standard base64 key (Standard Webhooks secrets are whsec_ followed by the base64 of 24 to 64 random bytes)")
		}
	}
	if w.Provider != WebhookHMAC {
		if w.Header != "" {
			bad("header", "is for the hmac provider only (%s signs with its own headers)", w.Provider)
		}
		if w.IDHeader != "" {
			bad("id_header", "is for the hmac provider only")
		}
	}
	if w.Provider == WebhookHMAC {
		w.Header = cmp.Or(w.Header, HMACHeaderDefault)
		if strings.ContainsAny(w.Header, " :\r\n") {
			bad("header", "%q is not a header name", w.Header)
		}
		if strings.ContainsAny(w.IDHeader, " :\r\n") {
			bad("id_header", "%q is not a header name", w.IDHeader)
		}
	}
	if w.Tolerance != 0 && w.Provider != WebhookStandard {
		bad("tolerance", "is for the standard provider only")
	}
	if w.Tolerance < 0 {
		bad("tolerance", "must be positive")
	}
	if w.Provider == WebhookStandard && w.Tolerance == 0 {
		w.Tolerance = signature.Tolerance
	}
	seen := map[string]bool{}
	for i, e := range w.Events {
		key := fmt.Sprintf("events[%d]", i)
		switch {
		case strings.TrimSpace(e) == "":
			bad(key, "is empty")
		case seen[e]:
			bad(key, "names %q twice", e)
		case w.Provider == WebhookGitHub && !slices.Contains(GitHubWebhookEvents, e):
			bad(key, "%q is not an event a github webhook maps (%s)", e, strings.Join(GitHubWebhookEvents, ", "))
		}
		seen[e] = true
	}
	if w.Provider == WebhookGitHub && len(w.Events) == 0 {
		w.Events = slices.Clone(GitHubWebhookEvents)
	}
	if w.ReconcileEvery < 0 || (w.ReconcileEvery > 0 && w.ReconcileEvery < time.Minute) {
		bad("reconcile_every", "must be at least 1m (the reconciliation poll is slow on purpose)")
	}
	w.ReconcileEvery = cmp.Or(w.ReconcileEvery, ReconcileEveryDefault)
	if w.SilenceAlert == nil {
		d := SilenceAlertDefault
		w.SilenceAlert = &d
	} else if *w.SilenceAlert < 0 {
		bad("silence_alert", "must be positive (0 turns the alert off)")
	} else if *w.SilenceAlert > 0 && *w.SilenceAlert < time.Minute {
		bad("silence_alert", "must be at least 1m (0 turns the alert off)")
	}
	if w.MaxBody < 0 || w.MaxBody > WebhookMaxBodyLimit {
		bad("max_body", "must be between 1 and %d bytes, not %d", WebhookMaxBodyLimit, w.MaxBody)
	}
	if w.MaxBody == 0 {
		w.MaxBody = WebhookMaxBodyDefault
	}
	return errs
}

// Maps reports whether the webhook maps events of type t (an empty
// Events list of a generic provider maps every type).
func (w *Webhook) Maps(t string) bool {
	return len(w.Events) == 0 || slices.Contains(w.Events, t)
}

// ParseWebhook reads the webhook block of a stored source definition (the
// JSON of source_definitions.definition), expanding its ${ENV} references
// and checking it as ParseSource does: what the api's ingest needs of a
// source, without the rest of the definition (whose ${ENV} references the
// api's environment may not have). It returns nil, nil when the source
// has no webhook block. file names the definition in errors.
func ParseWebhook(file string, definition []byte) (*Webhook, error) {
	root, err := parseYAML(file, definition)
	if err != nil {
		return nil, err
	}
	if root.Kind != yaml.MappingNode {
		return nil, &Error{File: file, Msg: "a source definition must be a mapping"}
	}
	var node *yaml.Node
	for i := 0; i+1 < len(root.Content); i += 2 {
		if root.Content[i].Value == "webhook" {
			node = &yaml.Node{Kind: yaml.MappingNode, Content: root.Content[i : i+2]}
		}
	}
	if node == nil || node.Content[1].Tag == "!!null" {
		return nil, nil
	}
	var holder struct {
		Webhook *Webhook `yaml:"webhook"`
	}
	var secrets []string
	lines, bad, errs := decodeStrict(file, node, &holder, &secrets)
	if holder.Webhook == nil {
		return nil, errors.Join(errs...)
	}
	s := &Source{Path: file, lines: lines}
	errs = append(errs, dropBad(holder.Webhook.check(s), bad)...)
	if len(errs) > 0 {
		return nil, errors.Join(byLine(errs)...)
	}
	return holder.Webhook, nil
}
