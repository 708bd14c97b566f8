package syncer

import (
	"context"
	"fmt"

	"github.com/lookout-dev/lookout/internal/definitions"
)

// Apply brings the syncer's sources to the definitions of d (a
// definitions.Follower's delta): it builds the sources added or changed,
// registers them in the sources table (a new source is due at once,
// unless d is the first load; a paused definition is registered paused),
// and stops claiming the sources removed and the orphaned ones (a file
// source that left the directory while users still watch it: kept in
// the definitions, never run until a file declares it again). A
// definition that does not build is logged and left out, and the syncer
// keeps running the source as it was built before. It then wakes the
// polling loop.
func (s *Syncer) Apply(ctx context.Context, d *definitions.Delta) error {
	for _, err := range d.Invalid {
		s.logger.Error("source definition refused; the source runs as it was", "error", err)
	}
	var built []*source
	var orphaned []string
	for _, def := range d.Sources {
		if def.Row.Orphaned() {
			orphaned = append(orphaned, def.Row.Name)
			continue
		}
		src, err := s.buildFor(def.Config, def.Row.ManagedBy == definitions.ManagedByAPI)
		if err != nil {
			s.logger.Error("source definition refused; the source runs as it was", "source", def.Row.Name,
				"managed_by", def.Row.ManagedBy, "error", s.conf.Redactor.Error(err))
			continue
		}
		// Built, the connector holds its settings and the source what it
		// reads of the definition: no parsed YAML is kept (a change of
		// the definition comes parsed anew), nor, without task watches,
		// the parsed definition.
		def.Config.Release()
		src.paused = def.Row.Paused
		built = append(built, src)
	}
	if len(built) > 0 {
		if err := s.register(ctx, built, !d.Full); err != nil {
			return fmt.Errorf("apply definitions (version %d): %w", d.To, err)
		}
	}
	s.mu.Lock()
	if d.Full {
		for _, src := range s.sources {
			src.retired = true
		}
	}
	for _, src := range built {
		s.sources[src.name] = src
		s.conf.Metrics.InitConnector(src.settings.connector)
	}
	for _, name := range d.RemovedSources {
		if src := s.sources[name]; src != nil && !containsSource(d, name) {
			src.retired = true
		}
	}
	for _, name := range orphaned {
		if src := s.sources[name]; src != nil {
			src.retired = true
		}
	}
	s.renameLocked()
	s.mu.Unlock()
	switch {
	case len(d.RemovedSources) > 0 || len(orphaned) > 0:
		// The rows of sources no longer defined stay active in the table:
		// claim only the defined ones.
		s.restrict.Store(true)
	case d.Full:
		// Every source is registered: the table says whether it holds
		// others (sources no longer defined, or another configuration's).
		if err := s.lookForOthers(ctx); err != nil {
			s.restrict.Store(true)
			s.logger.Warn("claims limited to the defined sources", "error", err)
		}
	}
	if d.Full {
		s.loaded.Store(true) // every source built is registered: Start registers none
	}
	if n := len(built) + len(d.RemovedSources) + len(orphaned); n > 0 && !d.Full {
		s.logger.Info("definitions applied", "version", d.To, "sources_changed", len(built), "sources_removed", len(d.RemovedSources),
			"sources_orphaned", orphaned)
	}
	s.Wake()
	return nil
}

// containsSource reports whether d (re)defines source name: a source
// deleted and created again within one delta stays.
func containsSource(d *definitions.Delta, name string) bool {
	for _, def := range d.Sources {
		if def.Row.Name == name {
			return true
		}
	}
	return false
}
