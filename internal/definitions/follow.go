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

// Delta is what changed in the definitions between two catch-ups (two
// snapshots of the database), parsed with the daemon's lookout.yaml.
type Delta struct {
	// From is the version applied before and To the highest version
	// committed in the delta's snapshot, for logs and metrics: versions
	// are taken in one order and committed in another, so a delta may
	// hold a change whose version is below From.
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
	// Watches are the rows of Config.Watches, in the same order. In a
	// first load that took the directory's parse of the source
	// (Follower.Reuse), their Definition is nil: Config is what it says.
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
// since the snapshot it read last, in one repeatable-read snapshot,
// parses it, and hands it to the consumer. A NOTIFY is a wake-up only.
//
// Changes take their versions from a sequence and commit in parallel,
// so a version number says nothing of what committed before it. The
// follower keeps the MVCC snapshot of its last catch-up instead, and
// reads the rows whose transaction (xid, stamped on every row) that
// snapshot did not see: exactly the changes committed since, a late one
// with a smaller version included.
type Follower struct {
	pool      *pgxpool.Pool
	validator *Validator
	apply     func(ctx context.Context, d *Delta) error

	// reuse is the directory's parse the first load takes (Reuse); nil
	// after it.
	reuse *Applied

	mu      sync.Mutex
	version atomic.Int64
	seen    atomic.Pointer[followPoint] // nil before the first load
}

// followPoint is where a follower is: the snapshot of its last catch-up
// (pg_snapshot as text) and the highest pruned deletion's transaction
// read in it.
type followPoint struct {
	snapshot string
	pruned   string
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

// Reuse makes f's first load take the sources of a, the configuration
// directory this daemon has just applied (ApplyKept), rather than parse
// their rows again: a source whose rows are exactly the directory's (its
// hash, managed_by and every watch's hash, no other watch) is the
// directory's parse, its watches in the rows' order; the others (made
// through the API, watched by users, changed since) are parsed from their
// rows. The daemon's start parses each file once. f lets go of a after
// its first load. It returns f.
func (f *Follower) Reuse(a *Applied) *Follower {
	f.reuse = a
	return f
}

// Version is the highest config version applied (0 before the first
// load).
func (f *Follower) Version() int64 { return f.version.Load() }

// CatchUp applies what changed since the last catch-up; the first call
// loads everything (Delta.Full). It returns the delta it applied (nil
// when nothing changed).
func (f *Follower) CatchUp(ctx context.Context) (*Delta, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	prev := f.seen.Load()
	d, next, changed, err := f.since(ctx, prev)
	f.reuse = nil // taken by the first load, or parsed from the rows from now on
	if err != nil {
		return nil, err
	}
	if prev != nil && !changed {
		f.seen.Store(next)
		return nil, nil
	}
	if err := f.apply(ctx, d); err != nil {
		return nil, err
	}
	f.seen.Store(next)
	f.version.Store(d.To)
	return d, nil
}

// Behind reports whether q's snapshot sees a change to the definitions
// that the follower has not applied (always before the first load). The
// evaluator asks in its claim transaction, after the claim: a claimed
// change committed after the definitions it must be judged with, so q
// sees them.
func (f *Follower) Behind(ctx context.Context, q queryRower) (bool, error) {
	p := f.seen.Load()
	if p == nil {
		return true, nil
	}
	var behind bool
	if err := q.QueryRow(ctx, queryBehind, p.snapshot, p.pruned).Scan(&behind); err != nil {
		return false, fmt.Errorf("look for changes to the definitions: %w", err)
	}
	return behind, nil
}

// CatchUpWith makes sure every change to the definitions that q's
// snapshot sees is applied: it catches up when the follower is Behind.
func (f *Follower) CatchUpWith(ctx context.Context, q queryRower) error {
	behind, err := f.Behind(ctx, q)
	if err != nil || !behind {
		return err
	}
	_, err = f.CatchUp(ctx)
	return err
}

// since reads and parses the changes committed since prev (everything
// when prev is nil, or when a deletion prev may not have seen was pruned:
// Delta.Full). It returns where the follower is after it, and whether
// any row changed.
func (f *Follower) since(ctx context.Context, prev *followPoint) (*Delta, *followPoint, bool, error) {
	d := &Delta{From: f.version.Load(), Full: prev == nil}
	var prevSnapshot, prevPruned *string
	if prev != nil {
		prevSnapshot, prevPruned = &prev.snapshot, &prev.pruned
	}
	next := &followPoint{}
	var sources []Source
	var watches []Watch
	var parents []Source
	var deletions int
	err := pgx.BeginTxFunc(ctx, f.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var pruned bool
		if err := tx.QueryRow(ctx, queryFollowState, prevSnapshot, prevPruned).Scan(&next.snapshot, &d.To, &next.pruned, &pruned); err != nil {
			return fmt.Errorf("read the definitions' snapshot: %w", err)
		}
		if pruned {
			// A deletion the previous snapshot may not have seen was
			// pruned (retention): the delta could miss it, so load
			// everything.
			d.Full = true
		}
		var err error
		if d.Full {
			sources, err = collect[Source](tx.Query(ctx, queryAllSources))(scanSource)
		} else {
			sources, err = collect[Source](tx.Query(ctx, querySourcesSince, prev.snapshot))(scanSource)
		}
		if err != nil {
			return err
		}
		names := make([]string, len(sources))
		for i := range sources {
			names[i] = sources[i].Name
		}
		switch {
		case d.Full && f.reuse != nil:
			watches, err = f.reuse.readWatches(ctx, tx, sources)
		case d.Full:
			watches, err = collect[Watch](tx.Query(ctx, queryAllWatches))(scanWatch)
		default:
			watches, err = collect[Watch](tx.Query(ctx, queryWatchesSince, prev.snapshot, names))(scanWatch)
		}
		if err != nil {
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
		if d.Full {
			return nil
		}
		rows, err := tx.Query(ctx, queryDeletionsSince, prev.snapshot)
		if err != nil {
			return fmt.Errorf("read deletions: %w", err)
		}
		for rows.Next() {
			var v int64
			var source, watch string
			if err := rows.Scan(&v, &source, &watch); err != nil {
				return fmt.Errorf("read deletions: %w", err)
			}
			deletions++
			if watch == "" {
				d.RemovedSources = append(d.RemovedSources, source)
			} else {
				d.RemovedWatches = append(d.RemovedWatches, [2]string{source, watch})
			}
		}
		return rows.Err()
	})
	if err != nil {
		return nil, nil, false, fmt.Errorf("read the definitions changed since version %d: %w", d.From, err)
	}
	if d.Full {
		d.From = 0
	}
	d.To = max(d.To, d.From)
	f.parse(d, sources, watches, parents)
	return d, next, d.Full || len(sources)+len(watches)+deletions > 0, nil
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
		if d.Full {
			if src := f.reuse.take(s, ws); src != nil {
				def.Config, def.Watches = src, ws
				d.Sources = append(d.Sources, def)
				continue
			}
		}
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
