package syncer

import (
	"slices"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/connectors"
)

// The syncer is what the task runner (internal/taskrunner) asks for the
// sources it acts on: their current definitions (they change at runtime
// with the definitions) and their connectors, whose requests spend the
// source's and the host's budgets like the runs do.

// TaskSource returns the definition of source name and its connector when
// the syncer runs the source (defined, not retired) and its connector
// can act on tasks (connectors.Actor).
func (s *Syncer) TaskSource(name string) (*config.Source, connectors.Actor, bool) {
	src := s.source(name)
	if src == nil || src.retired {
		return nil, nil, false
	}
	a, ok := src.conn.(connectors.Actor)
	return src.cfg, a, ok
}

// TaskSources lists the sources the syncer runs that have task watches.
func (s *Syncer) TaskSources() []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var names []string
	for name, src := range s.sources {
		if !src.retired && len(src.cfg.Tasks) > 0 {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}
