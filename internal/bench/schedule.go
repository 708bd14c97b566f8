package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ScheduleResult is measurement (10): one syncer keeping N sources on
// schedule, each checked against a local upstream that answers 304 (or,
// for a tenth of them, the same content again).
type ScheduleResult struct {
	Label       string
	Sources     int
	Window      time.Duration
	Runs        int64   // requests the upstream answered in the window (a run is one request)
	RunsPerSec  float64 // Runs / Window
	Demand      float64 // Sources / every
	LateP50     time.Duration
	LateP99     time.Duration
	LateMax     time.Duration
	SyncerCPU   time.Duration // the syncer process's user+system CPU in the window
	DBCPU       time.Duration // PostgreSQL's processes' CPU in the window
	WAL         int64         // bytes of WAL written in the window
	TableGrowth int64         // growth of the schema's tables and indexes in the window
	LogBytes    int64         // bytes the syncer logged in the window
	Replicas    int           // syncer processes sharing the sources
	PeakRSS     int64         // the largest peak RSS (VmHWM) of a syncer process, bytes
	// Overlaps counts requests the upstream received for a feed while
	// another request for the same feed was in flight: two runs of one
	// source at once, which the leases and claims must never allow.
	Overlaps int64
	Note     string
	// NodeDBCPU and NodeWAL are DBCPU and WAL of each of Options.Nodes
	// (DBCPU and WAL are then the coordinator's).
	NodeDBCPU []time.Duration
	NodeWAL   []int64
}

// PerRun divides a total by the runs of the window.
func (r *ScheduleResult) PerRun(total float64) float64 {
	if r.Runs == 0 {
		return 0
	}
	return total / float64(r.Runs)
}

func (r *ScheduleResult) String() string {
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	late := "n/a"
	if r.LateP99 > 0 || r.LateP50 > 0 {
		late = fmt.Sprintf("%.0f / %.0f ms", ms(r.LateP50), ms(r.LateP99))
	}
	return fmt.Sprintf("  %-26s %9.0f %7.0f%% %17s %9.3f %9.3f %9.0f %9.0f %9.0f",
		r.Label, r.RunsPerSec, 100*r.RunsPerSec/r.Demand, late,
		r.PerRun(ms(r.SyncerCPU)), r.PerRun(ms(r.DBCPU)), r.PerRun(float64(r.WAL)), r.PerRun(float64(r.TableGrowth)), r.PerRun(float64(r.LogBytes)))
}

// scheduleHeader names the columns of ScheduleResult.String.
const scheduleHeader = "  %-26s %9s %8s %17s %9s %9s %9s %9s %9s\n"

// feeds is the local upstream of (10): GET /feed/{i} is an RSS feed with
// an ETag, answering 304 when the request names it; every
// unchangedEvery-th feed sends no validators and answers its unchanged
// content (three items) again. The ETag feeds are empty, so that the
// initial sync (every source's first run) writes few records and the
// measurement starts soon: after it their answers are 304s either way.
type feeds struct {
	unchangedEvery int
	requests       atomic.Int64
	body, empty    []byte
	inflight       []atomic.Int32 // requests in flight per feed
	overlaps       atomic.Int64   // requests that found another in flight for their feed
}

func newFeeds(unchangedEvery, n int) *feeds {
	var b strings.Builder
	b.WriteString(`<?xml version="1.0" encoding="UTF-8"?><rss version="2.0"><channel><title>bench</title><link>http://example.org/</link><description>bench</description>`)
	for i := range 3 {
		fmt.Fprintf(&b, `<item><title>Release %d</title><link>http://example.org/r/%d</link><guid>r-%d</guid><pubDate>Mon, 02 Nov 2026 10:0%d:00 GMT</pubDate><description>Notes of release %d.</description></item>`, i, i, i, i, i)
	}
	b.WriteString(`</channel></rss>`)
	empty := `<?xml version="1.0" encoding="UTF-8"?><rss version="2.0"><channel><title>bench</title><link>http://example.org/</link><description>bench</description></channel></rss>`
	return &feeds{unchangedEvery: unchangedEvery, body: []byte(b.String()), empty: []byte(empty), inflight: make([]atomic.Int32, n+1)}
}

