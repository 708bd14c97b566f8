// Package syncer owns time and acquisition: it registers the configured
// sources in the sources table, claims due sources with FOR UPDATE SKIP
// LOCKED and a lease, runs their connectors under rate limits, and mirrors
// every page into records and changes in one transaction per batch.
//
// Any number of syncer replicas may run against one database: a source is
// run by the replica holding its lease, every write of a run checks that
// the lease is still held (a fencing check), and a lease that expires
// because its holder died is taken over and the takeover recorded.
package syncer

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/time/rate"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/connectors"
	"github.com/lookout-dev/lookout/internal/egress"
	"github.com/lookout-dev/lookout/internal/intern"
	"github.com/lookout-dev/lookout/internal/metrics"
	"github.com/lookout-dev/lookout/internal/normalize"
	"github.com/lookout-dev/lookout/internal/schedule"
	"github.com/lookout-dev/lookout/internal/service"
	"github.com/lookout-dev/lookout/internal/sources"
)

// ErrLeaseLost means another replica took the source over; the run stops
// without writing further.
var ErrLeaseLost = errors.New("lease lost to another syncer")

// Syncer mirrors sources into the database.
type Syncer struct {
	pool   *pgxpool.Pool
	conf   Config
	logger *slog.Logger
	hosts  *hostBudget
	loop   service.Loop
	done   *completer // writes quiet runs' completions in batches
	hours  rollup     // counts quiet runs for sync_run_hours
	stats  *tally     // for the summary line
	wake   chan struct{}
	// trusted and untrusted are what the transports of the sources share:
	// untrusted of sources created through the API (conf.UntrustedEgress),
	// trusted of the others (conf.Egress, conf.Transport).
	trusted, untrusted *transportShared

	// mu guards sources and names: the definitions change while the
	// syncer runs (Apply). A source removed from the definitions stays,
	// retired, for the runs in progress; it is no longer claimed.
	mu      sync.RWMutex
	sources map[string]*source
	// names are the sources to claim (neither retired nor paused).
	// restrict is set when the sources table holds active sources this
	// replica does not run (another replica's configuration, or sources
	// no longer defined): claims are then limited to names.
	names    []string
	restrict atomic.Bool
	// loaded is set by a first load of the definitions (Apply of a full
	// delta), which registered every source the syncer runs: the Start
	// after it registers none again.
	loaded atomic.Bool

	// writers bounds the runs writing at once (batches, outcomes), so
	// that the claim and the completer always find a connection.
	writers chan struct{}
	// openBatches counts the claim batches open (each holds a
	// connection), at most maxBatches.
	openBatches atomic.Int32
	maxBatches  int32
}

// PoolConns is the size of the connection pool the syncer daemon opens:
// runs that write share all but reservedConns of it.
const PoolConns = 16

// reservedConns are the connections left to the claim and the
// completer; claim batches take up to maxOpenBatches more, and always
// leave one to the runs that write.
const reservedConns = 2

// source is a configured source, built once. It keeps what its runs
// and its registration read of its definition, not the parsed
// definition (a config.Source is about 500 bytes with its parts): a
// syncer holds one per source, so it is small
// (TestBuiltSourceStateIsSmall).
type source struct {
	name string
	// hash is the definition's config.Source.Hash (sources.config_hash).
	hash string
	// path is the definition's file, named by the deletion guard's error.
	path     string
	conn     connectors.Connector
	mapper   *normalize.Mapper
	schedule *schedule.Schedule
	stopWhen *normalize.Condition // nil without stop.when
	// settings are the rest of what is read of the definition, shared
	// by the sources defined alike.
	settings *sourceSettings
	// tasks is the parsed definition of a source with task watches, for
	// the task runner (TaskSource); nil for the others.
	tasks *config.Source
	// paused is set for a source whose definition is paused: registered
	// as paused, not claimed.
	paused bool
	// retired is set for a source no longer defined.
	retired bool
}

