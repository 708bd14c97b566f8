package e2e

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	_ "github.com/lookout-dev/lookout/internal/connectors/postgres"
	"github.com/lookout-dev/lookout/internal/pgtest"
)

// agentTasksUpstream is a second database holding examples/agent-tasks's
// schema.sql: the agent_tasks table the example reads.
func agentTasksUpstream(t *testing.T) (url string, pool *pgxpool.Pool) {
	t.Helper()
	url = pgtest.Database(t)
	pool = pgtest.PoolFor(t, url)
	schema, err := os.ReadFile("../../examples/agent-tasks/schema.sql")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(context.Background(), string(schema)); err != nil {
		t.Fatalf("schema.sql: %v", err)
	}
	return url, pool
}

func upstreamExec(t *testing.T, pool *pgxpool.Pool, sql string) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), sql); err != nil {
		t.Fatalf("upstream: %s: %v", sql, err)
	}
}

// notified lists the notifications so far as "watch record_id", counted.
func (e *env) notified() map[string]int {
	e.t.Helper()
	ctx := context.Background()
	if _, err := e.evaluator("ev-1", nil).Drain(ctx); err != nil {
		e.t.Fatal(err)
	}
	rows, err := e.pool.Query(ctx, `SELECT watch || ' ' || record_id FROM notifications`)
	if err != nil {
		e.t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			e.t.Fatal(err)
		}
		out[k]++
	}
	return out
}

// syncAll runs every source once and fails the test if a run failed (a
// run that read nothing is quiet: it leaves no sync_runs row).
func (e *env) syncAll() {
	e.t.Helper()
	e.sync()
	rows, err := e.pool.Query(context.Background(), `SELECT name || ': ' || last_error FROM sources WHERE last_error IS NOT NULL ORDER BY name`)
	if err != nil {
		e.t.Fatal(err)
	}
	errs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(errs) > 0 {
		e.t.Fatalf("runs failed: %q %v", errs, err)
	}
}

