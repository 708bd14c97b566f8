// Command evaluator consumes the change log: it evaluates every change
// against the watches of its source, writes decisions and deduplicated
// notifications, and delivers them to sinks. Run any number of replicas
// against one database.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lookout-dev/lookout/internal/cli"
	"github.com/lookout-dev/lookout/internal/evaluator"
	"github.com/lookout-dev/lookout/internal/notify"
)

func main() {
	os.Exit(cli.Main("evaluator", "evaluate changes and deliver notifications", []cli.Command{
		{Name: "run", Summary: "run the evaluator and delivery daemon until SIGINT/SIGTERM", Run: runDaemon},
		{Name: "once", Summary: "evaluate pending changes and deliver due notifications, then exit", Run: runOnce},
		{Name: "retry-dead", Summary: "send dead notifications back to pending (--sink S --watch W --source S --id N)", Run: retryDead},
		{Name: "deliveries", Summary: "list notifications and their delivery state (--status S --sink S --watch W --limit N)", Run: deliveries},
		cli.MigrateCommand(),
		cli.CheckCommand(cli.BuildAll),
	}))
}

type parts struct {
	pool *pgxpool.Pool
	eval *evaluator.Evaluator
	del  *notify.Deliverer
	dig  *notify.Digester
}

func setup(ctx context.Context, env *cli.Env) (*parts, error) {
	cfg, err := env.Load()
	if err != nil {
		return nil, err
	}
	logger := env.Logger(cfg, "evaluator")
	sinks, err := notify.BuildSinks(&cfg.Global, logger)
	if err != nil {
		return nil, fmt.Errorf("configuration %s: %w", env.ConfigDir, err)
	}
	pool, err := cli.Open(ctx, true)
	if err != nil {
		return nil, err
	}
	composer, err := notify.NewComposer(cfg)
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("configuration %s: %w", env.ConfigDir, err)
	}
	p := &parts{pool: pool}
	p.del = notify.NewDeliverer(pool, &cfg.Global, sinks, notify.DelivererConfig{}, logger)
	p.dig = notify.NewDigester(pool, &cfg.Global, composer, notify.DigesterConfig{OnDigest: func(int) { p.del.Wake() }}, logger)
	p.eval, err = evaluator.New(pool, cfg, evaluator.Config{OnBatch: func(n int) {
		if n > 0 {
			p.del.Wake()
		}
	}}, logger)
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("configuration %s: %w", env.ConfigDir, err)
	}
	return p, nil
}

func runDaemon(ctx context.Context, env *cli.Env) error {
	p, err := setup(ctx, env)
	if err != nil {
		return err
	}
	defer p.pool.Close()
	if err := p.del.Start(ctx); err != nil {
		return err
	}
	if err := p.dig.Start(ctx); err != nil {
		p.del.Stop()
		return err
	}
	if err := p.eval.Start(ctx); err != nil {
		p.dig.Stop()
		p.del.Stop()
		return err
	}
	<-ctx.Done()
	return errors.Join(p.eval.Stop(), p.dig.Stop(), p.del.Stop())
}

func runOnce(ctx context.Context, env *cli.Env) error {
	p, err := setup(ctx, env)
	if err != nil {
		return err
	}
	defer p.pool.Close()
	n, err := p.eval.Drain(ctx)
	if err != nil {
		return err
	}
	g, err := p.dig.RunDue(ctx)
	if err != nil {
		return err
	}
	d, err := p.del.DeliverDue(ctx)
	fmt.Fprintf(env.Stdout, "evaluated %d change(s), built %d digest(s), made %d delivery attempt(s)\n", n, g, d)
	return err
}
