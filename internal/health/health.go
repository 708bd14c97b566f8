// Package health is the HTTP side of a lookout daemon: /metrics for
// Prometheus, /healthz (the process is alive) and /readyz (it can do its
// work: database reachable, LISTEN connections up, migrations current).
//
// Both binaries start a Server from their run command (--listen,
// LOOKOUT_LISTEN). The server holds no state of its own: /readyz runs its
// checks on every request, each bounded by a timeout, concurrently.
package health

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lookout-dev/lookout/internal/db"
)

// CheckTimeoutDefault bounds one readiness check.
const CheckTimeoutDefault = 2 * time.Second

// Check is one readiness condition. Run returns nil when it holds, or an
// error that says what is wrong (it is shown in /readyz's body).
type Check struct {
	Name string
	Run  func(ctx context.Context) error
	// Advisory checks report a problem without making the process not
	// ready: the error is shown as the check's warning (a refused reload
	// of the configuration, while the process runs on the last valid one).
	Advisory bool
}

// Warning is an error a check returns to report a problem that does not
// make the process not ready (a schema one release ahead of the binary
// during a rolling upgrade): /readyz shows it as the check's warning.
type Warning struct{ Msg string }

func (w *Warning) Error() string { return w.Msg }

// Database checks that the pool reaches the database (a ping).
func Database(pool *pgxpool.Pool) Check {
	return Check{Name: "database", Run: func(ctx context.Context) error {
		if err := pool.Ping(ctx); err != nil {
			return fmt.Errorf("ping: %w", err)
		}
		return nil
	}}
}

// Migrations checks that the database schema is at the migration version
// this binary embeds, and not dirty. A schema newer than the binary is a
// warning, not a failure: migrations are backward compatible for one
// release, so old pods stay ready while a rolling upgrade replaces them
// (docs/deploy.md). It reads schema_migrations directly (one small query)
// rather than opening a migrator per probe.
func Migrations(pool *pgxpool.Pool) Check {
	return Check{Name: "migrations", Run: func(ctx context.Context) error {
		latest, err := db.LatestVersion()
		if err != nil {
			return err
		}
		var version int64
		var dirty bool
		err = pool.QueryRow(ctx, `SELECT version, dirty FROM schema_migrations LIMIT 1`).Scan(&version, &dirty)
		var pgErr *pgconn.PgError
		switch {
		case errors.As(err, &pgErr) && pgErr.Code == "42P01": // undefined_table
			return fmt.Errorf("no migration applied; this binary needs version %d: run `migrate`", latest)
		case errors.Is(err, pgx.ErrNoRows):
			return fmt.Errorf("no migration applied; this binary needs version %d: run `migrate`", latest)
		case err != nil:
			return fmt.Errorf("read schema_migrations: %w", err)
		case dirty:
			return fmt.Errorf("schema is dirty at version %d (a migration failed half-way): fix it by hand, then `migrate --force %d`", version, version-1)
		case version < int64(latest):
			return fmt.Errorf("schema is at version %d, this binary needs %d: run `migrate`", version, latest)
		case version > int64(latest):
			return &Warning{Msg: fmt.Sprintf("schema is at version %d, newer than this binary's %d: running on it (migrations are backward compatible for one release); upgrade the binary", version, latest)}
		}
		return nil
	}}
}

// Listener checks a LISTEN connection through its connected function
// (evaluator.Listening, Deliverer.Listening).
func Listener(name string, connected func() bool) Check {
	return Check{Name: name, Run: func(context.Context) error {
		if !connected() {
			return errors.New("LISTEN connection is not connected (reconnecting)")
		}
		return nil
	}}
}

// Server serves /metrics, /healthz and /readyz.
type Server struct {
	addr    string
	metrics http.Handler
	checks  []Check
	timeout time.Duration
	logger  *slog.Logger

	app        http.Handler
	onShutdown func()
	limits     Limits

	mu   sync.Mutex
	srv  *http.Server
	ln   net.Listener
	done chan struct{}
}

// New returns a server for addr (host:port, ":0" for any free port) that
// serves metrics at /metrics (nil: 404) and runs checks for /readyz.
func New(addr string, metrics http.Handler, checks []Check, logger *slog.Logger) *Server {
	if metrics == nil {
		metrics = http.NotFoundHandler()
	}
	return &Server{addr: addr, metrics: metrics, checks: checks, timeout: CheckTimeoutDefault,
		logger: logger.With("component", "http"), limits: Limits{}.withDefaults()}
}

