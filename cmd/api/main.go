// Command api is lookout's third deployment: the HTTP JSON API under /v1
// (OpenAPI 3.1 at /openapi.json) through which assistants and their users
// read their notifications and describe sources, with bearer tokens per
// owner. It is stateless: run any number of replicas against one
// database. It links the connectors to validate the sources created
// through it (control.NewValidator: their decoders and constructors,
// never a fetch) and runs none of them.
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
	"os"
	"os/user"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/lookout-dev/lookout/internal/admin"
	"github.com/lookout-dev/lookout/internal/api"
	"github.com/lookout-dev/lookout/internal/audit"
	"github.com/lookout-dev/lookout/internal/cli"
	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/control"
	"github.com/lookout-dev/lookout/internal/definitions"
	"github.com/lookout-dev/lookout/internal/health"
	"github.com/lookout-dev/lookout/internal/ingest"
	"github.com/lookout-dev/lookout/internal/mcp"
	"github.com/lookout-dev/lookout/internal/me"
	"github.com/lookout-dev/lookout/internal/metrics"
	_ "github.com/lookout-dev/lookout/internal/notify/all" // sink types: lookout.yaml's sinks checked as the evaluator does
	"github.com/lookout-dev/lookout/internal/secrets"
	"github.com/lookout-dev/lookout/internal/tokens"
)

func main() {
	os.Exit(cli.Main("api", "serve the HTTP API of watches, sources and notifications", commands))
}

var commands = []cli.Command{
	{Name: "run", Summary: "serve the API until SIGINT/SIGTERM [--listen ADDR: /v1, /mcp, /ingest/{source}, /openapi.json, /admin, /me, /metrics, /healthz, /readyz; default " + cli.APIListenDefault + "]", Run: runDaemon},
	{Name: "mcp", Summary: "serve the MCP tools to one local assistant over stdio: mcp --stdio [--token TOKEN; default env " + tokenEnv + "]", Run: mcpStdio},
	{Name: "token", Summary: "manage API tokens: token create --owner NAME [--scope user|admin] [--name LABEL] [--ttl 720h], token list [--owner NAME], token revoke ID", Commands: []cli.Command{
		{Name: "create", Summary: "create --owner NAME [--scope user|admin] [--name LABEL] [--ttl 720h]: create a token; its secret is printed once", Run: tokenCreate},
		{Name: "list", Summary: "list [--owner NAME]: the tokens, their state and last use", Run: tokenList},
		{Name: "revoke", Summary: "revoke ID: revoke the token (see token list)", Run: tokenRevoke},
	}},
	{Name: "secret-key", Summary: "print a new key for LOOKOUT_SECRET_KEY (--id ID); put it first to rotate", Run: secretKey},
	{Name: "openapi", Summary: "print the OpenAPI 3.1 document (docs/openapi.json)", Run: printOpenAPI},
	cli.ReportCommand(),
	cli.MigrateCommand(),
	cli.CheckCommand(check),
}

// check is the api's side of the config check: the configuration loaded
// (api.limits included) and the key ring of LOOKOUT_SECRET_KEY parses.
func check(*config.Config) error {
	if _, err := secrets.FromEnv(); err != nil {
		return err
	}
	_, err := dryRunWait()
	return err
}

// dryRunWaitEnv sets how long a dry run with use_model waits for an
// evaluator's answer (control.Config.DryRunWait; default 60s).
const dryRunWaitEnv = "LOOKOUT_DRY_RUN_WAIT"

// dryRunWait reads dryRunWaitEnv; 0 when unset (the default).
func dryRunWait() (time.Duration, error) {
	v := os.Getenv(dryRunWaitEnv)
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%s: want a positive duration such as 60s, not %q", dryRunWaitEnv, v)
	}
	return d, nil
}

