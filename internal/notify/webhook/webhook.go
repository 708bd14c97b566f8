// Package webhook is the webhook sink type (type: webhook): an HTTP POST
// of the payload, signed the Standard Webhooks way (docs/delivery.md,
// "### webhook" and "## The webhook contract"). It owns the keys url,
// secret, signature and headers; the sending itself is
// notify.WebhookSink, which watches' own webhooks share.
package webhook

import (
	"cmp"
	"errors"
	"slices"
	"strings"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/notify"
)

// Settings are the keys of a webhook sink.
type Settings struct {
	// URL is the endpoint (http or https). Required.
	URL string `yaml:"url"`
	// Secret signs requests the Standard Webhooks way
	// (webhook-signature): "whsec_<base64 key>", or any other string used
	// as the HMAC key as written; write it as ${ENV_VAR}. Defaults to no
	// signature.
	Secret string `yaml:"secret"`
	// Signature is which headers sign a request: standard (webhook-id,
	// webhook-timestamp, webhook-signature), legacy (X-Lookout-Signature,
	// X-Lookout-Timestamp, Idempotency-Key), or both while receivers move
	// over. Defaults to standard.
	Signature string `yaml:"signature"`
	// Headers are extra HTTP headers; values may use ${ENV}. Defaults to
	// none.
	Headers map[string]string `yaml:"headers"`
}

func init() {
	notify.Register("webhook", Decode, func(s *config.Sink, st Settings, env notify.Env) (notify.Sink, error) {
		return notify.NewWebhookSink(notify.WebhookOptions{URL: st.URL, Secret: st.Secret, Signature: st.Signature,
			Headers: st.Headers, Concurrency: s.Concurrency, Egress: env.Egress})
	})
}

// Decode reads and checks the keys of a webhook sink, defaulting
// signature to standard.
func Decode(s *config.Sink) (Settings, error) {
	var st Settings
	if err := s.DecodeBlock(&st); err != nil {
		return st, err
	}
	var errs []error
	st.Signature = cmp.Or(st.Signature, notify.SignatureStandard)
	if !slices.Contains([]string{notify.SignatureStandard, notify.SignatureLegacy, notify.SignatureBoth}, st.Signature) {
		errs = append(errs, s.Errorf("signature", "must be standard, legacy or both, not %q", st.Signature))
	}
	if msg := config.CheckWebhookSecret(st.Secret); msg != "" {
		errs = append(errs, s.Errorf("secret", "%s", msg))
	}
	errs = append(errs, CheckURL(s, st.URL))
	return st, errors.Join(errs...)
}

// CheckURL checks the url key of an HTTP sink of s's type: required, http
// or https.
func CheckURL(s *config.Sink, url string) error {
	switch {
	case url == "":
		return s.Errorf("url", "is required for a %s sink", s.Type)
	case !strings.HasPrefix(url, "http://") && !strings.HasPrefix(url, "https://"):
		return s.Errorf("url", "must start with http:// or https://")
	}
	return nil
}
