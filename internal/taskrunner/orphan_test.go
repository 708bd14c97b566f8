//go:build linux

package taskrunner

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lookout-dev/lookout/internal/tasks"
	"github.com/lookout-dev/lookout/internal/testsignal"
)

// orphanHelperEnv makes the test binary the helper of
// TestExecutorDiesWithAKilledSyncer: a "syncer" that runs one command
// executor, which hangs, until it is SIGKILLed.
const orphanHelperEnv = "LOOKOUT_TEST_ORPHAN_HELPER"

// An executor whose syncer is SIGKILLed (no chance to kill its process
// group) does not run on: the kernel kills it with its parent. Real
// processes: the test binary re-runs itself as the syncer, whose executor
// writes its pid and hangs.
func TestExecutorDiesWithAKilledSyncer(t *testing.T) {
	if dir := os.Getenv(orphanHelperEnv); dir != "" {
		script := filepath.Join(dir, "agent.sh")
		c, err := newCommand([]string{script})
		if err != nil {
			t.Fatal(err)
		}
		c.run(context.Background(), input{run: &tasks.Run{RunID: "run-1.1"}, deadline: time.Now().Add(time.Hour), json: []byte("{}")})
		t.Fatal("the executor returned; it should hang until the helper is killed")
	}
	t.Parallel()
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pid")
	script := "#!/bin/sh\necho $$ > " + pidFile + ".tmp\nmv " + pidFile + ".tmp " + pidFile + "\nexec sleep 3600\n"
	if err := os.WriteFile(filepath.Join(dir, "agent.sh"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	helper := exec.Command(os.Args[0], "-test.run=^TestExecutorDiesWithAKilledSyncer$", "-test.count=1")
	helper.Env = append(os.Environ(), orphanHelperEnv+"="+dir)
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	var pid int
	testsignal.Eventually(t, "the executor writes its pid", func() bool {
		b, err := os.ReadFile(pidFile)
		if err != nil {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil
	})
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	if !alive(pid) {
		t.Fatalf("the executor %d is not running", pid)
	}
	if err := helper.Process.Kill(); err != nil { // SIGKILL: the syncer cleans nothing up
		t.Fatal(err)
	}
	_ = helper.Wait()
	testsignal.Eventually(t, "the executor of the killed syncer ends", func() bool { return !alive(pid) })
}

// alive reports whether pid is a process that has not exited (a zombie
// that nobody reaped has).
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// pid (comm) S ...: the state follows the last ')'.
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}
