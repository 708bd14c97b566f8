package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// StartupOptions shape measurement (13): the `evaluator run` and `syncer
// run` processes an operator starts on a configuration directory of many
// watches and sources, measured from outside (time to /readyz, the
// kernel's VmRSS and VmHWM), at N and at N/10, so that the cost of one
// more item is the difference ÷ 9N/10.
type StartupOptions struct {
	// Watches is N for the evaluator: watches spread over WatchSources
	// source files. Defaults to 100,000 and 1,000; < 0 skips the
	// evaluator.
	Watches, WatchSources int
	// Sources is N for the syncer: rss sources, one file each. Defaults
	// to 100,000; < 0 skips the syncer.
	Sources int
	// Hold is how long the process runs after /readyz answered before
	// its VmHWM is read (the peak of its first work). Default 10s.
	Hold          time.Duration
	EvaluatorBin  string
	SyncerBin     string
	ReadyDeadline time.Duration // default 10 minutes
}

// StartupResult is one process measured by (13).
type StartupResult struct {
	Binary string // evaluator or syncer
	Items  int    // watches or sources of its configuration directory
	// Ready is the time from the process's start to the first 200 of its
	// /readyz.
	Ready time.Duration
	// RSS is the process's VmRSS when /readyz first answered 200; HWM its
	// VmHWM after Hold more.
	RSS, HWM int64
}

// startupWhens are the conditions the generated watches copy, each with
// a parameter: as users copy an example and change a label or a state.
var startupWhens = []string{
	`record.status == "open" && "%s" in record.labels`,
	`change.kind == "updated" && changed("status") && record.status == "%s"`,
	`change.kind == "created" && "%s" in record.labels`,
	`record.status != "%s" && record.title != ""`,
}

// startupTitles are the watches' title templates (every third watch has
// none: the sink's).
var startupTitles = []string{
	`[{{upper .Verdict.Urgency}}] {{.Record.Title}}`,
	`{{.Watch}}: {{.Record.Title}} ({{join .Record.Labels ", "}})`,
}

var startupParams = []string{"urgent", "bug", "security", "regression", "customer", "p1", "done", "blocked", "review", "docs"}

