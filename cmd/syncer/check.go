package main

import (
	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/syncer"
	"github.com/lookout-dev/lookout/internal/taskrunner"
)

// check is the syncer's side of the config check: config.Load validated
// the whole directory (YAML, keys, types, names, sink references); this
// builds what the syncer runs — connectors, field mappings, schedules and
// stop conditions — without touching the database. Watches, templates,
// sinks and model options are the evaluator's side (`evaluator check`):
// the syncer binary links none of that code.
func check(cfg *config.Config) error {
	if err := syncer.Build(cfg); err != nil {
		return err
	}
	return taskrunner.Check(cfg)
}
