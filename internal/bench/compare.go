package bench

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Labeled is one lookout-bench run as written by --json and read by
// --compare: its label (e.g. "single 1", "citus 1"), the nodes it
// measured (1, or a coordinator and its workers) and its figures (with
// when it ran and the machine's load meanwhile).
type Labeled struct {
	Label  string
	Nodes  int
	Result *Result
}

// Load is the 1-minute load average of the machine, sampled while a run
// ran (/proc/loadavg, every loadEvery): on a shared machine every figure
// is read beside it.
type Load struct {
	Min, Max, Mean float64
	Samples        int
}

func (l Load) String() string {
	if l.Samples == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.0f-%.0f", l.Min, l.Max)
}

// loadEvery is how often sampleLoad reads the load average.
const loadEvery = 5 * time.Second

// readLoad reads the 1-minute load average from /proc/loadavg.
func readLoad() (float64, error) {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, fmt.Errorf("/proc/loadavg: empty")
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return 0, fmt.Errorf("/proc/loadavg: %w", err)
	}
	return v, nil
}

// SampleLoad samples the load average until stop is called, which
// returns the samples' summary (none where /proc/loadavg is missing).
func SampleLoad() (stop func() Load) {
	var (
		mu   sync.Mutex
		l    Load
		sum  float64
		done = make(chan struct{})
		wg   sync.WaitGroup
	)
	add := func() {
		v, err := readLoad()
		if err != nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if l.Samples == 0 || v < l.Min {
			l.Min = v
		}
		l.Max = max(l.Max, v)
		sum += v
		l.Samples++
		l.Mean = sum / float64(l.Samples)
	}
	add()
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(loadEvery)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				add()
			}
		}
	}()
	return func() Load {
		close(done)
		wg.Wait()
		add()
		mu.Lock()
		defer mu.Unlock()
		return l
	}
}

// WriteRun writes r as JSON to path.
func WriteRun(path string, r *Labeled) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("encode the run %q: %w", r.Label, err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("write the run %q: %w", r.Label, err)
	}
	return nil
}

// ReadRun reads a run WriteRun wrote.
func ReadRun(path string) (*Labeled, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read a run: %w", err)
	}
	var r Labeled
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: not a lookout-bench --json run: %w", path, err)
	}
	if r.Result == nil {
		return nil, fmt.Errorf("%s: a run without results", path)
	}
	return &r, nil
}

