// Package reload reloads the configuration directory of a running daemon
// without a restart: on a change to lookout.yaml or sources/ (fsnotify,
// debounced) and on SIGHUP, it validates the whole directory first (the
// binary's `check`); an invalid directory is refused and the running
// configuration stays (an ERROR log naming file:line: key, the metric
// lookout_config_reloads_total{outcome="refused"}, and a warning in
// /readyz); a valid one is applied to the definitions as a diff, which
// the daemons follow. Changes to lookout.yaml itself are validated but
// need a restart (docs/config.md#reload).
//
// A directory that differs from the applied generation while this daemon
// was not in step with it (it started with another directory, or was
// refused already) is not applied (definitions.DivergedError): the daemon
// runs on the applied generation and its /readyz warns, naming both
// hashes, until the directories agree again or `apply --force` applies
// its directory (docs/config.md#generations).
package reload

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/definitions"
	"github.com/lookout-dev/lookout/internal/health"
	"github.com/lookout-dev/lookout/internal/metrics"
	"github.com/lookout-dev/lookout/internal/service"
	"github.com/lookout-dev/lookout/internal/testsignal"
)

// DebounceDefault is how long the reloader waits after a file event for
// more before it reloads (an editor writes a file in several steps).
const DebounceDefault = 250 * time.Millisecond

// Config configures a Reloader.
type Config struct {
	// Dir is the configuration directory. Required.
	Dir string
	// Load reads and validates the directory the way the binary's check
	// does (config.Load, then its build). Required.
	Load func() (*config.Config, error)
	// Apply applies a valid directory (definitions.Apply) with opts (the
	// reloader sets Base). Required.
	Apply func(ctx context.Context, cfg *config.Config, opts definitions.ApplyOptions) (definitions.Diff, error)
	// Applied reads the applied generation (definitions.AppliedGeneration):
	// the readiness check asks it while this daemon's directory diverges.
	// Required.
	Applied func(ctx context.Context) (*definitions.Generation, error)
	// Start is the outcome of the daemon's start apply: the hash of its
	// directory (the Base of the first reload) and, when it was refused,
	// the divergence /readyz reports. Defaults to the zero Start.
	Start Start
	// Binary names the binary in messages ("syncer"). Defaults to
	// "lookout".
	Binary string
	// Debounce is the quiet time after a file event before reloading.
	// Defaults to DebounceDefault.
	Debounce time.Duration
	// SIGHUP reloads when set. Defaults to false (tests).
	SIGHUP bool
	// Metrics counts reloads. Defaults to nil: nothing is recorded.
	Metrics *metrics.Metrics
}

// Start is the outcome of a daemon's start apply.
type Start struct {
	// Hash is the start directory's (definitions.DirectoryHash).
	Hash string
	// Diverged is set when the directory was refused at start.
	Diverged *definitions.DivergedError
}

// Result is the outcome of one reload.
type Result struct {
	Diff definitions.Diff
	// Err is why the directory was refused (or could not be applied).
	Err error
	// GlobalChanged is set when lookout.yaml differs from the one the
	// process started with: it is applied at the next restart.
	GlobalChanged bool
}

// Reloader is the service that reloads the configuration directory.
type Reloader struct {
	conf   Config
	logger *slog.Logger
	global []byte // lookout.yaml as the process started with it
	loop   service.Loop

	mu      sync.Mutex
	problem string
	// base is the hash of the directory loaded last (the Base of the
	// next apply); diverged is set while it was refused as divergent.
	base     string
	diverged *definitions.DivergedError

	// testSignals fire in tests that Init them.
	testSignals struct {
		reloaded testsignal.Signal[Result]
	}
}

// New returns a reloader; it reads lookout.yaml now, as the reference
// for changes that need a restart.
func New(conf Config, logger *slog.Logger) *Reloader {
	if conf.Debounce <= 0 {
		conf.Debounce = DebounceDefault
	}
	if conf.Binary == "" {
		conf.Binary = "lookout"
	}
	r := &Reloader{conf: conf, logger: logger.With("component", "reload"), base: conf.Start.Hash, diverged: conf.Start.Diverged}
	r.global, _ = os.ReadFile(filepath.Join(conf.Dir, config.GlobalFile))
	conf.Metrics.InitConfig()
	return r
}

