package evaluator

import (
	"context"
	"time"
)

// observe records a committed batch in the metrics: one decision per
// (change, watch), the duplicates suppressed, and for every change the
// batch completed the lag from its commit to its evaluation. The lag is
// read back from the changes table (evaluated_at - created_at, both set by
// the database's clock) with one primary-key lookup per batch, only when
// metrics are enabled; a failure to read it is logged, never an error of
// the batch.
func (e *Evaluator) observe(ctx context.Context, claimed []*change, decs []decision) {
	m := e.conf.Metrics
	if m == nil {
		return
	}
	for i := range decs {
		d := &decs[i]
		m.Decision(d.change.Source, d.watch.cfg.Name, d.step, d.verdict)
		m.DuplicatesSuppressed(d.change.Source, d.watch.cfg.Name, d.suppressed)
	}
	ids := make([]int64, len(claimed))
	for i, c := range claimed {
		ids[i] = c.ID
	}
	rows, err := e.pool.Query(ctx, `
		SELECT source, extract(epoch FROM evaluated_at - created_at)::float8
		FROM changes WHERE id = ANY($1) AND eval_status = 'done' AND evaluated_at IS NOT NULL`, ids)
	if err != nil {
		if ctx.Err() == nil {
			e.logger.Warn("read change-to-decision lag for metrics", "error", err)
		}
		return
	}
	defer rows.Close()
	for rows.Next() {
		var source string
		var secs float64
		if err := rows.Scan(&source, &secs); err != nil {
			e.logger.Warn("read change-to-decision lag for metrics", "error", err)
			return
		}
		m.DecisionLag(source, time.Duration(secs*float64(time.Second)))
	}
	if err := rows.Err(); err != nil && ctx.Err() == nil {
		e.logger.Warn("read change-to-decision lag for metrics", "error", err)
	}
}
