package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/health"
	"github.com/lookout-dev/lookout/internal/metrics"
	"github.com/lookout-dev/lookout/internal/service"
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
	// APIListenDefault is the api deployment's address: /v1 and
	// /openapi.json beside /metrics, /healthz and /readyz.
	APIListenDefault = "127.0.0.1:9466"
)

// RunFlags parses the arguments of a run command: --listen ADDR, the
// address of the /metrics, /healthz and /readyz server. The default is
// LOOKOUT_LISTEN when set, else def; an empty address (or "off") disables
// the server.
func RunFlags(env *Env, def string) (listen string, err error) {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	if v, ok := os.LookupEnv(ListenEnv); ok {
		def = v
	}
	fs.StringVar(&listen, "listen", def, "`address` (host:port) of /metrics, /healthz and /readyz; empty or off disables; env "+ListenEnv)
	if err := env.Parse(fs, env.Args); err != nil {
		return "", err
	}
	if fs.NArg() > 0 {
		return "", &UsageError{Msg: fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	}
	if listen == "off" {
		listen = ""
	}
	return listen, nil
}

// Supervise runs services under one service.Supervisor, with the
// /metrics, /healthz and /readyz server on listen (see Serve), until ctx
// ends or one service fails; then it stops the server and every service
// (in reverse order) and returns their errors.
func Supervise(ctx context.Context, listen string, m *metrics.Metrics, checks []health.Check, logger *slog.Logger, services ...service.Service) error {
	return SuperviseApp(ctx, listen, nil, m, checks, logger, services...)
}

// App is an HTTP application served on run's --listen address beside
// /metrics, /healthz and /readyz: the api deployment's /v1.
type App struct {
	Handler http.Handler
	// OnShutdown, if set, is called when the server begins to shut down,
	// to end long-lived responses (event streams).
	OnShutdown func()
	// Limits bound slow requests (LimitsOf lookout.yaml's http block).
	// Defaults to health's defaults.
	Limits health.Limits
}

// LimitsOf returns the limits on slow requests of lookout.yaml's http
// block.
func LimitsOf(h config.HTTP) health.Limits {
	return health.Limits{Header: h.HeaderTimeout, BodyGrace: h.BodyGrace, BodyMinRate: h.BodyMinRate, Idle: h.IdleTimeout}
}

// SuperviseApp is Supervise with app served on the same address; a nil
// app serves the health endpoints only.
func SuperviseApp(ctx context.Context, listen string, app *App, m *metrics.Metrics, checks []health.Check, logger *slog.Logger, services ...service.Service) error {
	sup := service.NewSupervisor(logger, services...)
	if err := sup.Start(ctx); err != nil {
		return err
	}
	stopHTTP, err := serve(ctx, listen, app, m, checks, logger)
	if err != nil {
		return errors.Join(err, sup.Stop())
	}
	select {
	case <-ctx.Done():
		return errors.Join(stopHTTP(), sup.Stop())
	case <-sup.Done():
		return errors.Join(errors.New("a service ended before shutdown; the others were stopped"), stopHTTP(), sup.Stop())
	}
}

// Serve starts the /metrics, /healthz and /readyz server on addr with the
// given readiness checks, and returns its idempotent stop function. With
// an empty addr it starts nothing. A port in use is an error: the daemon
// does not start half-observable.
func Serve(ctx context.Context, addr string, m *metrics.Metrics, checks []health.Check, logger *slog.Logger) (stop func() error, err error) {
	return serve(ctx, addr, nil, m, checks, logger)
}

func serve(ctx context.Context, addr string, app *App, m *metrics.Metrics, checks []health.Check, logger *slog.Logger) (stop func() error, err error) {
	if addr == "" {
		logger.Info("metrics and health endpoints disabled (--listen is empty)")
		return func() error { return nil }, nil
	}
	srv := health.New(addr, m.Handler(logger), checks, logger)
	if app != nil {
		srv.Mount(app.Handler, app.OnShutdown)
		srv.SetLimits(app.Limits)
	}
	if err := srv.Start(ctx); err != nil {
		return nil, err
	}
	return srv.Stop, nil
}
