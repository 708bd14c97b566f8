// Package cli is the command-line plumbing the syncer and evaluator binaries
// share: flag parsing, configuration and logger setup, the database, and the
// commands both have (migrate, check).
package cli

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/db"
	"github.com/lookout-dev/lookout/internal/redact"
)

// Env is what a command runs with.
type Env struct {
	// Name is the binary's name (syncer, evaluator, api) and Command the
	// command run (run, once, apply, ...).
	Name, Command string
	// ConfigDir is --config or LOOKOUT_CONFIG.
	ConfigDir string
	// Args are the command's arguments after its name.
	Args   []string
	Stdout io.Writer
	Stderr io.Writer
	// LogFormat overrides lookout.yaml's log.format when set.
	LogFormat string
	// Uses is what the binary uses of the sources: Load and the
	// reloader read the directory with it (config.LoadFor). Defaults to
	// config.UsesAll; the evaluator sets config.UsesWatches.
	Uses config.Uses
}

// Command is one subcommand.
type Command struct {
	Name    string
	Summary string
	Run     func(ctx context.Context, env *Env) error
}

// UsageError is a wrong invocation; Main prints usage and exits 2.
type UsageError struct{ Msg string }

func (e *UsageError) Error() string { return e.Msg }

// Exit codes of the once commands (docs in README.md): the command ran but
// some of its work failed, or it could not run (configuration, database).
const (
	ExitFailures = 1
	ExitSetup    = 2
)

// ExitError is a command's error with the exit code Main returns for it.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string { return e.Err.Error() }

// Unwrap returns the command's error.
func (e *ExitError) Unwrap() error { return e.Err }

// Main parses os.Args for the binary name and runs the chosen command with
// a context cancelled by SIGINT or SIGTERM. It returns the exit code: 0 on
// success, 1 on failure, 2 on a usage error, or an ExitError's code.
func Main(name, about string, commands []Command) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return run(ctx, name, about, commands, os.Args[1:], os.Stdout, os.Stderr)
}

// Run is Main with explicit arguments, outputs and context, for tests.
func Run(ctx context.Context, name, about string, commands []Command, args []string, stdout, stderr io.Writer) int {
	return run(ctx, name, about, commands, args, stdout, stderr)
}

func run(ctx context.Context, name, about string, commands []Command, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	env := &Env{Name: name, Stdout: stdout, Stderr: stderr}
	fs.StringVar(&env.ConfigDir, "config", cmp.Or(os.Getenv("LOOKOUT_CONFIG"), "config"), "configuration `directory` (lookout.yaml, sources/*.yaml); env LOOKOUT_CONFIG")
	fs.StringVar(&env.LogFormat, "log-format", os.Getenv("LOOKOUT_LOG_FORMAT"), "log format, text or json (overrides lookout.yaml); env LOOKOUT_LOG_FORMAT")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "%s — %s\n\nUsage: %s [flags] <command> [args]\n\nCommands:\n", name, about, name)
		sorted := append([]Command(nil), commands...)
		sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
		for _, c := range sorted {
			fmt.Fprintf(stderr, "  %-12s %s\n", c.Name, c.Summary)
		}
		fmt.Fprintf(stderr, "\nFlags:\n")
		fs.PrintDefaults()
		fmt.Fprintf(stderr, "\nThe database is DATABASE_URL.\n")
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return 2
	}
	var cmd *Command
	for i := range commands {
		if commands[i].Name == fs.Arg(0) {
			cmd = &commands[i]
		}
	}
	if cmd == nil {
		fmt.Fprintf(stderr, "%s: unknown command %q\n\n", name, fs.Arg(0))
		fs.Usage()
		return 2
	}
	env.Args = fs.Args()[1:]
	env.Command = cmd.Name
	if err := cmd.Run(ctx, env); err != nil {
		var ue *UsageError
		if errors.As(err, &ue) {
			fmt.Fprintf(stderr, "%s %s: %s\n", name, cmd.Name, ue.Msg)
			return 2
		}
		if errors.Is(err, context.Canceled) && ctx.Err() != nil {
			return 0
		}
		fmt.Fprintf(stderr, "%s %s: %s\n", name, cmd.Name, indent(err.Error()))
		if ee := (*ExitError)(nil); errors.As(err, &ee) {
			return ee.Code
		}
		return 1
	}
	return 0
}

