//go:build !unix

package command

import "os/exec"

// killGroup is a no-op where process groups do not exist: the context's
// end kills the command itself.
func killGroup(*exec.Cmd) {}
