// Package bench measures lookout against baselines measured in the same
// run: the syncer's initial and unchanged re-sync of records from a local
// HTTP API beside a plain COPY of the same rows.
package bench

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lookout-dev/lookout/internal/api"
	"github.com/lookout-dev/lookout/internal/config"
	_ "github.com/lookout-dev/lookout/internal/connectors/file"
	_ "github.com/lookout-dev/lookout/internal/connectors/httpjson"
	"github.com/lookout-dev/lookout/internal/db"
	"github.com/lookout-dev/lookout/internal/normalize"
	"github.com/lookout-dev/lookout/internal/syncer"
)

// Options configure a run.
type Options struct {
	// DatabaseURL is the database; every measurement gets a fresh schema in it.
	DatabaseURL string
	// Records is the number of records of the sync measurements. Defaults to 100,000.
	Records int
	// PageSize is the API's page size. Defaults to 1,000.
	PageSize int
	// Rate and LatencyFor shape the latency measurement: changes per second
	// and duration. Defaults to 1,000/s for 10s; a zero Rate after
	// defaults skips it (Rate < 0).
	Rate       int
	LatencyFor time.Duration
	// Backlog is the number of changes of the evaluator throughput
	// measurement. Defaults to 100,000; < 0 skips it.
	Backlog int
	// Deliveries is the number of webhook deliveries measured. Defaults to
	// 5,000; < 0 skips it.
	Deliveries int
	// SyncerBin and RSSRecords: the syncer binary whose peak RSS is
	// measured while mirroring RSSRecords (default 1,000,000). Skipped when
	// SyncerBin is empty or RSSRecords < 0.
	SyncerBin  string
	RSSRecords int
	// Creates and Clients: watches created through the HTTP API by that
	// many concurrent clients. Defaults to 10,000 and 16; Creates < 0
	// skips it.
	Creates, Clients int
	// WebhookRate and WebhookFor shape the webhook received → decision
	// measurement (8); WebhookStores is the number of deliveries of its
	// ingest throughput. Defaults to 200/s for 10s and 5,000; a
	// WebhookRate < 0 skips (8).
	WebhookRate   int
	WebhookFor    time.Duration
	WebhookStores int
	// AdminSources and AdminChanges size the dataset of the admin page
	// measurement (sources, changes over 30 days); AdminRuns is how many
	// times each page is fetched. Defaults to 100,000, 10,000,000 and 20;
	// AdminChanges < 0 skips it.
	AdminSources, AdminChanges, AdminRuns int
	// AdminSchema, when set, times (9) on that schema, filled by an
	// earlier run kept with Keep (its name is printed): the fill is
	// skipped and the schema migrated to the current version first.
	AdminSchema string
	// AdminPages, when set, times only the admin pages whose path it
	// matches (a regular expression, e.g. ^/admin/(stuck|failures)).
	// Defaults to every page.
	AdminPages string
	// Schedule shapes measurement (10): Sources (default 100,000; < 0
	// skips it), Every (1m), For (5m, one syncer.rollup_every), Warmup (the longer of every and syncer.rollup_every), UnchangedEvery
	// (10), BaseBin (the syncer binary before issue 11, measured too when
	// set). SyncerBin is the binary measured.
	Schedule ScheduleOptions
	// FirstRuns and FirstRunGap shape measurement (11): sources (each
	// with a watch) created through the HTTP API, one every gap, while a
	// syncer runs. Defaults to 200 and 50ms; FirstRuns < 0 skips it.
	FirstRuns   int
	FirstRunGap time.Duration
	// ManyWatches and ManySources shape measurement (12): watches loaded
	// over that many sources beside source gen's, at Rate changes/s for
	// LatencyFor. Defaults to 100,000 and 1,000; ManyWatches < 0 skips it.
	ManyWatches, ManySources int
	// Startup shapes measurement (13): the `evaluator run` (EvaluatorBin)
	// and `syncer run` (SyncerBin) processes started on a configuration
	// directory of Watches watches and Sources sources (defaults
	// 100,000; < 0 skips one) and on a tenth of it.
	Startup      StartupOptions
	EvaluatorBin string
	// Only, when set, lists the measurements to run ("1,2,10"); (1) and
	// (2) run together.
	Only string
	// Keep leaves the benchmark schemas in place for inspection.
	Keep bool
	// Nodes are the URLs of further PostgreSQL nodes behind DatabaseURL
	// (the workers of a Citus coordinator, on this machine): measurement
	// (10) reports each one's WAL and CPU per run beside the coordinator's.
	Nodes []string
	Out   io.Writer
}

// runs reports whether measurement n is to be run.
func (o *Options) runs(n int) bool {
	if o.Only == "" {
		return true
	}
	for _, f := range strings.Split(o.Only, ",") {
		if strings.TrimSpace(f) == strconv.Itoa(n) {
			return true
		}
	}
	return false
}

// Result holds the measured figures.
type Result struct {
	// Start and End bound the run; Load is the machine's load average
	// meanwhile.
	Start, End time.Time
	Load       Load
	// HostSpeed is HostSpeed's probe at the run's start and end.
	HostSpeed             [2]time.Duration
	Records               int
	Initial, Resync, Copy time.Duration
	// InitialRuns and CopyRuns are (1)'s alternated runs, in order;
	// Initial and Copy are their medians.
	InitialRuns, CopyRuns       []time.Duration
	InitialRate, ResyncRate     float64 // records/s
	CopyRate                    float64 // rows/s
	ResyncRowsWritten           int64
	InitialVsCopy, ResyncVsCopy float64
	// InitialCost, ResyncCost and CopyCost: CPU and WAL of each, which
	// wall times on a shared machine do not show.
	InitialCost, ResyncCost, CopyCost Cost

	Latency     *LatencyResult
	Backlog     int
	BacklogTime time.Duration
	// BacklogCost is what the drain of (4) cost (not the fill).
	BacklogCost    Cost
	Deliveries     int
	DeliveriesTime time.Duration
	// DeliveriesBare is the same-run baseline of (5): the time of a bare
	// signed POST loop sending as many, to the same receiver, alternated
	// with the deliveries; DeliveriesTime and DeliveriesBare are the
	// medians of deliveryPairs runs each.
	DeliveriesBare time.Duration
	RSS            *RSSResult
	Creates        *CreatesResult
	Webhooks       *WebhookResult
	Admin          *AdminResult
	Schedule       []*ScheduleResult
	Startup        []*StartupResult
	FirstRun       *FirstRunResult
	ManyWatches    *ManyWatchesResult
}

// schema creates a fresh migrated schema and returns a pool on it.
func (o *Options) schema(ctx context.Context, admin *pgxpool.Pool, name string) (*pgxpool.Pool, string, func(), error) {
	return o.schemaWith(ctx, admin, name, true)
}

