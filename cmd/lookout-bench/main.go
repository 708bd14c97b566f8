// Command lookout-bench measures lookout against baselines measured in the
// same run (see internal/bench). It needs DATABASE_URL; `make bench` starts
// a throwaway PostgreSQL when it is unset.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/lookout-dev/lookout/internal/bench"
	"github.com/lookout-dev/lookout/internal/db"
)

func main() {
	// -h and --help print the flags to stdout and exit 0, touching nothing.
	flag.CommandLine.Init("lookout-bench", flag.ContinueOnError)
	flag.CommandLine.Usage = func() {}
	records := flag.Int("records", 100_000, "records to mirror")
	page := flag.Int("page-size", 1000, "records per API page")
	keep := flag.Bool("keep", false, "keep the benchmark schemas for inspection")
	rate := flag.Int("rate", 1000, "changes per second of the latency measurement (-1 skips it)")
	latencyFor := flag.Duration("latency-for", 10*time.Second, "duration of the latency measurement")
	backlog := flag.Int("backlog", 100_000, "changes of the evaluator throughput measurement (-1 skips it)")
	deliveries := flag.Int("deliveries", 5000, "webhook deliveries measured (-1 skips it)")
	syncerBin := flag.String("syncer", "", "syncer binary whose peak RSS is measured (empty skips it)")
	rssRecords := flag.Int("rss-records", 1_000_000, "records the syncer mirrors for the RSS measurement")
	creates := flag.Int("creates", 10_000, "watches created through the HTTP API (-1 skips it)")
	clients := flag.Int("clients", 16, "concurrent clients of the create measurement")
	webhookRate := flag.Int("webhook-rate", 200, "deliveries per second of the webhook measurement (-1 skips it)")
	webhookFor := flag.Duration("webhook-for", 10*time.Second, "duration of the webhook latency measurement")
	webhookStores := flag.Int("webhook-stores", 5000, "deliveries of the webhook ingest throughput measurement")
	adminSources := flag.Int("admin-sources", 100_000, "sources of the admin page measurement")
	adminChanges := flag.Int("admin-changes", 10_000_000, "changes of the admin page measurement (-1 skips it)")
	adminRuns := flag.Int("admin-runs", 20, "fetches of each admin page")
	adminSchema := flag.String("admin-schema", "", "time (9) on this schema, filled by an earlier run with --keep (no fill)")
	adminPages := flag.String("admin-pages", "", "time only the admin pages of (9) whose path matches this regular expression (default all)")
	sources := flag.Int("sources", 100_000, "sources of the schedule measurement (10) (-1 skips it)")
	every := flag.Duration("every", time.Minute, "schedule of those sources")
	window := flag.Duration("for", 5*time.Minute, "measured window of (10), in whole minutes of the syncer's summary lines (default: one syncer.rollup_every, so that it holds one flush of the quiet-run counts)")
	warmup := flag.Duration("warmup", 0, "time between the end of the initial sync and the window of (10) (default: the longer of every and syncer.rollup_every, so that the window starts after the first write of the quiet-run counts)")
	unchanged := flag.Int("unchanged-every", 10, "every n-th feed of (10) answers unchanged content instead of 304")
	replicas := flag.Int("replicas", 1, "syncer processes sharing the sources of (10); the upstream counts two runs of one source at once")
	baseSyncer := flag.String("base-syncer", "", "syncer binary from before issue 11, measured in (10) too (e.g. /work/wt/base/bin/syncer)")
	firstRuns := flag.Int("first-runs", 200, "sources created through the HTTP API while a syncer runs, measurement (11) (-1 skips it)")
	firstRunGap := flag.Duration("first-run-gap", 50*time.Millisecond, "time between the creates of (11)")
	manyWatches := flag.Int("many-watches", 100_000, "watches loaded for the latency measurement (12) (-1 skips it)")
	manySources := flag.Int("many-sources", 1000, "sources those watches are spread over")
	evaluatorBin := flag.String("evaluator", "", "evaluator binary started by (13) (empty skips its evaluator half)")
	startWatches := flag.Int("start-watches", 100_000, "watches of the evaluator started by (13), and a tenth of them (-1 skips it)")
	startWatchSources := flag.Int("start-watch-sources", 1000, "source files those watches are spread over")
	startSources := flag.Int("start-sources", 100_000, "sources of the syncer started by (13), and a tenth of them (-1 skips it)")
	startHold := flag.Duration("start-hold", 10*time.Second, "time (13) lets a process run after it is ready before reading its VmHWM")
	nodes := flag.String("nodes", "", "comma-separated URLs of further PostgreSQL nodes on this machine (a Citus coordinator's workers): (10) reports each one's WAL and CPU per run")
	only := flag.String("only", "", "comma-separated measurements to run, e.g. 10 or 1,2,10 (default all)")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the run to `file`")
	memprofile := flag.String("memprofile", "", "write the allocations of the run (pprof's allocs profile) to `file` when it ends")
	jsonOut := flag.String("json", "", "also write the run's figures, load average and --label as JSON to `file`, for --compare")
	label := flag.String("label", "", "the run's name in its --json file (e.g. \"single 1\", \"citus 1\")")
	compare := flag.Bool("compare", false, "run nothing: print one table of the --json files given as arguments, a Citus cluster's runs (--nodes) against one node's, with the overhead")
	if err := flag.CommandLine.Parse(os.Args[1:]); err != nil {
		out, code := os.Stderr, 2
		if errors.Is(err, flag.ErrHelp) {
			out, code = os.Stdout, 0
		}
		flag.CommandLine.SetOutput(out)
		fmt.Fprintf(out, "Usage: lookout-bench [flags]\n\nMeasures lookout against baselines (docs/benchmarks.md); needs DATABASE_URL.\n\nFlags:\n")
		flag.PrintDefaults()
		os.Exit(code)
	}
	if *compare {
		if flag.NArg() == 0 {
			fmt.Fprintln(os.Stderr, "lookout-bench: --compare needs the --json files of the runs as arguments")
			os.Exit(2)
		}
		var runs []*bench.Labeled
		for _, path := range flag.Args() {
			r, err := bench.ReadRun(path)
			if err != nil {
				fmt.Fprintln(os.Stderr, "lookout-bench:", err)
				os.Exit(1)
			}
			runs = append(runs, r)
		}
		if err := bench.WriteComparison(os.Stdout, runs); err != nil {
			fmt.Fprintln(os.Stderr, "lookout-bench:", err)
			os.Exit(1)
		}
		return
	}
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "lookout-bench: unexpected argument %q\n", flag.Arg(0))
		os.Exit(2)
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "lookout-bench:", err)
			os.Exit(1)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, "lookout-bench:", err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	url, err := db.URLFromEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, "lookout-bench:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	res, err := bench.Run(ctx, bench.Options{DatabaseURL: url, Records: *records, PageSize: *page, Keep: *keep,
		Rate: *rate, LatencyFor: *latencyFor, Backlog: *backlog, Deliveries: *deliveries, SyncerBin: *syncerBin, RSSRecords: *rssRecords,
		Creates: *creates, Clients: *clients, FirstRuns: *firstRuns, FirstRunGap: *firstRunGap,
		ManyWatches: *manyWatches, ManySources: *manySources,
		EvaluatorBin: *evaluatorBin, Startup: bench.StartupOptions{Watches: *startWatches, WatchSources: *startWatchSources,
			Sources: *startSources, Hold: *startHold},
		WebhookRate: *webhookRate, WebhookFor: *webhookFor, WebhookStores: *webhookStores,
		AdminSources: *adminSources, AdminChanges: *adminChanges, AdminRuns: *adminRuns, AdminSchema: *adminSchema, AdminPages: *adminPages,
		Only: *only, Nodes: splitList(*nodes), Schedule: bench.ScheduleOptions{Replicas: *replicas, Sources: *sources, Every: *every, For: *window, Warmup: *warmup,
			UnchangedEvery: *unchanged, BaseBin: *baseSyncer}})
	if err == nil && *jsonOut != "" {
		err = bench.WriteRun(*jsonOut, &bench.Labeled{Label: *label, Nodes: 1 + len(splitList(*nodes)), Result: res})
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "lookout-bench:", err)
		pprof.StopCPUProfile()
		os.Exit(1)
	}
	if *memprofile != "" {
		if err := writeAllocs(*memprofile); err != nil {
			fmt.Fprintln(os.Stderr, "lookout-bench:", err)
			os.Exit(1)
		}
	}
}

// writeAllocs writes pprof's allocs profile (every allocation since the
// start, sampled) to file.
func writeAllocs(file string) error {
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", file, err)
	}
	return f.Close()
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}
