package bench

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"time"
)

// RSSResult is the syncer process's peak resident set while mirroring.
type RSSResult struct {
	Records  int
	PeakRSS  int64 // bytes
	Duration time.Duration
}

// RunRSS runs the syncer binary (`syncer once`) as its own process against
// a local API of n records and reports its peak RSS: the kernel's
// high-water mark VmHWM of the process, read from /proc every 50ms while it
// runs. (getrusage's ru_maxrss of a child is no good here: it counts the
// parent's pages shared at fork, and this parent holds the whole fixture.)
func RunRSS(ctx context.Context, syncerBin, databaseURL string, n, pageSize int) (*RSSResult, error) {
	api := NewAPI(n, pageSize)
	srv := httptest.NewServer(api)
	defer srv.Close()
	dir, err := os.MkdirTemp("", "lookout-bench-rss-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if err := writeConfig(dir, srv.URL); err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, syncerBin, "--config", dir, "once")
	cmd.Env = append(os.Environ(), "DATABASE_URL="+databaseURL)
	out, err := os.CreateTemp("", "lookout-bench-rss-*.log")
	if err != nil {
		return nil, err
	}
	defer os.Remove(out.Name())
	defer out.Close()
	cmd.Stdout, cmd.Stderr = out, out
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", syncerBin, err)
	}
	var peak int64
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if hwm, ok := vmHWM(cmd.Process.Pid); ok && hwm > peak {
			peak = hwm
		}
		select {
		case err := <-done:
			if err != nil {
				log, _ := os.ReadFile(out.Name())
				return nil, fmt.Errorf("syncer once: %w\n%s", err, tail(log, 2000))
			}
			if peak == 0 {
				return nil, fmt.Errorf("could not read the syncer's memory from /proc")
			}
			return &RSSResult{Records: n, PeakRSS: peak, Duration: time.Since(start)}, nil
		case <-tick.C:
		}
	}
}

// vmHWM reads a process's peak resident set size in bytes.
func vmHWM(pid int) (int64, bool) {
	return procStatus(pid, "VmHWM:")
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
