package main

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/definitions"
	"github.com/lookout-dev/lookout/internal/egress"
	"github.com/lookout-dev/lookout/internal/notify"
	"github.com/lookout-dev/lookout/internal/notify/channel"
	urlsink "github.com/lookout-dev/lookout/internal/notify/url"
	"github.com/lookout-dev/lookout/internal/secrets"
)

// ownChannels adds the lane of watches' own channels
// (config.OwnChannelSink) to sinks and dconf: each notification goes to
// its watch's notification URL, read from the definitions at delivery and
// opened with LOOKOUT_SECRET_KEY, through the egress policy of untrusted
// URLs. The URL's secrets join the configuration's redactor when opened.
func ownChannels(pool *pgxpool.Pool, g *config.Global, sinks map[string]notify.Sink, dconf *notify.DelivererConfig) error {
	keys, err := secrets.FromEnv()
	if err != nil {
		return err
	}
	target := func(ctx context.Context, source, watch string) (string, error) {
		raw, err := definitions.OwnChannel(ctx, pool, keys, source, watch)
		if err != nil {
			return "", ownTargetError(err, definitions.ErrNoChannel, source, watch)
		}
		if ch, err := channel.Parse(raw); err == nil {
			g.Redactor().Add(ch.Secrets()...)
		}
		return raw, nil
	}
	lane := urlsink.OwnChannelSinkConfig()
	sinks[config.OwnChannelSink] = urlsink.NewOwnChannelSink(urlsink.OwnChannelOptions{Target: target, Concurrency: lane.Concurrency,
		Egress: egress.Untrusted(g.API.AllowPrivate)})
	addLane(dconf, config.OwnChannelSink, lane)
	return nil
}