func indent(s string) string {
	if !strings.Contains(s, "\n") {
		return s
	}
	return "\n  " + strings.ReplaceAll(s, "\n", "\n  ")
}

// Load reads the configuration directory as the binary uses it (Uses).
func (e *Env) Load() (*config.Config, error) {
	cfg, err := config.LoadFor(e.ConfigDir, e.Uses)
	if err != nil {
		return nil, fmt.Errorf("configuration %s: %w", e.ConfigDir, err)
	}
	return cfg, nil
}

// Logger builds the logger lookout.yaml (or --log-format) asks for. It
// redacts the configuration's secrets (the values of ${ENV} references) in
// every message and string attribute.
func (e *Env) Logger(cfg *config.Config, component string) *slog.Logger {
	format := cmp.Or(e.LogFormat, cfg.Global.Log.Format)
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.Global.Log.Level))
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler
	if format == "json" {
		h = slog.NewJSONHandler(e.Stderr, opts)
	} else {
		h = slog.NewTextHandler(e.Stderr, opts)
	}
	return slog.New(redact.NewHandler(h, cfg.Global.Redactor())).With("service", component)
}

// Open connects to DATABASE_URL and, when migrate is set, applies pending
// migrations first (the daemons do this on start).
func Open(ctx context.Context, migrate bool) (*pgxpool.Pool, error) {
	return OpenSized(ctx, migrate, 0)
}

// OpenSized is Open with a pool of at least minConns connections (unless
// DATABASE_URL sets pool_max_conns).
func OpenSized(ctx context.Context, migrate bool, minConns int32) (*pgxpool.Pool, error) {
	url, err := db.URLFromEnv()
	if err != nil {
		return nil, err
	}
	pool, err := db.OpenSized(ctx, url, minConns)
	if err != nil {
		return nil, err
	}
	if migrate {
		if _, err := db.Migrate(ctx, pool); err != nil {
			pool.Close()
			return nil, err
		}
	}
	return pool, nil
}

// MigrateCommand applies migrations, or with --force N records version N
// after a manual fix of a dirty database, or with --status prints the state.
func MigrateCommand() Command {
	return Command{
		Name:    "migrate",
		Summary: "apply database migrations (--status to show, --force N after a manual fix)",
		Run: func(ctx context.Context, env *Env) error {
			fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
			fs.SetOutput(env.Stderr)
			status := fs.Bool("status", false, "print the applied and latest versions, apply nothing")
			force := fs.String("force", "", "record `version` as applied without running anything (after fixing a dirty database)")
			if err := fs.Parse(env.Args); err != nil {
				return &UsageError{Msg: err.Error()}
			}
			pool, err := Open(ctx, false)
			if err != nil {
				return err
			}
			defer pool.Close()
			switch {
			case *status:
				cur, dirty, latest, err := db.MigrationStatus(ctx, pool)
				if err != nil {
					return err
				}
				fmt.Fprintf(env.Stdout, "applied %d, latest %d, dirty %t\n", cur, latest, dirty)
				return nil
			case *force != "":
				v, err := strconv.Atoi(*force)
				if err != nil {
					return &UsageError{Msg: fmt.Sprintf("--force wants a version number, not %q", *force)}
				}
				if err := db.Force(ctx, pool, v); err != nil {
					return err
				}
				fmt.Fprintf(env.Stdout, "recorded version %d\n", v)
				return nil
			}
			v, err := db.Migrate(ctx, pool)
			if err != nil {
				return err
			}
			fmt.Fprintf(env.Stdout, "database at migration version %d\n", v)
			return nil
		},
	}
}

// CheckCommand validates the configuration with build, exiting non-zero
// with every problem, each naming file and line.
func CheckCommand(build func(*config.Config) error) Command {
	return Command{
		Name:    "check",
		Summary: "validate the configuration directory and exit (non-zero on any problem)",
		Run: func(ctx context.Context, env *Env) error {
			cfg, err := env.Load()
			if err != nil {
				return err
			}
			if err := build(cfg); err != nil {
				return fmt.Errorf("configuration %s: %w", env.ConfigDir, err)
			}
			watches := 0
			for _, s := range cfg.Sources {
				watches += len(s.Watches)
			}
			fmt.Fprintf(env.Stdout, "configuration %s is valid: %d sources, %d watches, %d sinks\n",
				env.ConfigDir, len(cfg.Sources), watches, len(cfg.Global.Sinks))
			return nil
		},
	}
}