// WriteComparison prints one table of runs of one node and of a Citus
// cluster (Run.Nodes > 1), measurement by measurement, each run's row
// with the load average it ran at and, for a cluster, each node's
// PostgreSQL CPU and WAL beside their sum; under each measurement the
// overhead: the mean of the cluster's runs over the mean of the single
// node's.
func WriteComparison(out io.Writer, runs []*Labeled) error {
	w := bufio.NewWriter(out)
	has := func(f func(*Result) bool) []*Labeled {
		var rs []*Labeled
		for _, r := range runs {
			if f(r.Result) {
				rs = append(rs, r)
			}
		}
		return rs
	}
	head := func(r *Labeled) string {
		return fmt.Sprintf("  %-10s %5s %11s", r.Label, r.Result.Start.UTC().Format("15:04"), r.Result.Load)
	}
	const runCols = "  %-10s %5s %11s"

	if rs := has(func(r *Result) bool { return r.Initial > 0 }); len(rs) > 0 {
		fmt.Fprintf(w, "(1) initial sync of %d records (one source) against a COPY of the same rows into a table like records\n", rs[0].Result.Records)
		fmt.Fprintf(w, runCols+" %9s %9s %8s %22s %22s %9s %22s\n", "run", "UTC", "load", "sync s", "rec/s", "vs COPY", "PG CPU s (nodes = sum)", "WAL MB (nodes = sum)", "COPY s", "COPY PG CPU s (sum)")
		for _, r := range rs {
			x := r.Result
			fmt.Fprintf(w, "%s %9.2f %9.0f %8.2f %22s %22s %9.2f %22s\n", head(r), x.Initial.Seconds(), x.InitialRate, x.InitialVsCopy,
				cpuSum(x.InitialCost, 1), walSum(x.InitialCost, 1, 1e6, "%.1f"), x.Copy.Seconds(), cpuSum(x.CopyCost, 1))
		}
		overhead(w, rs, []ratio{
			{"records/s", func(x *Result) float64 { return x.InitialRate }},
			{"PostgreSQL CPU", func(x *Result) float64 { return x.InitialCost.TotalDB().Seconds() }},
			{"WAL", func(x *Result) float64 { return float64(x.InitialCost.TotalWAL()) }},
			{"COPY's records/s", func(x *Result) float64 { return x.CopyRate }},
		})
	}
	if rs := has(func(r *Result) bool { return r.Latency != nil }); len(rs) > 0 {
		fmt.Fprintf(w, "(3) commit-to-decision latency, steady %d changes/s (one source)\n", rs[0].Result.Latency.Rate)
		fmt.Fprintf(w, runCols+" %22s %22s\n", "run", "UTC", "load", "NOTIFY p50 / p99 ms", "1s polling p50 / p99 ms")
		for _, r := range rs {
			l := r.Result.Latency
			fmt.Fprintf(w, "%s %22s %22s\n", head(r), p50p99(l.Notify), p50p99(l.Naive))
		}
		overhead(w, rs, []ratio{
			{"NOTIFY p50", func(x *Result) float64 { return float64(x.Latency.Notify.P50) }},
			{"NOTIFY p99", func(x *Result) float64 { return float64(x.Latency.Notify.P99) }},
		})
	}
	if rs := has(func(r *Result) bool { return r.BacklogTime > 0 }); len(rs) > 0 {
		fmt.Fprintf(w, "(4) one evaluator draining a backlog of %d changes (one source)\n", rs[0].Result.Backlog)
		fmt.Fprintf(w, runCols+" %9s %9s %30s %30s\n", "run", "UTC", "load", "s", "changes/s", "PG CPU ms/change (nodes = sum)", "WAL B/change (nodes = sum)")
		for _, r := range rs {
			x := r.Result
			n := float64(x.Backlog)
			fmt.Fprintf(w, "%s %9.2f %9.0f %30s %30s\n", head(r), x.BacklogTime.Seconds(), n/x.BacklogTime.Seconds(),
				cpuPer(x.BacklogCost, n), walSum(x.BacklogCost, n, 1, "%.0f"))
		}
		overhead(w, rs, []ratio{
			{"changes/s", func(x *Result) float64 { return float64(x.Backlog) / x.BacklogTime.Seconds() }},
			{"PostgreSQL CPU per change", func(x *Result) float64 { return x.BacklogCost.TotalDB().Seconds() / float64(x.Backlog) }},
			{"WAL per change", func(x *Result) float64 { return float64(x.BacklogCost.TotalWAL()) / float64(x.Backlog) }},
		})
	}
	if rs := has(func(r *Result) bool { return len(r.Schedule) > 0 }); len(rs) > 0 {
		s0 := rs[0].Result.Schedule[0]
		fmt.Fprintf(w, "(10) one `syncer run` keeping %d sources every %s\n", s0.Sources, time.Duration(float64(time.Second)*float64(s0.Sources)/s0.Demand).Round(time.Second))
		fmt.Fprintf(w, runCols+" %9s %6s %19s %9s %30s %30s %8s\n", "run", "UTC", "load", "runs/s", "demand", "lateness p50/p99 ms", "syncer ms", "PG CPU ms/run (nodes = sum)", "WAL B/run (nodes = sum)", "overlaps")
		for _, r := range rs {
			s := r.Result.Schedule[0]
			c := Cost{DB: s.DBCPU, WAL: s.WAL, NodeDB: s.NodeDBCPU, NodeWAL: s.NodeWAL}
			runs := float64(s.Runs)
			fmt.Fprintf(w, "%s %9.0f %5.0f%% %19s %9.3f %30s %30s %8d\n", head(r), s.RunsPerSec, 100*s.RunsPerSec/s.Demand,
				fmt.Sprintf("%.0f / %.0f", msOf(s.LateP50), msOf(s.LateP99)), s.PerRun(msOf(s.SyncerCPU)), cpuPer(c, runs), walSum(c, runs, 1, "%.0f"), s.Overlaps)
		}
		sched := func(f func(*ScheduleResult) float64) func(*Result) float64 {
			return func(x *Result) float64 { return f(x.Schedule[0]) }
		}
		overhead(w, rs, []ratio{
			{"runs/s", sched(func(s *ScheduleResult) float64 { return s.RunsPerSec })},
			{"PostgreSQL CPU per run", sched(func(s *ScheduleResult) float64 {
				return s.PerRun(float64(Cost{DB: s.DBCPU, NodeDB: s.NodeDBCPU}.TotalDB()))
			})},
			{"WAL per run", sched(func(s *ScheduleResult) float64 {
				return s.PerRun(float64(Cost{WAL: s.WAL, NodeWAL: s.NodeWAL}.TotalWAL()))
			})},
			{"syncer CPU per run", sched(func(s *ScheduleResult) float64 { return s.PerRun(float64(s.SyncerCPU)) })},
		})
	}
	return w.Flush()
}

