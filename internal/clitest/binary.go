package clitest

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

var builds sync.Map // package -> *build

type build struct {
	once sync.Once
	path string
	err  error
	out  []byte
}

// BuildBinary builds the main package pkg (./cmd/syncer, relative to the
// module root, or an import path) once per test binary and returns the
// executable's path.
func BuildBinary(t testing.TB, pkg string) string {
	t.Helper()
	v, _ := builds.LoadOrStore(pkg, &build{})
	b := v.(*build)
	b.once.Do(func() {
		dir, err := os.MkdirTemp("", "lookout-bin-*")
		if err != nil {
			b.err = err
			return
		}
		b.path = filepath.Join(dir, filepath.Base(pkg))
		cmd := exec.Command("go", "build", "-o", b.path, pkg)
		b.out, b.err = cmd.CombinedOutput()
	})
	if b.err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, b.err, b.out)
	}
	return b.path
}

// StartBinary runs `bin --config configDir --log-format json run --listen
// 127.0.0.1:0` against databaseURL, waits until it serves HTTP, and stops
// it with SIGTERM when the test ends (failing the test if it exits with
// an error).
func StartBinary(t testing.TB, bin, configDir, databaseURL string) *DaemonTest {
	t.Helper()
	return StartBinaryEnv(t, bin, configDir, databaseURL)
}

// StartBinaryEnv is StartBinary with extra environment variables
// ("NAME=value"), e.g. LOOKOUT_SECRET_KEY.
func StartBinaryEnv(t testing.TB, bin, configDir, databaseURL string, env ...string) *DaemonTest {
	t.Helper()
	d := &DaemonTest{t: t, done: make(chan error, 1), logs: &lockedBuffer{}}
	cmd := exec.Command(bin, "--config", configDir, "--log-format", "json", "run", "--listen", "127.0.0.1:0")
	cmd.Env = append(append(os.Environ(), "DATABASE_URL="+databaseURL, "LOOKOUT_LISTEN="), env...)
	cmd.Stdout, cmd.Stderr = d.logs, d.logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	go func() { d.done <- cmd.Wait() }()
	d.proc = cmd.Process
	d.cancel = func() { _ = cmd.Process.Signal(syscall.SIGTERM) }
	t.Cleanup(func() { d.Stop() })
	d.waitServing()
	return d
}

// Signal sends sig to a daemon started by StartBinary.
func (d *DaemonTest) Signal(sig os.Signal) {
	d.t.Helper()
	if d.proc == nil {
		d.t.Fatalf("Signal: the daemon is not a process")
	}
	if err := d.proc.Signal(sig); err != nil {
		d.t.Fatalf("signal %v: %v", sig, err)
	}
}

// Pid returns the process id of a daemon started by StartBinary.
func (d *DaemonTest) Pid() int {
	d.t.Helper()
	if d.proc == nil {
		d.t.Fatalf("Pid: the daemon is not a process")
	}
	return d.proc.Pid
}

// Kill kills a daemon started by StartBinary with SIGKILL — a crash: it
// cleans nothing up, its children live on — and waits until it exited.
// The test's end then neither stops it nor checks its exit.
func (d *DaemonTest) Kill() {
	d.t.Helper()
	d.Signal(syscall.SIGKILL)
	select {
	case <-d.done:
	case <-time.After(30 * time.Second):
		d.t.Fatalf("the daemon did not exit within 30s of SIGKILL")
	}
	d.cancel = nil
}

// Count returns how many times s occurs in the logs.
func (d *DaemonTest) Count(s string) int { return bytes.Count([]byte(d.logs.String()), []byte(s)) }
