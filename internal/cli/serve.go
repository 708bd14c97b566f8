package cli

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"

	"github.com/lookout-dev/lookout/internal/health"
	"github.com/lookout-dev/lookout/internal/metrics"
)

// ListenEnv is the environment variable that sets run's --listen.
const ListenEnv = "LOOKOUT_LISTEN"

// Default addresses of the /metrics, /healthz and /readyz server: on the
// loopback interface only, a port each so that both binaries can run on
// one machine. Containers set --listen :9464 (or LOOKOUT_LISTEN) so that
// Prometheus and probes reach them.
const (
	SyncerListenDefault    = "127.0.0.1:9464"
	EvaluatorListenDefault = "127.0.0.1:9465"
)

// RunFlags parses the arguments of a run command: --listen ADDR, the
// address of the /metrics, /healthz and /readyz server. The default is
// LOOKOUT_LISTEN when set, else def; an empty address (or "off") disables
// the server.
func RunFlags(env *Env, def string) (listen string, err error) {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	if v, ok := os.LookupEnv(ListenEnv); ok {
		def = v
	}
	fs.StringVar(&listen, "listen", def, "`address` (host:port) of /metrics, /healthz and /readyz; empty or off disables; env "+ListenEnv)
	if err := fs.Parse(env.Args); err != nil {
		return "", &UsageError{Msg: err.Error()}
	}
	if fs.NArg() > 0 {
		return "", &UsageError{Msg: fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	}
	if listen == "off" {
		listen = ""
	}
	return listen, nil
}

// Serve starts the /metrics, /healthz and /readyz server on addr with the
// given readiness checks, and returns its idempotent stop function. With
// an empty addr it starts nothing. A port in use is an error: the daemon
// does not start half-observable.
func Serve(ctx context.Context, addr string, m *metrics.Metrics, checks []health.Check, logger *slog.Logger) (stop func() error, err error) {
	if addr == "" {
		logger.Info("metrics and health endpoints disabled (--listen is empty)")
		return func() error { return nil }, nil
	}
	srv := health.New(addr, m.Handler(logger), checks, logger)
	if err := srv.Start(ctx); err != nil {
		return nil, err
	}
	return srv.Stop, nil
}