// Check is the advisory readiness check "config": it reports the last
// refused reload, a lookout.yaml waiting for a restart, or a directory
// that differs from the applied generation (naming both hashes: refused
// at start or at a reload, or replaced since by another directory), without
// making the process unready: it runs on its last valid configuration,
// or on the applied generation.
func (r *Reloader) Check() health.Check {
	return health.Check{Name: "config", Advisory: true, Run: func(ctx context.Context) error {
		r.mu.Lock()
		problem, base, de := r.problem, r.base, r.diverged
		r.mu.Unlock()
		var problems []string
		if base != "" && r.conf.Applied != nil {
			g, err := r.conf.Applied(ctx)
			switch {
			case err != nil:
				problems = append(problems, "read the applied configuration generation: "+err.Error())
			case g != nil && g.Hash != base:
				problems = append(problems, r.divergence(base, g, de))
			case g != nil && de != nil:
				// In step again: another daemon or `apply --force`
				// applied this directory.
				r.mu.Lock()
				if r.diverged == de {
					r.diverged = nil
				}
				r.mu.Unlock()
			}
		}
		if problem != "" {
			problems = append(problems, problem)
		}
		if len(problems) > 0 {
			return errors.New(strings.Join(problems, "; "))
		}
		return nil
	}}
}

// divergence says that this daemon's directory (hash) is not the applied
// generation g; de is the refusal of its apply, if there was one.
func (r *Reloader) divergence(hash string, g *definitions.Generation, de *definitions.DivergedError) string {
	what := "not applied"
	would := ""
	if de != nil && de.Hash == hash {
		would = " (it would " + wouldString(de.Diff) + ")"
	} else {
		what = "replaced"
	}
	return fmt.Sprintf("configuration directory %s %s: its hash %s differs from the applied generation %d (hash %s, applied by %s at %s); "+
		"this daemon runs on generation %d. Run `%s --config %s apply --force` to apply this directory%s, or give this daemon the applied directory",
		r.conf.Dir, what, definitions.Short(hash), g.Number, definitions.Short(g.Hash), g.AppliedBy,
		g.AppliedAt.UTC().Format(time.RFC3339), g.Number, r.conf.Binary, r.conf.Dir, would)
}

func wouldString(d definitions.Diff) string {
	if d.Empty() {
		return "change no definition"
	}
	return d.String()
}

// Start watches the directory (and SIGHUP) in the background.
func (r *Reloader) Start(ctx context.Context) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch the configuration directory: %w", err)
	}
	for _, d := range []string{r.conf.Dir, filepath.Join(r.conf.Dir, config.SourcesDir)} {
		if err := w.Add(d); err != nil {
			if d != r.conf.Dir && errors.Is(err, os.ErrNotExist) {
				// No sources/ (yet): valid; its creation is an event in
				// the directory, and rewatchSources watches it then.
				continue
			}
			w.Close()
			return fmt.Errorf("watch %s: %w", d, err)
		}
	}
	hup := make(chan os.Signal, 1)
	if r.conf.SIGHUP {
		signal.Notify(hup, syscall.SIGHUP)
	}
	return r.loop.Start(ctx, func(ctx context.Context) error {
		defer w.Close()
		defer signal.Stop(hup)
		return r.run(ctx, w, hup)
	})
}

// Stop stops watching and waits.
func (r *Reloader) Stop() error { return r.loop.Stop() }

// Done is closed when the reloader ended (for service.Supervisor).
func (r *Reloader) Done() <-chan struct{} { return r.loop.Done() }

func (r *Reloader) run(ctx context.Context, w *fsnotify.Watcher, hup <-chan os.Signal) error {
	debounce := time.NewTimer(time.Hour)
	debounce.Stop()
	defer debounce.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return nil
			}
			if r.relevant(ev.Name) {
				r.rewatchSources(w, ev.Name)
				debounce.Reset(r.conf.Debounce)
			}
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			r.logger.Warn("watch the configuration directory", "error", err)
		case <-hup:
			r.logger.Info("SIGHUP: reloading the configuration directory", "dir", r.conf.Dir)
			debounce.Stop()
			r.Reload(ctx)
		case <-debounce.C:
			r.Reload(ctx)
		}
	}
}

// kubeletData is the symlink a Kubernetes ConfigMap volume swaps on an
// update: lookout.yaml and sources are symlinks through it, so an update
// replaces their targets without writing the files in place.
const kubeletData = "..data"

