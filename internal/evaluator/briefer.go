package evaluator

import (
	"github.com/lookout-dev/lookout/internal/notify"
	"github.com/lookout-dev/lookout/internal/semantic"
)

var _ notify.Briefer = (*semantic.Briefer)(nil)

// Briefer returns the writer of digests' briefings for the digester of
// the evaluator's deployment (notify.SummarizerFrom): the model path
// (semantic.Briefer) over a model client of its own, with the evaluator's
// model settings, owner (the briefings' claims and model_calls rows) and
// metrics. notify takes it as a notify.Briefer, so that notify, which the
// api links for its sinks, links no model client.
func (e *Evaluator) Briefer() (*semantic.Briefer, error) {
	client, err := semantic.NewClient(e.conf.Model, e.logger)
	if err != nil {
		return nil, err
	}
	b := semantic.NewBriefer(e.pool, client, e.conf.Owner, e.logger)
	b.SetMetrics(e.conf.Metrics)
	return b, nil
}