// schemaWith creates a fresh schema, migrated when migrate is set, and
// returns a pool on it, its URL and a function that drops it.
func (o *Options) schemaWith(ctx context.Context, admin *pgxpool.Pool, name string, migrate bool) (*pgxpool.Pool, string, func(), error) {
	schema := fmt.Sprintf("bench_%s_%d", name, time.Now().UnixNano())
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+db.Quote(schema)); err != nil {
		return nil, "", nil, fmt.Errorf("create schema: %w", err)
	}
	drop := func() {
		if !o.Keep {
			admin.Exec(context.WithoutCancel(ctx), "DROP SCHEMA "+db.Quote(schema)+" CASCADE")
		}
	}
	url := o.schemaURL(schema)
	pool, err := db.Open(ctx, url)
	if err != nil {
		drop()
		return nil, "", nil, err
	}
	if !migrate {
		return pool, url, func() { pool.Close(); drop() }, nil
	}
	if _, err := db.Migrate(ctx, pool); err != nil {
		pool.Close()
		drop()
		return nil, "", nil, err
	}
	return pool, url, func() { pool.Close(); drop() }, nil
}

// schemaURL is the database URL with schema as the search path.
func (o *Options) schemaURL(schema string) string {
	if strings.Contains(o.DatabaseURL, "?") {
		return o.DatabaseURL + "&search_path=" + schema
	}
	return o.DatabaseURL + "?search_path=" + schema
}

