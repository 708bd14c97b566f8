// Package clitest runs the daemons of the binaries in tests: their run command
// with a free loopback port, its HTTP endpoints, its logs.
package clitest

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lookout-dev/lookout/internal/cli"
	"github.com/lookout-dev/lookout/internal/testsignal"
)

// DaemonTest runs a binary's run command in a test against the database of
// DATABASE_URL, with its server on a free loopback port, and gives access
// to its HTTP endpoints. It is for the tests of the mains.
type DaemonTest struct {
	t      testing.TB
	cancel context.CancelFunc
	done   chan error
	logs   *lockedBuffer
	proc   *os.Process // a daemon started by StartBinary
	// Addr is the address the daemon's /metrics, /healthz and /readyz
	// server listens on.
	Addr string
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

var addrRE = regexp.MustCompile(`"msg":"serving /metrics, /healthz, /readyz".*"addr":"([^"]+)"`)

// StartDaemon starts run(ctx, env) with the config dir, JSON logs and
// --listen 127.0.0.1:0, and waits until it serves HTTP. The daemon is
// stopped (its context cancelled) and its error checked when the test ends.
func StartDaemon(t testing.TB, configDir string, run func(context.Context, *cli.Env) error) *DaemonTest {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	d := &DaemonTest{t: t, cancel: cancel, done: make(chan error, 1), logs: &lockedBuffer{}}
	env := &cli.Env{ConfigDir: configDir, Args: []string{"--listen", "127.0.0.1:0"}, Stdout: io.Discard, Stderr: d.logs, LogFormat: "json"}
	go func() { d.done <- run(ctx, env) }()
	t.Cleanup(func() { d.Stop() })
	d.waitServing()
	return d
}

// waitServing waits until the daemon logged the address it serves on.
func (d *DaemonTest) waitServing() {
	d.t.Helper()
	d.WaitFor("the HTTP server", func() bool {
		if m := addrRE.FindStringSubmatch(d.logs.String()); m != nil {
			d.Addr = m[1]
			return true
		}
		select {
		case err := <-d.done:
			d.t.Fatalf("daemon exited: %v\n%s", err, d.logs.String())
		default:
		}
		return false
	})
}

// Stop cancels the daemon and fails the test if it returned an error.
func (d *DaemonTest) Stop() {
	if d.cancel == nil {
		return
	}
	d.cancel()
	d.cancel = nil
	select {
	case err := <-d.done:
		if err != nil {
			d.t.Errorf("daemon returned %v\n%s", err, d.logs.String())
		}
	case <-time.After(30 * time.Second):
		d.t.Errorf("daemon did not stop within 30s")
	}
}

// Get fetches path from the daemon's server and returns status and body.
func (d *DaemonTest) Get(path string) (int, string) {
	d.t.Helper()
	resp, err := http.Get("http://" + d.Addr + path)
	if err != nil {
		d.t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Logs returns what the daemon logged so far.
func (d *DaemonTest) Logs() string { return d.logs.String() }

// WaitFor polls cond until it holds (testsignal.Eventually), failing with
// the daemon's logs.
func (d *DaemonTest) WaitFor(what string, cond func() bool) {
	d.t.Helper()
	testsignal.Eventually(withLogs{d}, what, cond)
}

// withLogs adds the daemon's logs to a failure.
type withLogs struct{ d *DaemonTest }

func (w withLogs) Helper() { w.d.t.Helper() }

func (w withLogs) Fatalf(format string, args ...any) {
	w.d.t.Helper()
	w.d.t.Fatalf(format+"; logs:\n%s", append(args, w.d.logs.String())...)
}

// Has reports whether a scrape has the exact line.
func Has(body, line string) bool { return strings.Contains("\n"+body, "\n"+line+"\n") }

// Value returns the value of a series in a scrape, or -1 when absent.
func Value(body, series string) float64 {
	for _, l := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(l, series+" "); ok {
			if f, err := strconv.ParseFloat(v, 64); err == nil {
				return f
			}
		}
	}
	return -1
}
