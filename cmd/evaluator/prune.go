package main

import (
	"context"
	"flag"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/lookout-dev/lookout/internal/cli"
	"github.com/lookout-dev/lookout/internal/retention"
)

// prune makes the partitions ahead and prunes history older than
// lookout.yaml's retention windows once (the daemon does it every
// retention.interval), or with --dry-run counts what it would drop and
// delete.
func prune(ctx context.Context, env *cli.Env) error {
	fs := flag.NewFlagSet("prune", flag.ContinueOnError)
	dry := fs.Bool("dry-run", false, "count the rows a prune would delete; delete nothing")
	if err := env.Parse(fs, env.Args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return &cli.UsageError{Msg: fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	}
	cfg, err := env.Load()
	if err != nil {
		return err
	}
	conf := retention.FromConfig(cfg.Global.Retention)
	if !conf.Enabled() {
		fmt.Fprintln(env.Stdout, "retention is off: lookout.yaml sets every retention window to 0s (see docs/config.md#retention); nothing to prune")
		return nil
	}
	pool, err := cli.Open(ctx, false)
	if err != nil {
		return err
	}
	defer pool.Close()
	p := retention.New(pool, conf, env.Logger(cfg, "evaluator"))
	var res retention.Result
	if *dry {
		res, err = p.DryRun(ctx)
	} else {
		res, err = p.Prune(ctx)
	}
	if res.Skipped {
		fmt.Fprintln(env.Stdout, "another evaluator is pruning this database now; nothing done")
		return err
	}
	w := tabwriter.NewWriter(env.Stdout, 0, 0, 2, ' ', 0)
	drop, verb := "PARTITIONS DROPPED", "ROWS DELETED"
	if *dry {
		drop, verb = "WOULD DROP", "WOULD DELETE"
	}
	fmt.Fprintf(w, "TABLE\tWINDOW\tOLDER THAN\t%s\tKEPT (PENDING)\t%s\tBATCHES\n", drop, verb)
	for _, t := range res.Tables {
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d\t%d\t%d\n", t.Table, t.Window, t.Cutoff.UTC().Format(time.RFC3339),
			len(t.Dropped), len(t.Kept), t.Rows, t.Batches)
	}
	if ferr := w.Flush(); ferr != nil && err == nil {
		err = ferr
	}
	return err
}
