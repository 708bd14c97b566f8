package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/lookout-dev/lookout/internal/cli"
	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/connectors"
	"github.com/lookout-dev/lookout/internal/syncer"
	"github.com/lookout-dev/lookout/internal/taskrunner"
)

// check is the syncer's side of the config check: config.Load validated
// the whole directory (YAML, keys, types, names, sink references); this
// builds what the syncer runs — connectors, field mappings, schedules and
// stop conditions — without touching the database. Watches, templates,
// sinks and model options are the evaluator's side (`evaluator check`):
// the syncer binary links none of that code. It sends no request (the
// daemons call it at start); checkCommand adds the upstream schemas.
func check(cfg *config.Config) error {
	if err := syncer.Build(cfg); err != nil {
		return err
	}
	return taskrunner.Check(cfg)
}

// checkCommand is `syncer check [--offline]`: check, then, unless
// --offline, verifyUpstream.
func checkCommand() cli.Command {
	c := cli.CheckCommand(check)
	c.Summary = "check [--offline]: validate the configuration directory and, unless --offline, the upstream schemas it names (Notion databases); exit non-zero on any problem"
	c.Run = func(ctx context.Context, env *cli.Env) error {
		fs := flag.NewFlagSet("check", flag.ContinueOnError)
		offline := fs.Bool("offline", false, "send no request: do not read the upstream schemas (Notion databases)")
		if err := env.Parse(fs, env.Args); err != nil {
			return err
		}
		if fs.NArg() > 0 {
			return &cli.UsageError{Msg: fmt.Sprintf("check takes no arguments, got %q", fs.Args())}
		}
		env.Args = nil // parsed
		return cli.CheckCommand(func(cfg *config.Config) error {
			if err := check(cfg); err != nil {
				return err
			}
			return verifyUpstream(ctx, cfg, env.Stdout, *offline)
		}).Run(ctx, env)
	}
	return c
}

// verifyUpstream reads what the sources' settings name upstream and
// checks it (connectors.Verifier: a Notion database's properties, their
// types and the status options), one source at a time, saying on out what
// it checked. A property or option the upstream lacks, a refused token or
// a database the token cannot see fails the check with a configuration
// error naming the file, line and key. An upstream that answers "not now"
// (429, 5xx: a *connectors.RetryLaterError) fails it with exit
// cli.ExitTryLater, saying when to try again, unless another source's
// configuration is wrong (exit 1). An upstream that cannot be reached
// (network, timeout) is said and skipped, since the first run checks
// again and records the same errors. offline skips every read.
func verifyUpstream(ctx context.Context, cfg *config.Config, out io.Writer, offline bool) error {
	hc := &http.Client{Transport: cfg.Global.Egress.Policy().Transport()}
	var errs, later []error
	for _, sc := range cfg.Sources {
		conn, err := connectors.New(sc, connectors.Env{Dir: cfg.Dir, HTTP: hc, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			return err // check built it already
		}
		v, ok := conn.(connectors.Verifier)
		if !ok {
			continue
		}
		if offline {
			fmt.Fprintf(out, "%s: %s schema not read (--offline)\n", sc.Path, sc.Connector)
			continue
		}
		vctx, cancel := context.WithTimeout(ctx, cmp.Or(sc.Timeout, config.TimeoutDefault))
		err = v.Verify(vctx)
		cancel()
		var ce *config.Error
		var rl *connectors.RetryLaterError
		switch {
		case err == nil:
			fmt.Fprintf(out, "%s: %s schema read: every property named exists\n", sc.Path, sc.Connector)
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.As(err, &ce):
			errs = append(errs, err)
		case errors.Is(err, connectors.ErrUnauthorized), errors.Is(err, connectors.ErrNotFound):
			errs = append(errs, fmt.Errorf("%s: source %s: %w", sc.Path, sc.Name, err))
		case errors.As(err, &rl):
			status := ""
			if rl.Status != 0 {
				status = fmt.Sprintf(" (%d)", rl.Status)
			}
			later = append(later, fmt.Errorf("%s: %s schema not checked: the upstream is rate limited or busy%s; try again after %s: %w",
				sc.Path, sc.Connector, status, rl.RetryAt.UTC().Format(time.RFC3339), err))
		default:
			fmt.Fprintf(out, "%s: %s schema not checked, upstream unreachable (the first run checks it): %v\n", sc.Path, sc.Connector, err)
		}
	}
	if len(errs) == 0 && len(later) > 0 {
		return &cli.ExitError{Code: cli.ExitTryLater, Err: errors.Join(later...)}
	}
	return errors.Join(append(errs, later...)...)
}
