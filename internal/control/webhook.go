package control

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"

	"github.com/lookout-dev/lookout/internal/definitions"
	"github.com/lookout-dev/lookout/internal/egress"
	"github.com/lookout-dev/lookout/internal/secrets"
)

// WebhookSecretPrefix starts a webhook signing secret, as Standard
// Webhooks libraries expect ("whsec_" + base64 of the key).
const WebhookSecretPrefix = "whsec_"

// NewWebhookSecret returns a signing secret for a user's webhook (shown
// once) and the same sealed as a definition stores it
// ("${sealed:...}"), bound to context (definitions.WebhookContext of the
// watch).
func NewWebhookSecret(keys *secrets.Ring, context string) (secret, sealed string, err error) {
	if keys == nil {
		return "", "", &InvalidError{Errors: []FieldError{{Pointer: "/webhook", Detail: "this lookout cannot store webhook secrets: the operator has not set " + secrets.KeyEnv + "; name one of the operator's sinks in notify instead"}}}
	}
	var b [24]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", "", fmt.Errorf("webhook secret: %w", err)
	}
	secret = WebhookSecretPrefix + base64.StdEncoding.EncodeToString(b[:])
	sealed, err = keys.Seal([]byte(secret), context)
	if err != nil {
		return "", "", fmt.Errorf("seal the webhook secret: %w", err)
	}
	return secret, definitions.SealedRef(sealed), nil
}

// Resolver looks host names up (net.DefaultResolver in production).
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// CheckURL checks a URL given through the API (a source's or a webhook's;
// pointer locates it in the request) before it is stored: http or https,
// a host, and every address the host resolves to allowed by the policy
// for untrusted URLs — link-local and metadata addresses always refused,
// loopback and private ones unless allowPrivate (api.allow_private). The
// connection is checked again when it is dialed, after every redirect.
func CheckURL(ctx context.Context, r Resolver, raw, pointer string, allowPrivate bool) error {
	bad := func(format string, args ...any) error {
		return &InvalidError{Errors: []FieldError{{Pointer: pointer, Value: raw, Detail: fmt.Sprintf(format, args...)}}}
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return bad("must be an absolute http or https URL, like https://api.example.com/items")
	}
	if u.User != nil {
		return bad("must not carry credentials in the URL; put a token in the source's headers instead")
	}
	host := u.Hostname()
	policy := egress.Untrusted(allowPrivate)
	var addrs []netip.Addr
	if ip, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{ip}
	} else {
		if strings.EqualFold(host, "localhost") || strings.HasSuffix(strings.ToLower(host), ".localhost") {
			addrs = []netip.Addr{netip.MustParseAddr("127.0.0.1")}
		} else if addrs, err = r.LookupNetIP(ctx, "ip", host); err != nil {
			var dnsErr *net.DNSError
			if errors.As(err, &dnsErr) && dnsErr.IsNotFound {
				return bad("host %q does not resolve (no such host): check the spelling", host)
			}
			return bad("host %q could not be resolved: %v", host, err)
		}
	}
	for _, a := range addrs {
		if err := policy.Check(a); err != nil {
			var d *egress.DeniedError
			if errors.As(err, &d) {
				unlock := "the operator may allow it with api.allow_private"
				if egress.Untrusted(true).Check(a) != nil {
					unlock = "never, whatever api.allow_private says"
				}
				return bad("%s resolves to %s, %s; lookout does not fetch such addresses for API users (%s)", host, a, d.Reason, unlock)
			}
			return bad("%v", err)
		}
	}
	return nil
}
