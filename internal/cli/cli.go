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
	"github.com/lookout-dev/lookout/internal/definitions"
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
	// KeepParse makes ApplyConfig keep the directory's parse it applied
	// for Env.Follow's first load, which takes those sources rather than
	// parse their rows again: the start parses each file once. Defaults
	// to false: ApplyConfig drops the parse.
	KeepParse bool
	// applied is the parse ApplyConfig kept (KeepParse) until Follow.
	applied *definitions.Applied

	// help is set when the command line asks for the command's help
	// (-h or --help among its arguments): Parse prints it and the
	// command does nothing.
	help bool
	// path and cmd are the command run, for the help ("token create";
	// a subcommand's cmd is its own).
	path string
	cmd  *Command
}

// Command is one subcommand, or a group of them (Commands).
type Command struct {
	Name    string
	Summary string
	// Usage is the synopsis of the command's flags and arguments in its
	// help; "[flags] [args]" when empty.
	Usage string
	// Run does the command's work. The first thing it does is parse its
	// arguments with Env.Parse (even a command without flags), and it
	// returns Parse's error: that is how `--help` prints the command's
	// help and does nothing else (docs/development.md, "--help never acts").
	Run func(ctx context.Context, env *Env) error
	// Commands, when set, are the command's subcommands (`api token
	// create`); the first argument chooses one, and Run is not used.
	Commands []Command
}

// ErrHelp is what Env.Parse returns when it printed the command's help
// instead of parsing: the command returns it at once, and Main exits 0.
var ErrHelp = errors.New("help printed")

// helpKey marks the context of a command run for its help: Open refuses
// it, so that a command that would act before parsing its arguments
// cannot touch the database.
type helpKey struct{}

// isHelpArg reports whether a is a request for help (the flag package's
// spellings).
func isHelpArg(a string) bool {
	switch a {
	case "-h", "--h", "-help", "--help":
		return true
	}
	return false
}

// wantsHelp reports whether args ask for help before a "--".
func wantsHelp(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		if isHelpArg(a) {
			return true
		}
	}
	return false
}

// Parse parses args with the command's flag set fs; a bad flag or
// argument is a UsageError. When the command line asked for help, it
// parses nothing: it prints the command's help (its summary and fs's
// flags) to Stdout and returns ErrHelp, which the command returns at once.
func (e *Env) Parse(fs *flag.FlagSet, args []string) error {
	if e.help {
		e.printHelp(fs)
		return ErrHelp
	}
	fs.SetOutput(e.Stderr)
	if err := fs.Parse(args); err != nil {
		return &UsageError{Msg: err.Error()}
	}
	return nil
}

// NoArgs parses args, which must hold no flag and no argument (a command
// that takes none still answers --help).
func (e *Env) NoArgs(name string) error {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	if err := e.Parse(fs, e.Args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return &UsageError{Msg: fmt.Sprintf("%s takes no arguments, got %q", name, fs.Args())}
	}
	return nil
}

// printHelp writes the help of the command being run, with fs's flags.
func (e *Env) printHelp(fs *flag.FlagSet) {
	w := e.Stdout
	synopsis := "[flags] [args]"
	if e.cmd != nil && e.cmd.Usage != "" {
		synopsis = e.cmd.Usage
	}
	fmt.Fprintf(w, "Usage: %s [global flags] %s %s\n\n", e.Name, e.path, synopsis)
	if e.cmd != nil && e.cmd.Summary != "" {
		fmt.Fprintf(w, "%s\n", e.cmd.Summary)
	}
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	if n > 0 {
		fmt.Fprintf(w, "\nFlags:\n")
		fs.SetOutput(w)
		fs.PrintDefaults()
	}
	fmt.Fprintf(w, "\nGlobal flags (before the command): --config DIR, --log-format text|json; see %s --help.\n", e.Name)
}

