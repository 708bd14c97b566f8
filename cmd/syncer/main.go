// Command syncer mirrors the configured sources into PostgreSQL: it owns
// schedules, leases, rate limits and connectors, and writes records and
// changes. Run any number of replicas against one database.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/lookout-dev/lookout/internal/cli"
	_ "github.com/lookout-dev/lookout/internal/connectors/all" // file, github, http, rss
	"github.com/lookout-dev/lookout/internal/syncer"
)

func main() {
	os.Exit(cli.Main("syncer", "mirror sources into PostgreSQL", []cli.Command{
		{Name: "run", Summary: "run the syncer daemon until SIGINT/SIGTERM", Run: runDaemon},
		{Name: "once", Summary: "run every due source once, then exit (cron, CronJob, tests)", Run: runOnce},
		cli.MigrateCommand(),
		cli.CheckCommand(cli.BuildAll),
	}))
}

func setup(ctx context.Context, env *cli.Env) (*syncer.Syncer, func(), error) {
	cfg, err := env.Load()
	if err != nil {
		return nil, nil, err
	}
	logger := env.Logger(cfg, "syncer")
	pool, err := cli.Open(ctx, true)
	if err != nil {
		return nil, nil, err
	}
	s, err := syncer.New(pool, cfg, syncer.Config{}, logger)
	if err != nil {
		pool.Close()
		return nil, nil, fmt.Errorf("configuration %s: %w", env.ConfigDir, err)
	}
	return s, pool.Close, nil
}

func runDaemon(ctx context.Context, env *cli.Env) error {
	s, closeFn, err := setup(ctx, env)
	if err != nil {
		return err
	}
	defer closeFn()
	if err := s.Start(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	return s.Stop()
}

func runOnce(ctx context.Context, env *cli.Env) error {
	s, closeFn, err := setup(ctx, env)
	if err != nil {
		return err
	}
	defer closeFn()
	if err := s.Register(ctx); err != nil {
		return err
	}
	n, err := s.RunDue(ctx)
	fmt.Fprintf(env.Stdout, "ran %d source(s)\n", n)
	return err
}
