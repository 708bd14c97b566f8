//go:build unix

package taskrunner

import (
	"os/exec"
	"syscall"
)

// killGroup runs cmd in a process group of its own and makes the context's
// end kill the whole group, so that an agent's children die with it (the
// command sink does the same, internal/notify/command_unix.go). Where the
// kernel can (Linux), the command also gets SIGKILL when the syncer dies
// without killing the group (SIGKILL, a crash): an executor never outlives
// its syncer, so none runs past its timeout unwatched.
func killGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	setParentDeathSignal(cmd.SysProcAttr)
	cmd.Cancel = func() error {
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}
