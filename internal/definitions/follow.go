package definitions

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/db"
	"github.com/lookout-dev/lookout/internal/secrets"
	"github.com/lookout-dev/lookout/internal/service"
	"github.com/lookout-dev/lookout/internal/testsignal"
)

// Delta is what changed in the definitions between two config versions,
// parsed with the daemon's lookout.yaml.
type Delta struct {
	// From (exclusive) and To are the versions the delta spans.
	From, To int64
	// Full is set on the first load: everything is in Sources, and the
	// consumer replaces what it had.
	Full bool
	// Sources are the sources added or changed, each with all its
	// watches (SourceDef.Watches, index-aligned with Config.Watches).
	Sources []*SourceDef
	// Watches are the watches added or changed of sources not in Sources.
	Watches []*WatchDef
	// RemovedSources are sources deleted (with all their watches).
	RemovedSources []string
	// RemovedWatches are watches deleted, as [source, watch].
	RemovedWatches [][2]string
	// Invalid are definitions that do not parse with this daemon's
	// configuration (an unset ${ENV}, a sink it does not declare): they
	// are left out, and the consumer keeps what it had for them. Each is
	// an *InvalidError naming the source (and watch).
	Invalid []error
}

// InvalidError is a definition that does not parse with a daemon's
// configuration (Delta.Invalid).
type InvalidError struct {
	// Source is the source's name.
	Source string
	// Watch is the watch's name, or "" when the source itself does not
	// parse (then none of its watches does).
	Watch string
	// ManagedBy is the watch's manager (file:..., api:...); "" for a source.
	ManagedBy string
	// Err is why.
	Err error
}

func (e *InvalidError) Error() string {
	if e.Watch == "" {
		return e.Err.Error()
	}
	return fmt.Sprintf("watch %s of source %s (%s): %v", e.Watch, e.Source, e.ManagedBy, e.Err)
}

// Unwrap returns why.
func (e *InvalidError) Unwrap() error { return e.Err }

// Empty reports whether the delta changes nothing.
func (d *Delta) Empty() bool {
	return !d.Full && len(d.Sources)+len(d.Watches)+len(d.RemovedSources)+len(d.RemovedWatches)+len(d.Invalid) == 0
}

// SourceDef is a source definition and its parsed configuration.
type SourceDef struct {
	Row    Source
	Config *config.Source
	// Watches are the rows of Config.Watches, in the same order.
	Watches []Watch
}

// WatchDef is a watch definition, parsed with its source.
type WatchDef struct {
	Row    Watch
	Config *config.Watch
	// Source is the watch's source, parsed (with this one watch).
	Source *config.Source
}

// Follower keeps a consumer (the syncer's sources, the evaluator's
// watches) current with the definitions: CatchUp reads what changed
// since the version it applied last, in one snapshot, parses it, and
// hands it to the consumer. A NOTIFY is a wake-up only; the version is
// the truth.
type Follower struct {
	pool      *pgxpool.Pool
	validator *Validator
	apply     func(ctx context.Context, d *Delta) error

	mu      sync.Mutex
	version atomic.Int64
	loaded  bool
}

// NewFollower returns a follower that parses definitions with the
// defaults and sinks of g and hands every delta to apply. apply is
// called with one delta at a time; when it fails the same changes come
// again at the next CatchUp.
func NewFollower(pool *pgxpool.Pool, g *config.Global, apply func(ctx context.Context, d *Delta) error) *Follower {
	return &Follower{pool: pool, validator: &Validator{Global: g}, apply: apply}
}

// WithKeys makes f open the sealed credentials of definitions made
// through the API with keys (LOOKOUT_SECRET_KEY); without them such a
// definition is invalid to this daemon (Delta.Invalid). It returns f.
func (f *Follower) WithKeys(keys *secrets.Ring) *Follower {
	f.validator.Keys = keys
	return f
}

// Version is the config version applied last (0 before the first load).
func (f *Follower) Version() int64 { return f.version.Load() }

