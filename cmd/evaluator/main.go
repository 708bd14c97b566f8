// Command evaluator consumes the change log: it evaluates every change
// against the watches of its source, writes decisions and deduplicated
// notifications, and delivers them to sinks. Run any number of replicas
// against one database.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lookout-dev/lookout/internal/cli"
	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/definitions"
	"github.com/lookout-dev/lookout/internal/drift"
	"github.com/lookout-dev/lookout/internal/evaluator"
	"github.com/lookout-dev/lookout/internal/explain"
	"github.com/lookout-dev/lookout/internal/health"
	"github.com/lookout-dev/lookout/internal/metrics"
	"github.com/lookout-dev/lookout/internal/notify"
	_ "github.com/lookout-dev/lookout/internal/notify/all" // log, webhook, slack, email, command
	"github.com/lookout-dev/lookout/internal/reload"
	"github.com/lookout-dev/lookout/internal/replay"
	"github.com/lookout-dev/lookout/internal/retention"
	"github.com/lookout-dev/lookout/internal/service"
	"github.com/lookout-dev/lookout/internal/watchdog"
)

func main() {
	stop := cpuProfile(os.Getenv("LOOKOUT_CPUPROFILE"))
	code := cli.Main("evaluator", "evaluate changes and deliver notifications", watchSide(commands))
	stop()
	os.Exit(code)
}

// cpuProfile writes a CPU profile of the process to path until stop is
// called (LOOKOUT_CPUPROFILE: where a start's time goes, docs/benchmarks.md
// (13)); an empty path profiles nothing.
func cpuProfile(path string) (stop func()) {
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err != nil {
		fmt.Fprintf(os.Stderr, "evaluator: LOOKOUT_CPUPROFILE: %v\n", err)
		return func() {}
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		fmt.Fprintf(os.Stderr, "evaluator: LOOKOUT_CPUPROFILE: %v\n", err)
		f.Close()
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}
}

// commands are the evaluator's commands (the help test walks them all).
var commands = []cli.Command{
	{Name: "run", Summary: "run the evaluator, delivery and alert daemon until SIGINT/SIGTERM [--listen ADDR: /metrics, /healthz, /readyz; default " + cli.EvaluatorListenDefault + "]", Run: runDaemon},
	{Name: "once", Summary: "evaluate pending changes, check for alerts and deliver due notifications, then exit", Run: runOnce},
	{Name: "explain", Usage: "--change ID | [--limit N] SOURCE RECORD_ID", Summary: "print the decision trail of a change (--change ID) or of a record's changes (SOURCE RECORD_ID), with the watches of the definitions (files and API)", Run: runExplain},
	{Name: "replay", Summary: "re-evaluate stored changes against the current watches of the definitions (files and API) and print how decisions would differ; delivers nothing", Run: runReplay},
	{Name: "retry-dead", Summary: "send dead notifications back to pending (--sink S --watch W --source S --id N)", Run: retryDead},
	{Name: "deliveries", Summary: "list notifications and their delivery state (--status S --sink S --watch W --limit N)", Run: deliveries},
	{Name: "prune", Summary: "delete history older than the retention windows now (--dry-run: count only)", Run: prune},
	cli.ReportCommand(),
	cli.MigrateCommand(),
	cli.ApplyCommand(check),
	cli.CheckCommand(check),
}

// watchSide makes every command read the configuration as the evaluator
// uses it (config.UsesWatches): the secrets of connectors, webhook ingest
// and task executors are the other daemons', and the evaluator needs
// none of them.
func watchSide(commands []cli.Command) []cli.Command {
	for i := range commands {
		run := commands[i].Run
		commands[i].Run = func(ctx context.Context, env *cli.Env) error {
			env.Uses = config.UsesWatches
			return run(ctx, env)
		}
	}
	return commands
}

type parts struct {
	cfg    *config.Config
	pool   *pgxpool.Pool
	logger *slog.Logger
	eval   *evaluator.Evaluator
	rev    *evaluator.Reviews
	del    *notify.Deliverer
	dig    *notify.Digester
	// dry answers the api's dry runs with the model (dry_run_requests).
	dry *replay.Worker
	dog *watchdog.Watchdog
	prn *retention.Pruner
	// drift embeds the model's decisions and alerts on drift (nil when
	// ollama.drift is off).
	drift *drift.Service
	// follower keeps the evaluator's watches those of the definitions.
	follower *definitions.Follower
	// start is the outcome of the start's apply (its reloader reports a
	// refused directory).
	start reload.Start
}