// keptSchema opens a schema an earlier run kept, migrated to the current
// version.
func (o *Options) keptSchema(ctx context.Context, schema string) (*pgxpool.Pool, error) {
	pool, err := db.Open(ctx, o.schemaURL(schema))
	if err != nil {
		return nil, fmt.Errorf("open schema %s: %w", schema, err)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_namespace WHERE nspname = $1`, schema).Scan(&n); err != nil || n == 0 {
		pool.Close()
		return nil, fmt.Errorf("schema %q does not exist (an earlier run with --keep prints the name of the schema it kept): %v", schema, err)
	}
	if _, err := db.Migrate(ctx, pool); err != nil {
		pool.Close()
		return nil, fmt.Errorf("migrate schema %s: %w", schema, err)
	}
	return pool, nil
}

// Run performs every measurement and prints a report to o.Out.
func Run(ctx context.Context, o Options) (*Result, error) {
	o.setDefaults()
	out := o.Out
	if out == nil {
		out = os.Stdout
	}
	admin, err := db.Open(ctx, o.DatabaseURL)
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	res := &Result{Records: o.Records, Start: time.Now()}
	stopLoad := SampleLoad()
	defer func() { res.Load, res.End = stopLoad(), time.Now() }()
	fmt.Fprintf(out, "lookout benchmark (%d cores); every measurement on a fresh schema\n", runtime.NumCPU())
	res.HostSpeed[0] = probeHost(out, "start")
	fmt.Fprintln(out)
	defer func() { res.HostSpeed[1] = probeHost(out, "end") }()
	r := &runner{o: &o, admin: admin, out: out, res: res}
	for _, m := range []struct {
		on  bool
		run func(context.Context) error
	}{
		{o.runs(1) || o.runs(2), r.syncVsCopy},
		{o.Rate > 0 && o.runs(3), r.latency},
		{o.Backlog > 0 && o.runs(4), r.backlog},
		{o.Deliveries > 0 && o.runs(5), r.deliveries},
		{o.Creates > 0 && o.runs(7), r.creates},
		{o.FirstRuns > 0 && o.runs(11), r.firstRuns},
		{o.Rate > 0 && o.ManyWatches > 0 && o.runs(12), r.manyWatches},
		{o.WebhookRate > 0 && o.runs(8), r.webhooks},
		{o.SyncerBin != "" && o.RSSRecords > 0 && o.runs(6), r.rss},
		{o.Schedule.SyncerBin != "" && o.Schedule.Sources > 0 && o.runs(10), r.schedule},
		{(o.Startup.EvaluatorBin != "" || o.Startup.SyncerBin != "") && o.runs(13), r.startup},
		{o.AdminChanges > 0 && o.runs(9), r.adminPages},
	} {
		if !m.on {
			continue
		}
		if err := m.run(ctx); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// probeHost prints and returns HostSpeed's probe (0 when it cannot be
// read: the run's figures stand without it).
func probeHost(out io.Writer, when string) time.Duration {
	d, err := HostSpeed()
	if err != nil {
		fmt.Fprintf(out, "host speed probe at the %s: %v\n", when, err)
		return 0
	}
	fmt.Fprintf(out, "host speed probe at the %s: %.3f s of CPU for a fixed sort (lower is faster; docs/benchmarks.md \"The host's speed\")\n", when, d.Seconds())
	return d
}

// runner holds what every measurement of one Run shares.
type runner struct {
	o     *Options
	admin *pgxpool.Pool
	out   io.Writer
	res   *Result
}

// seconds is d in seconds, for the printed rates.
func seconds(d time.Duration) float64 { return d.Seconds() }

// setDefaults fills every option left at zero.
func (o *Options) setDefaults() {
	o.Records = cmp.Or(o.Records, 100_000)
	o.PageSize = cmp.Or(o.PageSize, 1000)
	o.Rate = cmp.Or(o.Rate, 1000)
	o.LatencyFor = cmp.Or(o.LatencyFor, 10*time.Second)
	o.Backlog = cmp.Or(o.Backlog, 100_000)
	o.Deliveries = cmp.Or(o.Deliveries, 5000)
	o.RSSRecords = cmp.Or(o.RSSRecords, 1_000_000)
	o.AdminSources = cmp.Or(o.AdminSources, 100_000)
	o.AdminChanges = cmp.Or(o.AdminChanges, 10_000_000)
	o.AdminRuns = cmp.Or(o.AdminRuns, 20)
	o.Creates = cmp.Or(o.Creates, 10_000)
	o.Clients = cmp.Or(o.Clients, 16)
	o.WebhookRate = cmp.Or(o.WebhookRate, 200)
	o.WebhookFor = cmp.Or(o.WebhookFor, 10*time.Second)
	o.WebhookStores = cmp.Or(o.WebhookStores, 5000)
	o.FirstRuns = cmp.Or(o.FirstRuns, 200)
	o.FirstRunGap = cmp.Or(o.FirstRunGap, 50*time.Millisecond)
	o.ManyWatches = cmp.Or(o.ManyWatches, 100_000)
	o.ManySources = cmp.Or(o.ManySources, 1000)
	st := &o.Startup
	st.Watches = cmp.Or(st.Watches, 100_000)
	st.WatchSources = cmp.Or(st.WatchSources, 1000)
	st.Sources = cmp.Or(st.Sources, 100_000)
	st.Hold = cmp.Or(st.Hold, 10*time.Second)
	st.ReadyDeadline = cmp.Or(st.ReadyDeadline, 10*time.Minute)
	st.EvaluatorBin = cmp.Or(st.EvaluatorBin, o.EvaluatorBin)
	st.SyncerBin = cmp.Or(st.SyncerBin, o.SyncerBin)
	so := &o.Schedule
	so.Sources = cmp.Or(so.Sources, 100_000)
	so.Every = cmp.Or(so.Every, time.Minute)
	so.For = cmp.Or(so.For, 5*time.Minute) // one syncer.rollup_every: the window holds one flush of the quiet-run counts
	// The window starts after the first write of the quiet-run counts
	// (syncer.rollup_every after the syncer started), which inserts the
	// hour's row of every source: a cost of once an hour per source, not
	// of the runs of one window (docs/scaling.md counts it apart).
	so.Warmup = cmp.Or(so.Warmup, max(so.Every, config.RollupEveryDefault))
	so.UnchangedEvery = cmp.Or(so.UnchangedEvery, 10)
	so.SyncerBin = cmp.Or(so.SyncerBin, o.SyncerBin)
}

// syncVsCopy runs measurements (1) and (2): sync against COPY.
func (r *runner) syncVsCopy(ctx context.Context) error {
	o := r.o
	out := r.out
	res := r.res
	admin := r.admin
	_, url, done, err := o.schema(ctx, admin, "sync")
	if err != nil {
		return err
	}
	// The syncer's pool is sized as the syncer daemon sizes it.
	var pool *pgxpool.Pool
	if pool, err = db.OpenSized(ctx, url+"&application_name="+syncApp, syncer.PoolConns); err == nil {
		err = runSync(ctx, pool, *o, res)
		pool.Close()
	}
	done()
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "(1)(2) sync of %d records from a local HTTP API (pages of %d) against COPY of the same rows\n", o.Records, o.PageSize)
	fmt.Fprintf(out, "  %-32s %10s %14s %10s\n", "measurement", "seconds", "records/s", "vs COPY")
	fmt.Fprintf(out, "  %-32s %10.2f %14.0f %10.2f\n", "(1) initial sync", seconds(res.Initial), res.InitialRate, res.InitialVsCopy)
	fmt.Fprintf(out, "  %-32s %10.2f %14.0f %10.2f\n", "(2) unchanged re-sync", seconds(res.Resync), res.ResyncRate, res.ResyncVsCopy)
	fmt.Fprintf(out, "  %-32s %10.2f %14.0f %10.2f\n", "    plain COPY of the same rows", seconds(res.Copy), res.CopyRate, 1.0)
	fmt.Fprintf(out, "  (1) and the COPY are medians of %d runs each, alternated: sync %s s; COPY %s s\n",
		syncPairs, runSeconds(res.InitialRuns), runSeconds(res.CopyRuns))
	fmt.Fprintf(out, "  the re-sync wrote %d record/change rows (target 0)\n", res.ResyncRowsWritten)
	fmt.Fprintf(out, "  %-32s %14s %14s %10s\n", "CPU and WAL", "bench (Go) s", "PostgreSQL s", "WAL MB")
	for _, c := range []struct {
		name string
		c    Cost
	}{{"(1) initial sync", res.InitialCost}, {"(2) unchanged re-sync", res.ResyncCost}, {"    plain COPY", res.CopyCost}} {
		fmt.Fprintf(out, "  %-32s %14.2f %14.2f %10.1f\n", c.name, c.c.Go.Seconds(), c.c.DB.Seconds(), float64(c.c.WAL)/1e6)
		if len(c.c.NodeDB) > 0 {
			fmt.Fprintf(out, "  %-32s %s; WAL %s (the line above: the coordinator's)\n", "    on the workers:",
				strings.TrimPrefix(nodeSeconds(c.c.NodeDB), ", "), strings.TrimPrefix(nodeMB(c.c.NodeWAL), ", "))
		}
	}
	fmt.Fprintln(out)
	return nil
}

// latency runs measurement (3): commit-to-decision latency.
func (r *runner) latency(ctx context.Context) error {
	o := r.o
	out := r.out
	res := r.res
	admin := r.admin
	pool, _, done, err := o.schema(ctx, admin, "latency")
	if err != nil {
		return err
	}
	res.Latency, err = RunLatency(ctx, pool, o.Rate, o.LatencyFor)
	done()
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "(3) commit-to-decision latency, steady %d changes/s for %s, deterministic watches, no model\n", o.Rate, o.LatencyFor)
	fmt.Fprintf(out, "  LISTEN/NOTIFY wake-up   %s\n", res.Latency.Notify)
	fmt.Fprintf(out, "  its steps (the evaluator's batch timelines, evaluator.BatchTrace):\n%s", res.Latency.Steps)
	fmt.Fprintf(out, "  naive 1s polling loop   %s\n\n", res.Latency.Naive)
	return nil
}

// backlog runs measurement (4): evaluator throughput on a backlog.
func (r *runner) backlog(ctx context.Context) error {
	o := r.o
	out := r.out
	res := r.res
	admin := r.admin
	pool, _, done, err := o.schema(ctx, admin, "backlog")
	if err != nil {
		return err
	}
	res.Backlog = o.Backlog
	res.BacklogTime, res.BacklogCost, err = runBacklogCost(ctx, pool, o.Backlog, o.Nodes)
	done()
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "(4) evaluator throughput on a backlog of %d changes (2 deterministic watches)\n", o.Backlog)
	fmt.Fprintf(out, "  %.2fs, %.0f changes/s\n", seconds(res.BacklogTime), float64(o.Backlog)/seconds(res.BacklogTime))
	c := res.BacklogCost
	fmt.Fprintf(out, "  the drain's cost: bench (Go) %.2f s, PostgreSQL %.2f s%s, WAL %.1f MB%s\n\n", c.Go.Seconds(), c.DB.Seconds(), nodeSeconds(c.NodeDB),
		float64(c.WAL)/1e6, nodeMB(c.NodeWAL))
	return nil
}

// deliveries runs measurement (5): webhook deliveries, alternated with
// its baseline, a bare signed POST loop to the same receiver.
func (r *runner) deliveries(ctx context.Context) error {
	o := r.o
	out := r.out
	res := r.res
	pool, _, done, err := o.schema(ctx, r.admin, "deliver")
	if err != nil {
		return err
	}
	res.Deliveries = o.Deliveries
	res.DeliveriesTime, res.DeliveriesBare, err = DeliveriesAgainstBare(ctx, pool, o.Deliveries)
	done()
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "(5) webhook deliveries to a local receiver (signed, HTTP/1.1 keep-alive), against bare signed POSTs to it\n")
	fmt.Fprintf(out, "  measurement                         seconds   deliveries/s   vs bare\n")
	fmt.Fprintf(out, "  deliveries through the outbox      %7.2f  %13.0f   %7.2f\n", seconds(res.DeliveriesTime),
		float64(o.Deliveries)/seconds(res.DeliveriesTime), seconds(res.DeliveriesBare)/seconds(res.DeliveriesTime))
	fmt.Fprintf(out, "  bare signed POST loop              %7.2f  %13.0f      1.00\n", seconds(res.DeliveriesBare),
		float64(o.Deliveries)/seconds(res.DeliveriesBare))
	fmt.Fprintf(out, "  (medians of %d runs each, alternated)\n\n", deliveryPairs)
	return nil
}

// creates runs measurement (7): watches created through the HTTP API.
func (r *runner) creates(ctx context.Context) error {
	o := r.o
	out := r.out
	res := r.res
	admin := r.admin
	_, url, done, err := o.schema(ctx, admin, "creates")
	if err != nil {
		return err
	}
	// The api's pool is sized as the api daemon sizes it.
	var pool *pgxpool.Pool
	if pool, err = db.OpenSized(ctx, url, api.PoolConns); err == nil {
		res.Creates, err = RunCreates(ctx, pool, o.Creates, o.Clients)
		pool.Close()
	}
	done()
	if err != nil {
		return err
	}
	c := res.Creates
	fmt.Fprintf(out, "(7) %d watches created through the HTTP API (create_watch) by %d concurrent clients, one owner each\n", c.Watches, c.Clients)
	fmt.Fprintf(out, "  %.2fs, %.0f creates/s; per call %s\n\n", seconds(c.Took), float64(c.Watches)/seconds(c.Took), c.Latency)
	return nil
}

// firstRuns runs measurement (11): create-to-first-run latency.
func (r *runner) firstRuns(ctx context.Context) error {
	o := r.o
	out := r.out
	res := r.res
	admin := r.admin
	pool, _, done, err := o.schema(ctx, admin, "firstrun")
	if err != nil {
		return err
	}
	res.FirstRun, err = RunFirstRun(ctx, pool, o.FirstRuns, o.FirstRunGap)
	done()
	if err != nil {
		return fmt.Errorf("first runs: %w", err)
	}
	f := res.FirstRun
	fmt.Fprintf(out, "(11) create-to-first-run: %d sources created through the HTTP API (create_watch with new_source), one every %s, while a syncer runs (poll_interval %s: woken by the definitions NOTIFY), target p99 <= 1s\n", f.Sources, o.FirstRunGap, f.PollInterval)
	fmt.Fprintf(out, "  call -> first claim   %s\n", f.Latency)
	fmt.Fprintf(out, "  the create call       %s\n\n", f.Create)
	return nil
}

// manyWatches runs measurement (12): commit-to-decision with many watches loaded.
func (r *runner) manyWatches(ctx context.Context) error {
	o := r.o
	out := r.out
	res := r.res
	admin := r.admin
	pool, _, done, err := o.schema(ctx, admin, "manywatches")
	if err != nil {
		return err
	}
	res.ManyWatches, err = RunManyWatches(ctx, pool, o.Rate, o.LatencyFor, o.ManyWatches, o.ManySources)
	done()
	if err != nil {
		return fmt.Errorf("many watches: %w", err)
	}
	m := res.ManyWatches
	fmt.Fprintf(out, "(12) commit-to-decision latency, steady %d changes/s for %s on source gen (its 2 watches of (3)), the evaluator following the definitions, alternated, target p99 <= 2x the baseline\n", m.Rate, o.LatencyFor)
	for i, ph := range m.Phases {
		fmt.Fprintf(out, "  phase %d, %6d watches loaded   %s\n", i+1, ph.Watches, ph.Latency)
	}
	fmt.Fprintf(out, "  baseline (phases 1, 3)           %s\n", m.Baseline)
	fmt.Fprintf(out, "  %d watches more (phases 2, 4) %s  (p99 %.2fx the baseline)\n", m.Watches, m.Loaded, float64(m.Loaded.P99)/float64(max(m.Baseline.P99, time.Microsecond)))
	fmt.Fprintf(out, "  created through the definitions store in %.1fs; loaded by the evaluator in %.1fs; Go heap in use %.0f MB\n\n", seconds(m.Load), seconds(m.Apply), m.HeapMB)
	return nil
}

// webhooks runs measurement (8): webhook ingest.
func (r *runner) webhooks(ctx context.Context) error {
	o := r.o
	out := r.out
	res := r.res
	admin := r.admin
	pool, _, done, err := o.schema(ctx, admin, "webhooks")
	if err != nil {
		return err
	}
	res.Webhooks, err = RunWebhooks(ctx, pool, o.WebhookRate, o.WebhookFor, o.WebhookStores)
	done()
	if err != nil {
		return fmt.Errorf("webhooks: %w", err)
	}
	w := res.Webhooks
	fmt.Fprintf(out, "(8) webhook ingest: signed deliveries POSTed to /ingest, stored, mirrored by the events processor, decided by the evaluator (one process)\n")
	fmt.Fprintf(out, "  received -> decision, steady %d deliveries/s for %s: %s\n", w.Rate, o.WebhookFor, w.Latency)
	fmt.Fprintf(out, "    POST -> stored             %s\n", w.Stages[0])
	fmt.Fprintf(out, "    stored -> mirroring began  %s\n", w.Stages[1])
	fmt.Fprintf(out, "    mirroring began -> decided %s\n", w.Stages[2])
	if w.Stored > 0 {
		fmt.Fprintf(out, "  one ingest, GOMAXPROCS 2 (load generator in-process): %d stored in %.2fs, %.0f deliveries/s\n",
			w.Stored, seconds(w.StoreTime), float64(w.Stored)/seconds(w.StoreTime))
	}
	fmt.Fprintf(out, "  upstream requests per day of one repository, polled every minute vs webhooks + a 6h reconciliation poll:\n")
	fmt.Fprintf(out, "  %14s %12s %14s %12s %10s\n", "events/hour", "polling", "(of them 304)", "webhook", "saved")
	for _, r := range w.Saved {
		fmt.Fprintf(out, "  %14.0f %12.0f %14.0f %12.0f %9.0f%%\n", r.EventsPerHour, r.Polling, r.PollingFree, r.Webhook, 100*(1-r.Webhook/r.Polling))
	}
	fmt.Fprintln(out)
	return nil
}

// rss runs measurement (6): syncer peak RSS.
func (r *runner) rss(ctx context.Context) error {
	o := r.o
	out := r.out
	res := r.res
	admin := r.admin
	_, url, done, err := o.schema(ctx, admin, "rss")
	if err != nil {
		return err
	}
	res.RSS, err = RunRSS(ctx, o.SyncerBin, url, o.RSSRecords, o.PageSize)
	done()
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "(6) syncer process mirroring %d records (`syncer once`, its own process)\n", o.RSSRecords)
	fmt.Fprintf(out, "  peak RSS %.1f MB, %.1fs (%.0f records/s)\n\n", float64(res.RSS.PeakRSS)/1e6, seconds(res.RSS.Duration), float64(o.RSSRecords)/seconds(res.RSS.Duration))
	return nil
}

// schedule runs measurement (10): one syncer keeping sources on schedule.
func (r *runner) schedule(ctx context.Context) error {
	var err error
	r.res.Schedule, err = RunSchedule(ctx, r.o, r.admin, r.o.Schedule, r.out)
	return err
}

// startup runs measurement (13): the processes an operator starts on many
// watches and sources.
func (r *runner) startup(ctx context.Context) error {
	var err error
	r.res.Startup, err = RunStartup(ctx, r.o, r.admin, r.o.Startup, r.out)
	return err
}

// adminPages runs measurement (9): the admin page on a large database.
func (r *runner) adminPages(ctx context.Context) error {
	o := r.o
	out := r.out
	res := r.res
	admin := r.admin
	var (
		pool *pgxpool.Pool
		url  string
		err  error
	)
	done := func() {}
	fill := o.AdminSchema == ""
	if fill {
		pool, url, done, err = o.schema(ctx, admin, "admin")
		fmt.Fprintf(out, "(9) admin pages on %d sources and %d changes (30 days of history), %d fetches each, target p95 <= 200ms\n", o.AdminSources, o.AdminChanges, o.AdminRuns)
		if o.Keep {
			fmt.Fprintf(out, "  kept: %s (time it again with --admin-schema %s)\n", url, url[strings.LastIndex(url, "=")+1:])
		}
	} else {
		pool, err = o.keptSchema(ctx, o.AdminSchema)
		if err == nil {
			done = pool.Close
		}
		fmt.Fprintf(out, "(9) admin pages on the kept schema %s, %d fetches each, target p95 <= 200ms\n", o.AdminSchema, o.AdminRuns)
	}
	if err != nil {
		return err
	}
	var pages *regexp.Regexp
	if o.AdminPages != "" {
		if pages, err = regexp.Compile(o.AdminPages); err != nil {
			done()
			return fmt.Errorf("--admin-pages %q: %w", o.AdminPages, err)
		}
	}
	res.Admin, err = RunAdmin(ctx, pool, AdminOptions{Sources: o.AdminSources, Changes: o.AdminChanges, Runs: o.AdminRuns, Fill: fill, Pages: pages}, out)
	done()
	if err != nil {
		return err
	}
	WriteAdmin(out, res.Admin)
	return nil
}

// API is a local fixture JSON API: pages of realistic ticket records,
// rendered once so that the server costs little next to the syncer.
type API struct {
	pages [][]byte
	Items []map[string]any
}

// NewAPI renders n items in pages of size per page.
func NewAPI(n, size int) *API {
	a := &API{}
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for p := 0; p*size < n; p++ {
		var b strings.Builder
		b.WriteString(`{"data":[`)
		for i := p * size; i < min((p+1)*size, n); i++ {
			if i > p*size {
				b.WriteByte(',')
			}
			ts := base.Add(time.Duration(i) * time.Minute).Format(time.RFC3339)
			fmt.Fprintf(&b, `{"id":%d,"title":"Ticket %d: printer on floor %d is jammed again","body":"Reported by the front desk. The printer shows error E%d and the tray is stuck; please check the rollers and replace the toner if needed.","url":"https://tickets.example.com/t/%d","author":"user%d","status":"%s","labels":["facilities","floor-%d"],"created_at":"%s","updated_at":"%s","priority":%d,"assignee":"agent%d"}`,
				i, i, i%12, i%97, i, i%500, []string{"open", "pending", "closed"}[i%3], i%12, ts, ts, i%4, i%40)
		}
		next := "null"
		if (p+1)*size < n {
			next = fmt.Sprintf(`"/tickets?page=%d"`, p+2)
		}
		fmt.Fprintf(&b, `],"links":{"next":%s}}`, next)
		a.pages = append(a.pages, []byte(b.String()))
	}
	return a
}

// ServeHTTP answers GET /tickets?page=N.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p, err := strconv.Atoi(r.URL.Query().Get("page"))
	if err != nil || p < 1 || p > len(a.pages) {
		http.Error(w, "no such page", http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(a.pages[p-1])))
	w.Write(a.pages[p-1])
}

// runSync measures the initial sync, the unchanged re-sync and the COPY
// baseline.
func runSync(ctx context.Context, pool *pgxpool.Pool, o Options, res *Result) error {
	api := NewAPI(o.Records, o.PageSize)
	srv := httptest.NewServer(api)
	defer srv.Close()

	dir, err := os.MkdirTemp("", "lookout-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := writeConfig(dir, srv.URL); err != nil {
		return err
	}
	cfg, err := config.Load(dir)
	if err != nil {
		return err
	}
	sconf := syncer.FromConfig(cfg)
	sconf.Owner = "bench"
	s, err := syncer.New(pool, sconf, slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	if err := s.Register(ctx); err != nil {
		return err
	}
	// A syncer daemon's pool is open and its connections established
	// long before a source's first sync; this one was opened now, and the
	// COPY baseline runs later on connections the syncs warmed.
	if err := warm(ctx, pool); err != nil {
		return err
	}
	// A daemon's connections have also written before: a backend maps
	// each page of PostgreSQL's shared buffers into its own address space
	// the first time it touches it (a minor page fault, about 1 s of the
	// backend's CPU per 256 MB of shared_buffers, once per connection),
	// which a fresh connection's first large write pays and a running
	// daemon's does not. The initial sync of another source of the same
	// size on this pool warms the connections (1) reuses; the COPY
	// baseline's connection is warmed alike (copyBaselineRuns.measure).
	if err := warmupSync(ctx, pool, srv.URL); err != nil {
		return err
	}

	// (a) initial sync and (c) the plain COPY of the same rows into a
	// table like records, alternated syncPairs times: the host's speed
	// changes within a run (docs/benchmarks.md, "The host's speed"), and
	// a sync measured once beside a COPY measured once carried both
	// spreads. Each sync after the first starts where the first did: the
	// tables emptied and the source never synced (a source that synced
	// before reads its stored records back, even from empty tables).
	cp, err := newCopyBaseline(ctx, pool, api, cfg.Sources[0], o.Nodes)
	if err != nil {
		return err
	}
	var syncs, copies []measured
	for i := range syncPairs {
		if i > 0 {
			if _, err := pool.Exec(ctx, `TRUNCATE records, changes`); err != nil {
				return fmt.Errorf("empty the tables for initial sync %d: %w", i+1, err)
			}
			if _, err := pool.Exec(ctx, `
				UPDATE sources SET next_run_at = now(), cursor = DEFAULT, last_success_at = NULL,
				       last_run_at = NULL, last_change_at = NULL
				WHERE name <> $1`, warmupName); err != nil {
				return fmt.Errorf("make the source new again for initial sync %d: %w", i+1, err)
			}
		}
		checkpoint(ctx, pool, o.Nodes)
		m, err := timeRunDue(ctx, s, pool, o.Nodes)
		if err != nil {
			return fmt.Errorf("initial sync %d: %w", i+1, err)
		}
		if err := checkRun(ctx, pool, o.Records, "items_created"); err != nil {
			return fmt.Errorf("initial sync %d: %w", i+1, err)
		}
		syncs = append(syncs, m)
		if m.took, m.cost, err = cp.measure(ctx); err != nil {
			return fmt.Errorf("COPY baseline %d: %w", i+1, err)
		}
		copies = append(copies, m)
	}
	res.Initial, res.InitialCost = medianOf(syncs)
	res.Copy, res.CopyCost = medianOf(copies)
	for i := range syncs {
		res.InitialRuns, res.CopyRuns = append(res.InitialRuns, syncs[i].took), append(res.CopyRuns, copies[i].took)
	}

	// (b) unchanged re-sync: nothing may be written but the run's own rows.
	if err := flushStats(ctx, pool); err != nil {
		return err
	}
	if err := warm(ctx, pool); err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, `UPDATE sources SET next_run_at = now() WHERE name <> $1`, warmupName); err != nil {
		return err
	}
	before, err := tupleWrites(ctx, pool)
	if err != nil {
		return err
	}
	m, err := timeRunDue(ctx, s, pool, o.Nodes)
	if err != nil {
		return fmt.Errorf("unchanged re-sync: %w", err)
	}
	res.Resync, res.ResyncCost = m.took, m.cost
	if err := checkQuietRun(ctx, pool, o.Records); err != nil {
		return err
	}
	after, err := tupleWrites(ctx, pool)
	if err != nil {
		return err
	}
	res.ResyncRowsWritten = after - before

	sec := func(d time.Duration) float64 { return d.Seconds() }
	res.InitialRate = float64(o.Records) / sec(res.Initial)
	res.ResyncRate = float64(o.Records) / sec(res.Resync)
	res.CopyRate = float64(o.Records) / sec(res.Copy)
	res.InitialVsCopy = res.InitialRate / res.CopyRate
	res.ResyncVsCopy = res.ResyncRate / res.CopyRate
	return nil
}

func writeConfig(dir, apiURL string) error { return writeSourceConfig(dir, apiURL, "tickets") }

// writeSourceConfig writes a configuration directory of one http source
// named name reading the fixture API at apiURL.
func writeSourceConfig(dir, apiURL, name string) error {
	if err := os.MkdirAll(filepath.Join(dir, "sources"), 0o755); err != nil {
		return err
	}
	// The fixture API is local: give its host a budget that does not limit
	// (the default host budget, 2/s, is for real upstreams).
	host := strings.TrimPrefix(apiURL, "http://")
	global := fmt.Sprintf("sinks: {log: {type: log}}\nsyncer: {batch_size: 1000}\ndefaults: {jitter: 0s}\nhosts: {%q: {per_second: 100000, burst: 1000}}\n", host)
	if err := os.WriteFile(filepath.Join(dir, "lookout.yaml"), []byte(global), 0o644); err != nil {
		return err
	}
	src := fmt.Sprintf(`name: %s
connector: http
rate_limit: {per_second: 100000, burst: 100}
http:
  url: %s/tickets?page=1
  items: body.data
  next: body.links.next
  max_pages: 100000
`, name, apiURL)
	return os.WriteFile(filepath.Join(dir, "sources", name+".yaml"), []byte(src), 0o644)
}

// warmupName is the source of warmupSync.
const warmupName = "warmup"

// warmupSync runs the initial sync of a source named warmupName reading
// the fixture API at apiURL, with a syncer of its own on pool, not
// measured: the backends of pool's connections then have written as
// much as (1) will. It empties records and changes after it.
func warmupSync(ctx context.Context, pool *pgxpool.Pool, apiURL string) error {
	dir, err := os.MkdirTemp("", "lookout-bench-warmup-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := writeSourceConfig(dir, apiURL, warmupName); err != nil {
		return err
	}
	cfg, err := config.Load(dir)
	if err != nil {
		return err
	}
	sconf := syncer.FromConfig(cfg)
	sconf.Owner = "bench-warmup"
	s, err := syncer.New(pool, sconf, slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	if err := s.Register(ctx); err != nil {
		return err
	}
	if _, err := s.RunDue(ctx); err != nil {
		return fmt.Errorf("warm-up sync: %w", err)
	}
	var status string
	if err := pool.QueryRow(ctx, `SELECT status FROM sync_runs WHERE source = $1 ORDER BY id DESC LIMIT 1`, warmupName).Scan(&status); err != nil {
		return fmt.Errorf("read the warm-up run: %w", err)
	}
	if status != "succeeded" {
		return fmt.Errorf("warm-up sync %s", status)
	}
	// (1) writes into empty tables, as before the warm-up: its indexes
	// and autovacuum's work are not the warm-up's.
	if _, err := pool.Exec(ctx, `TRUNCATE records, changes`); err != nil {
		return fmt.Errorf("empty the warm-up's records: %w", err)
	}
	return nil
}

// checkQuietRun checks that the re-sync was one quiet run that read n
// unchanged items: a quiet run writes no sync_runs row, it is counted in
// sync_run_hours (migration 10).
func checkQuietRun(ctx context.Context, pool *pgxpool.Pool, n int) error {
	var runs, seen int64
	err := pool.QueryRow(ctx, `SELECT coalesce(sum(runs), 0), coalesce(sum(items_seen), 0) FROM sync_run_hours`).Scan(&runs, &seen)
	if err != nil {
		return fmt.Errorf("read quiet runs: %w", err)
	}
	if runs != 1 || seen != int64(n) {
		return fmt.Errorf("the re-sync was %d quiet run(s) that read %d items, want 1 that read %d (a run that changed or failed something is in sync_runs)", runs, seen, n)
	}
	return nil
}

func checkRun(ctx context.Context, pool *pgxpool.Pool, n int, column string) error {
	var status string
	var got int
	var errText *string
	err := pool.QueryRow(ctx, `SELECT status, `+column+`, error FROM sync_runs WHERE source <> $1 ORDER BY id DESC LIMIT 1`, warmupName).Scan(&status, &got, &errText)
	if err != nil {
		return fmt.Errorf("read run: %w", err)
	}
	if status != "succeeded" || got != n {
		e := ""
		if errText != nil {
			e = *errText
		}
		return fmt.Errorf("benchmark run %s with %s=%d, want %d: %s", status, column, got, n, e)
	}
	return nil
}

// checkpoint starts a measurement of (1) or the COPY on the same footing:
// no checkpoint of the writes before it running meanwhile, on pool's node
// and on nodes (a coordinator's workers). It needs pg_checkpoint (or a
// superuser, as scripts/bench.sh's cluster gives); without it the
// measurement runs as it is.
func checkpoint(ctx context.Context, pool *pgxpool.Pool, nodes []string) {
	pool.Exec(ctx, "CHECKPOINT")
	for _, u := range nodes {
		if conn, err := pgx.Connect(ctx, u); err == nil {
			conn.Exec(ctx, "CHECKPOINT")
			conn.Close(ctx)
		}
	}
}

// warm establishes every connection of pool (its MaxConns) and releases
// them: measurements start on an open pool, as in a running daemon.
func warm(ctx context.Context, pool *pgxpool.Pool) error {
	conns := make([]*pgxpool.Conn, 0, pool.Config().MaxConns)
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	for range pool.Config().MaxConns {
		c, err := pool.Acquire(ctx)
		if err != nil {
			return fmt.Errorf("open the pool's connections: %w", err)
		}
		conns = append(conns, c)
	}
	return nil
}

// syncApp is the application_name of the connections of the syncer of
// (1) and (2).
const syncApp = "lookout-bench-sync"

// flushStats closes pool's connections and waits until their backends
// exited, which flushes the table statistics they held (a backend
// reports them at most once a second while it lives): the initial sync's
// writes are then all counted before the re-sync's are measured.
func flushStats(ctx context.Context, pool *pgxpool.Pool) error {
	pool.Reset()
	for {
		var left int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND pid <> pg_backend_pid()`, syncApp).Scan(&left)
		if err != nil {
			return fmt.Errorf("wait for the syncer's connections to close: %w", err)
		}
		if left == 0 {
			return nil
		}
		if !sleepCtx(ctx, 10*time.Millisecond) {
			return ctx.Err()
		}
	}
}

