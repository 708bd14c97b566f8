package cli

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/definitions"
	"github.com/lookout-dev/lookout/internal/metrics"
	"github.com/lookout-dev/lookout/internal/reload"
	"github.com/lookout-dev/lookout/internal/secrets"
)

// ApplyConfig loads the configuration directory into the definitions
// (a diff, one transaction; nothing is written when nothing changed): the
// start of a daemon, after its check passed.
func ApplyConfig(ctx context.Context, pool *pgxpool.Pool, cfg *config.Config, logger *slog.Logger) error {
	diff, err := definitions.Apply(ctx, pool, cfg)
	if err != nil {
		return err
	}
	if !diff.Empty() {
		logger.Info("configuration directory applied to the definitions", "dir", cfg.Dir, "version", diff.Version,
			"added", namesForLog(diff.Added), "changed", namesForLog(diff.Changed), "removed", namesForLog(diff.Removed))
	}
	return nil
}

// logNames is the most names a log line lists.
const logNames = 20

// namesForLog shortens a list of definitions for a log line: a directory
// of a hundred thousand sources must not make a megabyte-long line.
func namesForLog(names []string) any {
	if len(names) <= logNames {
		return names
	}
	return fmt.Sprintf("%v and %d more", names[:logNames], len(names)-logNames)
}

// Reloader returns the service that reloads the configuration directory
// on a file change or SIGHUP: the directory is loaded and checked with
// check (the binary's side of `check`), then applied to the definitions.
func (e *Env) Reloader(pool *pgxpool.Pool, check func(*config.Config) error, m *metrics.Metrics, logger *slog.Logger) *reload.Reloader {
	return reload.New(reload.Config{
		Dir: e.ConfigDir,
		Load: func() (*config.Config, error) {
			cfg, err := config.LoadFor(e.ConfigDir, e.Uses)
			if err != nil {
				return nil, err
			}
			if err := check(cfg); err != nil {
				return nil, err
			}
			return cfg, nil
		},
		Apply: func(ctx context.Context, cfg *config.Config) (definitions.Diff, error) {
			return definitions.Apply(ctx, pool, cfg)
		},
		SIGHUP:  true,
		Metrics: m,
	}, logger)
}

// Follow returns a follower of the definitions for apply, after loading
// them once (a daemon's start): a daemon's services run with the
// definitions of the database, not with the files.
//
// The sealed credentials of definitions made through the API are opened
// with the key ring of LOOKOUT_SECRET_KEY; a malformed ring is an error,
// a missing one leaves such definitions invalid to this daemon.
func Follow(ctx context.Context, pool *pgxpool.Pool, g *config.Global, m *metrics.Metrics, apply func(context.Context, *definitions.Delta) error) (*definitions.Follower, error) {
	keys, err := secrets.FromEnv()
	if err != nil {
		return nil, err
	}
	f := definitions.NewFollower(pool, g, func(ctx context.Context, d *definitions.Delta) error {
		if err := apply(ctx, d); err != nil {
			return err
		}
		m.ConfigVersion(d.To)
		return nil
	}).WithKeys(keys)
	if _, err := f.CatchUp(ctx); err != nil {
		return nil, fmt.Errorf("load the definitions: %w", err)
	}
	return f, nil
}
