package definitions

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/lookout-dev/lookout/internal/secrets"
)

// Reseal seals again, under the first key of the store's ring, every
// credential of a source made through the API that is stored in clear
// (rows written before credentials were sealed) or sealed with another
// key (after a rotation of LOOKOUT_SECRET_KEY), and every watch's webhook
// secret and channel URL sealed with another key. It changes nothing else and returns how
// many definitions it rewrote, in one transaction (one config version).
// The api runs it at start; once it returned, the old key may leave the
// ring.
func (s *Store) Reseal(ctx context.Context) (int, error) {
	keys := s.validator.Keys
	if keys == nil {
		return 0, secrets.ErrNoKey
	}
	due := func(tx database, lock bool) (srcs []Source, ws []Watch, err error) {
		qs, qw := queryAPISources, queryAPIWebhookWatches
		if lock {
			qs, qw = qs+" FOR UPDATE", qw+" FOR UPDATE"
		}
		all, err := collect[Source](tx.Query(ctx, qs))(scanSource)
		if err != nil {
			return nil, nil, fmt.Errorf("read the sources made through the API: %w", err)
		}
		for _, src := range all {
			if needsReseal(keys, src.Definition) {
				srcs = append(srcs, src)
			}
		}
		allW, err := collect[Watch](tx.Query(ctx, qw))(scanWatch)
		if err != nil {
			return nil, nil, fmt.Errorf("read the watches with a webhook or a channel: %w", err)
		}
		stale := func(sealed string) bool {
			return IsSealed(sealed) && secrets.KeyOf(sealedValue(sealed)) != keys.KeyID()
		}
		for _, w := range allW {
			if stale(webhookSecretOf(w.Definition)) || stale(channelSecretOf(w.Definition)) {
				ws = append(ws, w)
			}
		}
		return srcs, ws, nil
	}
	srcs, ws, err := due(s.pool, false)
	if err != nil || len(srcs)+len(ws) == 0 {
		return 0, err
	}
	n := 0
	err = s.change(ctx, func(tx pgx.Tx, v int64) error {
		n = 0
		srcs, ws, err := due(tx, true)
		if err != nil {
			return err
		}
		for _, src := range srcs {
			plain, _, err := OpenCredentials(keys, src.Name, src.Definition)
			if err != nil {
				return fmt.Errorf("reseal: %w", err)
			}
			def, err := sealCredentials(keys, src.Name, plain)
			if err != nil {
				return fmt.Errorf("reseal source %s: %w", src.Name, err)
			}
			if _, err := tx.Exec(ctx, queryUpdateSource, src.Name, src.Owner, src.ManagedBy, src.Connector, def, hash(def), v); err != nil {
				return fmt.Errorf("reseal source %s: %w", src.Name, err)
			}
			n++
		}
		for _, w := range ws {
			def := w.Definition
			if IsSealed(webhookSecretOf(def)) {
				secret, err := OpenWebhookSecret(keys, w.Source, w.Name, webhookSecretOf(def))
				if err != nil {
					return fmt.Errorf("reseal: %w", err)
				}
				if def, err = WithWebhookSecret(keys, w.Source, w.Name, def, secret); err != nil {
					return err
				}
			}
			if IsSealed(channelSecretOf(def)) {
				url, err := OwnChannelOf(keys, w.Source, w.Name, def)
				if err != nil {
					return fmt.Errorf("reseal: %w", err)
				}
				if def, err = withChannelSecret(keys, w.Source, w.Name, def, url); err != nil {
					return err
				}
			}
			if _, err := tx.Exec(ctx, queryUpdateWatch, w.Source, w.Name, w.Owner, w.ManagedBy, def, hash(def), v); err != nil {
				return fmt.Errorf("reseal watch %s of source %s: %w", w.Name, w.Source, err)
			}
			n++
		}
		return nil
	})
	return n, err
}

// webhookSecretOf returns the stored webhook.secret of a watch definition.
func webhookSecretOf(def json.RawMessage) string {
	var d struct {
		Webhook *struct {
			Secret string `json:"secret"`
		} `json:"webhook"`
	}
	if json.Unmarshal(def, &d) != nil || d.Webhook == nil {
		return ""
	}
	return d.Webhook.Secret
}

// WithWebhookSecret returns the watch definition def (which has a
// webhook object) with webhook.secret set to secret sealed for the watch.
func WithWebhookSecret(keys *secrets.Ring, source, watch string, def json.RawMessage, secret string) (json.RawMessage, error) {
	if keys == nil {
		return nil, secrets.ErrNoKey
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(def, &m); err != nil {
		return nil, fmt.Errorf("watch %s of source %s: decode definition: %w", watch, source, err)
	}
	var hook map[string]any
	if err := json.Unmarshal(m["webhook"], &hook); err != nil || hook == nil {
		return nil, fmt.Errorf("watch %s of source %s: webhook is not an object", watch, source)
	}
	sealed, err := keys.Seal([]byte(secret), WebhookContext(source, watch))
	if err != nil {
		return nil, fmt.Errorf("seal the webhook secret of watch %s of source %s: %w", watch, source, err)
	}
	hook["secret"] = SealedRef(sealed)
	b, err := json.Marshal(hook)
	if err != nil {
		return nil, err
	}
	m["webhook"] = b
	return canonical(m)
}

// channelSecretOf returns the stored channel.secret (the sealed URL) of a
// watch definition.
func channelSecretOf(def json.RawMessage) string {
	var d struct {
		Channel *struct {
			Secret string `json:"secret"`
		} `json:"channel"`
	}
	if json.Unmarshal(def, &d) != nil || d.Channel == nil {
		return ""
	}
	return d.Channel.Secret
}

// withChannelSecret returns the watch definition def (which has a channel
// object) with channel.secret set to url sealed for the watch.
func withChannelSecret(keys *secrets.Ring, source, watch string, def json.RawMessage, url string) (json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(def, &m); err != nil {
		return nil, fmt.Errorf("watch %s of source %s: decode definition: %w", watch, source, err)
	}
	var ch map[string]any
	if err := json.Unmarshal(m["channel"], &ch); err != nil || ch == nil {
		return nil, fmt.Errorf("watch %s of source %s: channel is not an object", watch, source)
	}
	sealed, err := keys.Seal([]byte(url), ChannelContext(source, watch))
	if err != nil {
		return nil, fmt.Errorf("seal the channel URL of watch %s of source %s: %w", watch, source, err)
	}
	ch["secret"] = SealedRef(sealed)
	b, err := json.Marshal(ch)
	if err != nil {
		return nil, err
	}
	m["channel"] = b
	return canonical(m)
}
