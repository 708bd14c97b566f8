package taskrunner

import "syscall"

// setParentDeathSignal asks the kernel to SIGKILL the command when the
// thread that started it dies: command.run keeps its goroutine on that
// thread (runtime.LockOSThread) until the command ends, so only the
// syncer's death ends the thread first.
func setParentDeathSignal(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }
