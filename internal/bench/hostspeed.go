package bench

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"syscall"
	"time"
)

// HostSpeed is the CPU time of a fixed piece of work (probeWork) on one
// thread: what the host gives a process for the same work at that moment.
// The machines the benchmarks run on are virtual; between two quiet runs
// minutes apart, with the same binary and nothing else running, the CPU
// time of the same drain of (4) was seen to change by 40% in the Go process
// and in PostgreSQL alike (docs/benchmarks.md, "The host's speed"). A run
// prints the probe at its start and end, so that runs on a slower host can
// be told from a slower build.
func HostSpeed() (time.Duration, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	before, err := threadCPU()
	if err != nil {
		return 0, err
	}
	probeWork()
	after, err := threadCPU()
	if err != nil {
		return 0, err
	}
	return after - before, nil
}

// probeWork sorts the same million pseudo-random integers three times:
// memory, branches and comparisons, like the hot paths it stands beside.
func probeWork() {
	r := rand.New(rand.NewPCG(1, 2))
	xs := make([]uint64, 1_000_000)
	for range 3 {
		for i := range xs {
			xs[i] = r.Uint64()
		}
		slices.Sort(xs)
	}
}

// threadCPU is the calling thread's user and system CPU time.
func threadCPU() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(1 /* RUSAGE_THREAD */, &ru); err != nil {
		return 0, fmt.Errorf("read the thread's CPU time: %w", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}