// Mount serves app for every path other than /metrics, /healthz and
// /readyz (the api deployment's /v1 and /openapi.json). onShutdown, if
// set, is called when Stop begins, to end long-lived responses such as
// event streams. Call it before Start.
func (s *Server) Mount(app http.Handler, onShutdown func()) {
	s.app, s.onShutdown = app, onShutdown
}

// Handler is the server's routing, for tests with httptest.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	if s.app != nil {
		mux.Handle("/", s.app)
	}
	mux.Handle("GET /metrics", s.metrics)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":"ok"}` + "\n"))
	})
	mux.HandleFunc("GET /readyz", s.readyz)
	return mux
}

// CheckResult is one check in /readyz's body.
type CheckResult struct {
	Name  string `json:"name"`
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
	// Warning is the problem an advisory check reports (OK stays true).
	Warning    string  `json:"warning,omitempty"`
	DurationMS float64 `json:"duration_ms"`
}

// Readiness is /readyz's body.
type Readiness struct {
	// Status is "ready" or "not ready".
	Status string `json:"status"`
	// Failed names the checks that failed.
	Failed []string      `json:"failed,omitempty"`
	Checks []CheckResult `json:"checks"`
}

// Ready runs every check concurrently, each within the check timeout.
func (s *Server) Ready(ctx context.Context) Readiness {
	res := make([]CheckResult, len(s.checks))
	var wg sync.WaitGroup
	for i, c := range s.checks {
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, s.timeout)
			defer cancel()
			start := time.Now()
			err := c.Run(cctx)
			if err != nil && cctx.Err() != nil {
				err = fmt.Errorf("no answer within %s: %w", s.timeout, err)
			}
			r := CheckResult{Name: c.Name, OK: err == nil, DurationMS: float64(time.Since(start).Microseconds()) / 1000}
			var warn *Warning
			switch {
			case err != nil && (c.Advisory || errors.As(err, &warn)):
				r.OK, r.Warning = true, err.Error()
			case err != nil:
				r.Error = err.Error()
			}
			res[i] = r
		})
	}
	wg.Wait()
	out := Readiness{Status: "ready", Checks: res}
	for _, r := range res {
		if !r.OK {
			out.Failed = append(out.Failed, r.Name)
		}
	}
	if len(out.Failed) > 0 {
		out.Status = "not ready"
	}
	return out
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	rd := s.Ready(r.Context())
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if len(rd.Failed) > 0 {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_ = json.NewEncoder(w).Encode(rd)
}

// Start listens on the address at once (so that a port in use fails the
// daemon's start) and serves in the background until Stop.
func (s *Server) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv != nil {
		return errors.New("health server already started")
	}
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", s.addr)
	if err != nil {
		return fmt.Errorf("listen on %s for /metrics, /healthz and /readyz (set --listen or LOOKOUT_LISTEN, empty to disable): %w", s.addr, err)
	}
	s.ln = ln
	// Slow clients are bounded on what they send (Limits), never on what
	// they are sent: no WriteTimeout, which would cut event streams.
	s.srv = &http.Server{Handler: bodyDeadline(s.limits, refuseNUL(s.Handler())), ReadHeaderTimeout: s.limits.Header, IdleTimeout: s.limits.Idle,
		BaseContext: func(net.Listener) context.Context { return context.WithoutCancel(ctx) }}
	if s.onShutdown != nil {
		s.srv.RegisterOnShutdown(s.onShutdown)
	}
	s.done = make(chan struct{})
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.logger.Error("serve metrics and health", "error", err)
		}
	}()
	s.logger.Info("serving /metrics, /healthz, /readyz", "addr", ln.Addr().String())
	return nil
}

// Addr is the address the server listens on (useful with ":0"); empty
// before Start.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return ""
	}
	return s.ln.Addr().String()
}

// Stop shuts the server down, letting requests in progress finish for up
// to five seconds, then closes the connections still open: a request that
// outlives that, or a connection a client opened and never sent a request
// on (a browser's preconnect, which Shutdown counts as busy until it is
// five seconds old), is cut with a warning, and the stop is clean. It is
// idempotent and safe on a server never started.
func (s *Server) Stop() error {
	s.mu.Lock()
	srv, done := s.srv, s.done
	s.mu.Unlock()
	if srv == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := srv.Shutdown(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		s.logger.Warn("connections still open 5s after the stop began were closed")
		err = srv.Close()
	}
	<-done
	if err != nil {
		return fmt.Errorf("stop health server: %w", err)
	}
	return nil
}
