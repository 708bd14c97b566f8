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
		if err != nil {
			return notify.OwnWebhookTarget{}, ownTargetError(err, definitions.ErrNoWebhook, source, watch)
		}
		return notify.OwnWebhookTarget{URL: url, Secret: secret}, nil
	}
	lane := notify.OwnWebhookSinkConfig()
	sinks[config.OwnWebhookSink] = notify.NewOwnWebhookSink(notify.OwnWebhookOptions{Target: target, Concurrency: lane.Concurrency,
		Egress: egress.Untrusted(g.API.AllowPrivate)})
	addLane(dconf, config.OwnWebhookSink, lane)
	return nil
}

// ownTargetError is the delivery error of a watch's own target that could
// not be read: permanent when the watch is gone or has no such target
// (none, the sentinel of that kind), retried otherwise.
func ownTargetError(err, none error, source, watch string) error {
	switch {
	case errors.Is(err, definitions.ErrNotFound):
		return &notify.PermanentError{Err: fmt.Errorf("watch %s of source %s no longer exists", watch, source)}
	case errors.Is(err, none):
		return &notify.PermanentError{Err: err}
	}
	return err
}

// addLane adds the settings of a lane of watches' own targets to dconf's
// sinks (a copy: dconf's map may be the configuration's).
func addLane(dconf *notify.DelivererConfig, name string, lane *config.Sink) {
	dconf.Sinks = maps.Clone(dconf.Sinks)
	if dconf.Sinks == nil {
		dconf.Sinks = map[string]*config.Sink{}
	}
	dconf.Sinks[name] = lane
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
