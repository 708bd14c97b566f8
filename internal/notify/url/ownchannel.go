package url

import (
	"context"
	"sync"
	"time"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/egress"
	"github.com/lookout-dev/lookout/internal/notify"
)

// OwnChannelOptions configure the sink of watches' own channels.
type OwnChannelOptions struct {
	// Target returns the notification URL of watch of source, read at each
	// delivery (a changed URL applies at once). An error fails the
	// attempt; a *notify.PermanentError (the watch is gone) makes the
	// notification dead. Required.
	Target func(ctx context.Context, source, watch string) (string, error)
	// Concurrency sizes each channel's connection pool.
	Concurrency int
	// Egress is the policy of untrusted destinations
	// (egress.Untrusted(api.allow_private)): the URLs are given by API
	// users. It is checked on every connection.
	Egress egress.Policy
	// APIBase is Options.APIBase (tests). Defaults to the services'.
	APIBase string
}

// OwnChannelSink delivers the notifications of watches that have a channel
// of their own (config.OwnChannelSink) to that channel, as a url sink
// does; its lane is fair across users (notify.SharedSink).
type OwnChannelSink struct {
	opts OwnChannelOptions

	mu    sync.Mutex
	sinks map[string]*cachedSink // by URL: connections reused
}

type cachedSink struct {
	sink *Sink
	used time.Time
}

// ownChannelCache bounds the sinks kept for reuse.
const ownChannelCache = 256

var _ notify.SharedSink = (*OwnChannelSink)(nil)

// NewOwnChannelSink returns the sink of watches' own channels.
func NewOwnChannelSink(o OwnChannelOptions) *OwnChannelSink {
	return &OwnChannelSink{opts: o, sinks: map[string]*cachedSink{}}
}

// OwnChannelSinkConfig is the delivery settings of the own-channel lane:
// those of the own-webhook lane (timeout 10s, 8 attempts, concurrency 8).
func OwnChannelSinkConfig() *config.Sink {
	c := notify.OwnWebhookSinkConfig()
	c.Type = "url"
	return c
}

// PerOwner makes the lane fair across users: notify.OwnWebhookPerOwner.
func (s *OwnChannelSink) PerOwner() int { return notify.OwnWebhookPerOwner }

// Deliver sends n to the channel of n's watch.
func (s *OwnChannelSink) Deliver(ctx context.Context, n *notify.Notification) error {
	raw, err := s.opts.Target(ctx, n.Source, n.Watch)
	if err != nil {
		return err
	}
	sink, err := s.sink(raw)
	if err != nil {
		return &notify.PermanentError{Err: err}
	}
	return sink.Deliver(ctx, n)
}

func (s *OwnChannelSink) sink(raw string) (*Sink, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.sinks[raw]; ok {
		c.used = time.Now()
		return c.sink, nil
	}
	sink, err := New(Options{URL: raw, Concurrency: s.opts.Concurrency, Egress: s.opts.Egress, APIBase: s.opts.APIBase})
	if err != nil {
		return nil, err
	}
	if len(s.sinks) >= ownChannelCache {
		var oldest string
		for k, c := range s.sinks {
			if oldest == "" || c.used.Before(s.sinks[oldest].used) {
				oldest = k
			}
		}
		s.sinks[oldest].sink.client.CloseIdleConnections()
		delete(s.sinks, oldest)
	}
	s.sinks[raw] = &cachedSink{sink: sink, used: time.Now()}
	return sink, nil
}
