package evaluator

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/definitions"
	"github.com/lookout-dev/lookout/internal/watchspec"
)

// index holds the compiled watches by source: a change is evaluated
// against the watches of its source only, whatever the number of
// watches. The slices are never changed in place (a change to the
// definitions replaces a source's slice), so a batch may keep the slice
// it read while the definitions move on.
type index struct {
	mu       sync.RWMutex
	bySource map[string][]*watchspec.Watch
	sources  map[string]*config.Source
	// broken are the definitions this evaluator cannot build and had no
	// earlier version of, by source, then watch ("" for the source
	// itself): the changes of their sources wait (unbuilt).
	broken map[string]map[string]error
}

func newIndex() *index {
	return &index{bySource: map[string][]*watchspec.Watch{}, sources: map[string]*config.Source{}, broken: map[string]map[string]error{}}
}

// unbuilt returns why the watches of source cannot all be built, or nil.
// The changes of such a source are not evaluated: a watch missing from
// the evaluation would never see them.
func (ix *index) unbuilt(source string) error {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return unbuiltErr(source, ix.broken[source])
}

func unbuiltErr(source string, broken map[string]error) error {
	if len(broken) == 0 {
		return nil
	}
	var errs []error
	for _, w := range slices.Sorted(maps.Keys(broken)) {
		errs = append(errs, broken[w])
	}
	return fmt.Errorf("the watches of source %s cannot be built by this evaluator: %w", source, errors.Join(errs...))
}

// markBroken records that watch of source (or the source, watch "")
// cannot be built.
func (ix *index) markBroken(source, watch string, err error) {
	if ix.broken[source] == nil {
		ix.broken[source] = map[string]error{}
	}
	ix.broken[source][watch] = err
}

// mend forgets that watch of source could not be built.
func (ix *index) mend(source, watch string) {
	delete(ix.broken[source], watch)
	if len(ix.broken[source]) == 0 {
		delete(ix.broken, source)
	}
}

// of returns the watches of source.
func (ix *index) of(source string) []*watchspec.Watch {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return ix.bySource[source]
}

// source returns the configuration of source, or nil.
func (ix *index) source(name string) *config.Source {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return ix.sources[name]
}

// volatile returns the volatile fields of source.
func (ix *index) volatile(name string) []string {
	if s := ix.source(name); s != nil {
		return s.Volatile
	}
	return nil
}

// each calls fn for every source and its watches.
func (ix *index) each(fn func(source string, ws []*watchspec.Watch)) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	for s, ws := range ix.bySource {
		fn(s, ws)
	}
}

// count returns the number of watches loaded.
func (ix *index) count() int {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	n := 0
	for _, ws := range ix.bySource {
		n += len(ws)
	}
	return n
}

// compile builds watch i of src, owned by owner (watchspec.Compile with
// the evaluator's model settings).
func (e *Evaluator) compile(src *config.Source, i int, wc *config.Watch, owner string) (*watchspec.Watch, error) {
	return watchspec.Compile(src, i, wc, owner, e.conf.Model)
}

// Follow makes the evaluator check the definitions' version after each
// claim and catch up through f before it judges: a change committed after
// a change to the definitions is judged with it. f applies its deltas
// with Apply.
func (e *Evaluator) Follow(f *definitions.Follower) { e.follower = f }

