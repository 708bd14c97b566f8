package cli

import (
	"context"
	"flag"
	"fmt"
	"text/tabwriter"

	"github.com/lookout-dev/lookout/internal/reports"
)

// ReportCommand prints a report_* view as a table (`report stuck`), or
// lists the views with what each answers (`report`). It needs only
// DATABASE_URL.
func ReportCommand() Command {
	return Command{
		Name:    "report",
		Usage:   "[NAME] [--source S] [--limit N] [--wide] [-x]",
		Summary: "print a report_* view as a table (report stuck --source S); without a name, list them",
		Run: func(ctx context.Context, env *Env) error {
			fs := flag.NewFlagSet("report", flag.ContinueOnError)
			var opts reports.Options
			var format reports.Format
			fs.StringVar(&opts.Source, "source", "", "only the rows of this `source`")
			fs.IntVar(&opts.Limit, "limit", 100, "print at most `n` rows (0: all)")
			fs.BoolVar(&format.Wide, "wide", false, "print long text whole")
			fs.BoolVar(&format.Expanded, "x", false, "expanded output: one line per column, a block per row")
			// Flags may come before or after the name.
			if err := env.Parse(fs, env.Args); err != nil {
				return err
			}
			args := fs.Args()
			if len(args) > 0 {
				if err := env.Parse(fs, args[1:]); err != nil {
					return err
				}
				args = append(args[:1], fs.Args()...)
			}
			if len(args) > 1 {
				return &UsageError{Msg: fmt.Sprintf("want one report name, got %d arguments", len(args))}
			}
			pool, err := Open(ctx, false)
			if err != nil {
				return err
			}
			defer pool.Close()
			if len(args) == 0 {
				views, err := reports.Views(ctx, pool)
				if err != nil {
					return err
				}
				w := tabwriter.NewWriter(env.Stdout, 0, 0, 2, ' ', 0)
				fmt.Fprintln(w, "REPORT\tVIEW\tSHOWS")
				for _, v := range views {
					fmt.Fprintf(w, "%s\t%s\t%s\n", v.Short(), v.Name, v.Description)
				}
				return w.Flush()
			}
			t, err := reports.Query(ctx, pool, args[0], opts)
			if err != nil {
				return err
			}
			return reports.Write(env.Stdout, t, format)
		},
	}
}