func serviceConfig(cfg *config.Config, keys *secrets.Ring) (control.Config, error) {
	lim := func(v int) int {
		if v < 0 {
			return 0
		}
		return v
	}
	l := cfg.Global.API.Limits
	wait, err := dryRunWait()
	if err != nil {
		return control.Config{}, err
	}
	return control.Config{
		Limits:       control.Limits{Watches: lim(l.Watches), Sources: lim(l.Sources), ModelCallsPerDay: lim(l.ModelCallsPerDay)},
		Keys:         keys,
		AllowPrivate: cfg.Global.API.AllowPrivate,
		DryRunWait:   wait,
		Drift:        cfg.Global.Ollama.Drift,
		PublicURL:    os.Getenv(publicURLEnv),
	}, nil
}

// newService builds the control service of the api's commands (run and
// mcp --stdio: the HTTP API and the MCP tools share it) and the hub that
// wakes its notification streams; the caller starts and stops the hub.
func newService(pool *pgxpool.Pool, cfg *config.Config, keys *secrets.Ring, logger *slog.Logger) (*control.Service, *control.Hub, error) {
	conf, err := serviceConfig(cfg, keys)
	if err != nil {
		return nil, nil, err
	}
	hub := control.NewHub(pool, logger)
	// The one validation path: what `check` and the config loader run,
	// the connectors' decoders and constructors included.
	v := control.NewValidator(&cfg.Global)
	v.Keys = keys // seals and opens the credentials of API users' sources
	store := definitions.NewStore(pool, v)
	return control.New(pool, store, hub, conf, logger), hub, nil
}

func runDaemon(ctx context.Context, env *cli.Env) error {
	listen, err := cli.RunFlags(env, cli.APIListenDefault)
	if err != nil {
		return err
	}
	if listen == "" {
		return &cli.UsageError{Msg: "api run serves the API on --listen; it cannot be empty or off"}
	}
	cfg, err := env.Load()
	if err != nil {
		return err
	}
	logger := env.Logger(cfg, "api")
	keys, err := secrets.FromEnv()
	if err != nil {
		return err
	}
	if keys == nil {
		logger.Warn(secrets.KeyEnv + " is not set: creates that store a secret (source credentials, webhook signing secrets) will be refused")
	}
	pool, err := cli.OpenSized(ctx, true, api.PoolConns)
	if err != nil {
		return err
	}
	defer pool.Close()
	m := metrics.New()
	m.CollectDatabase(pool, 0, nil, 0) // lookout_database_up; the daemons export the work gauges
	svc, hub, err := newService(pool, cfg, keys, logger)
	if err != nil {
		return err
	}
	if keys != nil {
		// Credentials stored in clear (before they were sealed) or sealed
		// with a key that is no longer first are sealed again now.
		n, err := svc.Reseal(ctx)
		if err != nil {
			return fmt.Errorf("seal the stored credentials again: %w", err)
		}
		if n > 0 {
			logger.Info("sealed stored credentials again with the first key of "+secrets.KeyEnv, "definitions", n, "key_id", keys.KeyID())
		}
	}
	app, err := newApp(pool, cfg, svc, keys, m, logger)
	if err != nil {
		return err
	}
	return cli.SuperviseApp(ctx, listen, app, m,
		[]health.Check{health.Database(pool), health.Migrations(pool), health.Listener("outbox_listener", hub.Listening)},
		logger, hub)
}

// newApp returns what api run serves beside /metrics, /healthz and
// /readyz: /ingest/{source}, /mcp, /admin, /me and the API, bounded on slow
// requests by lookout.yaml's http block.
func newApp(pool *pgxpool.Pool, cfg *config.Config, svc *control.Service, keys *secrets.Ring, m *metrics.Metrics, logger *slog.Logger) (*cli.App, error) {
	a := api.New(svc, logger)
	m2 := mcp.New(svc, mcp.Config{}, logger)
	adm, err := admin.New(svc, admin.Config{Config: cfg}, logger)
	if err != nil {
		return nil, err
	}
	mine, err := me.New(svc, me.Config{}, logger)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	// Webhooks authenticate by their signature, outside /v1's tokens.
	mux.Handle(ingest.Pattern, ingest.New(pool, ingest.Config{Metrics: m, Keys: keys}, logger).Handler())
	mux.Handle("/mcp", m2.Handler())
	mux.Handle("/admin", adm.Handler())
	mux.Handle("/admin/", adm.Handler())
	mux.Handle("/me", mine.Handler())
	mux.Handle("/me/", mine.Handler())
	mux.Handle("/", a.Handler())
	shutdown := func() { a.Shutdown(); m2.Close() }
	return &cli.App{Handler: mux, OnShutdown: shutdown, Limits: cli.LimitsOf(cfg.Global.HTTP)}, nil
}

