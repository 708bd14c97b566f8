package postgres_test

import (
	"strings"
	"testing"
	"time"

	"github.com/lookout-dev/lookout/internal/connectors/conntest"
	"github.com/lookout-dev/lookout/internal/connectors/postgres"
)

const dsn = "postgres://reader@db.example.com:5432/agents"

func TestBlockErrors(t *testing.T) {
	t.Parallel()
	const head = "name: s\nconnector: postgres\npostgres:\n  dsn: " + dsn + "\n"
	cases := []struct{ src, want string }{
		{"name: s\nconnector: postgres\npostgres:\n  table: t\n  key: id\n  cursor: updated_at\n",
			"sources/s.yaml:3: postgres.dsn is required (write it as ${ENV_VAR}: it holds the password)"},
		{"name: s\nconnector: postgres\npostgres:\n  dsn: 'host=db port=x'\n  table: t\n  key: id\n  cursor: updated_at\n",
			"sources/s.yaml:4: postgres.dsn is not a valid PostgreSQL connection string (a URL postgres://user@host:5432/db or key=value pairs)"},
		{head + "  key: id\n  cursor: updated_at\n", "sources/s.yaml:3: postgres.table or postgres.query is required"},
		{head + "  table: t\n  query: SELECT 1 AS id\n  key: id\n  cursor: updated_at\n",
			"sources/s.yaml:6: postgres.query cannot be set together with postgres.table (give one)"},
		{head + "  table: 'a.b.c'\n  key: id\n  cursor: updated_at\n", `sources/s.yaml:5: postgres.table must be a table name or schema.table, not "a.b.c"`},
		{head + "  table: 'agent tasks'\n  key: id\n  cursor: updated_at\n",
			`sources/s.yaml:5: postgres.table must be a table name or schema.table (double-quote a name with other characters), not "agent tasks"`},
		{head + "  table: t\n  cursor: updated_at\n", "sources/s.yaml:3: postgres.key is required (the column whose value is the record id)"},
		{head + "  table: t\n  key: task_id\n  cursor: updated_at\n",
			`sources/s.yaml:6: postgres.key is "task_id": records take their id from the item's id, so map it: fields: {id: item.task_id}`},
		{head + "  table: t\n  key: id\n", "sources/s.yaml:3: postgres.cursor is required unless snapshot is true (the column every write raises, e.g. updated_at)"},
		{head + "  table: t\n  key: id\n  cursor: id\n", "sources/s.yaml:7: postgres.cursor must differ from postgres.key (use snapshot: true to read in key order)"},
		{head + "  table: t\n  key: id\n  snapshot: true\n  full_scan_every: 1h\n",
			"sources/s.yaml:8: postgres.full_scan_every is not used with snapshot: true (every run reads the whole set and records the rows gone)"},
		{head + "  table: t\n  key: id\n  cursor: updated_at\n  full_scan_every: 10s\n",
			"sources/s.yaml:8: postgres.full_scan_every must be at least 1m (each scan looks up every record's key upstream)"},
		{head + "  table: t\n  key: task_id\n  cursor: updated_at\n  full_scan_every: 1h\nfields:\n  id: '\"t-\" + string(item.task_id)'\n",
			"sources/s.yaml:8: postgres.full_scan_every needs the record id to be the key column (the scan looks records up by key): fields.id is \"\\\"t-\\\" + string(item.task_id)\"; map it as item.task_id"},
		{head + "  table: t\n  key: id\n  snapshot: true\n  cursor: updated_at\n", "sources/s.yaml:8: postgres.cursor is not used with snapshot: true (every run reads the whole set in key order)"},
		{head + "  table: t\n  key: id\n  cursor: updated_at\n  lookback: -1s\n", "sources/s.yaml:8: postgres.lookback must not be negative"},
		{head + "  table: t\n  key: id\n  cursor: updated_at\n  page_size: 20000\n", "sources/s.yaml:8: postgres.page_size must be between 1 and 10000"},
		{head + "  table: t\n  key: id\n  cursor: updated_at\n  statement_timeout: -1s\n", "sources/s.yaml:8: postgres.statement_timeout must not be negative"},
		{head + "  table: t\n  key: id\n  cursor: updated_at\n  where: x\n", "sources/s.yaml:8: postgres.where is not a known key"},
	}
	for _, tc := range cases {
		_, err := conntest.LoadSource(t, tc.src)
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("source\n%s\nerror = %v\nwant %q", tc.src, err, tc.want)
		}
	}
}

func TestBlockDefaults(t *testing.T) {
	t.Parallel()
	cfg, err := conntest.LoadSource(t, "name: s\nconnector: postgres\npostgres:\n  dsn: "+dsn+"\n  table: public.agent_tasks\n  key: id\n  cursor: updated_at\n")
	if err != nil {
		t.Fatal(err)
	}
	s, err := postgres.Decode(cfg.Sources[0])
	if err != nil {
		t.Fatal(err)
	}
	if s.PageSize != 1000 || s.MaxPages != 1000 || s.StatementTimeout != 30*time.Second || s.Lookback != 0 || s.Snapshot {
		t.Errorf("defaults: %+v", s)
	}
	// A key other than id is fine once fields.id maps it.
	if _, err := conntest.LoadSource(t, "name: s\nconnector: postgres\npostgres:\n  dsn: "+dsn+"\n  query: SELECT executor, 1 AS n FROM t GROUP BY 1\n  key: executor\n  snapshot: true\nfields:\n  id: item.executor\n"); err != nil {
		t.Errorf("query source keyed by executor: %v", err)
	}
}
