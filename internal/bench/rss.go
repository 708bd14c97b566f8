package bench

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// RSSResult is the syncer process's peak resident set while mirroring.
type RSSResult struct {
	Records  int
	PeakRSS  int64 // bytes
	Duration time.Duration
}

// RunRSS runs the syncer binary (`syncer once`) as its own process against
// a local API of n records and reads its peak RSS from the kernel
// (getrusage ru_maxrss of the child).
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
	if err := cmd.Run(); err != nil {
		log, _ := os.ReadFile(out.Name())
		return nil, fmt.Errorf("syncer once: %w\n%s", err, tail(log, 2000))
	}
	d := time.Since(start)
	ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	if !ok {
		return nil, fmt.Errorf("no rusage for the syncer process")
	}
	return &RSSResult{Records: n, PeakRSS: ru.Maxrss * 1024, Duration: d}, nil
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
