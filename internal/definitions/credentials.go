package definitions

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lookout-dev/lookout/internal/secrets"
)

// Credentials of definitions made through the API (docs/api.md#secrets).
//
// A credential is a string value that authenticates lookout somewhere: a
// key named token, secret, password, api_key (and the like) anywhere in a
// source's keys — a GitHub or Notion token, the webhook block's secret, a
// task executor's secret — and the values of headers whose name says
// they carry one (Authorization, Cookie, X-Api-Key, ...). The store keeps
// each one sealed with the LOOKOUT_SECRET_KEY ring, in place, as
// "${sealed:v1:<key id>:<ciphertext>}", bound to the source's name and the
// value's JSON pointer (a ciphertext copied elsewhere does not open). The
// daemons open them when they parse the row (Validator.Keys), and add the
// plaintexts to the configuration's redactor. What the API shows has
// every credential replaced by Redacted; an update that sends Redacted
// back keeps the stored value.

// Redacted stands for a credential in what the API shows, and keeps the
// stored credential when sent back in an update.
const Redacted = "[redacted]"

const sealedPrefix = "${sealed:"

// IsSealed reports whether v is a sealed credential as stored.
func IsSealed(v string) bool { return strings.HasPrefix(v, sealedPrefix) && strings.HasSuffix(v, "}") }

// SealedRef is how a value sealed with the secrets ring (secrets.Ring.Seal)
// is stored in a definition.
func SealedRef(sealed string) string { return sealedPrefix + sealed + "}" }

func sealedValue(ref string) string { return ref[len(sealedPrefix) : len(ref)-1] }

// credentialKeys are the key names (lowercase, '-' as '_') whose string
// values are credentials.
var credentialKeys = map[string]bool{
	"token": true, "secret": true, "password": true, "passwd": true, "api_key": true, "apikey": true,
	"access_token": true, "auth_token": true, "bearer_token": true, "client_secret": true, "private_key": true,
	"dsn": true, // a postgres connection string holds the password
}

// sensitiveHeader matches header names whose values are credentials.
var sensitiveHeader = regexp.MustCompile(`(?i)authorization|cookie|token|secret|key|passw|auth|session|signature|credential`)

func keyName(k string) string { return strings.ReplaceAll(strings.ToLower(k), "-", "_") }

