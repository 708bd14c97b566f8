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
	"math/rand/v2"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/sourcegraph/conc/pool"

	"github.com/lookout-dev/lookout/internal/changes"
	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/connectors"
	"github.com/lookout-dev/lookout/internal/normalize"
	"github.com/lookout-dev/lookout/internal/service"
)

// ErrLeaseLost means another replica took the source over; the run stops
// without writing further.
var ErrLeaseLost = errors.New("lease lost to another syncer")

// Config are the syncer's typed settings.
type Config struct {
	// Owner identifies this replica in leases. Defaults to hostname:pid.
	Owner string
	// Lease, Concurrency, PollInterval and BatchSize: see config.Syncer.
	Lease        time.Duration
	Concurrency  int
	PollInterval time.Duration
	BatchSize    int
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time
	// Transport is the base HTTP transport. Defaults to http.DefaultTransport.
	Transport http.RoundTripper
}

// Syncer mirrors sources into the database.
type Syncer struct {
	pool    *pgxpool.Pool
	cfg     *config.Config
	conf    Config
	logger  *slog.Logger
	sources map[string]*source
	loop    service.Loop
}

// source is a configured source, built once.
type source struct {
	cfg    *config.Source
	conn   connectors.Connector
	mapper *normalize.Mapper
}

// New builds a syncer for every source of cfg. Connector, mapping and
// expression errors are returned here, naming the file and line.
func New(pool *pgxpool.Pool, cfg *config.Config, conf Config, logger *slog.Logger) (*Syncer, error) {
	if conf.Owner == "" {
		host, _ := os.Hostname()
		conf.Owner = fmt.Sprintf("%s:%d", cmp.Or(host, "syncer"), os.Getpid())
	}
	conf.Lease = cmp.Or(conf.Lease, cfg.Global.Syncer.Lease)
	conf.Concurrency = cmp.Or(conf.Concurrency, cfg.Global.Syncer.Concurrency)
	conf.PollInterval = cmp.Or(conf.PollInterval, cfg.Global.Syncer.PollInterval)
	conf.BatchSize = cmp.Or(conf.BatchSize, cfg.Global.Syncer.BatchSize)
	if conf.Now == nil {
		conf.Now = time.Now
	}
	if conf.Transport == nil {
		conf.Transport = http.DefaultTransport
	}
	s := &Syncer{pool: pool, cfg: cfg, conf: conf, logger: logger.With("component", "syncer"), sources: map[string]*source{}}
	var errs []error
	for _, sc := range cfg.Sources {
		src, err := s.build(sc)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		s.sources[sc.Name] = src
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return s, nil
}

// Build checks that every source of cfg can be built: connector blocks,
// mappings and expressions. It is the config check's view of the syncer.
func Build(cfg *config.Config) error {
	_, err := New(nil, cfg, Config{Owner: "check"}, slog.New(slog.DiscardHandler))
	return err
}

func (s *Syncer) build(sc *config.Source) (*source, error) {
	f := sc.Fields
	mapper, err := normalize.NewMapper(normalize.FieldExprs{
		ID: f.ID, Title: f.Title, Body: f.Body, URL: f.URL, Author: f.Author, Status: f.Status,
		Labels: f.Labels, CreatedAt: f.CreatedAt, UpdatedAt: f.UpdatedAt, Extra: f.Extra,
	}, sc.Volatile)
	if err != nil {
		key, msg, _ := strings.Cut(err.Error(), ": ")
		if !strings.HasPrefix(key, "fields.") {
			key, msg = "volatile", err.Error()
		}
		return nil, sc.Errorf(key, "%s", msg)
	}
	logger := s.logger.With("source", sc.Name)
	client := &http.Client{
		Timeout:   sc.Timeout,
		Transport: newLimitedTransport(s.conf.Transport, sc.RateLimit.PerSecond, sc.RateLimit.Burst),
	}
	conn, err := connectors.New(sc, connectors.Env{Dir: s.cfg.Dir, HTTP: client, Logger: logger, Now: s.conf.Now})
	if err != nil {
		return nil, err
	}
	return &source{cfg: sc, conn: conn, mapper: mapper}, nil
}

// Owner is this replica's lease owner name.
func (s *Syncer) Owner() string { return s.conf.Owner }

// Register upserts the configured sources into the sources table. A source
// whose configuration changed is due at once; one that the system disabled
// or completed is re-activated by a configuration change.
func (s *Syncer) Register(ctx context.Context) error {
	b := &pgx.Batch{}
	now := s.conf.Now()
	for _, sc := range s.cfg.Sources {
		first := now.Add(jitter(*sc.Jitter))
		b.Queue(`
			INSERT INTO sources (name, connector, config_hash, schedule, interval_seconds, next_run_at)
			VALUES ($1, $2, $3, $4, $5, $6)
			ON CONFLICT (name) DO UPDATE SET
			    connector = excluded.connector,
			    schedule = excluded.schedule,
			    config_hash = excluded.config_hash,
			    updated_at = now(),
			    interval_seconds = CASE WHEN sources.config_hash <> excluded.config_hash
			                            THEN excluded.interval_seconds ELSE sources.interval_seconds END,
			    next_run_at = CASE WHEN sources.config_hash <> excluded.config_hash
			                       THEN least(sources.next_run_at, excluded.next_run_at) ELSE sources.next_run_at END,
			    failure_count = CASE WHEN sources.config_hash <> excluded.config_hash THEN 0 ELSE sources.failure_count END,
			    status = CASE WHEN sources.config_hash <> excluded.config_hash AND sources.status IN ('disabled', 'completed')
			                  THEN 'active' ELSE sources.status END,
			    status_reason = CASE WHEN sources.config_hash <> excluded.config_hash AND sources.status IN ('disabled', 'completed')
			                         THEN 'configuration changed' ELSE sources.status_reason END`,
			sc.Name, sc.Connector, sc.Hash, describeSchedule(sc), sc.Every.Seconds(), first)
	}
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("register sources: %w", err)
	}
	return nil
}