// setup checks the configuration directory, applies it to the
// definitions, and builds the evaluator from the definitions of the
// database (the files' and those made through the API).
func setup(ctx context.Context, env *cli.Env, m *metrics.Metrics) (*parts, error) {
	env.Uses = config.UsesWatches
	cfg, err := env.Load()
	if err != nil {
		return nil, err
	}
	if err := check(cfg); err != nil {
		return nil, fmt.Errorf("configuration %s: %w", env.ConfigDir, err)
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
	env.KeepParse = true // for the follower's first load: each file parsed once
	start, err := env.ApplyConfig(ctx, pool, cfg, logger)
	if err != nil {
		pool.Close()
		return nil, err
	}
	rconf := retention.FromConfig(cfg.Global.Retention)
	rconf.Metrics = m
	p := &parts{cfg: cfg, pool: pool, logger: logger, prn: retention.New(pool, rconf, logger), start: start}
	dconf := notify.DelivererConfigFrom(&cfg.Global)
	dconf.Metrics = m
	if err := ownChannels(pool, &cfg.Global, sinks, &dconf); err != nil {
		pool.Close()
		return nil, err
	}
	if err := ownWebhooks(pool, &cfg.Global, sinks, &dconf); err != nil {
		pool.Close()
		return nil, err
	}
	p.del = notify.NewDeliverer(pool, sinks, dconf, logger)
	wconf := watchdog.FromConfig(cfg)
	wconf.Sources = nil // from the definitions, as the evaluator's watches
	wconf.Metrics, wconf.OnAlert = m, func(int) { p.del.Wake() }
	p.dog = watchdog.New(pool, wconf, logger)
	econf := evaluator.FromConfig(cfg)
	econf.Sources = nil // from the definitions
	econf.Metrics = m
	econf.OnBatch = func(n int) {
		if n > 0 {
			p.del.Wake()
		}
	}
	p.eval, err = evaluator.New(pool, econf, logger)
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("configuration %s: %w", env.ConfigDir, err)
	}
	// The evaluator's watches and the watchdog's stale check follow the
	// same definitions (files and API), reloads included.
	follow := func(ctx context.Context, d *definitions.Delta) error {
		if err := p.eval.Apply(ctx, d); err != nil {
			return err
		}
		return p.dog.Apply(ctx, d)
	}
	if p.follower, err = env.Follow(ctx, pool, &cfg.Global, m, follow); err != nil {
		pool.Close()
		return nil, err
	}
	p.eval.Follow(p.follower)
	p.dry = p.eval.DryRuns(&cfg.Global)
	vconf := evaluator.ReviewConfig{OnAlert: p.del.Wake}
	if cfg.Global.Alerts.On() {
		vconf.AlertSinks = cfg.Global.Alerts.Notify
	}
	if p.rev, err = p.eval.Reviews(vconf); err != nil {
		pool.Close()
		return nil, err
	}
	gconf := notify.DigesterConfigFrom(&cfg.Global)
	gconf.OnDigest = func(int) { p.del.Wake() }
	briefer, err := p.eval.Briefer()
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("configuration %s: %w", env.ConfigDir, err)
	}
	if gconf.Summarizer, err = notify.SummarizerFrom(cfg, briefer, logger); err != nil {
		pool.Close()
		return nil, fmt.Errorf("configuration %s: %w", env.ConfigDir, err)
	}
	p.dig = notify.NewDigester(pool, p.eval.Composer(), gconf, logger)
	if dc, on := drift.FromConfig(&cfg.Global); on {
		emb, err := p.eval.Embedder()
		if err != nil {
			pool.Close()
			return nil, fmt.Errorf("configuration %s: %w", env.ConfigDir, err)
		}
		dc.Owner = p.eval.Owner()
		if p.drift, err = drift.New(pool, emb, dc, logger); err != nil {
			pool.Close()
			return nil, fmt.Errorf("configuration %s: %w", env.ConfigDir, err)
		}
	}
	return p, nil
}