// publicURLEnv is the address people open the api at: sign-in links of
// /me (me_link) start with it.
const publicURLEnv = "LOOKOUT_PUBLIC_URL"

// tokenEnv holds the token of `api mcp --stdio` when --token is not given.
const tokenEnv = "LOOKOUT_TOKEN"

// mcpStdio serves the MCP tools over stdin/stdout to one local assistant,
// acting for the owner of the token (checked at start and on every call);
// logs go to stderr.
func mcpStdio(ctx context.Context, env *cli.Env) error {
	fs := flag.NewFlagSet("mcp", flag.ContinueOnError)
	stdio := fs.Bool("stdio", false, "serve over stdin/stdout (the only transport of this command; /mcp of `api run` is the HTTP one)")
	token := fs.String("token", "", "the bearer `token` to act with (prefer env "+tokenEnv+": a flag is visible to other users in the process list)")
	if err := env.Parse(fs, env.Args); err != nil {
		return err
	}
	if !*stdio || fs.NArg() > 0 {
		return &cli.UsageError{Msg: "want api mcp --stdio (streamable HTTP is served by api run at /mcp)"}
	}
	secret := cmp.Or(*token, os.Getenv(tokenEnv))
	if secret == "" {
		return &cli.UsageError{Msg: "api mcp --stdio needs a token: set " + tokenEnv + " (or --token) to one made by `api token create --owner NAME`"}
	}
	cfg, err := env.Load()
	if err != nil {
		return err
	}
	logger := env.Logger(cfg, "api-mcp")
	keys, err := secrets.FromEnv()
	if err != nil {
		return err
	}
	pool, err := cli.Open(ctx, false)
	if err != nil {
		return err
	}
	defer pool.Close()
	svc, hub, err := newService(pool, cfg, keys, logger)
	if err != nil {
		return err
	}
	if err := hub.Start(ctx); err != nil {
		return err
	}
	defer func() { _ = hub.Stop() }()
	srv := mcp.New(svc, mcp.Config{Token: secret}, logger)
	defer srv.Close()
	err = srv.Run(ctx, &mcpsdk.IOTransport{Reader: io.NopCloser(os.Stdin), Writer: nopWriteCloser{env.Stdout}})
	if err != nil && ctx.Err() != nil {
		return nil
	}
	return err
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

func operator() control.Principal {
	name := os.Getenv("USER")
	if u, err := user.Current(); err == nil {
		name = cmp.Or(u.Username, name)
	}
	return control.Principal{Owner: "operator:" + cmp.Or(name, "unknown"), Admin: true, Via: audit.ViaCLI}
}

// tokenCreate is `api token create`.
func tokenCreate(ctx context.Context, env *cli.Env) error {
	fs := flag.NewFlagSet("token create", flag.ContinueOnError)
	owner := fs.String("owner", "", "the `owner` the token acts for (required)")
	scope := fs.String("scope", tokens.ScopeUser, "`scope`: user (the owner's objects) or admin (everything)")
	name := fs.String("name", "", "a `label` to tell tokens apart")
	ttl := fs.Duration("ttl", 0, "expire the token after this `duration` (e.g. 720h); 0 never")
	if err := env.Parse(fs, env.Args); err != nil {
		return err
	}
	if *owner == "" {
		return &cli.UsageError{Msg: "token create needs --owner NAME"}
	}
	if *scope != tokens.ScopeUser && *scope != tokens.ScopeAdmin {
		return &cli.UsageError{Msg: fmt.Sprintf("--scope must be user or admin, not %q", *scope)}
	}
	pool, err := cli.Open(ctx, false)
	if err != nil {
		return err
	}
	defer pool.Close()
	tok, secret, err := control.IssueToken(ctx, pool, operator(), tokens.NewToken{Owner: *owner, Scope: *scope, Name: *name, TTL: *ttl})
	if err != nil {
		return err
	}
	expires := "never expires"
	if tok.ExpiresAt != nil {
		expires = "expires " + tok.ExpiresAt.UTC().Format(time.RFC3339)
	}
	fmt.Fprintf(env.Stderr, "token %d for %s (scope %s, %s); it is shown once, store it now:\n", tok.ID, tok.Owner, tok.Scope, expires)
	fmt.Fprintf(env.Stdout, "%s\n", secret)
	return nil
}

// tokenList is `api token list`.
func tokenList(ctx context.Context, env *cli.Env) error {
	fs := flag.NewFlagSet("token list", flag.ContinueOnError)
	owner := fs.String("owner", "", "only the tokens of this `owner`")
	if err := env.Parse(fs, env.Args); err != nil {
		return err
	}
	pool, err := cli.Open(ctx, false)
	if err != nil {
		return err
	}
	defer pool.Close()
	list, err := tokens.List(ctx, pool, *owner)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tOWNER\tSCOPE\tNAME\tPREFIX\tCREATED\tLAST USED\tSTATE")
	for _, t := range list {
		state := "active"
		switch {
		case t.RevokedAt != nil:
			state = "revoked " + ts(t.RevokedAt)
		case t.ExpiresAt != nil && time.Now().After(*t.ExpiresAt):
			state = "expired " + ts(t.ExpiresAt)
		case t.ExpiresAt != nil:
			state = "active until " + ts(t.ExpiresAt)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s…\t%s\t%s\t%s\n", t.ID, t.Owner, t.Scope, t.Name, t.Prefix, ts(&t.CreatedAt), ts(t.LastUsedAt), state)
	}
	return tw.Flush()
}

// tokenRevoke is `api token revoke ID`.
func tokenRevoke(ctx context.Context, env *cli.Env) error {
	fs := flag.NewFlagSet("token revoke", flag.ContinueOnError)
	if err := env.Parse(fs, env.Args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return &cli.UsageError{Msg: "token revoke needs the token's ID (see token list)"}
	}
	id, err := strconv.ParseInt(fs.Arg(0), 10, 64)
	if err != nil {
		return &cli.UsageError{Msg: fmt.Sprintf("token revoke: %q is not a token id", fs.Arg(0))}
	}
	pool, err := cli.Open(ctx, false)
	if err != nil {
		return err
	}
	defer pool.Close()
	tok, err := control.RevokeToken(ctx, pool, operator(), id)
	if err != nil {
		return err
	}
	fmt.Fprintf(env.Stdout, "token %d of %s revoked at %s\n", tok.ID, tok.Owner, ts(tok.RevokedAt))
	return nil
}

func ts(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

func secretKey(_ context.Context, env *cli.Env) error {
	fs := flag.NewFlagSet("secret-key", flag.ContinueOnError)
	id := fs.String("id", "k"+time.Now().UTC().Format("20060102"), "the key's `id` (letters, digits, - and _)")
	if err := env.Parse(fs, env.Args); err != nil {
		return err
	}
	k, err := secrets.NewKey(*id)
	if err != nil {
		return err
	}
	if _, err := secrets.Parse(k); err != nil {
		return &cli.UsageError{Msg: err.Error()}
	}
	fmt.Fprintln(env.Stdout, k)
	return nil
}

func printOpenAPI(_ context.Context, env *cli.Env) error {
	if err := env.NoArgs("openapi"); err != nil {
		return err
	}
	doc, err := api.Document()
	if err != nil {
		return errors.Join(errors.New("build the OpenAPI document"), err)
	}
	_, err = env.Stdout.Write(doc)
	return err
}