// tupleWrites counts rows inserted or updated in records and changes.
func tupleWrites(ctx context.Context, pool *pgxpool.Pool) (int64, error) {
	var n int64
	// pg_stat_xact is per transaction; use the cumulative view, flushed.
	if _, err := pool.Exec(ctx, `SELECT pg_stat_force_next_flush()`); err != nil {
		return 0, err
	}
	err := pool.QueryRow(ctx, `
		SELECT coalesce(sum(n_tup_ins + n_tup_upd + n_tup_del), 0)::bigint
		FROM pg_stat_user_tables
		WHERE schemaname = current_schema() AND relname IN ('records', 'changes')`).Scan(&n)
	return n, err
}

// syncPairs is how many initial syncs and COPYs (1) alternates, as (5)
// alternates deliveryPairs.
const syncPairs = 5

// measured is one timed run and what it cost.
type measured struct {
	took time.Duration
	cost Cost
}

// runSeconds lists the runs' seconds, "2.31 2.40 …".
func runSeconds(runs []time.Duration) string {
	s := make([]string, len(runs))
	for i, d := range runs {
		s[i] = strconv.FormatFloat(d.Seconds(), 'f', 2, 64)
	}
	return strings.Join(s, " ")
}

// timeRunDue runs s's due sources once and returns how long it took and
// what it cost.
func timeRunDue(ctx context.Context, s *syncer.Syncer, pool *pgxpool.Pool, nodes []string) (measured, error) {
	c0, err := measureCost(ctx, pool, nodes)
	if err != nil {
		return measured{}, err
	}
	start := time.Now()
	if _, err := s.RunDue(ctx); err != nil {
		return measured{}, err
	}
	m := measured{took: time.Since(start)}
	m.cost, err = c0.since(ctx, pool, nodes)
	return m, err
}