// walkCredentials calls fn with the JSON pointer and value of every
// credential of v (a decoded definition), replacing the value with fn's.
// A source's watches are not walked (their credentials are their own).
func walkCredentials(v any, pointer string, inHeaders bool, fn func(pointer, value string) (string, error)) error {
	var errs []error
	switch x := v.(type) {
	case map[string]any:
		for k, child := range x {
			if pointer == "" && k == "watches" {
				continue
			}
			p := pointer + "/" + PointerToken(k)
			if s, ok := child.(string); ok {
				if credentialKeys[keyName(k)] || (inHeaders && sensitiveHeader.MatchString(k)) {
					out, err := fn(p, s)
					if err != nil {
						errs = append(errs, err)
						continue
					}
					x[k] = out
				}
				continue
			}
			if err := walkCredentials(child, p, keyName(k) == "headers", fn); err != nil {
				errs = append(errs, err)
			}
		}
	case []any:
		for i, child := range x {
			if err := walkCredentials(child, fmt.Sprintf("%s/%d", pointer, i), false, fn); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// mapCredentials decodes def, applies fn to its credentials and encodes
// it again (canonical).
func mapCredentials(def json.RawMessage, fn func(pointer, value string) (string, error)) (json.RawMessage, error) {
	var v any
	dec := json.NewDecoder(bytes.NewReader(def))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("decode definition: %w", err)
	}
	if err := walkCredentials(v, "", false, fn); err != nil {
		return nil, err
	}
	return canonical(v)
}

// credentialContext binds a sealed credential to its source and place.
func credentialContext(source, pointer string) string {
	return "credential:" + source + ":" + pointer
}

// ChannelContext binds a watch's sealed channel URL to the watch.
func ChannelContext(source, watch string) string { return "channel:" + source + "/" + watch }

// WebhookContext binds a watch's webhook secret to the watch.
func WebhookContext(source, watch string) string { return "webhook:" + source + "/" + watch }

// RedactCredentials returns def (a source's or a watch's definition) with
// every credential replaced by Redacted: what the API, the MCP tools and
// the audit log show.
func RedactCredentials(def json.RawMessage) json.RawMessage {
	if len(def) == 0 {
		return def
	}
	out, err := mapCredentials(def, func(_, _ string) (string, error) { return Redacted, nil })
	if err != nil {
		// Not an object: nothing of it is shown.
		return json.RawMessage(`{}`)
	}
	return out
}

// sealCredentials seals the plaintext credentials of source's definition
// def under the first key of keys; sealed ones are kept. A Redacted value
// or a missing key ring is a *ValidationError naming the credential.
func sealCredentials(keys *secrets.Ring, source string, def json.RawMessage) (json.RawMessage, error) {
	var problems []Problem
	out, err := mapCredentials(def, func(p, v string) (string, error) {
		switch {
		case IsSealed(v) || v == "":
			return v, nil
		case v == Redacted:
			problems = append(problems, Problem{Pointer: p, Message: "is " + Redacted + " but no credential is stored here: give the credential itself"})
			return v, nil
		case keys == nil:
			problems = append(problems, Problem{Pointer: p, Message: "is a credential, and this lookout cannot store credentials: the operator has not set " + secrets.KeyEnv})
			return v, nil
		}
		sealed, err := keys.Seal([]byte(v), credentialContext(source, p))
		if err != nil {
			return "", fmt.Errorf("seal %s of source %s: %w", p, source, err)
		}
		return SealedRef(sealed), nil
	})
	if err != nil {
		return nil, err
	}
	if len(problems) > 0 {
		return nil, &ValidationError{Problems: problems}
	}
	return out, nil
}

// keepRedacted replaces every Redacted credential of def (an update of
// source's definition) with the value stored at the same place in prior.
func keepRedacted(def, prior json.RawMessage) (json.RawMessage, error) {
	if !bytes.Contains(def, []byte(Redacted)) {
		return def, nil
	}
	stored := map[string]string{}
	if len(prior) > 0 {
		if _, err := mapCredentials(prior, func(p, v string) (string, error) {
			stored[p] = v
			return v, nil
		}); err != nil {
			return nil, err
		}
	}
	return mapCredentials(def, func(p, v string) (string, error) {
		if v == Redacted {
			if s, ok := stored[p]; ok {
				return s, nil
			}
		}
		return v, nil
	})
}

// OpenCredentials returns source's definition def with its sealed
// credentials opened, and their plaintexts (for a redactor). Without a
// sealed credential it returns def as is.
func OpenCredentials(keys *secrets.Ring, source string, def json.RawMessage) (json.RawMessage, []string, error) {
	if !bytes.Contains(def, []byte(sealedPrefix)) {
		return def, nil, nil
	}
	var plain []string
	out, err := mapCredentials(def, func(p, v string) (string, error) {
		if !IsSealed(v) {
			return v, nil
		}
		if keys == nil {
			return "", fmt.Errorf("source %s: %s is stored encrypted and %s is not set in this process's environment", source, p, secrets.KeyEnv)
		}
		b, err := keys.Open(sealedValue(v), credentialContext(source, p))
		if err != nil {
			return "", fmt.Errorf("source %s: %s: %w", source, p, err)
		}
		plain = append(plain, string(b))
		return string(b), nil
	})
	if err != nil {
		return nil, nil, err
	}
	return out, plain, nil
}

// needsReseal reports whether def holds a credential in clear (stored
// before credentials were sealed) or sealed with a key other than keys'
// first.
func needsReseal(keys *secrets.Ring, def json.RawMessage) bool {
	found := false
	_, _ = mapCredentials(def, func(_, v string) (string, error) {
		switch {
		case v == "" || v == Redacted:
		case !IsSealed(v):
			found = true
		case secrets.KeyOf(sealedValue(v)) != keys.KeyID():
			found = true
		}
		return v, nil
	})
	return found
}

// OpenWebhookSecret opens the sealed secret of a watch's own webhook.
func OpenWebhookSecret(keys *secrets.Ring, source, watch, sealed string) (string, error) {
	if !IsSealed(sealed) {
		return "", fmt.Errorf("the webhook secret of watch %s of source %s is not sealed", watch, source)
	}
	if keys == nil {
		return "", fmt.Errorf("the webhook secret of watch %s of source %s is stored encrypted and %s is not set in this process's environment", watch, source, secrets.KeyEnv)
	}
	b, err := keys.Open(sealedValue(sealed), WebhookContext(source, watch))
	if err != nil {
		return "", fmt.Errorf("open the webhook secret of watch %s of source %s: %w", watch, source, err)
	}
	return string(b), nil
}

// ErrNoWebhook is OwnWebhook's error for a watch without a webhook of its
// own (it was removed after the notification was made).
var ErrNoWebhook = errors.New("the watch has no webhook of its own any more")

// OwnWebhook returns the URL and the opened signing secret of the own
// webhook of watch of source (a watch made through the API with a
// webhook), read now: a changed URL or a rotated secret applies to the
// next delivery. A watch that no longer exists is ErrNotFound; one
// without a webhook is ErrNoWebhook.
func OwnWebhook(ctx context.Context, pool *pgxpool.Pool, keys *secrets.Ring, source, watch string) (url, secret string, err error) {
	w, err := getWatch(ctx, pool, source, watch, false)
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			return "", "", err
		}
		return "", "", fmt.Errorf("read watch %s of source %s: %w", watch, source, err)
	}
	var def struct {
		Webhook *struct {
			URL    string `json:"url"`
			Secret string `json:"secret"`
		} `json:"webhook"`
	}
	if err := json.Unmarshal(w.Definition, &def); err != nil {
		return "", "", fmt.Errorf("watch %s of source %s: decode definition: %w", watch, source, err)
	}
	if def.Webhook == nil || def.Webhook.URL == "" {
		return "", "", fmt.Errorf("watch %s of source %s: %w", watch, source, ErrNoWebhook)
	}
	secret, err = OpenWebhookSecret(keys, source, watch, def.Webhook.Secret)
	if err != nil {
		return "", "", err
	}
	return def.Webhook.URL, secret, nil
}

