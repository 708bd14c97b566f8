package db_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/lookout-dev/lookout/internal/db"
)

// A unique violation is recognized as one PostgreSQL reports it (23505)
// and as Citus relays a COPY's from a worker (XX000, the shard's
// constraint in the message: seen on the 3-node test cluster).
func TestUniqueViolation(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		err        error
		constraint string
		ok         bool
	}{
		{"postgres", &pgconn.PgError{Code: "23505", ConstraintName: "records_pkey",
			Message: `duplicate key value violates unique constraint "records_pkey"`}, "records_pkey", true},
		{"citus copy", &pgconn.PgError{Code: "XX000",
			Message: `duplicate key value violates unique constraint "records_pkey_106546"`}, "records_pkey", true},
		{"wrapped", fmt.Errorf("copy records: %w", &pgconn.PgError{Code: "XX000",
			Message: `duplicate key value violates unique constraint "evaluations_change_id_watch_key_102301"`}), "evaluations_change_id_watch_key", true},
		{"another internal error", &pgconn.PgError{Code: "XX000", Message: "could not connect to node"}, "", false},
		{"another error", &pgconn.PgError{Code: "23503", ConstraintName: "watches_source_fkey"}, "", false},
		{"not postgres", errors.New("duplicate key value violates unique constraint \"records_pkey_1\""), "", false},
	} {
		got, ok := db.UniqueViolation(tc.err)
		if got != tc.constraint || ok != tc.ok {
			t.Errorf("%s: UniqueViolation = %q, %t; want %q, %t", tc.name, got, ok, tc.constraint, tc.ok)
		}
	}
}