// Apply brings the watches to the definitions of d (a
// definitions.Follower's delta): sources and watches added or changed are
// compiled and used for the next batch, paused watches are left out,
// removed ones dropped. A definition that does not parse or compile is
// logged and the watch keeps its previous version, if it had one; if it
// had none, the changes of its source are not evaluated until it can be
// built (they stay pending with eval_error saying why, and Unbuilt
// reports it): evaluating them without the watch would settle them
// without the watch's decision, for good.
func (e *Evaluator) Apply(_ context.Context, d *definitions.Delta) error {
	invalid := map[string][]*definitions.InvalidError{}
	for _, err := range d.Invalid {
		e.logger.Error("watch definition refused; the watch runs as it was, and without an earlier version its source's changes wait", "error", err)
		var ie *definitions.InvalidError
		if errors.As(err, &ie) {
			invalid[ie.Source] = append(invalid[ie.Source], ie)
		}
	}
	ix := e.index
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if d.Full {
		for name := range ix.bySource {
			e.composer.RemoveSource(name)
		}
		ix.bySource, ix.sources = map[string][]*watchspec.Watch{}, map[string]*config.Source{}
		ix.broken = map[string]map[string]error{}
	}
	for _, name := range d.RemovedSources {
		delete(ix.bySource, name)
		delete(ix.sources, name)
		delete(ix.broken, name)
		e.composer.RemoveSource(name)
	}
	for _, rw := range d.RemovedWatches {
		ix.bySource[rw[0]] = without(ix.bySource[rw[0]], rw[1])
		ix.mend(rw[0], rw[1])
		e.composer.RemoveWatch(rw[0], rw[1])
	}
	for _, def := range d.Sources {
		src := def.Config
		old := map[string]*watchspec.Watch{}
		for _, w := range ix.bySource[src.Name] {
			old[w.Config.Name] = w
		}
		delete(ix.broken, src.Name)
		var ws []*watchspec.Watch
		for i, wc := range src.Watches {
			row := def.Watches[i]
			w, err := e.apply(src, i, wc, row, old[wc.Name])
			if w != nil {
				ws = append(ws, w)
			} else if err != nil {
				ix.markBroken(src.Name, wc.Name, err)
			}
		}
		// A watch of the source that did not parse runs as it was.
		for _, ie := range invalid[src.Name] {
			if w := old[ie.Watch]; ie.Watch != "" && w != nil {
				ws = append(ws, w)
			}
		}
		// Compiled, the watches hold what they run: the source keeps its
		// typed settings, not the parsed YAML of its connector block, its
		// definition's JSON or its key lines (at 100,000 watches over
		// 1,000 files, a third of the heap at ready: docs/benchmarks.md,
		// (13) on branch eval-start). A change comes parsed anew.
		src.Release()
		ix.sources[src.Name] = src
		ix.bySource[src.Name] = ws
	}
	for _, def := range d.Watches {
		name := def.Row.Name
		ws := ix.bySource[def.Row.Source]
		var prev *watchspec.Watch
		for _, w := range ws {
			if w.Config.Name == name {
				prev = w
			}
		}
		ws = without(ws, name)
		ix.mend(def.Row.Source, name)
		w, err := e.apply(def.Source, 0, def.Config, def.Row, prev)
		if w != nil {
			ws = append(ws, w)
		} else if err != nil {
			ix.markBroken(def.Row.Source, name, err)
		}
		ix.bySource[def.Row.Source] = ws
		if ix.sources[def.Row.Source] == nil {
			def.Source.Release()
			ix.sources[def.Row.Source] = def.Source
		}
	}
	// What did not parse and has no earlier version here holds its
	// source's changes back.
	for source, ies := range invalid {
		for _, ie := range ies {
			switch {
			case ie.Watch == "" && ix.sources[source] == nil:
				ix.markBroken(source, "", ie)
			case ie.Watch != "" && !slices.ContainsFunc(ix.bySource[source], func(w *watchspec.Watch) bool { return w.Config.Name == ie.Watch }):
				ix.markBroken(source, ie.Watch, ie)
			}
		}
	}
	for source, broken := range ix.broken {
		e.logger.Error("changes of the source wait: a watch cannot be built", "source", source, "error", unbuiltErr(source, broken))
	}
	if !d.Full && len(d.Sources)+len(d.Watches)+len(d.RemovedSources)+len(d.RemovedWatches) > 0 {
		e.logger.Info("definitions applied", "version", d.To, "sources_changed", len(d.Sources), "watches_changed", len(d.Watches),
			"sources_removed", len(d.RemovedSources), "watches_removed", len(d.RemovedWatches))
	}
	return nil
}

// Unbuilt returns why the watches of some sources cannot be built, whose
// changes wait (see Apply), or nil: the evaluator's /readyz warning.
func (e *Evaluator) Unbuilt() error {
	ix := e.index
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	var errs []error
	for _, source := range slices.Sorted(maps.Keys(ix.broken)) {
		errs = append(errs, unbuiltErr(source, ix.broken[source]))
	}
	return errors.Join(errs...)
}

// apply compiles one watch definition; it returns the watch to use: the
// new one, the previous one when the new one does not compile, or nil
// for a paused watch or one that does not compile and had no previous
// version (then with the error).
func (e *Evaluator) apply(src *config.Source, i int, wc *config.Watch, row definitions.Watch, prev *watchspec.Watch) (*watchspec.Watch, error) {
	if row.Paused {
		e.composer.RemoveWatch(src.Name, wc.Name)
		return nil, nil
	}
	w, err := e.compile(src, i, wc, row.Owner)
	if err == nil {
		err = e.composer.SetWatch(src, i, wc)
	}
	if err != nil {
		e.logger.Error("watch definition refused; the watch runs as it was", "source", src.Name, "watch", wc.Name,
			"managed_by", row.ManagedBy, "error", err)
		return prev, fmt.Errorf("watch %s of source %s (%s): %w", wc.Name, src.Name, row.ManagedBy, err)
	}
	return w, nil
}

// without returns ws without the watch called name (a new slice).
func without(ws []*watchspec.Watch, name string) []*watchspec.Watch {
	out := make([]*watchspec.Watch, 0, len(ws))
	for _, w := range ws {
		if w.Config.Name != name {
			out = append(out, w)
		}
	}
	return out
}
