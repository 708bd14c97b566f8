package main

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/lookout-dev/lookout/internal/cli"
	"github.com/lookout-dev/lookout/internal/outbox"
)

// filterFlags declares the notification filter flags on fs.
func filterFlags(fs *flag.FlagSet, f *outbox.Filter) {
	fs.Int64Var(&f.ID, "id", 0, "only the notification with this `id`")
	fs.StringVar(&f.Sink, "sink", "", "only notifications of this `sink`")
	fs.StringVar(&f.Source, "source", "", "only notifications of this `source`")
	fs.StringVar(&f.Watch, "watch", "", "only notifications of this `watch`")
	fs.StringVar(&f.Owner, "owner", "", "only notifications of the watches of this `owner`")
}

// retryDead sends dead notifications back to pending.
func retryDead(ctx context.Context, env *cli.Env) error {
	fs := flag.NewFlagSet("retry-dead", flag.ContinueOnError)
	var f outbox.Filter
	filterFlags(fs, &f)
	if err := env.Parse(fs, env.Args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return &cli.UsageError{Msg: fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	}
	pool, err := cli.Open(ctx, false)
	if err != nil {
		return err
	}
	defer pool.Close()
	n, err := outbox.RetryDead(ctx, pool, f)
	if err != nil {
		return err
	}
	fmt.Fprintf(env.Stdout, "%d dead notification(s) sent back to pending\n", n)
	return nil
}

// deliveries lists notifications with their delivery state.
func deliveries(ctx context.Context, env *cli.Env) error {
	fs := flag.NewFlagSet("deliveries", flag.ContinueOnError)
	var f outbox.Filter
	filterFlags(fs, &f)
	fs.StringVar(&f.Status, "status", "", "only notifications in this `status` (pending, held, delivered, digested, dead)")
	fs.IntVar(&f.Limit, "limit", 50, "show at most `n` notifications, newest first")
	if err := env.Parse(fs, env.Args); err != nil {
		return err
	}
	pool, err := cli.Open(ctx, false)
	if err != nil {
		return err
	}
	defer pool.Close()
	rows, err := outbox.List(ctx, pool, f)
	if err != nil {
		return err
	}
	w := tabwriter.NewWriter(env.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tSTATUS\tSINK\tSOURCE/WATCH\tRECORD\tATTEMPTS\tDUPS\tWHEN\tLAST ERROR")
	for _, r := range rows {
		when := "created " + r.CreatedAt.UTC().Format(time.RFC3339)
		switch {
		case r.DeliveredAt != nil:
			when = "delivered " + r.DeliveredAt.UTC().Format(time.RFC3339)
		case r.Status == "pending":
			when = "next " + r.NextAttemptAt.UTC().Format(time.RFC3339)
		case r.Status == "dead" && r.DeadAt != nil:
			when = "dead " + r.DeadAt.UTC().Format(time.RFC3339)
		case r.Status == "held" && r.DigestDueAt != nil:
			when = "digest " + r.DigestDueAt.UTC().Format(time.RFC3339)
		}
		record := r.RecordID
		if r.Kind == outbox.KindDigest {
			record = "(digest)"
		}
		lastErr := ""
		if r.LastError != nil {
			lastErr = oneLine(*r.LastError, 80)
		}
		fmt.Fprintf(w, "%d\t%s\t%s\t%s/%s\t%s\t%d\t%d\t%s\t%s\n", r.ID, r.Status, r.Sink, r.Source, r.Watch, record,
			r.Attempts, r.Duplicates, when, lastErr)
	}
	return w.Flush()
}

func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		s = s[:n] + "…"
	}
	return s
}
