package metrics

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// Gauges selects the database gauges a process exposes (see
// CollectDatabase). The syncer exposes SourceGauges, the evaluator
// OutboxGauges, so that a dashboard summing over both binaries counts
// each table once.
type Gauges int

const (
	// SourceGauges: lookout_sources{status}, lookout_sources_due,
	// lookout_sync_runs_running, lookout_sources_failing{connector},
	// lookout_longest_without_success_seconds{connector} and
	// lookout_expired_leases{component="syncer"}: a number of series
	// that does not grow with the sources.
	SourceGauges Gauges = 1 << iota
	// OutboxGauges: lookout_pending_changes,
	// lookout_oldest_pending_change_age_seconds,
	// lookout_pending_notifications{sink}, lookout_held_notifications{sink},
	// lookout_dead_notifications{sink} and
	// lookout_expired_leases{component="evaluator"|"delivery"}.
	OutboxGauges
	// PerSourceGauges (opt-in: metrics.per_source in lookout.yaml):
	// lookout_source_last_success_timestamp_seconds{source} and
	// lookout_source_consecutive_failures{source} of every active source,
	// two series per source (200,000 at 100,000 sources) read from the
	// sources table at every scrape.
	PerSourceGauges
)

// DBTimeoutDefault bounds the queries of one scrape.
const DBTimeoutDefault = 2 * time.Second

// CollectDatabase registers a collector that reads the selected gauges
// from pool at every scrape, with one round trip of cheap queries (counts
// over the partial indexes of pending work, the small sources table),
// bounded by timeout (DBTimeoutDefault when 0). sinks are the configured
// sink names, reported at 0 when they have nothing. When the queries fail,
// the scrape still succeeds: lookout_database_up is 0 and the gauges are
// left out.
func (m *Metrics) CollectDatabase(pool *pgxpool.Pool, g Gauges, sinks []string, timeout time.Duration) {
	if m == nil {
		return
	}
	if timeout <= 0 {
		timeout = DBTimeoutDefault
	}
	m.reg.MustRegister(&dbCollector{pool: pool, gauges: g, sinks: sinks, timeout: timeout})
}

var (
	descUp = prometheus.NewDesc("lookout_database_up",
		"1 when the scrape-time database queries succeeded, 0 when they failed or timed out.", nil, nil)
	descSources = prometheus.NewDesc("lookout_sources",
		"Registered sources by status: active, paused, disabled, completed.", []string{"status"}, nil)
	descSourcesDue = prometheus.NewDesc("lookout_sources_due",
		"Active sources that are due (or asked to run) and not leased: the syncers' backlog.", nil, nil)
	descRunsRunning = prometheus.NewDesc("lookout_sync_runs_running",
		"sync_runs rows with status running.", nil, nil)
	descFailing = prometheus.NewDesc("lookout_sources_failing",
		"Active sources whose last run failed (sources.failure_count > 0), by connector.", []string{"connector"}, nil)
	descWithoutSuccess = prometheus.NewDesc("lookout_longest_without_success_seconds",
		"The longest time an active source of the connector has gone without a successful run: now minus the latest of its last success, its registration and its last status change (the watchdog's stale measure).", []string{"connector"}, nil)
	descLastSuccess = prometheus.NewDesc("lookout_source_last_success_timestamp_seconds",
		"Unix time of the active source's last successful run (sources.last_success_at); only with metrics.per_source.", []string{"source"}, nil)
	descConsecutive = prometheus.NewDesc("lookout_source_consecutive_failures",
		"Consecutive failed runs of the active source (sources.failure_count); only with metrics.per_source.", []string{"source"}, nil)
	descExpired = prometheus.NewDesc("lookout_expired_leases",
		"Leases past their expiry and not yet taken over: syncer (sources), evaluator (changes), delivery (notifications).", []string{"component"}, nil)
	descPendingChanges = prometheus.NewDesc("lookout_pending_changes",
		"Changes waiting for evaluation (changes.eval_status = 'pending'), held ones included.", nil, nil)
	descOldestChange = prometheus.NewDesc("lookout_oldest_pending_change_age_seconds",
		"Age of the oldest pending change; 0 when none is pending.", nil, nil)
	descPendingNotes = prometheus.NewDesc("lookout_pending_notifications",
		"Notifications waiting for delivery (status pending), retries included.", []string{"sink"}, nil)
	descHeldNotes = prometheus.NewDesc("lookout_held_notifications",
		"Notifications held for a digest (status held).", []string{"sink"}, nil)
	descDeadNotes = prometheus.NewDesc("lookout_dead_notifications",
		"Dead letters (status dead) not yet retried or removed.", []string{"sink"}, nil)
)

type dbCollector struct {
	pool    *pgxpool.Pool
	gauges  Gauges
	sinks   []string
	timeout time.Duration
}

var _ prometheus.Collector = (*dbCollector)(nil)

func (c *dbCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descUp
	if c.gauges&SourceGauges != 0 {
		for _, d := range []*prometheus.Desc{descSources, descSourcesDue, descRunsRunning, descFailing, descWithoutSuccess} {
			ch <- d
		}
		if c.gauges&PerSourceGauges != 0 {
			ch <- descLastSuccess
			ch <- descConsecutive
		}
	}
	if c.gauges&OutboxGauges != 0 {
		for _, d := range []*prometheus.Desc{descPendingChanges, descOldestChange, descPendingNotes, descHeldNotes, descDeadNotes} {
			ch <- d
		}
	}
	ch <- descExpired
}

// sample is one gauge value read from the database.
type sample struct {
	desc   *prometheus.Desc
	value  float64
	labels []string
}