func runDaemon(ctx context.Context, env *cli.Env) error {
	listen, err := cli.RunFlags(env, cli.EvaluatorListenDefault)
	if err != nil {
		return err
	}
	m := metrics.New()
	p, err := setup(ctx, env, m)
	if err != nil {
		return err
	}
	defer p.pool.Close()
	cli.HeapProfile("evaluator", os.Getenv("LOOKOUT_HEAPPROFILE"))
	sinks := append(slices.Sorted(maps.Keys(p.cfg.Global.Sinks)), config.OwnWebhookSink, config.OwnChannelSink)
	m.CollectDatabase(p.pool, metrics.OutboxGauges, sinks, 0)
	watcher := definitions.NewWatcher(p.pool, p.follower, definitions.WatcherConfig{CatchUpInterval: p.cfg.Global.Evaluator.CatchUpInterval}, p.logger)
	reloader := env.Reloader(p.pool, check, m, p.logger, p.start)
	// Started in order, stopped in reverse: each Stop waits for its work.
	return cli.Supervise(ctx, listen, m, []health.Check{
		health.Database(p.pool), health.Migrations(p.pool),
		health.Listener("changes_listener", p.eval.Listening), health.Listener("outbox_listener", p.del.Listening),
		health.Listener("config_listener", watcher.Listening), reloader.Check(),
		// A watch it cannot build holds its source's changes back: shown,
		// not fatal (the other sources are evaluated).
		{Name: "watches", Advisory: true, Run: func(context.Context) error { return p.eval.Unbuilt() }},
	}, p.logger, p.services(watcher, reloader)...)
}

// services are the daemon's services, started in this order.
func (p *parts) services(watcher *definitions.Watcher, reloader service.Service) []service.Service {
	s := []service.Service{watcher, p.del, p.dig, p.eval, p.rev, p.dry, p.dog, p.prn}
	if p.drift != nil {
		s = append(s, p.drift)
	}
	return append(s, reloader)
}

// runOnce does what is due and exits 1 when an evaluation errored or was
// held, or a delivery attempt failed; 2 when it could not run
// (configuration, database).
func runOnce(ctx context.Context, env *cli.Env) error {
	if err := env.NoArgs("once"); err != nil {
		return err
	}
	m := metrics.New()
	p, err := setup(ctx, env, m)
	if err != nil {
		return &cli.ExitError{Code: cli.ExitSetup, Err: err}
	}
	defer p.pool.Close()
	n, err := p.eval.Drain(ctx)
	if err != nil {
		return &cli.ExitError{Code: cli.ExitSetup, Err: err}
	}
	if _, err := p.rev.Once(ctx); err != nil {
		return &cli.ExitError{Code: cli.ExitSetup, Err: err}
	}
	g, err := p.dig.RunDue(ctx)
	if err != nil {
		return &cli.ExitError{Code: cli.ExitSetup, Err: err}
	}
	alerts := 0
	if p.cfg.Global.Alerts.On() {
		res, err := p.dog.Check(ctx)
		if err != nil {
			return &cli.ExitError{Code: cli.ExitSetup, Err: err}
		}
		alerts = len(res.Raised)
	}
	if p.drift != nil {
		// Before the deliveries, so that a drift alert is delivered too.
		res, err := p.drift.Pass(ctx)
		if err != nil {
			return &cli.ExitError{Code: cli.ExitSetup, Err: err}
		}
		fmt.Fprintf(env.Stdout, "drift: queued %d decision(s), embedded %d, held %d, recorded %d model version(s), raised %d alert(s)\n",
			res.Fed, res.Embedded, res.Held, res.Versions, res.Alerts)
	}
	d, err := p.del.DeliverDue(ctx)
	fmt.Fprintf(env.Stdout, "evaluated %d change(s), built %d digest(s), raised %d alert(s), made %d delivery attempt(s)\n", n, g, alerts, d)
	if err != nil {
		return &cli.ExitError{Code: cli.ExitSetup, Err: err}
	}
	if f := m.Failures(); f.Any() {
		return &cli.ExitError{Code: cli.ExitFailures, Err: fmt.Errorf(
			"%d evaluation(s) errored or were held for the model, %d delivery attempt(s) failed (reasons in evaluations.reason and notifications.last_error, and in the log)",
			f.Evaluations, f.Deliveries)}
	}
	return nil
}

