package db

import (
	"errors"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// citusUnique is the message of a unique violation as Citus relays it
// from a worker: the shard's constraint, named after the table's with the
// shard id appended.
var citusUnique = regexp.MustCompile(`^duplicate key value violates unique constraint "(.+)_[0-9]+"$`)

// UniqueViolation reports whether err is a unique violation and of which
// constraint. On one PostgreSQL it is SQLSTATE 23505 with the constraint's
// name. On Citus a violation a COPY meets on a worker reaches the
// coordinator's client as SQLSTATE XX000 with the worker's message, whose
// constraint is the shard's ("records_pkey_102040"): that message is the
// only trace of the violation, so it is recognized by its text, and the
// shard id is taken off the name.
func UniqueViolation(err error) (constraint string, ok bool) {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return "", false
	}
	switch pgErr.Code {
	case "23505":
		return pgErr.ConstraintName, true
	case "XX000":
		if m := citusUnique.FindStringSubmatch(strings.TrimSpace(pgErr.Message)); m != nil {
			return m[1], true
		}
	}
	return "", false
}
