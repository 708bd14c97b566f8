package evaluator

// observe records a committed batch in the metrics: one decision per
// written (change, watch), the duplicates suppressed, and for every change the
// batch completed the lag from its commit to its evaluation (both times from
// the database's clock, returned by the settling UPDATE).
func (e *Evaluator) observe(claimed []*change, decs []decision) {
	m := e.conf.Metrics
	if m == nil {
		return
	}
	for i := range decs {
		d := &decs[i]
		if !d.written {
			continue // fenced: another evaluator decides this change
		}
		m.Decision(d.step, d.verdict)
		m.DuplicatesSuppressed(d.suppressed)
	}
	for _, c := range claimed {
		if c.lag > 0 {
			m.DecisionLag(c.lag)
		}
	}
}