// ErrNoChannel is OwnChannel's error for a watch without a channel of its
// own (it was removed after the notification was made).
var ErrNoChannel = errors.New("the watch has no channel of its own any more")

// OwnChannel returns the opened notification URL of the own channel of
// watch of source (a watch made through the API with a channel), read
// now: a changed URL applies to the next delivery. A watch that no longer
// exists is ErrNotFound; one without a channel is ErrNoChannel.
func OwnChannel(ctx context.Context, pool *pgxpool.Pool, keys *secrets.Ring, source, watch string) (string, error) {
	w, err := getWatch(ctx, pool, source, watch, false)
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			return "", err
		}
		return "", fmt.Errorf("read watch %s of source %s: %w", watch, source, err)
	}
	return OwnChannelOf(keys, source, watch, w.Definition)
}

// OwnChannelOf opens the sealed channel URL of def, the definition of
// watch of source.
func OwnChannelOf(keys *secrets.Ring, source, watch string, def json.RawMessage) (string, error) {
	sealed := channelSecretOf(def)
	if sealed == "" {
		return "", fmt.Errorf("watch %s of source %s: %w", watch, source, ErrNoChannel)
	}
	if !IsSealed(sealed) {
		return "", fmt.Errorf("the channel URL of watch %s of source %s is not sealed", watch, source)
	}
	if keys == nil {
		return "", fmt.Errorf("the channel URL of watch %s of source %s is stored encrypted and %s is not set in this process's environment", watch, source, secrets.KeyEnv)
	}
	b, err := keys.Open(sealedValue(sealed), ChannelContext(source, watch))
	if err != nil {
		return "", fmt.Errorf("open the channel URL of watch %s of source %s: %w", watch, source, err)
	}
	return string(b), nil
}
