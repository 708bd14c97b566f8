package cli

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
)

// HeapProfile writes a heap profile of what daemon's built process holds,
// and of what its start allocated, to path after a collection
// (LOOKOUT_HEAPPROFILE: where a watch's or a source's bytes go,
// docs/benchmarks.md (13)); an empty path writes none. A failure is
// reported on stderr, naming daemon and the variable, and does not stop
// the daemon.
func HeapProfile(daemon, path string) {
	if path == "" {
		return
	}
	runtime.GC()
	f, err := os.Create(path)
	if err == nil {
		err = errors.Join(pprof.WriteHeapProfile(f), f.Close())
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: LOOKOUT_HEAPPROFILE: %v\n", daemon, err)
	}
}
