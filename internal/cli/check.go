package cli

import (
	"errors"
	"log/slog"

	"github.com/lookout-dev/lookout/internal/config"
	_ "github.com/lookout-dev/lookout/internal/connectors/all" // BuildAll builds connectors
	"github.com/lookout-dev/lookout/internal/evaluator"
	"github.com/lookout-dev/lookout/internal/notify"
	"github.com/lookout-dev/lookout/internal/syncer"
)

// BuildAll builds every part of the configuration the way the daemons do —
// connectors, mappings, watch expressions, sinks — without touching the
// database, and returns every problem found.
func BuildAll(cfg *config.Config) error {
	_, sinkErr := notify.BuildSinks(&cfg.Global, slog.New(slog.DiscardHandler))
	return errors.Join(syncer.Build(cfg), evaluator.Build(cfg), sinkErr)
}