// writeWatchConfig writes a configuration directory of n watches over
// sources file sources (n/sources each): a few distinct conditions and
// titles, repeated with different parameters and names.
func writeWatchConfig(dir string, n, sources int) error {
	if err := os.MkdirAll(filepath.Join(dir, "sources"), 0o755); err != nil {
		return err
	}
	global := "log: {level: warn}\nsinks:\n  log:\n    type: log\ndefaults:\n  every: 1h\n  notify: [log]\n"
	if err := os.WriteFile(filepath.Join(dir, "lookout.yaml"), []byte(global), 0o644); err != nil {
		return err
	}
	per := (n + sources - 1) / sources
	made := 0
	for i := 0; i < sources && made < n; i++ {
		var b strings.Builder
		fmt.Fprintf(&b, "name: tasks-%05d\nconnector: file\nfile:\n  paths: [\"none-%d.jsonl\"]\nfields:\n  status: item.state\n  labels: item.tags\nwatches:\n", i, i)
		for j := 0; j < per && made < n; j++ {
			k := made
			when := fmt.Sprintf(startupWhens[k%len(startupWhens)], startupParams[(k/len(startupWhens))%len(startupParams)])
			fmt.Fprintf(&b, "  - name: watch-%03d\n    when: %s\n", j, strconv.Quote(when))
			if t := k % 3; t < len(startupTitles) {
				fmt.Fprintf(&b, "    title: %s\n", strconv.Quote(startupTitles[t]))
			}
			made++
		}
		if err := os.WriteFile(filepath.Join(dir, "sources", fmt.Sprintf("tasks-%05d.yaml", i)), []byte(b.String()), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// RunStartup measures (13): for the evaluator (N watches) and the syncer
// (N sources), the process at N/10 then at N, each on a fresh schema.
func RunStartup(ctx context.Context, o *Options, admin *pgxpool.Pool, so StartupOptions, out io.Writer) ([]*StartupResult, error) {
	var results []*StartupResult
	fmt.Fprintf(out, "(13) processes started on a configuration directory (time to /readyz; VmRSS at ready, VmHWM %s later)\n", so.Hold)
	fmt.Fprintf(out, "  %-10s %8s %10s %10s %10s\n", "process", "items", "ready s", "RSS MB", "HWM MB")
	type run struct {
		bin, name string
		n         int
	}
	var runs []run
	if so.Watches > 0 && so.EvaluatorBin != "" {
		runs = append(runs, run{so.EvaluatorBin, "evaluator", so.Watches})
	}
	if so.Sources > 0 && so.SyncerBin != "" {
		runs = append(runs, run{so.SyncerBin, "syncer", so.Sources})
	}
	for _, r := range runs {
		var pair [2]*StartupResult
		for i, n := range []int{r.n / 10, r.n} {
			res, err := startOne(ctx, o, admin, so, r.bin, r.name, n)
			if err != nil {
				return nil, fmt.Errorf("(13) %s with %d: %w", r.name, n, err)
			}
			pair[i] = res
			results = append(results, res)
			fmt.Fprintf(out, "  %-10s %8d %10.1f %10.0f %10.0f\n", r.name, n, res.Ready.Seconds(), float64(res.RSS)/(1<<20), float64(res.HWM)/(1<<20))
		}
		d := float64(pair[1].Items - pair[0].Items)
		fmt.Fprintf(out, "  %-10s per item (difference ÷ %d): RSS %.2f KB, HWM %.2f KB, ready %.1f µs\n", r.name, pair[1].Items-pair[0].Items,
			float64(pair[1].RSS-pair[0].RSS)/1024/d, float64(pair[1].HWM-pair[0].HWM)/1024/d, float64((pair[1].Ready-pair[0].Ready).Microseconds())/d)
	}
	fmt.Fprintln(out)
	return results, nil
}

// startOne writes the configuration directory, starts bin's `run` on a
// fresh schema and measures it.
func startOne(ctx context.Context, o *Options, admin *pgxpool.Pool, so StartupOptions, bin, name string, n int) (*StartupResult, error) {
	dir, err := os.MkdirTemp("", "lookout-bench-startup-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if name == "evaluator" {
		err = writeWatchConfig(dir, n, max(1, so.WatchSources*n/so.Watches))
	} else {
		up := newFeeds(10, n)
		srv := httptest.NewServer(up)
		defer srv.Close()
		err = writeFeedConfig(dir, srv.URL, n, time.Hour)
	}
	if err != nil {
		return nil, err
	}
	_, url, done, err := o.schema(ctx, admin, "startup")
	if err != nil {
		return nil, err
	}
	defer done()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := l.Addr().String()
	l.Close()
	logPath := filepath.Join(dir, name+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.CommandContext(ctx, bin, "--config", dir, "run", "--listen", addr)
	cmd.Env = append(os.Environ(), "DATABASE_URL="+url)
	cmd.Stdout, cmd.Stderr = logf, logf
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stopped := false
	defer func() {
		if !stopped {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(time.Minute):
				_ = cmd.Process.Kill()
				<-exited
			}
		}
	}()
	fail := func(err error) (*StartupResult, error) {
		log, _ := os.ReadFile(logPath)
		return nil, fmt.Errorf("%w\n%s", err, tail(log, 2000))
	}
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := start.Add(so.ReadyDeadline)
	res := &StartupResult{Binary: name, Items: n}
	for {
		resp, err := client.Get("http://" + addr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				res.Ready = time.Since(start)
				break
			}
		}
		select {
		case err := <-exited:
			stopped = true
			return fail(fmt.Errorf("exited before it was ready: %v", err))
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fail(fmt.Errorf("not ready within %s", so.ReadyDeadline))
		}
	}
	var ok bool
	if res.RSS, ok = procStatus(cmd.Process.Pid, "VmRSS:"); !ok {
		return fail(errors.New("could not read VmRSS from /proc"))
	}
	if !sleepCtx(ctx, so.Hold) {
		return nil, ctx.Err()
	}
	if res.HWM, ok = procStatus(cmd.Process.Pid, "VmHWM:"); !ok {
		return fail(errors.New("could not read VmHWM from /proc"))
	}
	return res, nil
}

// procStatus reads a size field (kB) of a process's /proc status, in
// bytes.
func procStatus(pid int, field string) (int64, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb * 1024, err == nil
		}
	}
	return 0, false
}
