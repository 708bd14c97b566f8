package db

import (
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

// Text, Int8, Float8 and Tstz are column values of a COPY (or a query's
// argument) that pgx encodes through its valuer interfaces: a nil pointer
// is NULL, and each is one pointer, which an interface holds without
// allocating (a string or an int64 would be boxed, a *string dereferenced
// through reflection). The writers of changes and of evaluations fill a
// reused row of them (internal/changes, internal/evaluator).
type (
	Text   struct{ P *string }
	Int8   struct{ P *int64 }
	Float8 struct{ P *float64 }
	Tstz   struct{ P *time.Time }
)

// TextValue implements pgtype.TextValuer.
func (t Text) TextValue() (pgtype.Text, error) {
	if t.P == nil {
		return pgtype.Text{}, nil
	}
	return pgtype.Text{String: *t.P, Valid: true}, nil
}

// Int64Value implements pgtype.Int64Valuer.
func (i Int8) Int64Value() (pgtype.Int8, error) {
	if i.P == nil {
		return pgtype.Int8{}, nil
	}
	return pgtype.Int8{Int64: *i.P, Valid: true}, nil
}

// Float64Value implements pgtype.Float64Valuer.
func (f Float8) Float64Value() (pgtype.Float8, error) {
	if f.P == nil {
		return pgtype.Float8{}, nil
	}
	return pgtype.Float8{Float64: *f.P, Valid: true}, nil
}

// TimestamptzValue implements pgtype.TimestamptzValuer.
func (t Tstz) TimestamptzValue() (pgtype.Timestamptz, error) {
	if t.P == nil {
		return pgtype.Timestamptz{}, nil
	}
	return pgtype.Timestamptz{Time: *t.P, Valid: true}, nil
}
