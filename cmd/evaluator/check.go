package main

import (
	"errors"
	"log/slog"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/notify"
	"github.com/lookout-dev/lookout/internal/watchspec"
)

// check is the evaluator's side of the config check: config.Load validated
// the whole directory (YAML, keys, types, names, sink references); this
// builds what the evaluator runs — watch expressions, model options,
// templates, digest schedules and digest briefings (watchspec.Check, as
// the api checks a watch made through HTTP or MCP), and sinks — without
// touching the database. Connector blocks and field mappings are the
// syncer's side (`syncer check`): the evaluator binary links no connector
// code.
func check(cfg *config.Config) error {
	_, sinkErr := notify.BuildSinks(&cfg.Global, slog.New(slog.DiscardHandler))
	return errors.Join(watchspec.Check(cfg), sinkErr)
}