// sourceSettings are the keys of a source's definition that its runs
// and its registration read once it is built, defaults applied.
// Immutable; one per distinct value (sharedSettings).
type sourceSettings struct {
	connector string
	// every and jitter are the schedule's (firstRunWindow); cron is set
	// for a cron schedule.
	every, jitter time.Duration
	cron          bool
	// stuckAfter is sources.stuck_after_seconds.
	stuckAfter int
	// maxFailures is stop.max_failures (0: none), stopAfter stop.after
	// (nil: none), stopWhen stop.when's text.
	maxFailures int
	stopAfter   *time.Time
	stopWhen    string
	// maxDeleteFraction is max_delete_fraction, defaulted.
	maxDeleteFraction float64
	// webhook is set for a webhook-first source; webhookProvider is
	// sources.webhook and silence sources.silence_alert_seconds (0:
	// NULL).
	webhook         bool
	webhookProvider string
	silence         int
}

// settingsOf is what a source keeps of sc's definition.
func settingsOf(sc *config.Source) sourceSettings {
	st := sourceSettings{connector: sc.Connector, every: sc.Every, cron: sc.Cron != "", stuckAfter: stuckAfterSeconds(sc.StuckAfter),
		maxDeleteFraction: config.MaxDeleteFractionDefault}
	if sc.Jitter != nil {
		st.jitter = *sc.Jitter
	}
	if sc.MaxDeleteFraction != nil {
		st.maxDeleteFraction = *sc.MaxDeleteFraction
	}
	if stop := sc.Stop; stop != nil {
		st.stopAfter, st.stopWhen = stop.After, stop.When
		if stop.MaxFailures != nil {
			st.maxFailures = *stop.MaxFailures
		}
	}
	if w := sc.Webhook; w != nil {
		st.webhook, st.webhookProvider = true, w.Provider
		if w.SilenceAlert != nil && *w.SilenceAlert > 0 {
			st.silence = max(int(*w.SilenceAlert/time.Second), 1)
		}
	}
	return st
}

// settings holds one sourceSettings per distinct value.
var settings intern.Cache[sourceSettings]

// sharedSettings returns the settings of sc, the ones other sources
// defined alike hold if any.
func sharedSettings(sc *config.Source) (*sourceSettings, error) {
	st := settingsOf(sc)
	after := ""
	if st.stopAfter != nil {
		after = st.stopAfter.UTC().Format(time.RFC3339Nano)
	}
	key := fmt.Sprintf("%q %d %d %t %d %d %q %q %g %t %q %d", st.connector, st.every, st.jitter, st.cron, st.stuckAfter, st.maxFailures,
		after, st.stopWhen, st.maxDeleteFraction, st.webhook, st.webhookProvider, st.silence)
	return settings.Get(key, func() (*sourceSettings, error) { return &st, nil })
}

// source returns the built source called name (retired or not), or nil.
func (s *Syncer) source(name string) *source {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.sources[name]
}

// connectorOf is the connector of source name, the label of its runs'
// metrics; metrics.ConnectorUnknown if the syncer has not built it.
func (s *Syncer) connectorOf(name string) string {
	if src := s.source(name); src != nil {
		return src.settings.connector
	}
	return metrics.ConnectorUnknown
}

// runnable returns the source called name if it is to be claimed.
func (s *Syncer) runnable(name string) *source {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if src := s.sources[name]; src != nil && !src.retired && !src.paused {
		return src
	}
	return nil
}

// claimable returns the names of the sources to claim.
func (s *Syncer) claimable() []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.names
}

// renameLocked recomputes names; s.mu is held.
func (s *Syncer) renameLocked() {
	names := make([]string, 0, len(s.sources))
	for n, src := range s.sources {
		if !src.retired && !src.paused {
			names = append(names, n)
		}
	}
	s.names = names
}