// Start registers the sources and runs the polling loop in the background.
func (s *Syncer) Start(ctx context.Context) error {
	if err := s.Register(ctx); err != nil {
		return err
	}
	return s.loop.Start(ctx, s.run)
}

// Stop stops the loop and waits for runs in progress to end; their leases
// are released.
func (s *Syncer) Stop() error { return s.loop.Stop() }

func (s *Syncer) run(ctx context.Context) error {
	s.logger.Info("syncer started", "owner", s.conf.Owner, "sources", len(s.sources))
	for {
		if _, err := s.RunDue(ctx); err != nil && ctx.Err() == nil {
			s.logger.Error("run due sources", "error", err)
		}
		if !changes.Sleep(ctx, s.conf.PollInterval) {
			return nil
		}
	}
}

// RunDue claims the sources that are due (up to the concurrency limit at a
// time) and runs them, until none is due. It returns how many runs it made.
func (s *Syncer) RunDue(ctx context.Context) (int, error) {
	total := 0
	for {
		claims, err := s.claim(ctx, s.conf.Concurrency)
		if err != nil {
			return total, err
		}
		if len(claims) == 0 {
			return total, nil
		}
		p := pool.New().WithMaxGoroutines(s.conf.Concurrency)
		for _, c := range claims {
			p.Go(func() { s.runClaim(ctx, c) })
		}
		p.Wait()
		total += len(claims)
		if ctx.Err() != nil {
			return total, ctx.Err()
		}
	}
}

// claim is a leased source run.
type claim struct {
	name      string
	runID     int64
	cursor    json.RawMessage
	reason    string
	prevOwner string
}

func (s *Syncer) claim(ctx context.Context, limit int) ([]claim, error) {
	names := make([]string, 0, len(s.sources))
	for n := range s.sources {
		names = append(names, n)
	}
	var claims []claim
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `
			WITH due AS (
			    SELECT name, lease_owner, lease_expires_at, run_id, run_requested_at
			    FROM sources
			    WHERE name = ANY($1::text[]) AND status = 'active'
			      AND (next_run_at <= $4 OR run_requested_at IS NOT NULL)
			      AND (lease_expires_at IS NULL OR lease_expires_at < $4)
			    ORDER BY run_requested_at NULLS LAST, next_run_at
			    LIMIT $2
			    FOR UPDATE SKIP LOCKED
			)
			UPDATE sources s
			SET lease_owner = $3, lease_expires_at = $4::timestamptz + $5::interval, run_requested_at = NULL, updated_at = now()
			FROM due
			WHERE s.name = due.name
			RETURNING s.name, s.cursor, coalesce(due.lease_owner, ''), due.run_id,
			          due.run_requested_at IS NOT NULL`,
			names, limit, s.conf.Owner, s.conf.Now(), s.conf.Lease)
		if err != nil {
			return err
		}
		var prevRuns []int64
		for rows.Next() {
			var c claim
			var prevRun *int64
			var manual bool
			if err := rows.Scan(&c.name, &c.cursor, &c.prevOwner, &prevRun, &manual); err != nil {
				return err
			}
			c.reason = "schedule"
			switch {
			case c.prevOwner != "":
				c.reason = "takeover"
				if prevRun != nil {
					prevRuns = append(prevRuns, *prevRun)
				}
			case manual:
				c.reason = "manual"
			}
			claims = append(claims, c)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if len(prevRuns) > 0 {
			if _, err := tx.Exec(ctx, `
				UPDATE sync_runs SET status = 'abandoned', finished_at = now(),
				       error = 'lease expired while running; taken over by ' || $2
				WHERE id = ANY($1) AND status = 'running'`, prevRuns, s.conf.Owner); err != nil {
				return err
			}
		}
		for i := range claims {
			c := &claims[i]
			if err := tx.QueryRow(ctx, `
				INSERT INTO sync_runs (source, owner, reason, cursor_before) VALUES ($1, $2, $3, $4)
				RETURNING id`, c.name, s.conf.Owner, c.reason, c.cursor).Scan(&c.runID); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `UPDATE sources SET run_id = $2 WHERE name = $1`, c.name, c.runID); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("claim due sources: %w", err)
	}
	for _, c := range claims {
		if c.reason == "takeover" {
			s.logger.Warn("took over expired lease", "source", c.name, "run_id", c.runID, "previous_owner", c.prevOwner)
		}
	}
	return claims, nil
}

func jitter(max time.Duration) time.Duration {
	if max <= 0 {
		return 0
	}
	return rand.N(max)
}

func describeSchedule(sc *config.Source) string {
	if sc.Cron != "" {
		return fmt.Sprintf("cron %q %s", sc.Cron, sc.Timezone)
	}
	s := "every " + sc.Every.String()
	if sc.Jitter != nil && *sc.Jitter > 0 {
		s += " jitter " + sc.Jitter.String()
	}
	if sc.Adaptive != nil {
		s += fmt.Sprintf(" adaptive %s..%s", sc.Adaptive.Min, sc.Adaptive.Max)
	}
	return s
}
