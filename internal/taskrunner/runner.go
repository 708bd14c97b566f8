// Package taskrunner runs the task watches of the syncer deployment
// (docs/tasks.md): after every run of a source with tasks:, a pass reads
// the source's mirrored records, keeps those a task watch's `when` makes
// eligible, orders them and claims up to `take` of them in PostgreSQL
// (internal/tasks: the claim that counts), then for each: writes the
// visible claim to the tool and reads it back (connectors.Actor),
// executes it once (a command or a webhook) and moves it to a terminal
// state in the tool and in task_runs. A maintenance loop recovers claims
// that expired (back to todo or failed, per on_expiry), finishes runs an
// agent reported on through the api, and retries writes to the tool that
// failed.
//
// It runs in the syncer because acting on a tool is upstream I/O: it uses
// the source's own connector (Syncer.Actor), whose requests spend the
// source's and the host's budgets like the runs do. Any number of replicas
// may run it: claims are rows of task_runs, taken with INSERT … ON
// CONFLICT DO NOTHING or a conditional UPDATE.
package taskrunner

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/connectors"
	"github.com/lookout-dev/lookout/internal/metrics"
	"github.com/lookout-dev/lookout/internal/normalize"
	"github.com/lookout-dev/lookout/internal/redact"
	"github.com/lookout-dev/lookout/internal/service"
)

// Defaults of Config.
const (
	TickDefault  = 15 * time.Second
	GraceDefault = 30 * time.Second
)

// Config are the task runner's typed settings; New uses them as given.
type Config struct {
	// Owner names this replica in claims (task_runs.claimed_by, ClaimedBy
	// in the tool). Defaults to lookout@hostname:pid.
	Owner string
	// Tick is how often the maintenance runs: expired claims, agents'
	// reports, writes to the tool that failed. Defaults to 15s.
	Tick time.Duration
	// Grace is how long after a claim expired its recovery waits (the
	// holder may be writing its end), and how long a finished run's write
	// to the tool is left to its own replica before any replica retries
	// it. Defaults to 30s.
	Grace time.Duration
	// HTTP sends the webhook executors' requests. Defaults to a client
	// without timeout (each request is bounded by the task's timeout).
	HTTP *http.Client
	// Now is the clock of claims. Defaults to time.Now.
	Now func() time.Time
	// Redactor hides configured secrets in stored errors. Defaults to nil.
	Redactor *redact.Redactor
	// Metrics counts task runs. Defaults to nil: nothing is recorded.
	Metrics *metrics.Metrics
	// Hooks are test hooks. Defaults to none.
	Hooks Hooks
}

// Hooks let tests act between the steps of a task run.
type Hooks struct {
	// AfterClaim runs after the visible claim was written, before it is
	// read back.
	AfterClaim func(source, recordID, runID string)
	// ExecTimeout, when set, bounds an execution instead of
	// context.WithTimeout(ctx, timeout): a test ends the execution when
	// the executor's state says it hangs, not when a timer fires on a
	// machine of unknown speed.
	ExecTimeout func(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc)
}

// FromConfig returns the task runner settings of a loaded configuration
// directory: syncer.tasks_interval and syncer.tasks_grace, its secrets'
// redactor. Owner, Now, HTTP and Metrics are left for the caller.
func FromConfig(cfg *config.Config) Config {
	return Config{Tick: cfg.Global.Syncer.TasksInterval, Grace: cfg.Global.Syncer.TasksGrace, Redactor: cfg.Global.Redactor()}
}

// Sources is what the runner needs of the syncer (*syncer.Syncer): the
// sources it runs now, which change at runtime with the definitions.
type Sources interface {
	// TaskSource returns the definition of source name and its connector
	// when it is run and its connector can act on tasks.
	TaskSource(name string) (*config.Source, connectors.Actor, bool)
	// TaskSources lists the sources run that have task watches.
	TaskSources() []string
}