func (f *feeds) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.requests.Add(1)
	n, err := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/feed/"))
	if err != nil || n < 0 || n >= len(f.inflight) {
		http.NotFound(w, r)
		return
	}
	if f.inflight[n].Add(1) > 1 {
		f.overlaps.Add(1)
	}
	defer f.inflight[n].Add(-1)
	w.Header().Set("Content-Type", "application/rss+xml")
	if f.unchangedEvery <= 0 || n%f.unchangedEvery != 0 {
		etag := `"` + strconv.Itoa(n) + `-v1"`
		if r.Header.Get("If-None-Match") == etag {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		w.Header().Set("ETag", etag)
		w.Write(f.empty)
		return
	}
	w.Write(f.body)
}

// writeFeedConfig writes a configuration directory of n rss sources, one
// file each, every `every` and otherwise the defaults.
func writeFeedConfig(dir, base string, n int, every time.Duration) error {
	if err := os.MkdirAll(filepath.Join(dir, "sources"), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "lookout.yaml"), []byte("log: {level: info}\n"), 0o644); err != nil {
		return err
	}
	for i := range n {
		name := fmt.Sprintf("feed-%06d", i)
		y := fmt.Sprintf("name: %s\nconnector: rss\nrss: {url: %s/feed/%d}\nevery: %s\n", name, base, i, every)
		if err := os.WriteFile(filepath.Join(dir, "sources", name+".yaml"), []byte(y), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// ScheduleOptions shape measurement (10).
type ScheduleOptions struct {
	Sources        int           // default 100,000
	Every          time.Duration // default 1m
	For            time.Duration // measured window, whole minutes of summary lines; default 5m (one flush of the quiet-run counts)
	Warmup         time.Duration // after every source ran once, before the window; default the longer of every and syncer.rollup_every
	UnchangedEvery int           // every n-th feed answers content, not 304; default 10
	SyncerBin      string
	BaseBin        string // the syncer before issue 11, measured the same way; optional
	// Replicas is how many `syncer run` processes share the sources
	// (default 1); the upstream counts overlapping runs of one source.
	Replicas int
}

// demand is the runs per second the schedule asks for: every source once
// per every (the jitter is centred on each run's slot, so the runs are
// every apart on average).
func (so ScheduleOptions) demand() float64 {
	return float64(so.Sources) / so.Every.Seconds()
}

// RunSchedule measures (10) with the syncer binary, then the same with the
// binary before the change (when given), then the baseline loop.
func RunSchedule(ctx context.Context, o *Options, admin *pgxpool.Pool, so ScheduleOptions, out io.Writer) ([]*ScheduleResult, error) {
	var results []*ScheduleResult
	procs := "one `syncer run`"
	if so.Replicas > 1 {
		procs = fmt.Sprintf("%d `syncer run` replicas", so.Replicas)
	}
	fmt.Fprintf(out, "(10) %d sources every %s (rss against a local upstream: 304, or unchanged content for every %dth), %s, default config\n",
		so.Sources, so.Every, so.UnchangedEvery, procs)
	fmt.Fprintf(out, scheduleHeader, "", "runs/s", "of demand", "lateness p50/p99", "syncer ms", "DB ms", "WAL B", "table B", "log B")
	fmt.Fprintf(out, scheduleHeader, "", "", "", "", "per run", "per run", "per run", "per run", "per run")
	label := "syncer (this build)"
	if so.Replicas > 1 {
		label = fmt.Sprintf("%d syncers (this build)", so.Replicas)
	}
	r, err := runSyncerSchedule(ctx, o, admin, so, so.SyncerBin, label, false)
	if err != nil {
		return nil, err
	}
	results = append(results, r)
	fmt.Fprintln(out, r)
	if so.BaseBin != "" {
		r, err := runSyncerSchedule(ctx, o, admin, so, so.BaseBin, "syncer before (c5832eb)", true)
		if err != nil {
			fmt.Fprintf(out, "  %-26s failed: %v\n", "syncer before", err)
		} else {
			results = append(results, r)
			fmt.Fprintln(out, r)
		}
	}
	// The bare loop's FOR UPDATE SKIP LOCKED over every source is refused
	// by Citus across shards (docs/scaling.md "Claims on Citus"): with
	// further nodes there is no ceiling to measure.
	if len(o.Nodes) == 0 {
		r, err = runBaseline(ctx, o, admin, so)
		if err != nil {
			return nil, err
		}
		results = append(results, r)
		fmt.Fprintln(out, r)
	} else {
		fmt.Fprintf(out, "  %-26s not run: its FOR UPDATE SKIP LOCKED across shards does not run on Citus\n", "baseline loop")
	}
	for _, r := range results {
		if r.Note != "" {
			fmt.Fprintf(out, "  %s: %s\n", r.Label, r.Note)
		}
		if r.PeakRSS > 0 {
			fmt.Fprintf(out, "  %s: peak RSS %.0f MB per process (%.1f KB per source)\n", r.Label, float64(r.PeakRSS)/(1<<20),
				float64(r.PeakRSS)/1024*float64(max(r.Replicas, 1))/float64(r.Sources))
		}
		for i, u := range o.Nodes {
			if i < len(r.NodeWAL) {
				fmt.Fprintf(out, "  %s: node %d (%s): DB %.3f ms and WAL %.0f B per run (the line above: the coordinator's)\n", r.Label, i+1, u,
					r.PerRun(float64(r.NodeDBCPU[i].Microseconds())/1000), r.PerRun(float64(r.NodeWAL[i])))
			}
		}
		if r.Replicas > 0 {
			fmt.Fprintf(out, "  %s: %d overlapping runs of one source (two requests for one feed in flight at once) in %d runs\n", r.Label, r.Overlaps, r.Runs)
		}
	}
	fmt.Fprintln(out)
	return results, nil
}

// snapshot is what a window's ends read.
type snapshot struct {
	at        time.Time
	requests  int64
	syncerCPU time.Duration
	dbCPU     map[int]time.Duration
	wal       int64
	size      int64
	logBytes  int64
	overlaps  int64
	nodeCPU   []map[int]time.Duration // Options.Nodes' processes
	nodeWAL   []int64
}

func (o *Options) snap(ctx context.Context, pool *pgxpool.Pool, up *feeds, pids []int, logPaths []string) (snapshot, error) {
	s := snapshot{at: time.Now(), requests: up.requests.Load(), overlaps: up.overlaps.Load()}
	for _, pid := range pids {
		cpu, _ := procCPU(pid)
		s.syncerCPU += cpu
	}
	var err error
	if s.dbCPU, err = dbCPU(ctx, pool); err != nil {
		return s, err
	}
	err = pool.QueryRow(ctx, `
		SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::bigint,
		       (SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint FROM pg_class c
		        WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'm'))`).Scan(&s.wal, &s.size)
	if err != nil {
		return s, fmt.Errorf("read WAL position and table sizes: %w", err)
	}
	for _, p := range logPaths {
		if fi, err := os.Stat(p); err == nil {
			s.logBytes += fi.Size()
		}
	}
	for _, u := range o.Nodes {
		cpu, wal, err := nodeSnap(ctx, u)
		if err != nil {
			return s, err
		}
		s.nodeCPU, s.nodeWAL = append(s.nodeCPU, cpu), append(s.nodeWAL, wal)
	}
	return s, nil
}

// nodeSnap reads the CPU of a further node's processes and its WAL
// position.
func nodeSnap(ctx context.Context, url string) (map[int]time.Duration, int64, error) {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return nil, 0, fmt.Errorf("node %s: %w", url, err)
	}
	defer pool.Close()
	cpu, err := dbCPU(ctx, pool)
	if err != nil {
		return nil, 0, fmt.Errorf("node %s: %w", url, err)
	}
	var wal int64
	if err := pool.QueryRow(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::bigint`).Scan(&wal); err != nil {
		return nil, 0, fmt.Errorf("node %s: read WAL position: %w", url, err)
	}
	return cpu, wal, nil
}

// fill computes r's totals from a window's two snapshots.
func (r *ScheduleResult) fill(a, b snapshot) {
	r.Window = b.at.Sub(a.at)
	r.Runs = b.requests - a.requests
	r.RunsPerSec = float64(r.Runs) / r.Window.Seconds()
	r.SyncerCPU = b.syncerCPU - a.syncerCPU
	for pid, t := range b.dbCPU {
		r.DBCPU += t - a.dbCPU[pid] // a process started in the window counts whole
	}
	r.WAL = b.wal - a.wal
	r.TableGrowth = b.size - a.size
	r.LogBytes = b.logBytes - a.logBytes
	r.Overlaps = b.overlaps - a.overlaps
	for i := range b.nodeWAL {
		var cpu time.Duration
		for pid, t := range b.nodeCPU[i] {
			cpu += t - a.nodeCPU[i][pid]
		}
		r.NodeDBCPU = append(r.NodeDBCPU, cpu)
		r.NodeWAL = append(r.NodeWAL, b.nodeWAL[i]-a.nodeWAL[i])
	}
}

// runSyncerSchedule runs one syncer binary over the sources on a fresh
// schema and measures a window of whole summary minutes after warm-up.
// old is the binary before this measurement existed: it has no summary
// line, so its window is timed and its lateness read from sync_runs.
func runSyncerSchedule(ctx context.Context, o *Options, admin *pgxpool.Pool, so ScheduleOptions, bin, label string, old bool) (*ScheduleResult, error) {
	up := newFeeds(so.UnchangedEvery, so.Sources)
	srv := httptest.NewServer(up)
	defer srv.Close()
	dir, err := os.MkdirTemp("", "lookout-bench-sched-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if err := writeFeedConfig(dir, srv.URL, so.Sources, so.Every); err != nil {
		return nil, err
	}
	pool, url, done, err := o.schemaWith(ctx, admin, "schedule", !old)
	if err != nil {
		return nil, err
	}
	defer done()
	if old {
		cmd := exec.CommandContext(ctx, bin, "--config", dir, "migrate")
		cmd.Env = append(os.Environ(), "DATABASE_URL="+url)
		if b, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("%s migrate: %w\n%s", bin, err, b)
		}
	}
	// One process per replica (old: one), each logging to its own file.
	replicas := 1
	if !old {
		replicas = max(so.Replicas, 1)
	}
	sy, err := startSyncers(ctx, bin, dir, url, replicas)
	if err != nil {
		return nil, err
	}
	defer sy.close()
	fail := func(err error) (*ScheduleResult, error) {
		log, _ := os.ReadFile(sy.logPaths[0])
		return nil, fmt.Errorf("%s: %w\n%s", label, err, tail(log, 2000))
	}
	// Registration is the syncer's own (config.Load + Register on start).
	if err := sy.waitRegistered(ctx, pool, so.Sources); err != nil {
		return fail(err)
	}
	res := &ScheduleResult{Label: label, Sources: so.Sources, Demand: so.demand(), Replicas: replicas}
	if !old { // the binary before runs 4 sources a second: its initial sync would take hours
		if res.Note, err = sy.waitInitialSync(ctx, pool); err != nil {
			return fail(err)
		}
	}
	if !sleepCtx(ctx, so.Warmup) {
		return nil, ctx.Err()
	}
	var a, b snapshot
	if old {
		a, b, err = o.windowOfRuns(ctx, pool, up, sy, so.For, res)
	} else {
		a, b, err = o.windowOfSummaries(ctx, pool, up, sy, so.For, res)
	}
	if err != nil {
		return fail(err)
	}
	res.fill(a, b)
	for _, pid := range sy.pids {
		if hwm, ok := vmHWM(pid); ok {
			res.PeakRSS = max(res.PeakRSS, hwm)
		}
	}
	if err := sy.stop(); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != -1 {
			res.Note = fmt.Sprintf("exit: %v", err)
		}
	}
	return res, nil
}

// syncers are the `syncer run` processes of one measurement (10), each
// logging to its own file in the configuration directory.
type syncers struct {
	bin      string
	logPaths []string
	logs     []*os.File
	pids     []int
	cmds     []*exec.Cmd
	exited   chan error
	stopped  bool
}

// startSyncers starts replicas `syncer run` processes of bin on the
// configuration directory dir and the database url.
func startSyncers(ctx context.Context, bin, dir, url string, replicas int) (*syncers, error) {
	sy := &syncers{bin: bin, exited: make(chan error, replicas)}
	for i := range replicas {
		logPath := filepath.Join(dir, fmt.Sprintf("syncer-%d.log", i))
		logf, err := os.Create(logPath)
		if err != nil {
			sy.close()
			return nil, err
		}
		sy.logs = append(sy.logs, logf)
		cmd := exec.CommandContext(ctx, bin, "--config", dir, "run", "--listen", "off")
		cmd.Env = append(os.Environ(), "DATABASE_URL="+url)
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			sy.close()
			return nil, fmt.Errorf("start %s: %w", bin, err)
		}
		go func() { sy.exited <- cmd.Wait() }()
		sy.logPaths, sy.pids, sy.cmds = append(sy.logPaths, logPath), append(sy.pids, cmd.Process.Pid), append(sy.cmds, cmd)
	}
	return sy, nil
}

// stop sends every process SIGTERM and waits for them, killing them after
// two minutes.
func (sy *syncers) stop() error {
	sy.stopped = true
	for _, cmd := range sy.cmds {
		_ = cmd.Process.Signal(syscall.SIGTERM)
	}
	var errs []error
	timeout := time.After(2 * time.Minute)
	for range sy.cmds {
		select {
		case err := <-sy.exited:
			errs = append(errs, err)
		case <-timeout:
			for _, cmd := range sy.cmds {
				_ = cmd.Process.Kill()
			}
			return fmt.Errorf("%s did not stop within 2 minutes of SIGTERM", sy.bin)
		}
	}
	return errors.Join(errs...)
}

// close stops the processes unless stop did, and closes their logs.
func (sy *syncers) close() {
	if !sy.stopped {
		_ = sy.stop()
	}
	for _, f := range sy.logs {
		_ = f.Close()
	}
}

// waitRegistered waits until the syncers registered n sources, for at
// most ten minutes.
func (sy *syncers) waitRegistered(ctx context.Context, pool *pgxpool.Pool, n int) error {
	deadline := time.Now().Add(10 * time.Minute)
	for {
		var got int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM sources`).Scan(&got); err == nil && got == n {
			return nil
		}
		select {
		case err := <-sy.exited:
			return fmt.Errorf("exited before registering its sources: %v", err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return errors.New("did not register its sources within 10 minutes")
		}
	}
}

// waitInitialSync waits until every source ran once (its first run
// mirrors its feed: records and changes, the initial sync), so that the
// measured runs are the steady ones; after 30 minutes it measures anyway.
// It returns the note saying which.
func (sy *syncers) waitInitialSync(ctx context.Context, pool *pgxpool.Pool) (string, error) {
	registered := time.Now()
	for {
		var left int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM sources WHERE last_run_at IS NULL`).Scan(&left); err != nil {
			return "", err
		}
		if left == 0 {
			return fmt.Sprintf("initial sync (every source's first run, which mirrors its feed) took %s", time.Since(registered).Round(time.Second)), nil
		}
		select {
		case err := <-sy.exited:
			return "", fmt.Errorf("exited during the initial sync: %v", err)
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(time.Second):
		}
		if time.Since(registered) > 30*time.Minute {
			return fmt.Sprintf("%d sources had not run once after 30 minutes; measured anyway", left), nil
		}
	}
}

// windowOfRuns measures the binary before this design over dur: its
// lateness from sync_runs.started_at - due_at.
func (o *Options) windowOfRuns(ctx context.Context, pool *pgxpool.Pool, up *feeds, sy *syncers, dur time.Duration, res *ScheduleResult) (a, b snapshot, err error) {
	if a, err = o.snap(ctx, pool, up, sy.pids, sy.logPaths); err != nil {
		return a, b, err
	}
	if !sleepCtx(ctx, dur) {
		return a, b, ctx.Err()
	}
	if b, err = o.snap(ctx, pool, up, sy.pids, sy.logPaths); err != nil {
		return a, b, err
	}
	err = pool.QueryRow(ctx, `
		SELECT coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM started_at - due_at)::float8), 0),
		       coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM started_at - due_at)::float8), 0),
		       coalesce(max(extract(epoch FROM started_at - due_at)::float8), 0)
		FROM sync_runs WHERE started_at BETWEEN $1 AND $2`, a.at, b.at).Scan(
		durationSeconds(&res.LateP50), durationSeconds(&res.LateP99), durationSeconds(&res.LateMax))
	return a, b, err
}

// windowOfSummaries measures whole minutes between the first syncer's
// summary lines (at least dur), whose lateness quantiles it reports; the
// other replicas' lines written within the window count too.
func (o *Options) windowOfSummaries(ctx context.Context, pool *pgxpool.Pool, up *feeds, sy *syncers, dur time.Duration, res *ScheduleResult) (a, b snapshot, err error) {
	logPath := sy.logPaths[0]
	seen := countSummaries(logPath)
	if !waitSummaries(ctx, logPath, seen+1, sy.exited) {
		return a, b, errors.New("no summary line")
	}
	from := make([]int, len(sy.logPaths))
	for i, p := range sy.logPaths[1:] {
		from[i+1] = countSummaries(p)
	}
	if a, err = o.snap(ctx, pool, up, sy.pids, sy.logPaths); err != nil {
		return a, b, err
	}
	minutes := max(int((dur+time.Minute-1)/time.Minute), 1)
	if !waitSummaries(ctx, logPath, seen+1+minutes, sy.exited) {
		return a, b, errors.New("summary lines stopped")
	}
	if b, err = o.snap(ctx, pool, up, sy.pids, sy.logPaths); err != nil {
		return a, b, err
	}
	lines := summaries(logPath)[seen+1 : seen+1+minutes]
	for i, p := range sy.logPaths[1:] {
		if more := summaries(p); len(more) > from[i+1] {
			lines = append(lines, more[from[i+1]:]...)
		}
	}
	res.LateP50, res.LateP99, res.LateMax = latenessOf(lines)
	return a, b, nil
}

func durationSeconds(d *time.Duration) any { return &secondsScanner{d} }

type secondsScanner struct{ d *time.Duration }

func (s *secondsScanner) Scan(v any) error {
	switch x := v.(type) {
	case float64:
		*s.d = time.Duration(x * float64(time.Second))
	case nil:
		*s.d = 0
	default:
		return fmt.Errorf("seconds: unexpected %T", v)
	}
	return nil
}

// summaryLine is one "syncer summary" log line's lateness.
type summaryLine struct {
	runs             int
	p50, p99, latest time.Duration
}

var summaryRE = regexp.MustCompile(`msg="syncer summary".* runs=(\d+) .*lateness_p50_ms=(\d+) lateness_p99_ms=(\d+) lateness_max_ms=(\d+)`)

func summaries(path string) []summaryLine {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []summaryLine
	rd := bufio.NewReaderSize(f, 1<<16)
	for {
		line, err := rd.ReadBytes('\n') // lines of any length
		if err != nil && len(line) == 0 {
			break
		}
		if !bytes.Contains(line, []byte(`msg="syncer summary"`)) {
			continue
		}
		m := summaryRE.FindSubmatch(line)
		if m == nil {
			continue
		}
		n := func(i int) int { v, _ := strconv.Atoi(string(m[i])); return v }
		out = append(out, summaryLine{runs: n(1), p50: time.Duration(n(2)) * time.Millisecond,
			p99: time.Duration(n(3)) * time.Millisecond, latest: time.Duration(n(4)) * time.Millisecond})
	}
	return out
}

func countSummaries(path string) int { return len(summaries(path)) }

func waitSummaries(ctx context.Context, path string, n int, exited <-chan error) bool {
	for countSummaries(path) < n {
		select {
		case <-ctx.Done():
			return false
		case <-exited:
			return false
		case <-time.After(500 * time.Millisecond):
		}
	}
	return true
}

// latenessOf combines the minutes' quantiles: the median of the p50s, the
// largest p99 and max.
func latenessOf(lines []summaryLine) (p50, p99, most time.Duration) {
	var p50s []time.Duration
	for _, l := range lines {
		p50s = append(p50s, l.p50)
		p99, most = max(p99, l.p99), max(most, l.latest)
	}
	slices.Sort(p50s)
	if len(p50s) > 0 {
		p50 = p50s[len(p50s)/2]
	}
	return p50, p99, most
}

// runBaseline measures the ceiling of a bare claim loop on the same
// number of sources, all due: workers that each repeat BEGIN; SELECT
// name ... FOR UPDATE SKIP LOCKED LIMIT 100; UPDATE next_run_at ...;
// COMMIT — no upstream, no schedule logic, no lease, no record of the run.
func runBaseline(ctx context.Context, o *Options, admin *pgxpool.Pool, so ScheduleOptions) (*ScheduleResult, error) {
	pool, _, done, err := o.schemaWith(ctx, admin, "claimloop", true)
	if err != nil {
		return nil, err
	}
	defer done()
	if _, err := pool.Exec(ctx, `
		INSERT INTO sources (name, connector, config_hash, schedule, interval_seconds, interval_reason, next_run_at, cursor)
		SELECT format('feed-%s', lpad(i::text, 6, '0')), 'rss', md5(i::text), 'every 1m0s jitter 6s', 60, 'every 1m0s',
		       now() - interval '1 hour' + i * interval '1 millisecond',
		       jsonb_build_object('url', 'http://127.0.0.1:1/feed/' || i, 'etag', '"' || i || '-v1"')
		FROM generate_series(0, $1 - 1) i`, so.Sources); err != nil {
		return nil, fmt.Errorf("baseline: fill sources: %w", err)
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE sources`); err != nil {
		return nil, err
	}
	up := &feeds{}
	const workers, batch = 4, 100
	dur := min(so.For, 30*time.Second)
	a, err := o.snap(ctx, pool, up, []int{os.Getpid()}, nil)
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithTimeout(ctx, dur)
	defer cancel()
	var wg sync.WaitGroup
	var loopErr error
	var mu sync.Mutex
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for wctx.Err() == nil {
				var n int64
				err := pgx.BeginFunc(wctx, pool, func(tx pgx.Tx) error {
					rows, err := tx.Query(wctx, `
						SELECT name FROM sources WHERE status = 'active' AND next_run_at <= now()
						ORDER BY next_run_at LIMIT $1 FOR UPDATE SKIP LOCKED`, batch)
					if err != nil {
						return err
					}
					names, err := pgx.CollectRows(rows, pgx.RowTo[string])
					if err != nil {
						return err
					}
					// Due again at once, behind the others: the loop never runs dry.
					tag, err := tx.Exec(wctx, `UPDATE sources SET next_run_at = now(), last_run_at = now() WHERE name = ANY ($1)`, names)
					n = tag.RowsAffected()
					return err
				})
				if err != nil {
					if wctx.Err() == nil {
						mu.Lock()
						loopErr = err
						mu.Unlock()
					}
					return
				}
				up.requests.Add(n)
			}
		}()
	}
	wg.Wait()
	if loopErr != nil {
		return nil, fmt.Errorf("baseline loop: %w", loopErr)
	}
	b, err := o.snap(context.WithoutCancel(ctx), pool, up, []int{os.Getpid()}, nil)
	if err != nil {
		return nil, err
	}
	r := &ScheduleResult{Label: "bare claim loop (ceiling)", Sources: so.Sources, Demand: so.demand()}
	r.fill(a, b)
	r.Note = fmt.Sprintf("%d workers, %d sources per SELECT … FOR UPDATE SKIP LOCKED + UPDATE, all sources due, for %s; its \"syncer ms\" is the bench process's CPU",
		workers, batch, dur)
	return r, nil
}

// procCPU is a process's user+system CPU time from /proc.
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name is in parentheses and may hold spaces.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: malformed", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: malformed", pid)
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	const hz = 100 // USER_HZ on Linux
	return time.Duration(ut+st) * time.Second / hz, nil
}

// dbCPU is the CPU time of every PostgreSQL process of the server (its
// backends and background processes, from pg_stat_activity), by pid.
func dbCPU(ctx context.Context, pool *pgxpool.Pool) (map[int]time.Duration, error) {
	rows, err := pool.Query(ctx, `SELECT pid FROM pg_stat_activity`)
	if err != nil {
		return nil, fmt.Errorf("list PostgreSQL processes: %w", err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return nil, fmt.Errorf("list PostgreSQL processes: %w", err)
	}
	out := map[int]time.Duration{}
	for _, p := range pids {
		if t, err := procCPU(int(p)); err == nil {
			out[int(p)] = t
		}
	}
	return out, nil
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}
