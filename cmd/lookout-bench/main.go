// Command lookout-bench measures lookout against baselines measured in the
// same run (see internal/bench). It needs DATABASE_URL; `make bench` starts
// a throwaway PostgreSQL when it is unset.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime/pprof"

	"github.com/lookout-dev/lookout/internal/bench"
	"github.com/lookout-dev/lookout/internal/db"
)

func main() {
	records := flag.Int("records", 100_000, "records to mirror")
	page := flag.Int("page-size", 1000, "records per API page")
	keep := flag.Bool("keep", false, "keep the benchmark schema for inspection")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the run to `file`")
	flag.Parse()
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "lookout-bench:", err)
			os.Exit(1)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, "lookout-bench:", err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	url, err := db.URLFromEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, "lookout-bench:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if _, err := bench.Run(ctx, bench.Options{DatabaseURL: url, Records: *records, PageSize: *page, Keep: *keep}); err != nil {
		fmt.Fprintln(os.Stderr, "lookout-bench:", err)
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}