// medianOf returns the median run of ms (by time) and its cost.
func medianOf(ms []measured) (time.Duration, Cost) {
	s := slices.Clone(ms)
	slices.SortFunc(s, func(a, b measured) int { return cmp.Compare(a.took, b.took) })
	m := s[len(s)/2]
	return m.took, m.cost
}

// copyBaselineRuns is (1)'s baseline: the rows of src's mapping of the
// fixture API, prepared before timing (the baseline is the database's
// best case), and the tables they are COPYed into.
type copyBaselineRuns struct {
	pool  *pgxpool.Pool
	rows  [][]any
	nodes []string
}

// newCopyBaseline makes the baseline's tables, records_warmup and
// records_copy, like records. On a Citus coordinator both are
// distributed as records is (by source, co-located with it): the COPY
// goes through the coordinator to the shard of the source, as the
// syncer's writes do.
func newCopyBaseline(ctx context.Context, pool *pgxpool.Pool, api *API, src *config.Source, nodes []string) (*copyBaselineRuns, error) {
	citus, err := onCitus(ctx, pool)
	if err != nil {
		return nil, err
	}
	for _, t := range []string{"records_warmup", "records_copy"} {
		if _, err := pool.Exec(ctx, `CREATE TABLE `+t+` (LIKE records INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING INDEXES)`); err != nil {
			return nil, err
		}
		if !citus {
			continue
		}
		if _, err := pool.Exec(ctx, `SELECT create_distributed_table($1, 'source', colocate_with => 'records')`, t); err != nil {
			return nil, fmt.Errorf("distribute %s like records: %w", t, err)
		}
	}
	rows, err := copyRows(api, src, "tickets")
	if err != nil {
		return nil, err
	}
	return &copyBaselineRuns{pool: pool, rows: rows, nodes: nodes}, nil
}