// The backtest of examples/agent-tasks: its sources and watches as
// written, on a real agent_tasks table (schema.sql) in a second database.
// A healthy table notifies nothing; then the seed's anomalies are seeded
// (task 388 in_progress for three days, a result unreviewed for two hours,
// windows failing 12 of 18, 53 % of the tasks at priority 1, a result sent
// back twice) and each watch fires once, on its anomaly; a run with no
// change and the anomalies' resolution notify nothing more.
func TestAgentTasksExamplesBacktest(t *testing.T) {
	url, up := agentTasksUpstream(t)
	t.Setenv("AGENT_TASKS_DSN", url)
	e := newEnv(t)
	files, err := filepath.Glob("../../examples/agent-tasks/sources/*.yaml")
	if err != nil || len(files) != 5 {
		t.Fatalf("example sources: %v %v", files, err)
	}
	for _, f := range append(files, "../../examples/agent-tasks/lookout.yaml") {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel("../../examples/agent-tasks", f)
		e.write(rel, string(b))
	}

	// A healthy day: linux fails 1 of 12, windows 2 of 4 (too few to
	// judge), one task in progress for 5 minutes, one result done 10
	// minutes ago and not reviewed yet, 4 of 21 tasks at priority 1, one
	// result sent back once.
	upstreamExec(t, up, `
		INSERT INTO agent_tasks (title, agent_name, status, executor, priority, surveillance_score, created_at, updated_at)
		SELECT 'linux task ' || i, 'builder', 'done', 'linux', CASE WHEN i <= 4 THEN 1 ELSE 3 END, 8, now() - interval '1 day', now() - interval '1 day'
		FROM generate_series(1, 10) AS i;
		INSERT INTO agent_tasks (title, agent_name, status, executor, created_at, updated_at) VALUES
		  ('linux failure', 'builder', 'failed', 'linux', now() - interval '1 day', now() - interval '1 day'),
		  ('windows failure 1', 'opener', 'failed', 'windows', now() - interval '1 day', now() - interval '1 day'),
		  ('windows failure 2', 'opener', 'failed', 'windows', now() - interval '1 day', now() - interval '1 day'),
		  ('running', 'builder', 'in_progress', 'linux', now() - interval '5 minutes', now() - interval '5 minutes'),
		  ('pending 1', NULL, 'pending', 'any', now() - interval '1 hour', now() - interval '1 hour'),
		  ('pending 2', NULL, 'pending', 'any', now() - interval '1 hour', now() - interval '1 hour'),
		  ('pending 3', NULL, 'pending', 'any', now() - interval '1 hour', now() - interval '1 hour');
		INSERT INTO agent_tasks (title, agent_name, status, executor, surveillance_score, created_at, updated_at) VALUES
		  ('windows launch 1', 'opener', 'done', 'windows', 9, now() - interval '1 day', now() - interval '1 day'),
		  ('windows launch 2', 'opener', 'done', 'windows', 9, now() - interval '1 day', now() - interval '1 day'),
		  ('just done', 'builder', 'done', 'linux', NULL, now() - interval '2 hours', now() - interval '10 minutes');
		INSERT INTO agent_tasks (id, title, agent_name, status, executor, surveillance_score, correction_count, created_at, updated_at)
		VALUES (600, 'report with corrections', 'writer', 'done', 'linux', 7, 1, now() - interval '1 day', now() - interval '1 day')`)
	e.syncer("register")
	e.syncAll()
	if n := e.count(`SELECT count(*) FROM records WHERE source = 'agent-tasks'`); n != 21 {
		t.Errorf("%d agent-tasks records, want 21", n)
	}
	if got := e.notified(); len(got) != 0 {
		t.Errorf("a healthy table notified %v", got)
	}

	// The seed's anomalies.
	upstreamExec(t, up, `
		INSERT INTO agent_tasks (id, title, agent_name, status, executor, created_at, updated_at)
		VALUES (388, 'audit report', 'auditor', 'in_progress', 'linux', now() - interval '3 days', now() - interval '3 days');
		INSERT INTO agent_tasks (id, title, agent_name, status, executor, created_at, updated_at)
		VALUES (500, 'migration plan', 'planner', 'done', 'linux', now() - interval '3 hours', now() - interval '2 hours');
		INSERT INTO agent_tasks (title, agent_name, status, executor, priority, surveillance_score, created_at, updated_at)
		SELECT 'windows task ' || i, 'opener', CASE WHEN i <= 10 THEN 'failed' ELSE 'done' END, 'windows', 1,
		       CASE WHEN i <= 10 THEN NULL ELSE 8 END, now() - interval '1 day', now() - interval '1 day'
		FROM generate_series(1, 14) AS i;
		INSERT INTO agent_tasks (title, status, executor, priority, created_at, updated_at)
		SELECT 'urgent by default ' || i, 'pending', 'any', 1, now() - interval '1 hour', now() - interval '1 hour'
		FROM generate_series(1, 4) AS i;
		UPDATE agent_tasks SET correction_count = 2, updated_at = now() WHERE id = 600`)
	e.syncAll()
	want := map[string]int{
		"stuck-in-progress 388":         1,
		"result-not-reviewed 500":       1,
		"executor-failure-rate windows": 1,
		"priority-defaults agent_tasks": 1,
		"sent-back-twice 600":           1,
	}
	if got := e.notified(); !equalCounts(got, want) {
		t.Errorf("the anomalies notified %v\nwant %v", got, want)
	}
	var pct float64
	if err := e.pool.QueryRow(context.Background(), `SELECT (extra->>'priority_1_pct')::float8 FROM records WHERE source = 'priority-spread'`).Scan(&pct); err != nil || pct != 53.7 {
		t.Errorf("priority_1_pct = %v (%v), want 53.7", pct, err)
	}

	// Nothing changed: nothing more. Then the anomalies are resolved
	// (388 finishes, 500 is reviewed): their rows leave the queries,
	// their records are deleted, and that notifies nobody.
	e.syncAll()
	upstreamExec(t, up, `UPDATE agent_tasks SET status = 'done', surveillance_score = 9, updated_at = now() WHERE id IN (388, 500)`)
	e.syncAll()
	if got := e.notified(); !equalCounts(got, want) {
		t.Errorf("after a quiet run and the resolution, notifications are %v\nwant %v", got, want)
	}
	if n := e.count(`SELECT count(*) FROM records WHERE source IN ('stuck-tasks', 'unreviewed-results') AND deleted_at IS NOT NULL`); n != 2 {
		t.Errorf("%d resolved anomalies deleted, want 2", n)
	}
}