func (c *dbCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	samples, err := c.read(ctx)
	if err != nil {
		ch <- prometheus.MustNewConstMetric(descUp, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(descUp, prometheus.GaugeValue, 1)
	for _, s := range samples {
		ch <- prometheus.MustNewConstMetric(s.desc, prometheus.GaugeValue, s.value, s.labels...)
	}
}

// read runs the queries in one batch (one round trip).
func (c *dbCollector) read(ctx context.Context) ([]sample, error) {
	var out []sample
	b := &pgx.Batch{}
	if c.gauges&SourceGauges != 0 {
		statuses := map[string]float64{"active": 0, "paused": 0, "disabled": 0, "completed": 0, "removed": 0}
		failing, without := map[string]float64{}, map[string]float64{}
		var due, expired float64
		b.Queue(`
			SELECT status, connector, count(*)::float8,
			       count(*) FILTER (WHERE status = 'active' AND (next_run_at <= now() OR run_requested_at IS NOT NULL)
			                          AND (lease_expires_at IS NULL OR lease_expires_at < now()))::float8,
			       count(*) FILTER (WHERE lease_owner IS NOT NULL AND lease_expires_at < now())::float8,
			       count(*) FILTER (WHERE status = 'active' AND failure_count > 0)::float8,
			       coalesce(extract(epoch FROM now() - min(greatest(last_success_at, status_changed_at, created_at))
			                                          FILTER (WHERE status = 'active')), 0)::float8
			FROM sources GROUP BY status, connector`).Query(func(rows pgx.Rows) error {
			var st, conn string
			var n, d, e, f, w float64
			_, err := pgx.ForEachRow(rows, []any{&st, &conn, &n, &d, &e, &f, &w}, func() error {
				statuses[st] += n
				due += d
				expired += e
				failing[conn] += f
				without[conn] = max(without[conn], w)
				return nil
			})
			if err != nil {
				return err
			}
			for st, n := range statuses {
				out = append(out, sample{descSources, n, []string{st}})
			}
			for conn, f := range failing {
				out = append(out, sample{descFailing, f, []string{conn}}, sample{descWithoutSuccess, max(without[conn], 0), []string{conn}})
			}
			out = append(out, sample{descSourcesDue, due, nil}, sample{descExpired, expired, []string{ComponentSyncer}})
			return nil
		})
		b.Queue(`SELECT count(*)::float8 FROM sync_runs WHERE status = 'running'`).QueryRow(func(row pgx.Row) error {
			var n float64
			if err := row.Scan(&n); err != nil {
				return err
			}
			out = append(out, sample{descRunsRunning, n, nil})
			return nil
		})
	}
	if c.gauges&SourceGauges != 0 && c.gauges&PerSourceGauges != 0 {
		b.Queue(`SELECT name, extract(epoch FROM last_success_at)::float8, failure_count::float8 FROM sources WHERE status = 'active'`).Query(func(rows pgx.Rows) error {
			var name string
			var at *float64
			var failures float64
			_, err := pgx.ForEachRow(rows, []any{&name, &at, &failures}, func() error {
				if at != nil {
					out = append(out, sample{descLastSuccess, *at, []string{name}})
				}
				out = append(out, sample{descConsecutive, failures, []string{name}})
				return nil
			})
			return err
		})
	}
	if c.gauges&OutboxGauges != 0 {
		// The counts and the oldest pending change are two CTEs: Citus
		// pushes no subquery beside aggregates down to the shards
		// ("cannot push down subquery on the target list"); it runs
		// each CTE over the shards, and PostgreSQL plans them as the
		// one statement did.
		b.Queue(`
			WITH p AS (
			    SELECT count(*)::float8 AS n,
			           count(*) FILTER (WHERE eval_owner IS NOT NULL AND eval_lease_expires_at < now())::float8 AS expired
			    FROM changes WHERE eval_status = 'pending'
			), o AS (
			    SELECT created_at FROM changes WHERE eval_status = 'pending' ORDER BY id LIMIT 1
			)
			SELECT p.n, p.expired, coalesce((SELECT extract(epoch FROM now() - o.created_at)::float8 FROM o), 0) FROM p`).QueryRow(func(row pgx.Row) error {
			var pending, expired, oldest float64
			if err := row.Scan(&pending, &expired, &oldest); err != nil {
				return err
			}
			out = append(out, sample{descPendingChanges, pending, nil}, sample{descOldestChange, max(oldest, 0), nil},
				sample{descExpired, expired, []string{ComponentEvaluator}})
			return nil
		})
		b.Queue(`
			SELECT sink, status, count(*)::float8,
			       count(*) FILTER (WHERE status = 'pending' AND lease_owner IS NOT NULL AND lease_expires_at < now())::float8
			FROM notifications WHERE status IN ('pending', 'held', 'dead')
			GROUP BY sink, status`).Query(func(rows pgx.Rows) error {
			type key struct{ sink, status string }
			counts := map[key]float64{}
			for _, s := range c.sinks {
				for _, st := range []string{"pending", "held", "dead"} {
					counts[key{s, st}] = 0
				}
			}
			var sink, st string
			var n, e, expired float64
			_, err := pgx.ForEachRow(rows, []any{&sink, &st, &n, &e}, func() error {
				counts[key{sink, st}] = n
				expired += e
				return nil
			})
			if err != nil {
				return err
			}
			descs := map[string]*prometheus.Desc{"pending": descPendingNotes, "held": descHeldNotes, "dead": descDeadNotes}
			for k, n := range counts {
				out = append(out, sample{descs[k.status], n, []string{k.sink}})
			}
			out = append(out, sample{descExpired, expired, []string{ComponentDelivery}})
			return nil
		})
	}
	if err := c.pool.SendBatch(ctx, b).Close(); err != nil {
		return nil, err
	}
	return out, nil
}
