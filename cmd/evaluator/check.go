package main

import (
	"errors"
	"log/slog"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/evaluator"
	"github.com/lookout-dev/lookout/internal/notify"
)

// check is the evaluator's side of the config check: config.Load validated
// the whole directory (YAML, keys, types, names, sink references); this
// builds what the evaluator runs — watch expressions, model options,
// templates, digest schedules, digest briefings and sinks — without
// touching the database. Connector blocks and field mappings are the syncer's side (`syncer
// check`): the evaluator binary links no connector code.
func check(cfg *config.Config) error {
	_, sinkErr := notify.BuildSinks(&cfg.Global, slog.New(slog.DiscardHandler))
	_, sumErr := notify.SummarizerFrom(nil, cfg, "", nil, slog.New(slog.DiscardHandler))
	return errors.Join(evaluator.Build(cfg), sinkErr, sumErr)
}
