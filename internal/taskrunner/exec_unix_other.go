//go:build unix && !linux

package taskrunner

import "syscall"

// setParentDeathSignal does nothing where the kernel has no parent death
// signal: an executor whose syncer was killed runs until it exits.
func setParentDeathSignal(*syscall.SysProcAttr) {}