func runExplain(ctx context.Context, env *cli.Env) error {
	fs := flag.NewFlagSet("explain", flag.ContinueOnError)
	changeID := fs.Int64("change", 0, "explain the change with this `id`")
	limit := fs.Int("limit", 10, "with SOURCE RECORD_ID: show the newest `n` changes of the record")
	if err := env.Parse(fs, env.Args); err != nil {
		return err
	}
	q := explain.Query{ChangeID: *changeID, Limit: *limit}
	switch {
	case *changeID != 0 && fs.NArg() == 0:
	case *changeID == 0 && fs.NArg() == 1:
		id, err := strconv.ParseInt(fs.Arg(0), 10, 64)
		if err != nil {
			return &cli.UsageError{Msg: fmt.Sprintf("want --change ID or SOURCE RECORD_ID, not %q", fs.Arg(0))}
		}
		q.ChangeID = id
	case *changeID == 0 && fs.NArg() == 2:
		q.Source, q.RecordID = fs.Arg(0), fs.Arg(1)
	default:
		return &cli.UsageError{Msg: "want --change ID, or SOURCE RECORD_ID"}
	}
	cfg, err := env.Load()
	if err != nil {
		return err
	}
	pool, err := cli.Open(ctx, false)
	if err != nil {
		return err
	}
	defer pool.Close()
	// The watches are the definitions' (files as applied, and the API's).
	snap, err := loadDefinitions(ctx, pool, &cfg.Global)
	if err != nil {
		return err
	}
	trails, err := explain.Trails(ctx, pool, snap.Config, q)
	if err != nil {
		return err
	}
	explain.WriteTrails(env.Stdout, trails)
	return nil
}

func runReplay(ctx context.Context, env *cli.Env) error {
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	since := fs.String("since", "24h", "replay changes created since this `time` (RFC 3339, or a duration back from now such as 24h)")
	until := fs.String("until", "", "and before this `time` (RFC 3339 or a duration back from now); default now")
	source := fs.String("source", "", "only changes of this `source`")
	watch := fs.String("watch", "", "only this `watch` (the one you are testing)")
	noModel := fs.Bool("no-model", false, "do not call the model: use cached verdicts only (others show as unknown)")
	maxCalls := fs.Int("max-calls", 100, "call the model at most `n` times (0: no limit)")
	all := fs.Bool("all", false, "print every decision, not only those that would change")
	files := fs.Bool("files", false, "replay the watches of the configuration files as they are now (an edit the daemons have not applied yet), not the definitions of the database")
	if err := env.Parse(fs, env.Args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return &cli.UsageError{Msg: fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	}
	now := time.Now()
	q := replay.Query{Source: *source, Watch: *watch, NoModel: *noModel, MaxCalls: *maxCalls}
	if *maxCalls == 0 {
		q.MaxCalls = -1
	}
	var err error
	if q.Since, err = parseTime(*since, now); err != nil {
		return &cli.UsageError{Msg: "--since: " + err.Error()}
	}
	if *until != "" {
		if q.Until, err = parseTime(*until, now); err != nil {
			return &cli.UsageError{Msg: "--until: " + err.Error()}
		}
	}
	cfg, err := env.Load()
	if err != nil {
		return err
	}
	logger := env.Logger(cfg, "evaluator")
	pool, err := cli.Open(ctx, false)
	if err != nil {
		return err
	}
	defer pool.Close()
	conf := evaluator.FromConfig(cfg)
	conf.Owner = "replay"
	if !*files {
		conf.Sources = nil // from the definitions
	}
	ev, err := evaluator.New(pool, conf, logger)
	if err != nil {
		return fmt.Errorf("configuration %s: %w", env.ConfigDir, err)
	}
	if !*files {
		// The current watches are the definitions' (the files as the
		// daemons applied them, and those made through the API), as the
		// evaluator runs them: paused ones left out.
		snap, err := loadDefinitions(ctx, pool, &cfg.Global)
		if err != nil {
			return err
		}
		if err := ev.Apply(ctx, snap.Delta()); err != nil {
			return err
		}
	}
	rep, err := ev.Replay(ctx, q)
	if err != nil {
		return err
	}
	return replay.Write(env.Stdout, rep, *all)
}

// parseTime reads an RFC 3339 time or a duration back from now.
func parseTime(s string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil {
		if d < 0 {
			return time.Time{}, fmt.Errorf("duration %q must be positive (it counts back from now)", s)
		}
		return now.Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is neither a duration (24h) nor an RFC 3339 time (2026-11-30T08:00:00Z)", s)
	}
	return t, nil
}