// Runner is the task runner service.
type Runner struct {
	pool   *pgxpool.Pool
	conf   Config
	logger *slog.Logger
	srcs   Sources

	built   sync.Mutex
	sources map[string]*source // built task watches, by source

	loop service.Loop
	wake chan struct{}
	work sync.WaitGroup // task runs in progress
	mu   sync.Mutex
	due  map[string]int64 // sources whose pass is due, with the run that made it so
}

// source is a source with task watches, built from one definition.
type source struct {
	cfg      *config.Source
	actor    connectors.Actor
	watches  []*watch
	err      error // the definition's task watches do not build
	verified atomic.Bool
}

// watch is a compiled task watch.
type watch struct {
	cfg     *config.Task
	when    *normalize.Condition
	order   []config.TaskOrder
	exec    executor
	backoff service.Backoff
}

// New returns the runner of the task watches of the sources srcs runs.
// A source's task watches are built from its definition when a pass or
// the maintenance first needs them, and again when the definition
// changes; one that does not build is logged and skipped (config.Load and
// Check refuse them before).
func New(pool *pgxpool.Pool, conf Config, srcs Sources, logger *slog.Logger) (*Runner, error) {
	if conf.Owner == "" {
		host, _ := os.Hostname()
		conf.Owner = fmt.Sprintf("lookout@%s:%d", cmp.Or(host, "syncer"), os.Getpid())
	}
	conf.Tick = cmp.Or(conf.Tick, TickDefault)
	conf.Grace = cmp.Or(conf.Grace, GraceDefault)
	if conf.Now == nil {
		conf.Now = time.Now
	}
	if conf.HTTP == nil {
		conf.HTTP = &http.Client{}
	}
	return &Runner{pool: pool, conf: conf, logger: logger.With("component", "tasks"), srcs: srcs,
		sources: map[string]*source{}, wake: make(chan struct{}, 1), due: map[string]int64{}}, nil
}

// source returns the task watches of source name as currently defined, or
// nil when it has none, is not run, cannot act, or its task watches do
// not build (logged once per definition).
func (r *Runner) source(name string) *source {
	src, err := r.lookup(name)
	if err != nil {
		return nil
	}
	return src
}

func (r *Runner) lookup(name string) (*source, error) {
	cfg, actor, ok := r.srcs.TaskSource(name)
	r.built.Lock()
	defer r.built.Unlock()
	if cfg == nil || len(cfg.Tasks) == 0 {
		delete(r.sources, name)
		return nil, nil
	}
	if src := r.sources[name]; src != nil && src.cfg == cfg {
		return src, src.err
	}
	src := &source{cfg: cfg, actor: actor}
	var errs []error
	if !ok {
		errs = append(errs, cfg.Errorf("tasks", "the %s connector cannot act on tasks (notion and github can, with their task: block)", cfg.Connector))
	}
	for i, t := range cfg.Tasks {
		w, err := r.build(cfg, i, t)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		src.watches = append(src.watches, w)
	}
	if src.err = errors.Join(errs...); src.err != nil {
		r.logger.Error("task watches refused; the source's tasks are not run", "source", name, "error", r.conf.Redactor.Error(src.err))
	}
	r.sources[name] = src
	return src, src.err
}

// static is the Sources of a configuration directory, for Check.
type static struct {
	cfg    *config.Config
	actors map[string]connectors.Actor
}

func (s static) TaskSource(name string) (*config.Source, connectors.Actor, bool) {
	for _, sc := range s.cfg.Sources {
		if sc.Name == name {
			a, ok := s.actors[name]
			return sc, a, ok
		}
	}
	return nil, nil, false
}

func (s static) TaskSources() []string {
	var names []string
	for _, sc := range s.cfg.Sources {
		if len(sc.Tasks) > 0 {
			names = append(names, sc.Name)
		}
	}
	return names
}

