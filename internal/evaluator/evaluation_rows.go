package evaluator

import (
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// evaluationRows is the COPY of evaluations (evaluationColumns): one row
// per decision decs[idx[i]], its values read from the decision and its
// change in place, into one slice reused from row to row (pgx encodes a
// row's values before it asks for the next). Each value is one pointer in
// an interface, which allocates nothing: the [][]any of boxed strings,
// integers and times it replaces was a row's 17 allocations, about a
// tenth of the evaluator's CPU in a backlog with the garbage collector's
// share (docs/benchmarks.md, (4) on branch eval-cpu). The writer of
// changes encodes its COPYs the same way (internal/changes, rowSource).
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
// content_hash is NULL for an empty hash.
func (r *evaluationRows) Values() ([]any, error) {
	d := &r.decs[r.idx[r.i-1]]
	c, v := d.change, r.values
	var hash *string
	if c.NewHash != "" {
		hash = &c.NewHash
	}
	v[0], v[1], v[2], v[3], v[4] = int8Value{&c.ID}, textValue{&c.Source}, textValue{&c.RecordID}, textValue{&d.watch.Config.Name}, textValue{hash}
	v[5], v[6], v[7], v[8], v[9] = textValue{&d.step}, d.matched, textValue{&d.verdict}, textValue{&d.reason}, textValue{&d.urgency}
	v[10], v[11], v[12], v[13] = int8Value{d.noteID}, textValue{r.evaluator}, int8Value{d.modelCallID}, float8Value{d.confidence}
	v[14], v[15], v[16] = tstzValue{r.at}, textValue{&d.watch.Owner}, tstzValue{&c.CreatedAt}
	return v, nil
}

// Err is nil: the rows are in memory.
func (r *evaluationRows) Err() error { return nil }

// textValue, int8Value, float8Value and tstzValue are column values that
// pgx encodes through its valuer interfaces: a nil pointer is NULL, and
// each is one pointer, which an interface holds without allocating (a
// string or an int64 would be boxed, a pointer dereferenced through
// reflection).
type (
	textValue   struct{ p *string }
	int8Value   struct{ p *int64 }
	float8Value struct{ p *float64 }
	tstzValue   struct{ p *time.Time }
)

func (t textValue) TextValue() (pgtype.Text, error) {
	if t.p == nil {
		return pgtype.Text{}, nil
	}
	return pgtype.Text{String: *t.p, Valid: true}, nil
}

func (i int8Value) Int64Value() (pgtype.Int8, error) {
	if i.p == nil {
		return pgtype.Int8{}, nil
	}
	return pgtype.Int8{Int64: *i.p, Valid: true}, nil
}

func (f float8Value) Float64Value() (pgtype.Float8, error) {
	if f.p == nil {
		return pgtype.Float8{}, nil
	}
	return pgtype.Float8{Float64: *f.p, Valid: true}, nil
}

func (t tstzValue) TimestamptzValue() (pgtype.Timestamptz, error) {
	if t.p == nil {
		return pgtype.Timestamptz{}, nil
	}
	return pgtype.Timestamptz{Time: *t.p, Valid: true}, nil
}
