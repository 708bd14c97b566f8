package sources

import (
	"context"
	"regexp"
	"slices"
	"testing"

	"github.com/lookout-dev/lookout/internal/pgtest"
)

// TestRunStatusesMatchTheSchema holds the RunStatus constants to the
// statuses the CHECK constraint of sync_runs.status allows: the same set.
func TestRunStatusesMatchTheSchema(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	var def string
	err := pool.QueryRow(context.Background(), `
		SELECT pg_get_constraintdef(c.oid) FROM pg_constraint c
		WHERE c.conrelid = 'sync_runs'::regclass AND c.contype = 'c' AND pg_get_constraintdef(c.oid) LIKE '%status%'`).Scan(&def)
	if err != nil {
		t.Fatalf("read the CHECK of sync_runs.status: %v", err)
	}
	var schema []string
	for _, m := range regexp.MustCompile(`'([a-z_]+)'`).FindAllStringSubmatch(def, -1) {
		schema = append(schema, m[1])
	}
	var consts []string
	for _, s := range runStatuses {
		consts = append(consts, string(s))
	}
	slices.Sort(schema)
	slices.Sort(consts)
	if !slices.Equal(schema, consts) {
		t.Errorf("RunStatus constants %v, the schema's CHECK allows %v (%s)", consts, schema, def)
	}
}