// measure COPYs the rows into an empty records_copy and returns how long
// it took and what it cost. The COPY runs on a connection that COPYed
// them just before into records_warmup (not measured), as (1) runs on
// connections that synced before (warmupSync).
func (b *copyBaselineRuns) measure(ctx context.Context) (time.Duration, Cost, error) {
	if _, err := b.pool.Exec(ctx, `TRUNCATE records_warmup, records_copy`); err != nil {
		return 0, Cost{}, fmt.Errorf("empty the COPY baseline's tables: %w", err)
	}
	conn, err := b.pool.Acquire(ctx)
	if err != nil {
		return 0, Cost{}, err
	}
	defer conn.Release()
	if _, err := copyInto(ctx, conn, "records_warmup", b.rows); err != nil {
		return 0, Cost{}, err
	}
	checkpoint(ctx, b.pool, b.nodes)
	c0, err := measureCost(ctx, b.pool, b.nodes)
	if err != nil {
		return 0, Cost{}, err
	}
	d, err := copyInto(ctx, conn, "records_copy", b.rows)
	if err != nil {
		return 0, Cost{}, err
	}
	c, err := c0.since(ctx, b.pool, b.nodes)
	return d, c, err
}

// onCitus reports whether pool's database has the citus extension (a
// Citus coordinator).
func onCitus(ctx context.Context, pool *pgxpool.Pool) (bool, error) {
	var citus bool
	if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')`).Scan(&citus); err != nil {
		return false, fmt.Errorf("look for the citus extension: %w", err)
	}
	return citus, nil
}