// Check builds the task watches of cfg's sources without a database or
// any request: that each connector can act, the expressions, the
// executors (a command that does not exist). It is the syncer's config
// check.
func Check(cfg *config.Config) error {
	st := static{cfg: cfg, actors: map[string]connectors.Actor{}}
	for _, sc := range cfg.Sources {
		if len(sc.Tasks) == 0 {
			continue
		}
		conn, err := connectors.New(sc, connectors.Env{Dir: cfg.Dir, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			return err
		}
		if a, ok := conn.(connectors.Actor); ok {
			st.actors[sc.Name] = a
		}
	}
	r, _ := New(nil, FromConfig(cfg), st, slog.New(slog.DiscardHandler))
	var errs []error
	for _, name := range st.TaskSources() {
		if _, err := r.lookup(name); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (r *Runner) build(sc *config.Source, i int, t *config.Task) (*watch, error) {
	key := fmt.Sprintf("tasks[%d]", i)
	when, err := normalize.CompileTaskWhen(t.When, sc.Fields.Exprs())
	if err != nil {
		var errs []error
		for _, p := range normalize.Problems(err) {
			errs = append(errs, sc.Errorf(key+".when", ": %v", p))
		}
		return nil, errors.Join(errs...)
	}
	w := &watch{cfg: t, when: when, backoff: service.Backoff{Min: t.Backoff.Min, Max: t.Backoff.Max}}
	for j, o := range t.Order {
		p, err := config.ParseTaskOrder(o)
		if err != nil {
			return nil, sc.Errorf(fmt.Sprintf("%s.order[%d]", key, j), "%v", err)
		}
		w.order = append(w.order, p)
	}
	switch {
	case len(t.Command) > 0:
		w.exec, err = newCommand(t.Command)
		if err != nil {
			return nil, sc.Errorf(key+".command", "%v", err)
		}
	case t.Webhook != nil:
		w.exec, err = newWebhook(t.Webhook, r.conf.HTTP)
		if err != nil {
			return nil, sc.Errorf(key+".webhook", "%v", err)
		}
	}
	return w, nil
}

// AfterRun makes a pass of source due (the syncer's AfterRun hook); it
// returns at once.
func (r *Runner) AfterRun(source string, runID int64) {
	if cfg, _, _ := r.srcs.TaskSource(source); cfg == nil || len(cfg.Tasks) == 0 {
		return
	}
	r.mu.Lock()
	r.due[source] = runID
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Start runs the passes and the maintenance in the background.
func (r *Runner) Start(ctx context.Context) error {
	return r.loop.Start(ctx, r.run)
}

// Stop stops the loops and waits for the task runs in progress: their
// executors are stopped and the attempts recorded.
func (r *Runner) Stop() error { return r.loop.Stop() }

// Done is closed when the loop ended (for service.Supervisor).
func (r *Runner) Done() <-chan struct{} { return r.loop.Done() }

func (r *Runner) run(ctx context.Context) error {
	defer r.work.Wait()
	backoff := service.LoopBackoff()
	stop := service.Every(ctx, r.conf.Tick, func(ctx context.Context) bool {
		if r.maintain(ctx) {
			backoff.Reset()
			return true
		}
		return service.RetrySleep(ctx, backoff.Next())
	})
	defer stop()
	for {
		r.passes(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-r.wake:
		}
	}
}

// passes runs the due passes.
func (r *Runner) passes(ctx context.Context) {
	r.mu.Lock()
	due := r.due
	r.due = map[string]int64{}
	r.mu.Unlock()
	for name, runID := range due {
		if ctx.Err() != nil {
			return
		}
		src := r.source(name)
		if src == nil {
			continue
		}
		if err := r.pass(ctx, src, runID); err != nil && ctx.Err() == nil {
			r.logger.Error("task pass failed", "source", name, "run_id", runID, "error", err)
		}
	}
}

// Once runs the due passes, waits for their task runs to end, then runs
// the maintenance once: `syncer once`.
func (r *Runner) Once(ctx context.Context) {
	r.passes(ctx)
	r.work.Wait()
	r.maintain(ctx)
	r.work.Wait()
}

// Wait waits for the task runs in progress (tests).
func (r *Runner) Wait() { r.work.Wait() }
