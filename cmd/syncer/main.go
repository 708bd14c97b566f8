// Command syncer mirrors the configured sources into PostgreSQL: it owns
// schedules, leases, rate limits and connectors, and writes records and
// changes. Run any number of replicas against one database.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lookout-dev/lookout/internal/cli"
	_ "github.com/lookout-dev/lookout/internal/connectors/all" // file, github, http, imap, notion, postgres, rss, web
	"github.com/lookout-dev/lookout/internal/definitions"
	"github.com/lookout-dev/lookout/internal/health"
	"github.com/lookout-dev/lookout/internal/metrics"
	"github.com/lookout-dev/lookout/internal/reload"
	"github.com/lookout-dev/lookout/internal/sources"
	"github.com/lookout-dev/lookout/internal/syncer"
	"github.com/lookout-dev/lookout/internal/taskrunner"
	"github.com/lookout-dev/lookout/internal/tasks"
)

func main() {
	os.Exit(cli.Main("syncer", "mirror sources into PostgreSQL", commands))
}

// commands are the syncer's commands (the help test walks them all).
var commands = []cli.Command{
	{Name: "run", Summary: "run the syncer daemon until SIGINT/SIGTERM [--listen ADDR: /metrics, /healthz, /readyz; default " + cli.SyncerListenDefault + "]", Run: runDaemon},
	{Name: "once", Summary: "run every due source once, then exit (cron, CronJob, tests)", Run: runOnce},
	{Name: "status", Summary: "show every source: status, next run, interval, failures, lease, last error", Run: status},
	{Name: "pause", Summary: "pause SOURCE [--reason TEXT]: stop scheduling it until resume", Run: pause},
	{Name: "resume", Summary: "resume SOURCE: make a paused, disabled or completed source active and due now", Run: resume},
	{Name: "run-now", Summary: "run-now SOURCE: run an active source at the next poll, whatever its schedule", Run: runNow},
	{Name: "tasks", Summary: "tasks [SOURCE [RECORD_ID]] [--limit N]: the task runs, newest first: status, attempts, who claimed, how long, why it failed", Run: taskRuns},
	cli.ReportCommand(),
	cli.MigrateCommand(),
	cli.ApplyCommand(check),
	checkCommand(),
}

// daemon is a configured syncer and what it runs with.
type daemon struct {
	syncer   *syncer.Syncer
	tasks    *taskrunner.Runner
	follower *definitions.Follower
	pool     *pgxpool.Pool
	logger   *slog.Logger
	gauges   metrics.Gauges // the database gauges of /metrics (metrics.per_source)
	// start is the outcome of the start's apply (its reloader reports a
	// refused directory).
	start reload.Start
}

// setup checks the configuration directory, applies it to the
// definitions, and builds the syncer from the definitions of the
// database (the files' and those made through the API).
func setup(ctx context.Context, env *cli.Env, m *metrics.Metrics) (*daemon, error) {
	defer lowerGC(startGCPercent)()
	cfg, err := env.Load()
	if err != nil {
		return nil, err
	}
	if err := check(cfg); err != nil {
		return nil, fmt.Errorf("configuration %s: %w", env.ConfigDir, err)
	}
	logger := env.Logger(cfg, "syncer")
	pool, err := cli.OpenSized(ctx, true, syncer.PoolConns)
	if err != nil {
		return nil, err
	}
	start, err := env.ApplyConfig(ctx, pool, cfg, logger)
	if err != nil {
		pool.Close()
		return nil, err
	}
	conf := syncer.FromConfig(cfg)
	conf.Sources = nil // from the definitions
	conf.Metrics = m
	// After every run of a source with task watches, its pass (docs/tasks.md).
	var runner *taskrunner.Runner
	conf.AfterRun = func(source string, runID int64) { runner.AfterRun(source, runID) }
	s, err := syncer.New(pool, conf, logger)
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("configuration %s: %w", env.ConfigDir, err)
	}
	tc := taskrunner.FromConfig(cfg)
	tc.Metrics = m
	tc.HTTP = &http.Client{Transport: cfg.Global.Egress.Policy().Transport()}
	if runner, err = taskrunner.New(pool, tc, s, logger); err != nil {
		pool.Close()
		return nil, fmt.Errorf("configuration %s: %w", env.ConfigDir, err)
	}
	f, err := cli.Follow(ctx, pool, &cfg.Global, m, s.Apply)
	if err != nil {
		pool.Close()
		return nil, err
	}
	gauges := metrics.SourceGauges
	if cfg.Global.Metrics.PerSource {
		gauges |= metrics.PerSourceGauges
	}
	return &daemon{syncer: s, tasks: runner, follower: f, pool: pool, logger: logger, gauges: gauges, start: start}, nil
}