// printCommands writes the list of commands.
func printCommands(w io.Writer, commands []Command) {
	sorted := append([]Command(nil), commands...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	for _, c := range sorted {
		fmt.Fprintf(w, "  %-12s %s\n", c.Name, c.Summary)
	}
}

// UsageError is a wrong invocation; Main prints usage and exits 2.
type UsageError struct{ Msg string }

func (e *UsageError) Error() string { return e.Msg }

// Exit codes of the once commands (docs in README.md): the command ran but
// some of its work failed, or it could not run (configuration, database).
const (
	ExitFailures = 1
	ExitSetup    = 2
	// ExitTryLater is `syncer check`'s exit when the configuration is
	// valid but an upstream it reads answered "not now" (429, 5xx):
	// EX_TEMPFAIL of sysexits.h, run it again later.
	ExitTryLater = 75
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
	usage := func(w io.Writer) {
		fmt.Fprintf(w, "Usage: %s [flags] <command> [args]\n\n%s — %s\n\nCommands:\n", name, name, about)
		printCommands(w, commands)
		fmt.Fprintf(w, "\nFlags:\n")
		fs.SetOutput(w)
		fs.PrintDefaults()
		fs.SetOutput(stderr)
		fmt.Fprintf(w, "\n%s <command> --help prints a command's help. The database is DATABASE_URL.\n", name)
	}
	fs.Usage = func() {} // printed below, to stdout for --help
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usage(stdout)
			return 0
		}
		usage(stderr)
		return 2
	}
	if fs.NArg() == 0 {
		usage(stderr)
		return 2
	}
	// Find the command, and a group's subcommand.
	cmd, list, rest := (*Command)(nil), commands, fs.Args()
	var path []string
	for {
		cmd = nil
		for i := range list {
			if list[i].Name == rest[0] {
				cmd = &list[i]
			}
		}
		if cmd == nil {
			if len(path) == 0 {
				fmt.Fprintf(stderr, "%s: unknown command %q\n\n", name, rest[0])
				usage(stderr)
			} else {
				fmt.Fprintf(stderr, "%s %s: unknown command %q (want %s)\n", name, strings.Join(path, " "), rest[0], names(list))
			}
			return 2
		}
		path, rest = append(path, cmd.Name), rest[1:]
		if len(cmd.Commands) == 0 {
			break
		}
		if len(rest) == 0 || isHelpArg(rest[0]) {
			w, code := stderr, 2
			if len(rest) > 0 {
				w, code = stdout, 0
			}
			fmt.Fprintf(w, "Usage: %s [global flags] %s <command> [flags] [args]\n\n%s\n\nCommands:\n", name, strings.Join(path, " "), cmd.Summary)
			printCommands(w, cmd.Commands)
			return code
		}
		list = cmd.Commands
	}
	env.Args, env.path, env.cmd = rest, strings.Join(path, " "), cmd
	label := name + " " + env.path
	if wantsHelp(rest) {
		// The command runs only as far as its Parse, which prints the help.
		env.help = true
		ctx = context.WithValue(ctx, helpKey{}, true)
		if err := cmd.Run(ctx, env); !errors.Is(err, ErrHelp) {
			fmt.Fprintf(stderr, "%s: --help did not print the help (the command does not parse its arguments with Env.Parse first): %v\n", label, err)
			return 1
		}
		return 0
	}
	env.Command = env.path
	if err := cmd.Run(ctx, env); err != nil {
		var ue *UsageError
		if errors.As(err, &ue) {
			fmt.Fprintf(stderr, "%s: %s\n", label, ue.Msg)
			return 2
		}
		if errors.Is(err, context.Canceled) && ctx.Err() != nil {
			return 0
		}
		fmt.Fprintf(stderr, "%s: %s\n", label, indent(err.Error()))
		if ee := (*ExitError)(nil); errors.As(err, &ee) {
			return ee.Code
		}
		return 1
	}
	return 0
}

func names(list []Command) string {
	var out []string
	for _, c := range list {
		out = append(out, c.Name)
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

func indent(s string) string {
	if !strings.Contains(s, "\n") {
		return s
	}
	return "\n  " + strings.ReplaceAll(s, "\n", "\n  ")
}

// Load reads the configuration directory as the binary uses it (Uses).
func (e *Env) Load() (*config.Config, error) {
	if e.help {
		return nil, errors.New("--help loads no configuration")
	}
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
	if ctx.Value(helpKey{}) != nil {
		return nil, errors.New("--help opens no database")
	}
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
			status := fs.Bool("status", false, "print the applied and latest versions, apply nothing")
			force := fs.String("force", "", "record `version` as applied without running anything (after fixing a dirty database)")
			if err := env.Parse(fs, env.Args); err != nil {
				return err
			}
			if fs.NArg() > 0 {
				return &UsageError{Msg: fmt.Sprintf("migrate takes no arguments, got %q", fs.Args())}
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
			if err := env.NoArgs("check"); err != nil {
				return err
			}
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
