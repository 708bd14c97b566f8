package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/definitions"
	"github.com/lookout-dev/lookout/internal/metrics"
	"github.com/lookout-dev/lookout/internal/reload"
	"github.com/lookout-dev/lookout/internal/secrets"
)

// by names who applies the directory, for config_generations.applied_by
// and the audit rows: "syncer run on host-1 (/etc/lookout)".
func (e *Env) by(extra string) string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s %s%s on %s (%s)", e.Name, e.Command, extra, host, e.ConfigDir)
}

// ApplyConfig loads the configuration directory into the definitions
// (a diff, one transaction; nothing is written when nothing changed): the
// start of a daemon, after its check passed. A directory that differs
// from the applied generation is not applied (definitions.DivergedError):
// it is logged at ERROR, the daemon runs on the applied generation, and
// the returned Start makes its reloader report it in /readyz. Either way
// it empties cfg.Sources: the daemon runs on the definitions (Follow).
func (e *Env) ApplyConfig(ctx context.Context, pool *pgxpool.Pool, cfg *config.Config, logger *slog.Logger) (reload.Start, error) {
	diff, applied, err := definitions.ApplyKept(ctx, pool, cfg, definitions.ApplyOptions{By: e.by("")})
	// Applied (or refused), the directory's sources are not what the
	// daemon runs: it runs on the definitions, parsed by its follower
	// (Follow), which may take the sources applied (KeepParse) rather
	// than parse their rows again. It holds no second parse of them.
	cfg.Sources = nil
	if e.KeepParse {
		e.applied = applied
	}
	var de *definitions.DivergedError
	if errors.As(err, &de) {
		logger.Error("configuration directory not applied: it differs from the applied generation; the daemon runs on the applied one",
			"dir", cfg.Dir, "hash", de.Hash, "applied_generation", de.Applied.Number, "applied_hash", de.Applied.Hash,
			"applied_by", de.Applied.AppliedBy, "error", err)
		return reload.Start{Hash: de.Hash, Diverged: de}, nil
	}
	if err != nil {
		return reload.Start{}, err
	}
	if !diff.Empty() {
		logger.Info("configuration directory applied to the definitions", "dir", cfg.Dir, "version", diff.Version, "generation", diff.Generation,
			"added", namesForLog(diff.Added), "changed", namesForLog(diff.Changed), "removed", namesForLog(diff.Removed),
			"orphaned", namesForLog(diff.Orphaned), "adopted", namesForLog(diff.Adopted))
	}
	return reload.Start{Hash: diff.Hash}, nil
}

// ApplyCommand is `apply [--force]`: it checks the configuration
// directory with check (the binary's side of `check`) and applies it to
// the definitions now. A directory that differs from the applied
// generation (another directory, or an older one) is refused, printing
// what it would change, unless --force.
func ApplyCommand(check func(*config.Config) error) Command {
	return Command{
		Name:    "apply",
		Summary: "apply the configuration directory to the definitions now (--force: even when it differs from the applied generation)",
		Run: func(ctx context.Context, env *Env) error {
			fs := flag.NewFlagSet("apply", flag.ContinueOnError)
			force := fs.Bool("force", false, "apply the directory even when it differs from the applied generation (another or an older directory): its definitions replace the files' ones; sources users still watch are orphaned, never deleted")
			if err := env.Parse(fs, env.Args); err != nil {
				return err
			}
			if fs.NArg() > 0 {
				return &UsageError{Msg: fmt.Sprintf("apply takes no arguments, got %q", fs.Args())}
			}
			cfg, err := env.Load()
			if err != nil {
				return err
			}
			if err := check(cfg); err != nil {
				return fmt.Errorf("configuration %s: %w", env.ConfigDir, err)
			}
			pool, err := Open(ctx, true)
			if err != nil {
				return err
			}
			defer pool.Close()
			extra := ""
			if *force {
				extra = " --force"
			}
			diff, err := definitions.Apply(ctx, pool, cfg, definitions.ApplyOptions{Force: *force, By: env.by(extra)})
			if err != nil {
				return err
			}
			fmt.Fprintf(env.Stdout, "configuration %s applied: generation %d (hash %s), config version %d: %s\n",
				env.ConfigDir, diff.Generation, definitions.Short(diff.Hash), diff.Version, diff)
			return nil
		},
	}
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
// start is the outcome of the daemon's ApplyConfig.
func (e *Env) Reloader(pool *pgxpool.Pool, check func(*config.Config) error, m *metrics.Metrics, logger *slog.Logger, start reload.Start) *reload.Reloader {
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
		Apply: func(ctx context.Context, cfg *config.Config, opts definitions.ApplyOptions) (definitions.Diff, error) {
			opts.By = e.by(" (reload)")
			return definitions.Apply(ctx, pool, cfg, opts)
		},
		Applied: func(ctx context.Context) (*definitions.Generation, error) {
			return definitions.AppliedGeneration(ctx, pool)
		},
		Start:   start,
		Binary:  e.Name,
		SIGHUP:  true,
		Metrics: m,
	}, logger)
}

// Follow is the package's Follow whose first load takes the sources
// ApplyConfig applied (KeepParse) when their rows are exactly those
// (definitions.Follower.Reuse), rather than parse them again.
func (e *Env) Follow(ctx context.Context, pool *pgxpool.Pool, g *config.Global, m *metrics.Metrics, apply func(context.Context, *definitions.Delta) error) (*definitions.Follower, error) {
	applied := e.applied
	e.applied = nil
	return follow(ctx, pool, g, m, apply, applied)
}

// Follow returns a follower of the definitions for apply, after loading
// them once (a daemon's start): a daemon's services run with the
// definitions of the database, not with the files.
//
// The sealed credentials of definitions made through the API are opened
// with the key ring of LOOKOUT_SECRET_KEY; a malformed ring is an error,
// a missing one leaves such definitions invalid to this daemon.
func Follow(ctx context.Context, pool *pgxpool.Pool, g *config.Global, m *metrics.Metrics, apply func(context.Context, *definitions.Delta) error) (*definitions.Follower, error) {
	return follow(ctx, pool, g, m, apply, nil)
}

func follow(ctx context.Context, pool *pgxpool.Pool, g *config.Global, m *metrics.Metrics, apply func(context.Context, *definitions.Delta) error, applied *definitions.Applied) (*definitions.Follower, error) {
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
	}).WithKeys(keys).Reuse(applied)
	if _, err := f.CatchUp(ctx); err != nil {
		return nil, fmt.Errorf("load the definitions: %w", err)
	}
	// The start's garbage (the directory's parse, the definitions' rows
	// and JSON) goes back to the system now rather than over minutes: the
	// daemon's resident set is what it holds.
	debug.FreeOSMemory()
	return f, nil
}
