package evaluator

import (
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/lookout-dev/lookout/internal/db"
)

// evaluationRows is the COPY of evaluations (evaluationColumns): one row
// per decision decs[idx[i]], its values read from the decision and its
// change in place, into one slice reused from row to row (pgx encodes a
// row's values before it asks for the next). Each value is one pointer in
// an interface, which allocates nothing: the [][]any of boxed strings,
// integers and times it replaces was a row's 17 allocations, about a
// tenth of the evaluator's CPU in a backlog with the garbage collector's
// share (docs/benchmarks.md, (4) on branch eval-cpu). The writer of
// changes encodes its COPYs with the same values (db.Text, db.Int8, …).
type evaluationRows struct {
	decs      []decision
	idx       []int
	evaluator *string
	at        *time.Time
	i         int
	values    []any
}

var _ pgx.CopyFromSource = (*evaluationRows)(nil)

func newEvaluationRows(decs []decision, idx []int, evaluator *string, at *time.Time) *evaluationRows {
	return &evaluationRows{decs: decs, idx: idx, evaluator: evaluator, at: at, values: make([]any, len(evaluationColumns))}
}

// Next advances to the next row.
func (r *evaluationRows) Next() bool {
	r.i++
	return r.i <= len(r.idx)
}

// Values returns the current row's values, in evaluationColumns' order:
// content_hash is NULL for an empty hash. A NULL is a nil value, which pgx
// writes without looking up an encode plan (a valuer of a nil pointer is
// planned, then encoded as NULL): a deterministic decision has three or
// four NULLs of its 17 columns.
func (r *evaluationRows) Values() ([]any, error) {
	d := &r.decs[r.idx[r.i-1]]
	c, v := d.change, r.values
	v[0], v[1], v[2], v[3], v[4] = db.Int8{P: &c.ID}, db.Text{P: &c.Source}, db.Text{P: &c.RecordID}, db.Text{P: &d.watch.Config.Name}, nil
	if c.NewHash != "" {
		v[4] = db.Text{P: &c.NewHash}
	}
	v[5], v[6], v[7], v[8], v[9] = db.Text{P: &d.step}, d.matched, db.Text{P: &d.verdict}, db.Text{P: &d.reason}, db.Text{P: &d.urgency}
	v[10], v[11], v[12], v[13] = nullable(d.noteID), db.Text{P: r.evaluator}, nullable(d.modelCallID), nil
	if d.confidence != nil {
		v[13] = db.Float8{P: d.confidence}
	}
	v[14], v[15], v[16] = db.Tstz{P: r.at}, db.Text{P: &d.watch.Owner}, db.Tstz{P: &c.CreatedAt}
	return v, nil
}

// nullable is p as a COPY value: nil (NULL) for a nil pointer.
func nullable(p *int64) any {
	if p == nil {
		return nil
	}
	return db.Int8{P: p}
}

// Err is nil: the rows are in memory.
func (r *evaluationRows) Err() error { return nil }