// copyColumns are the columns of records copyRows fills.
var copyColumns = []string{"source", "record_id", "version", "content_hash", "title", "body", "url", "author", "status",
	"labels", "external_created_at", "external_updated_at", "extra", "raw"}

// copyRows normalizes every item of api as src's mapping does, as rows of
// copyColumns of the source named name.
func copyRows(api *API, src *config.Source, name string) ([][]any, error) {
	m, err := normalize.NewMapper(normalize.FieldExprs{}, src.Volatile)
	if err != nil {
		return nil, err
	}
	var rows [][]any
	for _, page := range api.pages {
		doc, err := normalize.Decode(page)
		if err != nil {
			return nil, err
		}
		for _, it := range doc.(map[string]any)["data"].([]any) {
			r, err := m.Map(it, nil)
			if err != nil {
				return nil, err
			}
			rows = append(rows, []any{name, r.ID, 1, r.Hash, r.Title, r.Body, r.URL, r.Author, r.Status,
				r.Labels, r.CreatedAt, r.UpdatedAt, string(normalize.Canonical(r.Extra)), string(r.Raw)})
		}
	}
	return rows, nil
}

// copyInto COPYs rows (copyRows') into table and returns how long it took.
func copyInto(ctx context.Context, pool interface {
	CopyFrom(context.Context, pgx.Identifier, []string, pgx.CopyFromSource) (int64, error)
}, table string, rows [][]any) (time.Duration, error) {
	start := time.Now()
	n, err := pool.CopyFrom(ctx, pgx.Identifier{table}, copyColumns, pgx.CopyFromRows(rows))
	if err != nil {
		return 0, fmt.Errorf("copy: %w", err)
	}
	d := time.Since(start)
	if int(n) != len(rows) {
		return 0, fmt.Errorf("copied %d rows of %d", n, len(rows))
	}
	return d, nil
}