// New builds a syncer for every source of conf.Sources. Connector, mapping
// and expression errors are returned here, naming the file and line.
// conf's settings are used as given: FromConfig carries the loaded,
// defaulted lookout.yaml values.
func New(pool *pgxpool.Pool, conf Config, logger *slog.Logger) (*Syncer, error) {
	if conf.Owner == "" {
		host, _ := os.Hostname()
		conf.Owner = fmt.Sprintf("%s:%d", cmp.Or(host, "syncer"), os.Getpid())
	}
	if conf.Now == nil {
		conf.Now = time.Now
	}
	if conf.RollupEvery <= 0 {
		conf.RollupEvery = time.Second
	}
	if conf.Egress == nil {
		conf.Egress = &egress.Policy{}
	}
	if conf.UntrustedEgress == nil {
		u := egress.Untrusted(false)
		conf.UntrustedEgress = &u
	}
	if conf.Transport == nil {
		t := conf.Egress.Transport()
		// Many sources share a host (a feed server, an API): keep enough
		// idle connections to it that runs reuse them instead of dialing.
		t.MaxIdleConns, t.MaxIdleConnsPerHost = 1024, 128
		conf.Transport = t
	}
	s := &Syncer{pool: pool, conf: conf, logger: logger.With("component", "syncer"), sources: map[string]*source{},
		stats: newTally(conf.Now()), wake: make(chan struct{}, 1)}
	ut := conf.UntrustedEgress.Transport()
	ut.MaxIdleConns, ut.MaxIdleConnsPerHost = 1024, 128
	s.done = newCompleter(s)
	if pool != nil {
		conns := pool.Config().MaxConns
		s.maxBatches = min(max(conns-reservedConns-1, 0), maxOpenBatches)
		s.writers = make(chan struct{}, max(1, int(conns-reservedConns-s.maxBatches)))
	}
	if pool != nil {
		s.hosts = &hostBudget{pool: pool, limits: conf.HostLimit}
	}
	s.trusted = &transportShared{base: conf.Transport, hosts: s.hosts, maxWait: conf.MaxWait, now: conf.Now, metrics: conf.Metrics,
		dial: conf.Egress.Dialer().DialContext}
	s.untrusted = &transportShared{base: ut, hosts: s.hosts, maxWait: conf.MaxWait, now: conf.Now, metrics: conf.Metrics,
		dial: conf.UntrustedEgress.Dialer().DialContext}
	var errs []error
	for _, sc := range conf.Sources {
		src, err := s.build(sc)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		s.sources[sc.Name] = src
		s.names = append(s.names, sc.Name)
		conf.Metrics.InitConnector(sc.Connector)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	// Built, a source keeps what it reads of its definition: the parsed
	// sources are the caller's to drop.
	s.conf.Sources = nil
	return s, nil
}

// Build checks that every source of cfg can be built: connector blocks,
// mappings and expressions. It is the syncer's side of the config check.
func Build(cfg *config.Config) error {
	conf := FromConfig(cfg)
	conf.Owner = "check"
	_, err := New(nil, conf, slog.New(slog.DiscardHandler))
	return err
}

func (s *Syncer) build(sc *config.Source) (*source, error) { return s.buildFor(sc, false) }

// buildFor builds a source; an untrusted one (created through the API)
// connects through conf.UntrustedEgress.
func (s *Syncer) buildFor(sc *config.Source, untrusted bool) (*source, error) {
	mapper, err := sharedMapper(sc.Fields.Exprs(), sc.Volatile)
	if err != nil {
		var errs []error
		for _, p := range normalize.Problems(err) {
			var ke *normalize.KeyError
			if errors.As(p, &ke) {
				errs = append(errs, sc.Errorf(ke.Key, "%v", ke.Err))
			} else {
				errs = append(errs, sc.Errorf("volatile", "%v", p))
			}
		}
		return nil, errors.Join(errs...)
	}
	var adaptive *schedule.Bounds
	if a := sc.Adaptive; a != nil {
		adaptive = &schedule.Bounds{Min: a.Min, Max: a.Max}
	}
	sched, err := sharedSchedule(schedule.Spec{Every: sc.Every, Jitter: *sc.Jitter, Cron: sc.Cron, Timezone: sc.Timezone, Adaptive: adaptive})
	if err != nil {
		var se *schedule.SpecError
		if errors.As(err, &se) {
			return nil, sc.Errorf(se.Key, "%v", se.Err)
		}
		return nil, sc.Errorf("every", "%v", err)
	}
	var stopWhen *normalize.Condition
	if sc.Stop != nil && sc.Stop.When != "" {
		if stopWhen, err = normalize.CompileStopWhen(sc.Stop.When); err != nil {
			var errs []error
			for _, p := range normalize.Problems(err) {
				errs = append(errs, sc.Errorf("stop.when", ": %v", p))
			}
			return nil, errors.Join(errs...)
		}
	}
	logger := sourceLogger(s.logger.Handler(), sc.Name)
	// No http.Client.Timeout: it would count the waits for rate limits.
	// The transport bounds every request by the source's timeout instead.
	// CheckRedirect applies follow_redirects.
	shared := s.trusted
	if untrusted {
		shared = s.untrusted
	}
	tr := &politeTransport{transportShared: shared, source: sc.Name, logger: logger, timeout: sc.Timeout,
		perSecond: rate.Limit(sc.RateLimit.PerSecond), burst: int32(min(sc.RateLimit.Burst, math.MaxInt32)),
		redirects: redirectModeOf(sc.FollowRedirects)}
	client := &http.Client{CheckRedirect: tr.checkRedirect, Transport: tr}
	conn, err := connectors.New(sc, connectors.Env{Dir: s.conf.Dir, HTTP: client, Dial: shared.dial, Logger: logger, Now: s.conf.Now})
	if err != nil {
		return nil, err
	}
	st, err := sharedSettings(sc)
	if err != nil {
		return nil, err
	}
	src := &source{name: sc.Name, hash: sc.Hash, path: sc.Path, conn: conn, mapper: mapper, schedule: sched, stopWhen: stopWhen, settings: st}
	if len(sc.Tasks) > 0 {
		src.tasks = sc
	}
	return src, nil
}

// mappers holds one Mapper per distinct mapping (fields and volatile):
// sources copied from one example share it.
var mappers intern.Cache[normalize.Mapper]

// sharedMapper returns the Mapper of f and volatile, the one other
// sources mapping alike hold if any. A Mapper is safe for concurrent use.
func sharedMapper(f normalize.FieldExprs, volatile []string) (*normalize.Mapper, error) {
	key, err := json.Marshal(struct {
		F normalize.FieldExprs
		V []string
	}{f, volatile})
	if err != nil {
		return nil, fmt.Errorf("mapping key: %w", err)
	}
	return mappers.Get(string(key), func() (*normalize.Mapper, error) { return normalize.NewMapper(f, volatile) })
}

// schedules holds one Schedule per distinct spec.
var schedules intern.Cache[schedule.Schedule]

// sharedSchedule returns the Schedule of spec, the one other sources
// scheduled alike hold if any (a Schedule is immutable).
func sharedSchedule(spec schedule.Spec) (*schedule.Schedule, error) {
	key := fmt.Sprintf("%d %d %q %q", spec.Every, spec.Jitter, spec.Cron, spec.Timezone)
	if a := spec.Adaptive; a != nil {
		key += fmt.Sprintf(" %d %d", a.Min, a.Max)
	}
	return schedules.Get(key, func() (*schedule.Schedule, error) { return schedule.New(spec) })
}

// Owner is this replica's lease owner name.
func (s *Syncer) Owner() string { return s.conf.Owner }

// Register upserts the configured sources into the sources table. A new
// source first runs after a random part of its jitter (or at its next cron
// slot). A source whose configuration changed is due by its new schedule at
// the latest, starts again from its initial interval and failure count, and
// is re-activated if the system had disabled or completed it; a source an
// operator paused stays paused.
func (s *Syncer) Register(ctx context.Context) error {
	s.mu.RLock()
	srcs := make([]*source, 0, len(s.sources))
	for _, src := range s.sources {
		if !src.retired {
			srcs = append(srcs, src)
		}
	}
	s.mu.RUnlock()
	return s.register(ctx, srcs, false)
}

// register upserts srcs into the sources table. With firstNow, a new
// source is due at once (a source created at runtime). A source paused in
// its definition is registered paused, and active again when resumed.
//
// Only the sources whose row is missing or differs are written: a replica
// that starts (or reloads) with the configuration the table already has
// writes nothing, instead of rewriting and locking every row while other
// replicas run them. The writes go in name order, in transactions of
// registerChunk sources, each retried on a deadlock: a replica's
// registration and another's runs lock rows in different orders. A
// transaction is two statements at most, whatever its number of sources:
// the new ones inserted, the others updated (on Citus a statement a
// source took the coordinator a round trip to a worker each: 10,000
// sources registered in 4 minutes, docs/scaling.md).
func (s *Syncer) register(ctx context.Context, srcs []*source, firstNow bool) error {
	stored, err := s.storedSources(ctx, srcs)
	if err != nil {
		return err
	}
	fresh := 0
	if !firstNow { // sources created at runtime are due at once
		for _, src := range srcs {
			if st, ok := stored[src.name]; !ok || st.hash != src.hash {
				fresh++
			}
		}
	}
	srcs = slices.SortedFunc(slices.Values(srcs), func(a, b *source) int { return strings.Compare(a.name, b.name) })
	srcs = slices.DeleteFunc(srcs, func(src *source) bool {
		st, ok := stored[src.name]
		return ok && st.matches(src)
	})
	for chunk := range slices.Chunk(srcs, registerChunk) {
		rows := s.registerRows(chunk, stored, fresh, firstNow)
		if err := retryDeadlocks(ctx, func() error { return s.writeRegistration(ctx, rows) }); err != nil {
			return fmt.Errorf("register sources: %w", err)
		}
	}
	if err := s.lookForOthers(ctx); err != nil {
		return fmt.Errorf("register sources: %w", err)
	}
	return nil
}

// lookForOthers sets restrict: whether the sources table holds active
// sources this replica does not claim.
func (s *Syncer) lookForOthers(ctx context.Context) error {
	var others bool
	if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM sources WHERE status = 'active' AND NOT (name = ANY ($1::text[])))`,
		s.claimable()).Scan(&others); err != nil {
		return fmt.Errorf("look for sources of other configurations: %w", err)
	}
	s.restrict.Store(others)
	return nil
}

// registerChunk is how many sources one registration transaction writes.
const registerChunk = 1000

// retryDeadlocks runs f again, up to four more times, when PostgreSQL
// ended it as a deadlock's victim (f must be idempotent).
func retryDeadlocks(ctx context.Context, f func() error) error {
	backoff := service.Backoff{Min: 20 * time.Millisecond, Max: time.Second}
	for attempt := 1; ; attempt++ {
		err := f()
		var pgErr *pgconn.PgError
		if err == nil || attempt == 5 || !errors.As(err, &pgErr) || pgErr.Code != "40P01" {
			return err
		}
		if !service.Sleep(ctx, backoff.Next()) {
			return err
		}
	}
}

// storedSource is the registered state of a source, as register writes it.
type storedSource struct {
	hash, connector, schedule string
	webhook, statusReason     *string
	silence                   *int
	stuckAfter                int
	status                    string
}

// matches reports whether registering src would change nothing.
func (st storedSource) matches(src *source) bool {
	set := src.settings
	pausedByDefinition := st.status == "paused" && st.statusReason != nil && *st.statusReason == sources.DefinitionPaused
	web, _ := webhookProvider(set).(string)
	sil, _ := silenceSeconds(set).(int)
	return st.status != "removed" && st.hash == src.hash && st.connector == set.connector && st.schedule == src.schedule.String() &&
		derefString(st.webhook) == web && derefInt(st.silence) == sil && st.stuckAfter == set.stuckAfter &&
		pausedByDefinition == src.paused
}

func derefString(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func derefInt(p *int) int {
	if p == nil {
		return 0
	}
	return *p
}

// storedSources reads the registered state of srcs' rows.
func (s *Syncer) storedSources(ctx context.Context, srcs []*source) (map[string]storedSource, error) {
	names := make([]string, len(srcs))
	for i, src := range srcs {
		names[i] = src.name
	}
	rows, err := s.pool.Query(ctx, `
		SELECT name, config_hash, connector, schedule, webhook, silence_alert_seconds, stuck_after_seconds, status, status_reason
		FROM sources WHERE name = ANY ($1::text[])`, names)
	if err != nil {
		return nil, fmt.Errorf("register sources: read the registered ones: %w", err)
	}
	defer rows.Close()
	out := make(map[string]storedSource, len(srcs))
	for rows.Next() {
		var name string
		var st storedSource
		if err := rows.Scan(&name, &st.hash, &st.connector, &st.schedule, &st.webhook, &st.silence, &st.stuckAfter, &st.status, &st.statusReason); err != nil {
			return nil, fmt.Errorf("register sources: read the registered ones: %w", err)
		}
		out[name] = st
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("register sources: read the registered ones: %w", err)
	}
	return out, nil
}

// registration is a chunk of register's sources as the arguments of
// sources.QueryRegisterNew and QueryRegisterExisting, one array a column;
// at is a new source's next run, and isNew tells which sources had no row
// when register read them.
type registration struct {
	name, connector, hash, schedule, reason []string
	interval                                []*float64
	insertAt, firstAt                       []time.Time
	paused                                  []bool
	webhook                                 []*string
	silence                                 []*int
	stuckAfter                              []int
	isNew                                   []bool
	now                                     time.Time
}

// registerRows is the registration of srcs (stored: their rows as
// register read them).
func (s *Syncer) registerRows(srcs []*source, stored map[string]storedSource, fresh int, firstNow bool) *registration {
	now := s.conf.Now()
	r := &registration{now: now}
	for _, src := range srcs {
		set := src.settings
		first := src.schedule.First(now)
		if w := firstRunWindow(set, fresh); w > 0 {
			first.At = now.Add(rand.N(w))
			first.Reason = fmt.Sprintf("registered with %d other new or changed sources: first run spread over %s", fresh-1, w)
		}
		insertAt := first.At
		if firstNow {
			insertAt = now
		}
		var interval *float64
		if iv := src.schedule.Initial(); iv > 0 {
			secs := iv.Seconds()
			interval = &secs
		}
		var web *string
		if w, ok := webhookProvider(set).(string); ok {
			web = &w
		}
		var silence *int
		if sil, ok := silenceSeconds(set).(int); ok {
			silence = &sil
		}
		_, registered := stored[src.name]
		r.name = append(r.name, src.name)
		r.connector = append(r.connector, set.connector)
		r.hash = append(r.hash, src.hash)
		r.schedule = append(r.schedule, src.schedule.String())
		r.interval = append(r.interval, interval)
		r.reason = append(r.reason, first.Reason)
		r.insertAt = append(r.insertAt, insertAt)
		r.firstAt = append(r.firstAt, first.At)
		r.paused = append(r.paused, src.paused)
		r.webhook = append(r.webhook, web)
		r.silence = append(r.silence, silence)
		r.stuckAfter = append(r.stuckAfter, set.stuckAfter)
		r.isNew = append(r.isNew, !registered)
	}
	return r
}

// args are the arguments of sources.QueryRegisterNew (at: insertAt) or
// QueryRegisterExisting (at: firstAt) for the sources of r at idx.
func (r *registration) args(idx []int, at []time.Time) []any {
	var (
		name, connector, hash, schedule, reason = make([]string, len(idx)), make([]string, len(idx)), make([]string, len(idx)), make([]string, len(idx)), make([]string, len(idx))
		interval                                = make([]*float64, len(idx))
		ats                                     = make([]time.Time, len(idx))
		paused                                  = make([]bool, len(idx))
		webhook                                 = make([]*string, len(idx))
		silence                                 = make([]*int, len(idx))
		stuckAfter                              = make([]int, len(idx))
	)
	for j, i := range idx {
		name[j], connector[j], hash[j], schedule[j], reason[j] = r.name[i], r.connector[i], r.hash[i], r.schedule[i], r.reason[i]
		interval[j], ats[j], paused[j], webhook[j], silence[j], stuckAfter[j] = r.interval[i], at[i], r.paused[i], r.webhook[i], r.silence[i], r.stuckAfter[i]
	}
	return []any{name, connector, hash, schedule, interval, reason, ats, paused, webhook, silence, stuckAfter, sources.DefinitionPaused, r.now}
}

// writeRegistration writes r in one transaction: the sources that had no
// row inserted in one statement, then the others, and the new ones
// another replica registered meanwhile, updated in one.
func (s *Syncer) writeRegistration(ctx context.Context, r *registration) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var fresh, existing []int
		for i, isNew := range r.isNew {
			if isNew {
				fresh = append(fresh, i)
			} else {
				existing = append(existing, i)
			}
		}
		if len(fresh) > 0 {
			rows, err := tx.Query(ctx, sources.QueryRegisterNew, r.args(fresh, r.insertAt)...)
			if err != nil {
				return fmt.Errorf("insert: %w", err)
			}
			inserted, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				return fmt.Errorf("insert: %w", err)
			}
			if len(inserted) < len(fresh) {
				// Registered by another replica since register read
				// the rows: updated, as if they had been there.
				done := make(map[string]bool, len(inserted))
				for _, n := range inserted {
					done[n] = true
				}
				for _, i := range fresh {
					if !done[r.name[i]] {
						existing = append(existing, i)
					}
				}
				slices.Sort(existing)
			}
		}
		if len(existing) > 0 {
			if _, err := tx.Exec(ctx, sources.QueryRegisterExisting, r.args(existing, r.firstAt)...); err != nil {
				return fmt.Errorf("update: %w", err)
			}
		}
		return nil
	})
}

// Wake makes the polling loop look for due sources now (after a change
// to the definitions, or a run requested through the API).
func (s *Syncer) Wake() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// webhookProvider is sources.webhook of set: its webhook provider, or NULL.
func webhookProvider(set *sourceSettings) any {
	if !set.webhook {
		return nil
	}
	return set.webhookProvider
}

// silenceSeconds is sources.silence_alert_seconds of set: NULL without a
// webhook or with the silence alert off.
func silenceSeconds(set *sourceSettings) any {
	if set.silence == 0 {
		return nil
	}
	return set.silence
}

// firstRunsPerSecond is the pace at which the first runs of sources
// registered (or reconfigured) together are spread: at most about this
// many per second, within each source's interval.
const firstRunsPerSecond = 100

// firstRunWindow is how far the first run of set is spread when fresh
// sources (new or with a changed configuration) are registered together:
// over fresh/firstRunsPerSecond seconds, at most its interval, when more
// than firstRunsPerSecond are fresh and that is longer than its jitter;
// else 0 (its jitter applies). A hundred thousand
// sources every minute registered at once start spread over the minute,
// not in a herd within its jitter. Cron sources run at their slot.
func firstRunWindow(set *sourceSettings, fresh int) time.Duration {
	if set.cron || set.every <= 0 || fresh <= firstRunsPerSecond {
		return 0
	}
	w := min(time.Duration(fresh)*time.Second/firstRunsPerSecond, set.every)
	if w <= set.jitter {
		return 0
	}
	return w
}

func (s *Syncer) batchEnded() { s.openBatches.Add(-1) }

// writing holds a writer slot until the returned function is called.
func (s *Syncer) writing(ctx context.Context) (func(), error) {
	select {
	case s.writers <- struct{}{}:
		return func() { <-s.writers }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// stuckAfterSeconds is stuck_after in whole seconds (at least 1), as
// sources.stuck_after_seconds stores it; 0 means the built-in default.
func stuckAfterSeconds(d time.Duration) int {
	if d <= 0 {
		d = config.StuckAfterDefault
	}
	return max(int(d/time.Second), 1)
}

// Start registers the sources and runs the polling loop in the background.
// After a first load of the definitions (Apply), which registered them,
// it registers none: a second registration would read every row back to
// write nothing (at 100,000 sources, megabytes of garbage and of resident
// set before the daemon is ready).
func (s *Syncer) Start(ctx context.Context) error {
	if !s.loaded.Swap(false) {
		if err := s.Register(ctx); err != nil {
			return err
		}
	}
	return s.loop.Start(ctx, s.run)
}

// Stop stops the loop and waits for runs in progress to end; their leases
// are released.
func (s *Syncer) Stop() error { return s.loop.Stop() }

// Done is closed when the polling loop ended (for service.Supervisor).
func (s *Syncer) Done() <-chan struct{} { return s.loop.Done() }

// completeExpired marks completed the active sources whose stop.after has
// passed, so that a syncer that was down past the date does not run them
// once more. A source whose lease is held is completed by its run.
func (s *Syncer) completeExpired(ctx context.Context, now time.Time) error {
	var names, reasons []string
	s.mu.RLock()
	for name, src := range s.sources {
		if src.retired || src.paused {
			continue
		}
		if after := src.settings.stopAfter; after != nil && !now.Before(*after) {
			names = append(names, name)
			reasons = append(reasons, "stop.after "+after.UTC().Format(time.RFC3339)+" reached")
		}
	}
	s.mu.RUnlock()
	if len(names) == 0 {
		return nil
	}
	rows, err := s.pool.Query(ctx, sources.QueryCompleteExpired, names, reasons, now)
	if err != nil {
		return fmt.Errorf("complete sources past stop.after: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var name, reason string
		if err := rows.Scan(&name, &reason); err != nil {
			return fmt.Errorf("complete sources past stop.after: %w", err)
		}
		s.logger.Info("source completed", "source", name, "reason", reason)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("complete sources past stop.after: %w", err)
	}
	return nil
}