// rewatchSources watches sources/ again after the folder itself was
// replaced (a ConfigMap update swaps ..data, so the old target directory
// and the watch on it are gone; an editor or `mv` may replace it too).
// Watching the same path twice is harmless.
func (r *Reloader) rewatchSources(w *fsnotify.Watcher, name string) {
	rel, err := filepath.Rel(r.conf.Dir, name)
	if err != nil || (rel != kubeletData && rel != config.SourcesDir) {
		return
	}
	if err := w.Add(filepath.Join(r.conf.Dir, config.SourcesDir)); err != nil && !errors.Is(err, os.ErrNotExist) {
		r.logger.Warn("watch the configuration's sources folder again", "error", err)
	}
}

// relevant reports whether a file event concerns the configuration:
// lookout.yaml, a .yaml/.yml file of sources/ (or the folder itself), or
// the ..data symlink of a Kubernetes ConfigMap volume.
func (r *Reloader) relevant(name string) bool {
	rel, err := filepath.Rel(r.conf.Dir, name)
	if err != nil {
		return false
	}
	if rel == config.GlobalFile || rel == config.SourcesDir || rel == kubeletData {
		return true
	}
	dir, file := filepath.Split(rel)
	return filepath.Clean(dir) == config.SourcesDir && !strings.HasPrefix(file, ".") &&
		(strings.HasSuffix(file, ".yaml") || strings.HasSuffix(file, ".yml"))
}

// Reload validates the directory and applies it when valid. It logs,
// counts and remembers the outcome, and returns it.
func (r *Reloader) Reload(ctx context.Context) Result {
	res := r.reload(ctx)
	now := time.Now()
	var problems []string
	var de *definitions.DivergedError
	switch {
	case errors.As(res.Err, &de):
		r.conf.Metrics.ConfigReload("refused", now)
		r.logger.Error("configuration directory not applied: it differs from the applied generation; the daemon runs on the applied one",
			"dir", r.conf.Dir, "hash", de.Hash, "applied_generation", de.Applied.Number, "applied_hash", de.Applied.Hash,
			"applied_by", de.Applied.AppliedBy, "error", res.Err)
	case res.Err != nil:
		r.conf.Metrics.ConfigReload("refused", now)
		r.logger.Error("configuration reload refused; the running configuration stays", "dir", r.conf.Dir, "error", res.Err)
		problems = append(problems, "configuration reload refused (the last valid configuration runs): "+res.Err.Error())
	case res.Diff.Empty():
		r.conf.Metrics.ConfigReload("unchanged", now)
		r.logger.Debug("configuration reloaded: no change to the definitions", "dir", r.conf.Dir, "version", res.Diff.Version)
	default:
		r.conf.Metrics.ConfigReload("applied", now)
		r.logger.Info("configuration reloaded", "dir", r.conf.Dir, "version", res.Diff.Version, "generation", res.Diff.Generation,
			"added", res.Diff.Added, "changed", res.Diff.Changed, "removed", res.Diff.Removed,
			"orphaned", res.Diff.Orphaned, "adopted", res.Diff.Adopted)
	}
	if res.GlobalChanged {
		msg := config.GlobalFile + " changed since the process started: its settings (sinks, defaults, ollama, ...) apply at the next restart"
		if res.Err == nil {
			r.logger.Warn(msg, "dir", r.conf.Dir)
		}
		problems = append(problems, msg)
	}
	r.mu.Lock()
	r.problem = strings.Join(problems, "; ")
	switch {
	case de != nil:
		r.base, r.diverged = de.Hash, de
	case res.Err == nil:
		r.base, r.diverged = res.Diff.Hash, nil
	}
	r.mu.Unlock()
	r.testSignals.reloaded.Signal(res)
	return res
}

func (r *Reloader) reload(ctx context.Context) Result {
	var res Result
	global, err := os.ReadFile(filepath.Join(r.conf.Dir, config.GlobalFile))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		res.Err = fmt.Errorf("read %s: %w", config.GlobalFile, err)
		return res
	}
	res.GlobalChanged = !bytes.Equal(global, r.global)
	cfg, err := r.conf.Load()
	if err != nil {
		res.Err = err
		return res
	}
	r.mu.Lock()
	base := r.base
	r.mu.Unlock()
	res.Diff, res.Err = r.conf.Apply(ctx, cfg, definitions.ApplyOptions{Base: base})
	return res
}