// startGCPercent is the garbage collector's target percent while the
// daemon starts (setup): the start parses every definition twice (the
// directory's and the follower's parse) and builds every source among
// that garbage. At the default 100 the heap doubles before a collection,
// and the built sources end up scattered over spans the garbage filled,
// which stay resident once the garbage is gone (docs/benchmarks.md, (13)).
const startGCPercent = 20

// lowerGC sets the garbage collector's percent to percent, unless it is
// lower already or off (GOGC), and returns the function that restores it.
func lowerGC(percent int) (restore func()) {
	prev := debug.SetGCPercent(percent)
	if prev < 0 || prev <= percent {
		debug.SetGCPercent(prev)
		return func() {}
	}
	return func() { debug.SetGCPercent(prev) }
}

func runDaemon(ctx context.Context, env *cli.Env) error {
	listen, err := cli.RunFlags(env, cli.SyncerListenDefault)
	if err != nil {
		return err
	}
	m := metrics.New()
	d, err := setup(ctx, env, m)
	if err != nil {
		return err
	}
	defer d.pool.Close()
	cli.HeapProfile("syncer", os.Getenv("LOOKOUT_HEAPPROFILE"))
	m.CollectDatabase(d.pool, d.gauges, nil, 0)
	watcher := definitions.NewWatcher(d.pool, d.follower, definitions.WatcherConfig{OnWake: d.syncer.Wake}, d.logger)
	reloader := env.Reloader(d.pool, check, m, d.logger, d.start)
	events := d.syncer.Events(syncer.EventsConfig{})
	return cli.Supervise(ctx, listen, m, []health.Check{health.Database(d.pool), health.Migrations(d.pool),
		health.Listener("config_listener", watcher.Listening), health.Listener("inbound_listener", events.Listening), reloader.Check()},
		d.logger, d.tasks, d.syncer, events, watcher, reloader)
}

// runOnce runs what is due and exits 1 when a run failed, 2 when it could
// not run (configuration, database).
func runOnce(ctx context.Context, env *cli.Env) error {
	if err := env.NoArgs("once"); err != nil {
		return err
	}
	m := metrics.New()
	d, err := setup(ctx, env, m)
	if err != nil {
		return &cli.ExitError{Code: cli.ExitSetup, Err: err}
	}
	defer d.pool.Close()
	if err := d.syncer.Register(ctx); err != nil {
		return &cli.ExitError{Code: cli.ExitSetup, Err: err}
	}
	n, err := d.syncer.RunDue(ctx)
	fmt.Fprintf(env.Stdout, "ran %d source(s)\n", n)
	if err != nil {
		return &cli.ExitError{Code: cli.ExitSetup, Err: err}
	}
	events, err := d.syncer.Events(syncer.EventsConfig{}).Drain(ctx)
	if events > 0 {
		fmt.Fprintf(env.Stdout, "mirrored %d webhook event(s)\n", events)
	}
	if err != nil {
		return &cli.ExitError{Code: cli.ExitSetup, Err: err}
	}
	d.tasks.Once(ctx)
	if f := m.Failures(); f.Any() {
		failed := f.FailedSources()
		return &cli.ExitError{Code: cli.ExitFailures, Err: fmt.Errorf("%d of %d run(s) failed: %s (the errors are in sync_runs.error; see syncer status)",
			len(failed), n, strings.Join(failed, ", "))}
	}
	return nil
}