// CatchUp applies what changed since the version applied last; the first
// call loads everything (Delta.Full). It returns the delta it applied
// (nil when nothing changed).
func (f *Follower) CatchUp(ctx context.Context) (*Delta, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d, err := f.since(ctx, f.version.Load(), !f.loaded)
	if err != nil {
		return nil, err
	}
	if f.loaded && d.To == d.From {
		return nil, nil
	}
	if err := f.apply(ctx, d); err != nil {
		return nil, err
	}
	f.loaded = true
	f.version.Store(d.To)
	return d, nil
}

// CatchUpTo makes sure the definitions of version v at least are applied.
func (f *Follower) CatchUpTo(ctx context.Context, v int64) error {
	if f.version.Load() >= v {
		return nil
	}
	_, err := f.CatchUp(ctx)
	return err
}

// since reads and parses the changes after version from.
func (f *Follower) since(ctx context.Context, from int64, full bool) (*Delta, error) {
	if full {
		from = 0
	}
	d := &Delta{From: from, Full: full}
	var sources []Source
	var watches []Watch
	var parents []Source
	err := pgx.BeginTxFunc(ctx, f.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var pruned int64
		if err := tx.QueryRow(ctx, queryFollowVersion).Scan(&d.To, &pruned); err != nil {
			return fmt.Errorf("read config version: %w", err)
		}
		if d.To == from && !full {
			return nil
		}
		if !full && from < pruned {
			// Deletions after from were pruned (retention): the delta
			// could miss one, so load everything.
			full, from = true, 0
			d.Full, d.From = true, 0
		}
		var err error
		if sources, err = collect[Source](tx.Query(ctx, querySourcesSince, from))(scanSource); err != nil {
			return err
		}
		names := make([]string, len(sources))
		for i := range sources {
			names[i] = sources[i].Name
		}
		if watches, err = collect[Watch](tx.Query(ctx, queryWatchesSince, from, names))(scanWatch); err != nil {
			return err
		}
		changed := map[string]bool{}
		for _, n := range names {
			changed[n] = true
		}
		var others []string
		seen := map[string]bool{}
		for _, w := range watches {
			if !changed[w.Source] && !seen[w.Source] {
				seen[w.Source] = true
				others = append(others, w.Source)
			}
		}
		if len(others) > 0 {
			if parents, err = collect[Source](tx.Query(ctx, queryGetSources, others))(scanSource); err != nil {
				return err
			}
		}
		if full {
			return nil
		}
		rows, err := tx.Query(ctx, queryDeletionsSince, from)
		if err != nil {
			return fmt.Errorf("read deletions: %w", err)
		}
		for rows.Next() {
			var v int64
			var source, watch string
			if err := rows.Scan(&v, &source, &watch); err != nil {
				return fmt.Errorf("read deletions: %w", err)
			}
			if watch == "" {
				d.RemovedSources = append(d.RemovedSources, source)
			} else {
				d.RemovedWatches = append(d.RemovedWatches, [2]string{source, watch})
			}
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("read definitions since version %d: %w", from, err)
	}
	f.parse(d, sources, watches, parents)
	return d, nil
}

// parse fills d from the rows read.
func (f *Follower) parse(d *Delta, sources []Source, watches []Watch, parents []Source) {
	bySource := map[string][]Watch{}
	for _, w := range watches {
		bySource[w.Source] = append(bySource[w.Source], w)
	}
	for i := range sources {
		s := &sources[i]
		ws := bySource[s.Name]
		delete(bySource, s.Name)
		def := &SourceDef{Row: *s}
		cfg, err := f.validator.parseRow(s, ws)
		if err == nil {
			def.Config, def.Watches = cfg, ws
			d.Sources = append(d.Sources, def)
			continue
		}
		// Isolate the culprit: the source alone, then each watch.
		if def.Config, err = f.validator.parseRow(s, nil); err != nil {
			d.Invalid = append(d.Invalid, &InvalidError{Source: s.Name, Err: err})
			continue
		}
		for _, w := range ws {
			one, err := f.validator.parseRow(s, []Watch{w})
			if err != nil {
				d.Invalid = append(d.Invalid, &InvalidError{Source: s.Name, Watch: w.Name, ManagedBy: w.ManagedBy, Err: err})
				continue
			}
			def.Config.Watches = append(def.Config.Watches, one.Watches[0])
			def.Watches = append(def.Watches, w)
		}
		d.Sources = append(d.Sources, def)
	}
	byName := map[string]*Source{}
	for i := range parents {
		byName[parents[i].Name] = &parents[i]
	}
	for _, ws := range bySource {
		for _, w := range ws {
			s := byName[w.Source]
			if s == nil {
				continue // deleted in the same snapshot: RemovedSources has it
			}
			one, err := f.validator.parseRow(s, []Watch{w})
			if err != nil {
				d.Invalid = append(d.Invalid, &InvalidError{Source: s.Name, Watch: w.Name, ManagedBy: w.ManagedBy, Err: err})
				continue
			}
			d.Watches = append(d.Watches, &WatchDef{Row: w, Config: one.Watches[0], Source: one})
		}
	}
}

// collect reads rows with scan.
func collect[T any](rows pgx.Rows, err error) func(scan func(pgx.Row) (*T, error)) ([]T, error) {
	return func(scan func(pgx.Row) (*T, error)) ([]T, error) {
		if err != nil {
			return nil, err
		}
		return pgx.CollectRows(rows, func(r pgx.CollectableRow) (T, error) {
			v, err := scan(r)
			if err != nil {
				var zero T
				return zero, err
			}
			return *v, nil
		})
	}
}

// WatcherConfig configures a Watcher.
type WatcherConfig struct {
	// CatchUpInterval is the slow timer that catches up even without a
	// notification. Defaults to 30s.
	CatchUpInterval time.Duration
	// OnWake, when set, is called after every wake-up, whether or not the
	// definitions changed (RunNow's NOTIFY wakes the syncer's loop).
	OnWake func()
}

// Watcher is the service that keeps a Follower current: it LISTENs on
// <schema>.config (a wake-up only), catches up on every notification, on
// every (re)connect and on a slow timer, and retries with backoff when
// the catch-up fails.
type Watcher struct {
	pool     *pgxpool.Pool
	follower *Follower
	conf     WatcherConfig
	logger   *slog.Logger
	listener *db.Listener
	loop     service.Loop

	// testSignals fire in tests that Init them.
	testSignals struct {
		caughtUp testsignal.Signal[int64] // after every catch-up that applied a change: the version
	}
}

// NewWatcher returns a watcher of the definitions for follower.
func NewWatcher(pool *pgxpool.Pool, follower *Follower, conf WatcherConfig, logger *slog.Logger) *Watcher {
	if conf.CatchUpInterval <= 0 {
		conf.CatchUpInterval = 30 * time.Second
	}
	return &Watcher{pool: pool, follower: follower, conf: conf, logger: logger.With("component", "definitions")}
}

// Listening reports whether the LISTEN connection is up (for readiness).
func (w *Watcher) Listening() bool { return w.listener != nil && w.listener.Connected() }

// Start listens for changes to the definitions in the background.
func (w *Watcher) Start(ctx context.Context) error {
	schema, err := db.CurrentSchema(ctx, w.pool)
	if err != nil {
		return err
	}
	w.listener = db.NewListener(w.pool, Channel(schema), w.logger)
	if err := w.listener.Start(ctx); err != nil {
		return err
	}
	return w.loop.Start(ctx, w.run)
}

// Stop stops the watcher and waits for it.
func (w *Watcher) Stop() error {
	err := w.loop.Stop()
	if w.listener != nil {
		err = errors.Join(err, w.listener.Stop())
	}
	return err
}

// Done is closed when the watcher's loop ended (for service.Supervisor).
func (w *Watcher) Done() <-chan struct{} { return w.loop.Done() }

func (w *Watcher) run(ctx context.Context) error {
	timer := time.NewTimer(w.conf.CatchUpInterval)
	defer timer.Stop()
	backoff := service.Backoff{Min: 100 * time.Millisecond, Max: 30 * time.Second}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-w.listener.Wake():
		case <-timer.C:
		}
		d, err := w.follower.CatchUp(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			wait := backoff.Next()
			w.logger.Error("follow definitions", "error", err, "retry_in", wait)
			timer.Reset(wait)
			continue
		}
		backoff.Reset()
		if d != nil {
			w.testSignals.caughtUp.Signal(d.To)
		}
		if w.conf.OnWake != nil {
			w.conf.OnWake()
		}
		timer.Stop()
		timer.Reset(w.conf.CatchUpInterval)
	}
}