// ratio is a figure of the overhead lines.
type ratio struct {
	name string
	of   func(*Result) float64
}

// overhead writes the mean of the cluster's runs over the mean of the
// single node's for each figure, with the means.
func overhead(w io.Writer, rs []*Labeled, figs []ratio) {
	var one, many []*Result
	for _, r := range rs {
		if r.Nodes > 1 {
			many = append(many, r.Result)
		} else {
			one = append(one, r.Result)
		}
	}
	if len(one) == 0 || len(many) == 0 {
		fmt.Fprintf(w, "  overhead: needs runs of both (%d of one node, %d of a cluster)\n\n", len(one), len(many))
		return
	}
	mean := func(xs []*Result, f func(*Result) float64) float64 {
		var t float64
		for _, x := range xs {
			t += f(x)
		}
		return t / float64(len(xs))
	}
	var parts []string
	for _, f := range figs {
		a, b := mean(one, f.of), mean(many, f.of)
		r := math.NaN()
		if a != 0 {
			r = b / a
		}
		parts = append(parts, fmt.Sprintf("%s %.2fx", f.name, r))
	}
	fmt.Fprintf(w, "  cluster / one node (means of %d and %d runs): %s\n\n", len(many), len(one), strings.Join(parts, ", "))
}

func msOf(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func p50p99(l Latency) string {
	return fmt.Sprintf("%.0f / %.0f", msOf(l.P50), msOf(l.P99))
}

// cpuSum is c's PostgreSQL CPU in seconds per n: the node's, or each
// node's and their sum.
func cpuSum(c Cost, n float64) string {
	if len(c.NodeDB) == 0 {
		return fmt.Sprintf("%.2f", c.DB.Seconds()/n)
	}
	parts := []string{fmt.Sprintf("%.2f", c.DB.Seconds()/n)}
	for _, d := range c.NodeDB {
		parts = append(parts, fmt.Sprintf("%.2f", d.Seconds()/n))
	}
	return fmt.Sprintf("%s = %.2f", strings.Join(parts, "+"), c.TotalDB().Seconds()/n)
}

// cpuPer is c's PostgreSQL CPU in milliseconds per n, as cpuSum.
func cpuPer(c Cost, n float64) string {
	f := func(d time.Duration) string { return fmt.Sprintf("%.3f", msOf(d)/n) }
	if len(c.NodeDB) == 0 {
		return f(c.DB)
	}
	parts := []string{f(c.DB)}
	for _, d := range c.NodeDB {
		parts = append(parts, f(d))
	}
	return strings.Join(parts, "+") + " = " + f(c.TotalDB())
}

// walSum is c's WAL in units of unit bytes per n, each node's and
// their sum on a cluster.
func walSum(c Cost, n, unit float64, format string) string {
	f := func(b int64) string { return fmt.Sprintf(format, float64(b)/unit/n) }
	if len(c.NodeWAL) == 0 {
		return f(c.WAL)
	}
	parts := []string{f(c.WAL)}
	for _, b := range c.NodeWAL {
		parts = append(parts, f(b))
	}
	return strings.Join(parts, "+") + " = " + f(c.TotalWAL())
}
