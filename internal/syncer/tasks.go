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
// the syncer runs the source (defined, not retired) and the source has
// task watches; ok reports whether its connector can act on tasks
// (connectors.Actor). A source without task watches keeps no parsed
// definition: nil.
func (s *Syncer) TaskSource(name string) (*config.Source, connectors.Actor, bool) {
	src := s.source(name)
	if src == nil || src.retired {
		return nil, nil, false
	}
	if src.tasks == nil {
		return nil, nil, false
	}
	a, ok := src.conn.(connectors.Actor)
	return src.tasks, a, ok
}

// TaskSources lists the sources the syncer runs that have task watches.
func (s *Syncer) TaskSources() []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var names []string
	for name, src := range s.sources {
		if !src.retired && src.tasks != nil {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}