// Cost is what a measurement cost: the bench process's CPU (the syncer
// and the local API in it), PostgreSQL's processes' CPU and the WAL
// written; on a Citus coordinator DB and WAL are the coordinator's, and
// NodeDB and NodeWAL those of each of Options.Nodes (its workers).
type Cost struct {
	Go, DB  time.Duration
	WAL     int64
	NodeDB  []time.Duration `json:",omitempty"`
	NodeWAL []int64         `json:",omitempty"`
}

// TotalDB is the PostgreSQL CPU of every node.
func (c Cost) TotalDB() time.Duration {
	t := c.DB
	for _, d := range c.NodeDB {
		t += d
	}
	return t
}

// TotalWAL is the WAL every node wrote.
func (c Cost) TotalWAL() int64 {
	t := c.WAL
	for _, w := range c.NodeWAL {
		t += w
	}
	return t
}

// costMark is the counters at the start of a measurement.
type costMark struct {
	goCPU   time.Duration
	dbCPU   map[int]time.Duration
	wal     int64
	nodeCPU []map[int]time.Duration
	nodeWAL []int64
}

// measureCost reads the counters of Cost on pool's node and on nodes.
func measureCost(ctx context.Context, pool *pgxpool.Pool, nodes []string) (costMark, error) {
	var m costMark
	var err error
	if m.goCPU, err = procCPU(os.Getpid()); err != nil {
		return m, fmt.Errorf("read the bench's CPU time: %w", err)
	}
	if m.dbCPU, err = dbCPU(ctx, pool); err != nil {
		return m, err
	}
	if err := pool.QueryRow(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::bigint`).Scan(&m.wal); err != nil {
		return m, fmt.Errorf("read the WAL position: %w", err)
	}
	for _, u := range nodes {
		cpu, wal, err := nodeSnap(ctx, u)
		if err != nil {
			return m, err
		}
		m.nodeCPU, m.nodeWAL = append(m.nodeCPU, cpu), append(m.nodeWAL, wal)
	}
	return m, nil
}

// since is the cost from m until now.
func (m costMark) since(ctx context.Context, pool *pgxpool.Pool, nodes []string) (Cost, error) {
	n, err := measureCost(ctx, pool, nodes)
	if err != nil {
		return Cost{}, err
	}
	c := Cost{Go: n.goCPU - m.goCPU, WAL: n.wal - m.wal}
	c.DB = cpuSince(m.dbCPU, n.dbCPU)
	for i := range n.nodeWAL {
		c.NodeDB = append(c.NodeDB, cpuSince(m.nodeCPU[i], n.nodeCPU[i]))
		c.NodeWAL = append(c.NodeWAL, n.nodeWAL[i]-m.nodeWAL[i])
	}
	return c, nil
}

// cpuSince is the CPU PostgreSQL's processes spent from a to b (a process
// started meanwhile counts whole).
func cpuSince(a, b map[int]time.Duration) time.Duration {
	var t time.Duration
	for pid, d := range b {
		t += d - a[pid]
	}
	return t
}

// nodeSeconds lists the CPU of each further node, ", node 1 0.12 s, ...".
func nodeSeconds(d []time.Duration) string {
	var b strings.Builder
	for i, t := range d {
		fmt.Fprintf(&b, ", node %d %.2f s", i+1, t.Seconds())
	}
	return b.String()
}

// nodeMB lists the WAL of each further node, ", node 1 0.1 MB, ...".
func nodeMB(w []int64) string {
	var b strings.Builder
	for i, n := range w {
		fmt.Fprintf(&b, ", node %d %.1f MB", i+1, float64(n)/1e6)
	}
	return b.String()
}
