package main

import (
	"context"
	"errors"
	"fmt"
	"maps"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/definitions"
	"github.com/lookout-dev/lookout/internal/egress"
	"github.com/lookout-dev/lookout/internal/notify"
	"github.com/lookout-dev/lookout/internal/secrets"
)

// ownWebhooks adds the lane of watches' own webhooks (config.OwnWebhookSink)
// to sinks and dconf: each notification goes to its watch's webhook, read
// from the definitions at delivery, signed with the secret opened with
// LOOKOUT_SECRET_KEY, through the egress policy of untrusted URLs.
func ownWebhooks(pool *pgxpool.Pool, g *config.Global, sinks map[string]notify.Sink, dconf *notify.DelivererConfig) error {
	keys, err := secrets.FromEnv()
	if err != nil {
		return err
	}
	target := func(ctx context.Context, source, watch string) (notify.OwnWebhookTarget, error) {
		url, secret, err := definitions.OwnWebhook(ctx, pool, keys, source, watch)
		switch {
		case errors.Is(err, definitions.ErrNotFound):
			return notify.OwnWebhookTarget{}, &notify.PermanentError{Err: fmt.Errorf("watch %s of source %s no longer exists", watch, source)}
		case errors.Is(err, definitions.ErrNoWebhook):
			return notify.OwnWebhookTarget{}, &notify.PermanentError{Err: err}
		case err != nil:
			return notify.OwnWebhookTarget{}, err
		}
		return notify.OwnWebhookTarget{URL: url, Secret: secret}, nil
	}
	lane := notify.OwnWebhookSinkConfig()
	sinks[config.OwnWebhookSink] = notify.NewOwnWebhookSink(notify.OwnWebhookOptions{Target: target, Concurrency: lane.Concurrency,
		Egress: egress.Untrusted(g.API.AllowPrivate)})
	dconf.Sinks = maps.Clone(dconf.Sinks)
	if dconf.Sinks == nil {
		dconf.Sinks = map[string]*config.Sink{}
	}
	dconf.Sinks[config.OwnWebhookSink] = lane
	return nil
}

// loadDefinitions reads a snapshot of the definitions (evaluator explain
// and replay), opening API users' sealed credentials with
// LOOKOUT_SECRET_KEY as the daemon does.
func loadDefinitions(ctx context.Context, pool *pgxpool.Pool, g *config.Global) (*definitions.Snapshot, error) {
	keys, err := secrets.FromEnv()
	if err != nil {
		return nil, err
	}
	return definitions.LoadWithKeys(ctx, pool, g, keys)
}
