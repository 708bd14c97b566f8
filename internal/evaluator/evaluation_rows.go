package evaluator

import (
	"time"

	"github.com/lookout-dev/lookout/internal/db"
)

// evaluationRows is the COPY of evaluations (evaluationColumns): one row
// per decision decs[idx[i]], its values read from the decision and its
// change in place and encoded as pgconn reads them (db.CopyIn): nothing
// is boxed or allocated per row. content_hash is NULL for an empty hash.
// The [][]any of boxed strings, integers and times this once replaced was
// a row's 17 allocations, about a tenth of the evaluator's CPU in a
// backlog with the garbage collector's share (docs/benchmarks.md, (4) on
// branch eval-cpu); the valuers that replaced those cost an encode plan's
// lookup per value (docs/benchmarks.md "(1) and (4): COPY rows encoded by
// their writers").
func evaluationRows(decs []decision, idx []int, evaluator *string, at *time.Time) *db.CopyIn {
	return db.NewCopyIn(len(idx), func(i int, r *db.CopyIn) {
		d := &decs[idx[i]]
		c := d.change
		r.Row(len(evaluationColumns))
		r.Int8(c.ID)
		r.Text(c.Source)
		r.Text(c.RecordID)
		r.Text(d.watch.Config.Name)
		if c.NewHash != "" {
			r.Text(c.NewHash)
		} else {
			r.Null()
		}
		r.Text(d.step)
		r.Bool(d.matched)
		r.Text(d.verdict)
		r.Text(d.reason)
		r.Text(d.urgency)
		r.Int8Ptr(d.noteID)
		r.TextPtr(evaluator)
		r.Int8Ptr(d.modelCallID)
		r.Float8Ptr(d.confidence)
		r.TstzPtr(at)
		r.Text(d.watch.Owner)
		r.TstzPtr(&c.CreatedAt)
	})
}