// sourceArg parses "SOURCE [flags]" or "[flags] SOURCE" for an operator
// command, with the flags fs defines.
func sourceArg(env *cli.Env, fs *flag.FlagSet) (string, error) {
	if err := env.Parse(fs, env.Args); err != nil {
		return "", err
	}
	args := fs.Args()
	if len(args) > 0 {
		if err := env.Parse(fs, args[1:]); err != nil {
			return "", err
		}
		args = append(args[:1], fs.Args()...)
	}
	if len(args) != 1 {
		return "", &cli.UsageError{Msg: fmt.Sprintf("want exactly one source name, got %d argument(s)", len(args))}
	}
	return args[0], nil
}

func status(ctx context.Context, env *cli.Env) error {
	if err := env.NoArgs("status"); err != nil {
		return err
	}
	pool, err := cli.Open(ctx, false)
	if err != nil {
		return err
	}
	defer pool.Close()
	states, err := sources.States(ctx, pool)
	if err != nil {
		return err
	}
	return sources.WriteStatus(env.Stdout, states, time.Now())
}

func pause(ctx context.Context, env *cli.Env) error {
	fs := flag.NewFlagSet("pause", flag.ContinueOnError)
	reason := fs.String("reason", "", "why, stored in sources.status_reason (default \"paused by operator\")")
	name, err := sourceArg(env, fs)
	if err != nil {
		return err
	}
	pool, err := cli.Open(ctx, false)
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := sources.Pause(ctx, pool, name, *reason, time.Now()); err != nil {
		return err
	}
	fmt.Fprintf(env.Stdout, "paused %s\n", name)
	return nil
}

func resume(ctx context.Context, env *cli.Env) error {
	name, err := sourceArg(env, flag.NewFlagSet("resume", flag.ContinueOnError))
	if err != nil {
		return err
	}
	pool, err := cli.Open(ctx, false)
	if err != nil {
		return err
	}
	defer pool.Close()
	_, st, err := definitions.NewStore(pool, nil).ResumeSource(ctx, definitions.Actor{Owner: "operator", Admin: true}, name, time.Now())
	if err != nil {
		return err
	}
	if st == nil {
		fmt.Fprintf(env.Stdout, "resumed the definition of %s; the syncers register it\n", name)
		return nil
	}
	if st.PreviousStatus == "active" {
		fmt.Fprintf(env.Stdout, "%s was already active\n", name)
		return nil
	}
	fmt.Fprintf(env.Stdout, "resumed %s (was %s); it is due now\n", name, st.PreviousStatus)
	return nil
}

func runNow(ctx context.Context, env *cli.Env) error {
	name, err := sourceArg(env, flag.NewFlagSet("run-now", flag.ContinueOnError))
	if err != nil {
		return err
	}
	pool, err := cli.Open(ctx, false)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := sources.RunNow(ctx, pool, name, time.Now()); err != nil {
		return err
	}
	fmt.Fprintf(env.Stdout, "requested a run of %s; a syncer picks it up at its next poll\n", name)
	return nil
}

// taskRuns lists task runs: syncer tasks [SOURCE [RECORD_ID]].
func taskRuns(ctx context.Context, env *cli.Env) error {
	fs := flag.NewFlagSet("tasks", flag.ContinueOnError)
	limit := fs.Int("limit", 20, "the most runs listed")
	var args []string
	rest := env.Args
	for len(rest) > 0 {
		if err := env.Parse(fs, rest); err != nil {
			return err
		}
		if rest = fs.Args(); len(rest) > 0 {
			args, rest = append(args, rest[0]), rest[1:]
		}
	}
	if len(args) > 2 {
		return &cli.UsageError{Msg: fmt.Sprintf("want at most a source and a record id, got %d arguments", len(args))}
	}
	args = append(args, "", "")
	pool, err := cli.Open(ctx, false)
	if err != nil {
		return err
	}
	defer pool.Close()
	runs, err := tasks.List(ctx, pool, args[0], args[1], *limit)
	if err != nil {
		return err
	}
	return tasks.WriteRuns(env.Stdout, runs, time.Now())
}
