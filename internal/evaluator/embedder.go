package evaluator

import (
	"github.com/lookout-dev/lookout/internal/drift"
	"github.com/lookout-dev/lookout/internal/semantic"
)

var _ drift.Embedder = (*semantic.Client)(nil)

// Embedder returns the embedding client of the drift service of the
// evaluator's deployment: a model client of its own over the evaluator's
// model settings, so that an embedding model that fails opens its own
// breaker, never the one of the watches' verdicts.
func (e *Evaluator) Embedder() (*semantic.Client, error) {
	return semantic.NewClient(e.conf.Model, e.logger)
}

// Owner is the evaluator's name in claims (evaluator.name or the host).
func (e *Evaluator) Owner() string { return e.conf.Owner }
