package definitions

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/secrets"
)

// Snapshot is every definition of the database in one MVCC snapshot,
// parsed the way the daemons parse them: the truth a one-shot command
// (evaluator replay and explain) reads instead of the configuration
// files, so that it sees the watches made through the API too.
type Snapshot struct {
	// Version is the highest config version committed in the snapshot.
	Version int64
	// Config holds g and every source that parses, with its watches
	// (Config.Source finds one by name); paused ones included.
	Config *config.Config
	// Sources are the sources with their rows (owner, managed_by, paused),
	// index-aligned with Config.Sources.
	Sources []*SourceDef
	// Invalid are definitions that do not parse with g (an unset ${ENV},
	// a sink this lookout.yaml does not declare): left out, as a daemon
	// leaves them out.
	Invalid []error
}

// Load reads a Snapshot of the definitions in one repeatable-read
// transaction, parsed with the defaults and sinks of g (the Follower's
// first load, handed back instead of applied).
func Load(ctx context.Context, pool *pgxpool.Pool, g *config.Global) (*Snapshot, error) {
	return LoadWithKeys(ctx, pool, g, nil)
}

// LoadWithKeys is Load opening the sealed credentials of definitions made
// through the API with keys (LOOKOUT_SECRET_KEY); without them such a
// definition is in Invalid.
func LoadWithKeys(ctx context.Context, pool *pgxpool.Pool, g *config.Global, keys *secrets.Ring) (*Snapshot, error) {
	f := NewFollower(pool, g, func(context.Context, *Delta) error { return nil }).WithKeys(keys)
	d, _, _, err := f.since(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("load the definitions: %w", err)
	}
	s := &Snapshot{Version: d.To, Config: &config.Config{Global: *g}, Sources: d.Sources, Invalid: d.Invalid}
	for _, def := range d.Sources {
		s.Config.Sources = append(s.Config.Sources, def.Config)
	}
	return s, nil
}

// Delta returns the snapshot as the full delta a Follower's first load
// hands a consumer (evaluator.Apply), paused watches and all: the
// consumer leaves out what it does not run.
func (s *Snapshot) Delta() *Delta {
	return &Delta{To: s.Version, Full: true, Sources: s.Sources, Invalid: s.Invalid}
}

// WatchesOf reads the watch definitions of source, by name: every
// owner's, paused ones included. A source without a definition has none.
func WatchesOf(ctx context.Context, pool *pgxpool.Pool, source string) ([]Watch, error) {
	return watchesOf(ctx, pool, source)
}
