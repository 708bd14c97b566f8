package reports

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lookout-dev/lookout/internal/pgtest"
	"github.com/lookout-dev/lookout/internal/retention"
)

// sqlFrom returns the one SQL string literal of a Go file of the module
// that contains marker, so that the plans below are the plans of the code
// as it is, not of a copy. A query that moved or changed its marker fails
// the test, naming the file.
func sqlFrom(t *testing.T, file, marker string) string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "../../"+file, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	ast.Inspect(f, func(n ast.Node) bool {
		if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
			if s, err := strconv.Unquote(lit.Value); err == nil && strings.Contains(s, marker) {
				found = append(found, s)
			}
		}
		return true
	})
	if len(found) != 1 {
		t.Fatalf("%s: %d SQL strings contain %q, want 1: the hot query changed or moved; update its marker in plans_test.go", file, len(found), marker)
	}
	return found[0]
}

// sqlConst returns the value of the string constant name of a Go file of
// the module: literals joined with + and the file's other string
// constants (`SELECT ` + runColumns + ` FROM …`). A constant that moved or
// was renamed fails the test, naming the file.
func sqlConst(t *testing.T, file, name string) string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "../../"+file, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	consts := map[string]ast.Expr{}
	for _, d := range f.Decls {
		if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.CONST {
			for _, sp := range g.Specs {
				vs := sp.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if i < len(vs.Values) {
						consts[n.Name] = vs.Values[i]
					}
				}
			}
		}
	}
	var eval func(e ast.Expr) (string, bool)
	eval = func(e ast.Expr) (string, bool) {
		switch e := e.(type) {
		case *ast.BasicLit:
			if e.Kind == token.STRING {
				s, err := strconv.Unquote(e.Value)
				return s, err == nil
			}
		case *ast.ParenExpr:
			return eval(e.X)
		case *ast.Ident:
			if c, ok := consts[e.Name]; ok {
				return eval(c)
			}
		case *ast.SelectorExpr:
			// A constant of another lookout package (changes.SnapshotOfR).
			if pkg, ok := e.X.(*ast.Ident); ok {
				return pkgConst(t, "internal/"+pkg.Name, e.Sel.Name), true
			}
		case *ast.BinaryExpr:
			if e.Op == token.ADD {
				x, ok1 := eval(e.X)
				y, ok2 := eval(e.Y)
				return x + y, ok1 && ok2
			}
		}
		return "", false
	}
	c, ok := consts[name]
	if !ok {
		t.Fatalf("%s: no constant %s: the hot query changed or moved; update plans_test.go", file, name)
	}
	s, ok := eval(c)
	if !ok {
		t.Fatalf("%s: constant %s is not a string built from literals and constants", file, name)
	}
	return s
}

// pkgConst is sqlConst of the constant name in whichever file of the
// package in dir declares it.
func pkgConst(t *testing.T, dir, name string) string {
	t.Helper()
	files, err := filepath.Glob("../../" + dir + "/*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), "const "+name+" ") || strings.Contains(string(b), "\t"+name+" = ") {
			return sqlConst(t, strings.TrimPrefix(file, "../../"), name)
		}
	}
	t.Fatalf("%s: no constant %s: the hot query changed or moved; update plans_test.go", dir, name)
	return ""
}

// history fills a schema like a lookout that ran for weeks: 5,000 sources,
// 50,000 finished runs, an hour of quiet runs of 2,000 sources, 200,000 evaluated changes (one record with 10,000
// of them), 200,000 evaluations, 50,000 finished notifications, 20,000
// model calls — and pending work of every kind, among it a backlog of
// 30,000 changes.
//
// The history of the partitioned tables is laid out on whole weeks, whatever
// the date: it starts on a Monday at 00:00 UTC (the start of a partition,
// retention.WeekOf) and runs to now, so every partition but the current
// week's holds a whole week of rows. Laid out from now backwards instead, the
// oldest partition held what fell into it on that day: on 2026-12-01 (a
// Tuesday) twelve hours of changes, 95 pages, less than one block range of
// the BRIN index on run_id (128 pages), which the planner then rightly read
// whole (issue 28). checkWholeWeeks checks the layout.
const history = `
-- spread(i, n, weeks) is the time of the i-th of n rows spread evenly from
-- the Monday 00:00 UTC weeks weeks before the current week's to now.
-- (A single expression, so that the planner inlines it.)
CREATE FUNCTION pg_temp.spread(i bigint, n bigint, weeks int) RETURNS timestamptz LANGUAGE sql STABLE AS $f$
    SELECT (date_trunc('week', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' - weeks * interval '1 week')
           + (now() - (date_trunc('week', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' - weeks * interval '1 week'))
             * (i::float8 / n)
$f$;

-- Bulk load: set the secondary indexes aside and build them again after
-- the inserts (the same definitions, read from pg_indexes), which is several
-- times faster than maintaining them row by row.
SET maintenance_work_mem = '256MB';
CREATE TEMP TABLE set_aside AS
SELECT i.indexname, i.indexdef FROM pg_indexes i
WHERE i.schemaname = current_schema()
  AND i.tablename IN ('changes', 'evaluations', 'notifications', 'sync_runs', 'model_calls', 'records', 'verdicts',
                      'notification_keys')
  AND i.indexname NOT IN (SELECT conname FROM pg_constraint WHERE connamespace = current_schema()::regnamespace);
DO $$ DECLARE r record; BEGIN
    FOR r IN SELECT indexname FROM set_aside LOOP EXECUTE format('DROP INDEX %I', r.indexname); END LOOP;
END $$;

INSERT INTO sources (name, connector, config_hash, schedule, interval_seconds, interval_reason, next_run_at, last_run_at,
                     status, status_reason, status_changed_at)
-- Due from an hour on: filling the other tables takes minutes on a busy
-- machine, and sources falling due meanwhile would change the claim's plan.
SELECT 'src-' || i, 'http', 'h', 'every 5m0s', 300, 'every 5m0s',
       now() + interval '1 hour' + (i % 300) * interval '1 second', now() - interval '4 minutes',
       CASE WHEN i % 50 = 0 THEN 'paused' ELSE 'active' END,
       CASE WHEN i % 50 = 0 THEN 'paused by operator' END,
       CASE WHEN i % 50 = 0 THEN now() - interval '1 day' END
FROM generate_series(1, 5000) i;
-- Their definitions: fifty of alice's (src-6 among them), half of the rest
-- of 49 other owners, the others the operator's (the admin's owner filter).
INSERT INTO source_definitions (name, owner, managed_by, connector, definition, definition_hash, version)
SELECT 'src-' || i, CASE WHEN i % 100 = 6 THEN 'alice' WHEN i % 2 = 0 THEN 'owner-' || (i % 49) ELSE '' END,
       'api', 'http', '{}', 'h', 1
FROM generate_series(1, 5000) i;
UPDATE sources SET next_run_at = now() - interval '1 minute' WHERE name IN ('src-1', 'src-2', 'src-3');
UPDATE sources SET run_requested_at = now() WHERE name = 'src-4';
UPDATE sources SET failure_count = 3, last_error = 'boom' WHERE name IN ('src-5', 'src-6');

INSERT INTO sync_runs (source, owner, reason, status, started_at, finished_at, duration_ms, pages, items_seen, error, due_at, due_reason)
SELECT 'src-' || (1 + i % 5000), 'syncer-1', 'schedule', CASE WHEN i % 100 = 0 THEN 'failed' ELSE 'succeeded' END,
       pg_temp.spread(i, 50000, 5), pg_temp.spread(i, 50000, 5) + interval '1 second',
       1000, 1, 10, CASE WHEN i % 100 = 0 THEN 'boom' END,
       pg_temp.spread(i, 50000, 5), 'every 5m0s'
FROM generate_series(1, 50000) i;
INSERT INTO sync_runs (source, owner, started_at) VALUES ('src-7', 'syncer-1', now() - interval '2 minutes'),
                                                         ('src-8', 'syncer-2', now() - interval '2 hours');
UPDATE sources s SET lease_owner = r.owner, lease_expires_at = now() + interval '3 minutes', run_id = r.id
FROM sync_runs r WHERE r.status = 'running' AND s.name = r.source;
UPDATE sources s SET run_id = m.id
FROM (SELECT source, max(id) AS id FROM sync_runs GROUP BY source) m
WHERE s.name = m.source AND s.run_id IS NULL;

-- Quiet runs of 2,000 more sources in the last hour (src-1 to src-20 have
-- fifty days of them, below): the admin page's list of an hour's quiet runs.
INSERT INTO sync_run_hours (source, hour, runs, not_modified, requests, items_seen, first_started_at, last_started_at, last_finished_at)
SELECT 'src-' || s, h, 12, 12, 12, 120, h, h + interval '55 minutes', h + interval '56 minutes'
FROM generate_series(21, 2020) s, (SELECT date_trunc('hour', now(), 'UTC') - interval '1 hour' AS h) g;

INSERT INTO records (source, record_id, content_hash, title)
SELECT 'src-' || (1 + i % 5000), 'r-' || i, md5(i::text), 'record ' || i FROM generate_series(0, 19999) i;

INSERT INTO changes (source, record_id, kind, version, new_hash, changed_fields, record, run_id, created_at, eval_status, evaluated_at)
SELECT CASE WHEN i <= 10000 THEN 'src-1' ELSE 'src-' || (1 + i % 5000) END,
       CASE WHEN i <= 10000 THEN 'hot' ELSE 'r-' || (i % 20000) END,
       'updated', 1 + i / 20000, 'h' || i, '{title}', '{"title": "x"}', i / 2,
       pg_temp.spread(i, 200000, 3), 'done', pg_temp.spread(i, 200000, 3)
FROM generate_series(1, 200000) i;
-- Pending: a backlog of 30,000 changes (an evaluator was down for a while),
-- five of them behind the hot record, held changes, an expired claim.
INSERT INTO changes (source, record_id, kind, version, new_hash, record, run_id, created_at)
SELECT 'src-' || (1 + i % 5000), 'r-' || (i % 20000), 'updated', 1, 'b' || i, '{}', 50000, now() - interval '5 minutes'
FROM generate_series(1, 30000) i;
INSERT INTO changes (source, record_id, kind, version, new_hash, record, run_id, created_at, eval_next_at, eval_owner,
                     eval_lease_expires_at, eval_attempts, eval_error)
SELECT CASE WHEN i <= 5 THEN 'src-1' ELSE 'src-' || i END,
       CASE WHEN i <= 5 THEN 'hot' ELSE 'new-' || i END,
       'updated', 1, md5(i::text), '{}', 50001, now() - i * interval '1 minute',
       CASE WHEN i % 7 = 0 THEN now() + interval '10 minutes' ELSE '-infinity' END,
       CASE WHEN i = 20 THEN 'evaluator-dead' END, CASE WHEN i = 20 THEN now() - interval '1 minute' END,
       CASE WHEN i % 7 = 0 THEN 2 ELSE 0 END, CASE WHEN i % 7 = 0 THEN 'model down' END
FROM generate_series(1, 20) i;


INSERT INTO notifications (dedupe_key, source, record_id, watch, sink, change_id, content_hash, title, payload, status,
                           attempts, created_at, delivered_at, last_attempt_at, dead_at, last_error, next_attempt_at)
SELECT c.source || '/' || c.record_id || '/w/v' || c.id, c.source, c.record_id, 'w', (ARRAY['log', 'hook', 'mail'])[1 + c.id % 3],
       c.id, c.new_hash, 't', '{}', CASE WHEN c.id % 100 = 0 THEN 'dead' ELSE 'delivered' END,
       CASE WHEN c.id % 100 = 0 THEN 8 ELSE 1 END, c.created_at,
       CASE WHEN c.id % 100 <> 0 THEN c.created_at + interval '1 second' END, c.created_at + interval '1 second',
       CASE WHEN c.id % 100 = 0 THEN c.created_at + interval '1 second' END,
       CASE WHEN c.id % 100 = 0 THEN 'gave up after 8 attempts' END, c.created_at
FROM changes c WHERE c.id % 4 = 0 AND c.eval_status = 'done';
INSERT INTO notifications (dedupe_key, source, record_id, watch, sink, title, payload, status, attempts, next_attempt_at,
                           last_error, last_attempt_at, digest_due_at)
SELECT 'pending/' || i, 'src-' || (1 + i % 50), 'r-' || i, 'w', (ARRAY['log', 'hook', 'mail'])[1 + i % 3], 't', '{}',
       CASE WHEN i > 30 THEN 'held' ELSE 'pending' END, i % 3,
       now() - interval '1 second' + (i % 2) * interval '1 minute',
       CASE WHEN i % 3 > 0 THEN '503' END, CASE WHEN i % 3 > 0 THEN now() - interval '1 minute' END,
       CASE WHEN i > 30 THEN now() + (i - 36) * interval '1 hour' END
FROM generate_series(1, 40) i;
-- The lane of watches' own webhooks: one user's backlog of 20,000 behind
-- a hanging receiver (two of them in flight), one due row of each of 200
-- other users.
INSERT INTO notifications (dedupe_key, source, record_id, watch, sink, title, payload, status, owner, attempts,
                           next_attempt_at, lease_owner, lease_expires_at)
SELECT 'own/' || i, 'src-1', 'r-' || i, 'w', '@webhook', 't', '{}', 'pending',
       CASE WHEN i <= 20000 THEN 'hanging' ELSE 'user-' || i END, CASE WHEN i <= 2 THEN 1 ELSE 0 END,
       now() - interval '1 hour' + i * interval '10 milliseconds',
       CASE WHEN i <= 2 THEN 'evaluator-1' END, CASE WHEN i <= 2 THEN now() + interval '1 minute' END
FROM generate_series(1, 20200) i;

INSERT INTO evaluations (change_id, source, record_id, watch, content_hash, step, matched, decision, reason, evaluator,
                         created_at, notification_id, change_created_at)
SELECT c.id, c.source, c.record_id, 'w', c.new_hash, 'filter', c.id % 4 = 0,
       CASE WHEN c.id % 1000 = 0 THEN 'error' WHEN c.id % 4 = 0 THEN 'notify' ELSE 'skip' END, 'when', 'evaluator-1',
       c.created_at,
       -- the notifications above were numbered 1, 2, ... in change order
       CASE WHEN c.id % 4 = 0 THEN c.id / 4 END, c.created_at
FROM changes c
WHERE c.eval_status = 'done';

INSERT INTO notification_keys (dedupe_key, sink, notification_id, created_at)
SELECT dedupe_key, sink, id, created_at FROM notifications;

INSERT INTO model_calls (purpose, change_id, source, record_id, watch, content_hash, model, model_digest, prompt_version,
                         input_ref, input_hash, outcome, latency_ms, prompt_tokens, output_tokens, created_at)
SELECT 'evaluate', i * 10, 'src-' || (1 + i % 50), 'r-' || i, 'w', md5(i::text), 'llama3.2', 'sha256:aaa', 'pv-1',
       'change:' || i * 10, md5(i::text), CASE WHEN i % 500 = 0 THEN 'timeout' ELSE 'ok' END, 800, 50, 20,
       pg_temp.spread(i, 20000, 3)
FROM generate_series(1, 20000) i;
INSERT INTO verdicts (prompt_version, model_digest, input_hash, model, source, watch, should_notify, urgency, confidence, reason, model_call_id)
SELECT 'pv-1', 'sha256:aaa', md5(i::text), 'llama3.2', 'src-1', 'w', false, 'low', 0.8, 'no', i
FROM generate_series(1, 20000, 4) i;

DO $$ DECLARE r record; BEGIN
    -- An index of a partitioned table reads "ON ONLY": build it on every partition.
    FOR r IN SELECT indexdef FROM set_aside LOOP EXECUTE replace(r.indexdef, ' ON ONLY ', ' ON '); END LOOP;
END $$;
DROP TABLE set_aside;
DROP FUNCTION pg_temp.spread;
SET default_statistics_target = 30;
`

// grown fills the tables that are not partitioned but grow with time, as
// weeks of use leave them (each pruned by rows through its owner,
// docs/config.md#retention), with a little pending work among the old
// rows: 20,000 task runs over 111 days (running ones, ones waiting for a
// retry), 20,000 webhook events (some unprocessed), 20,000 idempotency
// keys over two days, 20,000 definition deletions, 20,000 audit entries
// over 400 days, 20,000 budget days, 5,000 briefings over 111 days (some
// being written), the verdicts spread over 100 days, 24,000 quiet-run hours over 50 days
// and 20,000 hourly totals over 166 days.
const grown = `
INSERT INTO task_runs (source, task, record_id, record_version, content_version, idempotency_key, run_id, status,
                       claimed_by, claimed_at, claim_expires_at, finished_at, retry_at, executor, created_at, updated_at)
SELECT 'src-' || (1 + i % 50), 't', 'r-' || i, 1, 'v1', 'k-' || i, 'run-' || i || '.1',
       CASE WHEN i % 1000 = 0 THEN 'running' WHEN i % 1000 = 1 THEN 'released' WHEN i % 100 = 0 THEN 'failed' ELSE 'completed' END,
       'syncer-1', t, t + interval '30 minutes', CASE WHEN i % 1000 <> 0 THEN t + interval '1 minute' END,
       CASE WHEN i % 1000 = 1 THEN t + interval '1 hour' END, 'command', t, t
FROM (SELECT i, now() - (20000 - i) * interval '8 minutes' AS t FROM generate_series(1, 20000) i) g;
INSERT INTO inbound_events (source, delivery_id, signature_valid, payload, payload_hash, received_at, processed_at, outcome)
SELECT 'src-' || (1 + i % 50), 'd-' || i, true, '{}', 'h', t, CASE WHEN i % 1000 <> 0 THEN t + interval '1 second' END,
       CASE WHEN i % 1000 <> 0 THEN 'created' END
FROM (SELECT i, now() - (20000 - i) * interval '4 minutes' AS t FROM generate_series(1, 20000) i) g;
INSERT INTO idempotency_keys (owner, key, operation, request_hash, status, response, created_at)
SELECT 'alice', 'key-' || i, 'create_source', 'h', 201, '{}', now() - (20000 - i) * interval '8 seconds'
FROM generate_series(1, 20000) i;
INSERT INTO definition_deletions (version, source, managed_by, deleted_at)
SELECT i, 'src-gone-' || i, 'api', now() - (20000 - i) * interval '4 minutes' FROM generate_series(1, 20000) i;
INSERT INTO audit_log (at, actor, via, action, kind, target, owner)
SELECT now() - (20000 - i) * interval '30 minutes', 'alice', 'api', 'update', 'watch', 'src-' || (i % 50), 'alice'
FROM generate_series(1, 20000) i;
INSERT INTO model_budgets (source, watch, day, calls)
SELECT 'src-' || (1 + i % 50), 'w', (now() AT TIME ZONE 'UTC')::date - i / 50, 3 FROM generate_series(0, 19999) i;
INSERT INTO briefings (prompt_version, model_digest, input_hash, source, watch, model, state, owner, lease_expires_at,
                       created_at, updated_at, last_hit_at)
SELECT 'pv-1', 'sha256:aaa', 'b-' || i, 'src-1', 'digest', 'llama3.2', CASE WHEN i % 1000 = 0 THEN 'writing' ELSE 'ok' END,
       CASE WHEN i % 1000 = 0 THEN 'evaluator-1' END, CASE WHEN i % 1000 = 0 THEN now() + interval '1 minute' END,
       t, t, CASE WHEN i % 10 = 0 THEN now() - interval '1 hour' END
FROM (SELECT i, now() - (5000 - i) * interval '32 minutes' AS t FROM generate_series(1, 5000) i) g;
UPDATE verdicts SET created_at = now() - (abs(hashtext(input_hash)) % (100 * 86400)) * interval '1 second';
INSERT INTO sync_run_hours (source, hour, runs, first_started_at, last_started_at, last_finished_at)
SELECT 'src-' || (1 + i % 20), h, 12, h, h + interval '55 minutes', h + interval '56 minutes'
FROM (SELECT i, date_trunc('hour', now(), 'UTC') - (i / 20) * interval '1 hour' AS h FROM generate_series(0, 23999) i) g;
INSERT INTO activity_hour_totals (hour, backend, runs)
SELECT date_trunc('hour', now(), 'UTC') - (i / 5) * interval '1 hour', -1 - i % 5, 5 FROM generate_series(0, 19999) i
ON CONFLICT DO NOTHING;
`

// taskHistory fills task_runs (migration 17) like task watches on 50
// sources that ran for ten weeks: 100,000 finished task runs, and the
// pending work of the task runners — claims running, claims expired,
// releases waiting for their retry, writes to the tool behind, an agent's
// report.
const taskHistory = `
INSERT INTO task_runs (source, task, record_id, record_version, content_version, idempotency_key, title, attempt, run_id,
                       sync_run_id, status, claimed_by, claimed_at, claim_expires_at, started_at, finished_at, executions,
                       failures, executor, exit_code, last_error, created_at, updated_at)
SELECT 'src-' || (1 + i % 50), 'execute', 'r-' || i, 1, md5(i::text), 'src-' || (1 + i % 50) || ':r-' || i || ':v' || md5(i::text) || ':execute',
       'task ' || i, 1, 'run-' || i || '.1', i / 2, CASE WHEN i % 100 = 0 THEN 'failed' ELSE 'completed' END, 'lookout@host:1',
       now() - (100000 - i) * interval '60 seconds', now() - (100000 - i) * interval '60 seconds' + interval '30 minutes',
       now() - (100000 - i) * interval '60 seconds', now() - (100000 - i) * interval '60 seconds' + interval '20 seconds',
       1, CASE WHEN i % 100 = 0 THEN 1 ELSE 0 END, 'command', CASE WHEN i % 100 = 0 THEN 3 ELSE 0 END,
       CASE WHEN i % 100 = 0 THEN 'exited with status 3: boom' END,
       now() - (100000 - i) * interval '60 seconds', now() - (100000 - i) * interval '60 seconds' + interval '20 seconds'
FROM generate_series(1, 100000) i;
INSERT INTO task_runs (source, task, record_id, record_version, content_version, idempotency_key, attempt, run_id, status,
                       claimed_by, claimed_at, claim_expires_at, started_at, executions, failures, retry_at, executor,
                       tool_action, tool_due_at, tool_error, report_token_hash, report, reported_at, updated_at)
SELECT 'src-' || (1 + i % 50), 'execute', 'p-' || i, 1, 'c' || i, 'src-' || (1 + i % 50) || ':p-' || i || ':vc' || i || ':execute',
       1 + i % 3, 'run-p' || i, CASE WHEN i <= 23 THEN 'running' WHEN i <= 38 THEN 'released' ELSE 'completed' END,
       'lookout@host:2', now() - interval '5 minutes',
       -- 20 claims running, 3 expired
       CASE WHEN i <= 20 THEN now() + interval '25 minutes' ELSE now() - interval '2 minutes' END,
       now() - interval '5 minutes', 1, i % 3,
       -- releases: 10 waiting for their retry, 5 due
       CASE WHEN i BETWEEN 24 AND 33 THEN now() + interval '5 minutes' WHEN i BETWEEN 34 AND 38 THEN now() - interval '1 minute' END,
       'command',
       -- 5 completions the tool does not show yet
       CASE WHEN i > 38 THEN 'complete' END, CASE WHEN i > 38 THEN now() - interval '1 minute' END,
       CASE WHEN i > 38 THEN '503 service_unavailable' END,
       -- an agent's report of a running attempt
       CASE WHEN i = 1 THEN 'hash' END, CASE WHEN i = 1 THEN '{"status": "completed"}'::jsonb END,
       CASE WHEN i = 1 THEN now() END, now() - interval '5 minutes'
FROM generate_series(1, 43) i;
`

// analyze is run after the pruner gave the history's weeks their
// partitions.
const analyze = `ANALYZE sources, source_definitions, sync_runs, records, changes, evaluations, notifications, model_calls, verdicts, notification_keys,
	task_runs, inbound_events, idempotency_keys, definition_deletions, audit_log, model_budgets, briefings, sync_run_hours,
	activity_hour_totals`

// bigTables are the tables that grow with history: no hot query may read
// one of them whole. sources grows with configuration only; the claim
// must not scan it either, but reports may (see allowSources).
var bigTables = []string{"changes", "evaluations", "notifications", "sync_runs", "model_calls", "records", "verdicts",
	"notification_keys", "task_runs", "inbound_events", "idempotency_keys", "definition_deletions", "audit_log",
	"model_budgets", "briefings", "sync_run_hours", "activity_hour_totals"}

// partitionOf matches the partitions of the history tables (migration 16).
var partitionOf = regexp.MustCompile(`^(.*)_(p[0-9]{8}|default)$`)

// table is the table a plan node reads: a partition's parent.
func table(rel string) string {
	if m := partitionOf.FindStringSubmatch(rel); m != nil {
		return m[1]
	}
	return rel
}

// plan is a node of EXPLAIN (FORMAT JSON).
type plan struct {
	NodeType     string  `json:"Node Type"`
	RelationName string  `json:"Relation Name"`
	IndexName    string  `json:"Index Name"`
	Strategy     string  `json:"Strategy"`
	Operation    string  `json:"Operation"`
	Total        float64 `json:"Total Cost"`
	Rows         float64 `json:"Plan Rows"`
	// Removed is the number of partitions pruned when the executor
	// started (a generic plan's parameters).
	Removed int    `json:"Subplans Removed"`
	Plans   []plan `json:"Plans"`

	// With EXPLAIN (ANALYZE, BUFFERS): what the node did.
	JoinType        string  `json:"Join Type"`
	ActualRows      float64 `json:"Actual Rows"`
	Loops           float64 `json:"Actual Loops"`
	RemovedByFilter float64 `json:"Rows Removed by Filter"`
	Filter          string  `json:"Filter"`
	Hit             int64   `json:"Shared Hit Blocks"`
	Read            int64   `json:"Shared Read Blocks"`
}

// walk calls fn on every node, depth first.
func (p plan) walk(depth int, fn func(p plan, depth int)) {
	fn(p, depth)
	for _, c := range p.Plans {
		c.walk(depth+1, fn)
	}
}

// describe is a node in one line: "Index Scan using changes_pkey on changes".
func (p plan) describe() string {
	s := p.NodeType
	if p.Strategy != "" && p.Strategy != "Plain" {
		s = p.Strategy + " " + s
	}
	if p.Operation != "" && p.NodeType == "ModifyTable" {
		s = p.Operation
	}
	if p.IndexName != "" {
		s += " using " + p.IndexName
	}
	if p.RelationName != "" {
		s += " on " + p.RelationName
	}
	if p.Removed > 0 {
		s += fmt.Sprintf(" (%d partitions pruned at executor start)", p.Removed)
	}
	return s
}

// hotQuery is a statement a daemon runs in its loop (or an operator
// query that must stay fast on a large database).
type hotQuery struct {
	name string
	who  string // the code it comes from
	sql  string
	args []any
	// allowSources lets the plan read the sources table whole (a report
	// over every source; the table has one row per configured source).
	allowSources bool
	// allowAll lets the plan read any table whole: the dry run of a prune
	// counts every row old enough, however it gets them.
	allowAll bool
	// allowCurrent lets the plan read the current week's partitions whole
	// (reports, the cookbook, the pruner: the planner may when most of
	// the week is pending, as with the backlog here); a daemon's loop
	// never may, nor may anything read an older partition whole.
	allowCurrent bool
	// allowRel lets the plan read this partition whole: a prune by rows
	// reads partitions past the window.
	allowRel string
	// index, when set, must appear in the plan: the index the query was
	// given.
	index string
	// since, when set, is the earliest partition key (created_at) of the
	// rows the statement reaches by id, which it carries: its plan reads
	// no partition of a week before since's, whether planned with the
	// values or as a generic plan (a prepared statement's cached plan,
	// pruned when the executor starts), which is checked too.
	since time.Time
}

func explain(ctx context.Context, pool *pgxpool.Pool, q hotQuery) (plan, error) {
	var raw []byte
	if err := pool.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+q.sql, q.args...).Scan(&raw); err != nil {
		return plan{}, err
	}
	return decodePlan(raw)
}

// explainGeneric is the generic plan of q, the one PostgreSQL caches for
// a prepared statement (pgx prepares every statement) once it is not
// costlier than the plans made with the values: q prepared, then
// EXPLAIN EXECUTE with q's arguments as literals under plan_cache_mode
// force_generic_plan. EXPLAIN starts the executor, so the partitions
// pruned at its start are gone from the plan ("Subplans Removed").
func explainGeneric(ctx context.Context, pool *pgxpool.Pool, q hotQuery) (plan, error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return plan{}, err
	}
	defer conn.Release()
	sd, err := conn.Conn().Prepare(ctx, "hot_generic", q.sql)
	if err != nil {
		return plan{}, err
	}
	defer conn.Conn().Deallocate(ctx, "hot_generic")
	lits := make([]string, len(q.args))
	for i, oid := range sd.ParamOIDs {
		var typ, lit string
		if err := conn.QueryRow(ctx, "SELECT format_type($1, NULL)", oid).Scan(&typ); err != nil {
			return plan{}, err
		}
		if err := conn.QueryRow(ctx, "SELECT quote_nullable($1::"+typ+")", q.args[i]).Scan(&lit); err != nil {
			return plan{}, fmt.Errorf("argument %d: %w", i+1, err)
		}
		lits[i] = lit + "::" + typ
	}
	if _, err := conn.Exec(ctx, "SET plan_cache_mode = force_generic_plan"); err != nil {
		return plan{}, err
	}
	defer conn.Exec(ctx, "RESET plan_cache_mode")
	var raw []byte
	if err := conn.QueryRow(ctx, "EXPLAIN (FORMAT JSON) EXECUTE hot_generic("+strings.Join(lits, ", ")+")").Scan(&raw); err != nil {
		return plan{}, err
	}
	return decodePlan(raw)
}

// earlierPartitions returns the partitions p reads of a week before
// since's.
func earlierPartitions(p plan, since time.Time) []string {
	var out []string
	p.walk(0, func(n plan, _ int) {
		m := partitionOf.FindStringSubmatch(n.RelationName)
		if m != nil && m[2] != "default" && n.RelationName < retention.PartitionName(m[1], retention.WeekOf(since)) {
			out = append(out, n.RelationName)
		}
	})
	return out
}

func decodePlan(raw []byte) (plan, error) {
	var out []struct {
		Plan plan `json:"Plan"`
	}
	if err := json.Unmarshal(raw, &out); err != nil || len(out) != 1 {
		return plan{}, fmt.Errorf("decode plan: %v (%s)", err, raw)
	}
	return out[0].Plan, nil
}

// The window the admin's lists picked by a key filter span (all time).
var (
	allSince = time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC)
	allUntil = time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)
)

// TestHotQueriesUseIndexes fills the tables with weeks of history and a
// little pending work, and checks that no query the daemons run in their
// loops, and no report over pending work, reads a large table whole. Set
// LOOKOUT_PLANS=file to write the plans (docs/performance.md quotes them).
func TestHotQueriesUseIndexes(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	start := time.Now()
	if _, err := pool.Exec(ctx, history); err != nil {
		t.Fatalf("fill: %v", err)
	}
	if _, err := pool.Exec(ctx, grown); err != nil {
		t.Fatalf("fill the tables pruned by rows: %v", err)
	}
	if _, err := pool.Exec(ctx, taskHistory); err != nil {
		t.Fatalf("fill task_runs: %v", err)
	}
	// The pruner gives the weeks of the history their partitions (the
	// rows came in the default partition), as a lookout that ran for
	// weeks has them.
	res, err := retention.New(pool, retention.Config{BatchSize: 5000, Interval: time.Hour}, slog.New(slog.DiscardHandler)).Prune(ctx)
	if err != nil {
		t.Fatalf("make the partitions: %v", err)
	}
	if _, err := pool.Exec(ctx, analyze); err != nil {
		t.Fatal(err)
	}
	t.Logf("filled the tables in %s (%d partitions made)", time.Since(start).Round(time.Millisecond), len(res.Made))
	checkWholeWeeks(t, pool)

	names := make([]string, 5000)
	for i := range names {
		names[i] = fmt.Sprintf("src-%d", i+1)
	}
	now := time.Now()
	lease := 5 * time.Minute
	// The budgets' day the semantic client passes (its clock's UTC day):
	// the last day of the filled model_budgets.
	budgetDay := time.Date(now.UTC().Year(), now.UTC().Month(), now.UTC().Day(), 0, 0, 0, 0, time.UTC)
	// A claimed batch of the evaluator (two changes of the backlog), with
	// its source key: the statements on it by id carry its sources and
	// its earliest created_at (internal/evaluator changeKeys).
	batch := []int64{200001, 200002}
	var batchSources []string
	var batchSince time.Time
	if err := pool.QueryRow(ctx, `SELECT array_agg(DISTINCT source ORDER BY source), min(created_at) FROM changes WHERE id = ANY($1)`,
		batch).Scan(&batchSources, &batchSince); err != nil {
		t.Fatal(err)
	}
	// The syncer composes some statements from parts.
	claimCTE := sqlFrom(t, "internal/sources/queries.go", "WITH req AS (")
	quietRuns := sqlFrom(t, "internal/sources/queries.go", "AS x(name, run_id, finished_at")
	queries := []hotQuery{
		{name: "syncer: lease due sources", who: "internal/sources/queries.go QueryClaim",
			sql: claimCTE + sqlFrom(t, "internal/sources/queries.go", "UPDATE sources s\nSET lease_owner = $3"), args: []any{nil, 500, "syncer-x", now, lease, now},
			index: "sources_due_idx"},
		{name: "syncer: lock due sources in a claim batch", who: "internal/sources/queries.go QueryLock",
			sql: claimCTE + sqlFrom(t, "internal/sources/queries.go", "SELECT picked.name, nextval"), args: []any{nil, 500, "syncer-x", now, lease, now},
			index: "sources_due_idx"},
		{name: "syncer: lease due sources (restricted to this replica's sources)", who: "internal/sources/queries.go QueryClaim",
			sql: claimCTE + sqlFrom(t, "internal/sources/queries.go", "UPDATE sources s\nSET lease_owner = $3"), args: []any{names, 500, "syncer-x", now, lease, now},
			index: "sources_run_requested_idx"},
		{name: "syncer: record taken-over runs as abandoned", who: "internal/sources/queries.go QueryAbandonTaken",
			sql:  sqlFrom(t, "internal/sources/queries.go", "'lease expired while running; taken over by '"),
			args: []any{[]int64{5, 6}, []string{"src-1", "src-2"}, []string{"syncer-1", "syncer-2"}, []time.Time{now, now}, now, "syncer-x"}},
		{name: "syncer: renew the lease (heartbeat)", who: "internal/sources/queries.go QueryHeartbeat",
			sql:  sqlFrom(t, "internal/sources/queries.go", "ON CONFLICT ON CONSTRAINT sync_runs_pkey DO NOTHING"),
			args: []any{"src-7", "syncer-1", int64(50001), now, lease, "schedule", now, nil, now, "every 1m0s"}},
		{name: "syncer: commit a batch's lease and counters", who: "internal/sources/queries.go QueryExtendLease",
			sql:  sqlFrom(t, "internal/sources/queries.go", "counters AS ("),
			args: []any{"src-7", "syncer-1", int64(50001), now, lease, nil, 1, 1, 0, 0, 0, 1, 0, "schedule", now, nil, now, "every 1m0s", 0}},
		{name: "syncer: record a run", who: "internal/sources/queries.go QueryRunEnd",
			sql:  sqlFrom(t, "internal/sources/queries.go", "WHERE r.status = 'running'"),
			args: []any{int64(50001), "src-7", "syncer-1", "schedule", now, nil, now, "every 1m0s", "succeeded", now, 1.5, nil, 1, 0, 1, 1, 1, 0, 0, 0, 0}},
		{name: "syncer: complete quiet runs", who: "internal/sources/queries.go QueryCompleteQuiet",
			sql: quietRuns + sqlFrom(t, "internal/sources/queries.go", "WHERE s.name = x.name AND s.lease_owner = $8"),
			args: []any{[]string{"src-7", "src-8"}, []int64{50001, 50002}, []time.Time{now, now}, []time.Time{now, now}, []float64{60, 60},
				[]string{"every 1m0s", "every 1m0s"}, []*string{nil, nil}, "syncer-1"}},
		{name: "syncer: complete quiet runs of a claim batch", who: "internal/sources/queries.go QueryCompleteLocked",
			sql: quietRuns + sqlFrom(t, "internal/sources/queries.go", "WHERE s.name = x.name AND $8::text IS NOT NULL"),
			args: []any{[]string{"src-7", "src-8"}, []int64{50001, 50002}, []time.Time{now, now}, []time.Time{now, now}, []float64{60, 60},
				[]string{"every 1m0s", "every 1m0s"}, []*string{nil, nil}, "syncer-1"}},
		{name: "syncer: add counted quiet runs to their hours", who: "internal/syncer/rollup.go flushHoursSQL",
			sql: sqlFrom(t, "internal/syncer/rollup.go", "), updated AS ("),
			args: []any{[]string{"src-7", "src-8"}, []time.Time{now.Truncate(time.Hour), now.Truncate(time.Hour)}, []int32{5, 5}, []int32{4, 5},
				[]int32{5, 5}, []int64{0, 10}, []int32{0, 0}, []time.Time{now, now}, []time.Time{now, now}, []time.Time{now, now},
				[]float64{10, 12}, []float64{0.5, 0.2}, []float64{0.3, 0.1}}},
		{name: "syncer: stored hashes of a page", who: "internal/changes/writer.go Apply",
			sql: sqlFrom(t, "internal/changes/writer.go", "deleted_at IS NOT NULL"), args: []any{"src-2", []string{"r-1", "r-5001", "r-10001"}}},
		{name: "syncer: live records of a snapshot source", who: "internal/changes/delete.go Missing",
			sql: sqlConst(t, "internal/changes/delete.go", "liveIDsSQL"), args: []any{"src-2"}},
		{name: "syncer: a page of live record ids for a key check", who: "internal/changes/delete.go LiveIDs",
			sql: sqlConst(t, "internal/changes/delete.go", "liveIDsAfterSQL"), args: []any{"src-2", "r-5000", 5000},
			index: "records_pkey"},
		{name: "syncer: materialize created snapshots of a page", who: "internal/changes/snapshot.go materialize",
			sql: sqlConst(t, "internal/changes/snapshot.go", "materializeSQL"), args: []any{"src-2", []string{"hot", "r-1", "r-5001"}},
			index: "changes_record_idx"},
		{name: "evaluator: snapshots the claimed changes left to their records", who: "internal/evaluator/evaluator.go fillSnapshots",
			sql:  sqlFrom(t, "internal/evaluator/evaluator.go", "FROM changes_with_record\n\t\tWHERE id = ANY($1) AND source = ANY($2)"),
			args: []any{batch, batchSources, batchSince}, index: "records_pkey", since: batchSince},
		{name: "evaluator: claim pending changes", who: "internal/evaluator/evaluator.go claimSQL",
			sql: sqlConst(t, "internal/evaluator/evaluator.go", "claimSQL"), args: []any{500, nil},
			index: "changes_record_idx"},
		{name: "evaluator: lease a batch that needs the model", who: "internal/evaluator/evaluator.go lease",
			sql:  sqlFrom(t, "internal/evaluator/evaluator.go", "eval_attempts = eval_attempts + 1\n\t\tWHERE id = ANY($1)"),
			args: []any{batch, "evaluator-x", lease, batchSources, batchSince}, index: "changes_pkey", since: batchSince},
		{name: "evaluator: extend the lease while the model works", who: "internal/evaluator/judge.go keepLease",
			sql:  sqlFrom(t, "internal/evaluator/judge.go", "SET eval_lease_expires_at = now() + $3::interval"),
			args: []any{batch, "evaluator-x", lease, batchSources, batchSince}, index: "changes_pending_idx|changes_pkey", since: batchSince},
		{name: "evaluator: settle the batch", who: "internal/evaluator/commit.go settle",
			sql:  sqlConst(t, "internal/evaluator/commit.go", "settleDoneSQL"),
			args: []any{batch, "evaluator-x", 0, batchSince}, index: "changes_pending_idx|changes_pkey", since: batchSince},
		{name: "evaluator: hold changes whose model step failed", who: "internal/evaluator/commit.go settle",
			sql:   sqlConst(t, "internal/evaluator/commit.go", "holdSQL"),
			args:  []any{batch, []time.Time{now, now}, []string{"w: model down", "w: model down"}, "evaluator-x", 0, batchSince},
			index: "changes_pending_idx|changes_pkey", since: batchSince},
		{name: "evaluator: watches already decided", who: "internal/evaluator/judge.go decidedWatches",
			sql:  sqlFrom(t, "internal/evaluator/judge.go", "FROM evaluations\n\t\tWHERE change_id = ANY($1)"),
			args: []any{batch, batchSources, batchSince}, index: "evaluations_change_id_watch_key", since: batchSince},
		{name: "evaluator: dedupe window", who: "internal/outbox/queries.go querySuppressRecent",
			sql: sqlFrom(t, "internal/outbox/queries.go", "created_at > now() - $5::interval"), args: []any{"src-1", "hot", "w", "log", time.Hour}},
		{name: "evaluator: reserve a call of a model budget", who: "internal/semantic/budget.go reserveSQL",
			sql: sqlFrom(t, "internal/semantic/budget.go", "SET calls = calls + 1"), args: []any{"src-1", "w", 50, int64(0), budgetDay}},
		{name: "evaluator: start a model budget's day", who: "internal/semantic/budget.go seedSQL",
			sql: sqlFrom(t, "internal/semantic/budget.go", "INSERT INTO model_budgets"), args: []any{"src-1", "w", budgetDay}},
		{name: "deliverer: claim a sink's due notifications", who: "internal/outbox/queries.go queryClaim",
			sql: sqlConst(t, "internal/outbox/queries.go", "queryClaim"), args: []any{"hook", 100, "deliverer-x", lease, nil},
			index: "notifications_due_idx"},
		{name: "deliverer: claim the own-webhook lane's due notifications, fair across owners", who: "internal/outbox/queries.go queryClaimFair",
			sql: sqlConst(t, "internal/outbox/queries.go", "queryClaimFair"), args: []any{"@webhook", 8, "deliverer-x", lease, 2, nil},
			index: "notifications_owner_due_idx"},
		{name: "deliverer: record outcomes", who: "internal/outbox/queries.go queryRecord",
			sql: sqlFrom(t, "internal/outbox/queries.go", "WHEN u.kind = 'unclaim' THEN 'pending'"),
			args: []any{"deliverer-x", []int64{1, 2}, []string{"delivered", "pending"}, []*string{nil, nil}, []*time.Time{nil, nil}, []*time.Time{&now, &now},
				[]time.Time{now, now}, []*time.Time{&now, &now}, []float64{12, 30}, []string{"delivered", "retry"}, []*int32{nil, nil}, []*string{nil, nil}}},
		{name: "digester: due digest matches", who: "internal/outbox/queries.go queryLockHeld",
			sql: sqlConst(t, "internal/outbox/queries.go", "queryLockHeld"), args: []any{5000, nil},
			index: "notifications_held_idx"},
	}
	// Enqueue: the dedupe keys, then the duplicates.
	keys, sinks := []string{"src-1/hot/w/v4", "new/1"}, []string{"hook", "log"}
	texts := []string{"a", "b"}
	queries = append(queries,
		hotQuery{name: "evaluator: enqueue notifications (take their dedupe keys)", who: "internal/outbox/queries.go enqueueInsert",
			sql: sqlFrom(t, "internal/outbox/queries.go", "INSERT INTO notification_keys"),
			args: []any{keys, sinks, []string{"src-1", "src-1"}, []string{"hot", "hot"}, []string{"w", "w"}, []string{"single", "single"},
				[]*int64{nil, nil}, texts, texts, texts, texts, texts, []string{"{}", "{}"}, []string{"pending", "pending"},
				[]*time.Time{nil, nil}, []*int32{nil, nil}, []string{"", ""}}},
		hotQuery{name: "evaluator: count duplicates on their rows", who: "internal/outbox/queries.go enqueueDuplicates",
			sql:  sqlFrom(t, "internal/outbox/queries.go", "SELECT notification_id, dedupe_key, sink, false FROM k"),
			args: []any{keys, sinks}, index: "notification_keys_pkey"},
	)
	// The task runner's statements (internal/tasks/queries.go): the pass,
	// the steps of a task run, the maintenance of every replica; and
	// syncer tasks.
	const tasksQ = "internal/tasks/queries.go"
	taskSources := make([]string, 50)
	for i := range taskSources {
		taskSources[i] = fmt.Sprintf("src-%d", i+1)
	}
	for _, q := range []hotQuery{
		{name: "tasks: the pass's candidates (a source's live records)", sql: sqlConst(t, tasksQ, "queryCandidates"),
			args: []any{"src-1"}, index: "records_pkey"},
		{name: "tasks: the task runs of the pass's keys", sql: sqlConst(t, tasksQ, "queryLookup"),
			args: []any{[]string{"src-2:r-1:v" + md5hex("1") + ":execute", "src-1:p-50:vc50:execute"}}, index: "task_runs_idempotency_key_key"},
		{name: "tasks: claim a new task version", sql: sqlConst(t, tasksQ, "queryClaimNew"),
			args: []any{"src-1", "execute", "r-new", 1, "00ff", "src-1:r-new:v00ff:execute", "t", int64(1), "lookout@x:1", now, lease, "command"}},
		{name: "tasks: claim a released task's next attempt", sql: sqlConst(t, tasksQ, "queryReclaim"),
			args: []any{"src-35:p-34:vc34:execute", 1, "t", int64(1), "lookout@x:1", now, lease, "src-35"}, index: "task_runs_idempotency_key_key"},
		{name: "tasks: the claim written to the tool", sql: sqlConst(t, tasksQ, "queryConfirming"), args: []any{int64(120001), 1, now}},
		{name: "tasks: start the executor", sql: sqlConst(t, tasksQ, "queryStart"), args: []any{int64(120001), 1, now, "h"}},
		{name: "tasks: end an attempt", sql: sqlConst(t, tasksQ, "queryEnd"),
			args: []any{int64(120001), 1, "completed", now, 0, "{}", "", "", 0, nil, now, "complete", []string{"running"}, false}},
		{name: "tasks: end an attempt for its review", sql: sqlConst(t, tasksQ, "queryEndForReview"),
			args: []any{int64(120001), 1, "reviewing", now, 0, "{}", "", "", 0, nil, now, "", []string{"running"}, false}},
		{name: "review: an evaluator claims pending reviews", sql: sqlConst(t, tasksQ, "queryClaimReviews"),
			args: []any{now, "evaluator-x", 20, now.Add(time.Minute), nil}},
		{name: "tasks: maintenance: decided reviews", sql: sqlConst(t, tasksQ, "queryDecidedReviews"),
			args: []any{taskSources, 100}},
		{name: "tasks: the tool shows the attempt", sql: sqlConst(t, tasksQ, "queryToolDone"),
			args: []any{int64(120039), 1, "complete"}},
		{name: "tasks: maintenance: expired claims", sql: sqlConst(t, tasksQ, "queryExpired"),
			args: []any{taskSources, now, 100}, index: "task_runs_active_idx"},
		{name: "tasks: maintenance: writes to the tool due", sql: sqlConst(t, tasksQ, "queryToolDue"),
			args: []any{taskSources, now, 100, now.Add(time.Minute)}, index: "task_runs_tool_due_idx"},
		{name: "tasks: maintenance: agents' reports", sql: sqlConst(t, tasksQ, "queryReported"),
			args: []any{taskSources, 100}, index: "task_runs_active_idx|task_runs_status_updated_idx"}, // both read only running runs
		{name: "tasks: an agent's report", sql: sqlConst(t, tasksQ, "queryReport"),
			args: []any{int64(120001), "hash", "{}", now}},
		{name: "syncer tasks: the newest task runs", sql: sqlConst(t, tasksQ, "queryList"),
			args: []any{"", "", 20}, index: "task_runs_updated_idx"},
		{name: "syncer tasks SOURCE", sql: sqlConst(t, tasksQ, "queryList"),
			args: []any{"src-7", "", 20}, index: "task_runs_source_updated_idx"},
		{name: "syncer tasks SOURCE RECORD", sql: sqlConst(t, tasksQ, "queryList"),
			args: []any{"src-7", "r-56", 20}}, // task_runs_record_idx or task_runs_record_id_idx
	} {
		q.who = tasksQ
		queries = append(queries, q)
	}
	// The task runs page of the admin with its filters (queryTaskRuns:
	// id, source, status, record_id, owner, then the cursor).
	for _, f := range []struct {
		col, index string
		args       []any
	}{{"", "task_runs_updated_idx", []any{nil, nil, nil, nil, nil}},
		{"source", "task_runs_source_updated_idx", []any{nil, "src-7", nil, nil, nil}},
		{"status", "task_runs_status_updated_idx", []any{nil, nil, "failed", nil, nil}},
		{"record_id", "task_runs_record_id_idx", []any{nil, nil, nil, "r-56", nil}}} {
		q := hotQuery{name: "admin: task runs", who: "internal/control/report_queries.go", sql: sqlConst(t, "internal/control/report_queries.go", "queryTaskRuns"),
			args: f.args, index: f.index}
		if f.col != "" {
			q.name += " of a " + f.col
		}
		queries = append(queries, q)
	}
	// The pruner's statements on a partition three weeks old (the default
	// partition's are the same statements).
	frontier, cutoff := int64(150000), now.Add(-7*24*time.Hour)
	old := retention.WeekOf(now.Add(-21 * 24 * time.Hour))
	for _, st := range retention.Statements(func(table string) string { return retention.PartitionName(table, old) }, frontier, cutoff, 5000) {
		// The NOT IN (sources.run_id) of sync_runs reads sources once per
		// statement, into a hash.
		queries = append(queries, hotQuery{name: fmt.Sprintf("retention: %s %s", st.Name, st.Table),
			who: "internal/retention/pruner.go", sql: st.SQL, args: st.Args, allowSources: true, allowAll: st.Name == "count",
			allowCurrent: true, allowRel: retention.PartitionName(st.Table, old)})
	}
	// The prune queries of the tables pruned by rows through their owners
	// (internal/retention/rows.go), with their cutoffs at the default
	// windows.
	days := func(n int) time.Time { return now.Add(-time.Duration(n) * 24 * time.Hour) }
	for _, q := range []hotQuery{
		{name: "task_runs", who: "internal/tasks/queries.go queryPrune", sql: sqlFrom(t, "internal/tasks/queries.go", "DELETE FROM task_runs"),
			args: []any{days(90), 5000}, index: "task_runs_finished_idx"},
		{name: "inbound_events", who: "internal/inbound/queries.go queryPrune", sql: sqlFrom(t, "internal/inbound/queries.go", "DELETE FROM inbound_events"),
			args: []any{days(30), 5000}, index: "inbound_events_processed_idx"},
		{name: "idempotency_keys", who: "internal/idempotency/queries.go queryPrune", sql: sqlFrom(t, "internal/idempotency/queries.go", "DELETE FROM idempotency_keys"),
			args: []any{days(1), 5000}, index: "idempotency_keys_created_idx"},
		{name: "definition_deletions", who: "internal/definitions/queries.go queryPruneDeletions",
			sql: sqlFrom(t, "internal/definitions/queries.go", "DELETE FROM definition_deletions"), args: []any{days(30), 5000},
			index: "definition_deletions_deleted_idx"},
		{name: "audit_log", who: "internal/audit/queries.go queryPrune", sql: sqlFrom(t, "internal/audit/queries.go", "DELETE FROM audit_log"),
			args: []any{days(365), 5000}, index: "audit_log_at_idx"},
		{name: "model_budgets", who: "internal/semantic/queries.go queryPruneBudgets", sql: sqlFrom(t, "internal/semantic/queries.go", "DELETE FROM model_budgets"),
			args: []any{days(90), 5000}, index: "model_budgets_day_idx"},
		{name: "briefings", who: "internal/semantic/queries.go queryPruneBriefings", sql: sqlFrom(t, "internal/semantic/queries.go", "DELETE FROM briefings WHERE ctid"),
			args: []any{days(90), 5000}, index: "briefings_unused_idx"},
		{name: "verdicts", who: "internal/semantic/queries.go queryPruneVerdicts", sql: sqlFrom(t, "internal/semantic/queries.go", "DELETE FROM verdicts"),
			args: []any{days(90), 5000}, index: "verdicts_created_idx"},
		{name: "sync_run_hours", who: "internal/retention/queries.go pruneRunHours", sql: sqlFrom(t, "internal/retention/queries.go", "DELETE FROM sync_run_hours"),
			args: []any{days(30), 5000}, index: "sync_run_hours_hour_idx"},
		{name: "activity_hour_totals", who: "internal/retention/queries.go pruneActivityHours",
			sql: sqlFrom(t, "internal/retention/queries.go", "DELETE FROM activity_hour_totals"), args: []any{days(90), 5000},
			index: "activity_hour_totals_pkey"},
	} {
		q.name = "retention: " + q.name + " by owner"
		if strings.Contains(q.sql, "$3::text[]") {
			// On one PostgreSQL the prune is one statement over every
			// source or owner (db.PruneEachShard passes NULL); on Citus
			// one per shard, with that shard's keys.
			q.args = append(q.args, []string(nil))
		}
		queries = append(queries, q)
	}
	for _, v := range []string{"report_stuck", "report_overview", "report_recent_failures", "report_high_retry",
		"report_active_sources", "report_disabled_sources", "report_dead_letters"} {
		queries = append(queries, hotQuery{name: "report: " + v, who: "migrations/0005_reports.up.sql",
			sql: "SELECT * FROM " + v, allowSources: true, allowCurrent: true})
	}
	// The admin page's statements (internal/control/report_queries.go), with the
	// arguments its pages pass (NULL: a filter not given, or the cursor
	// of a first page; control.Report plans each for its arguments).
	const adminQ = "internal/control/report_queries.go"
	hour := now.Add(-time.Hour).Truncate(time.Hour)
	// The evaluations behind a count of the drift table: the notify count
	// of today's cell.
	today := now.UTC().Truncate(24 * time.Hour)
	sourcesQ := sqlFrom(t, adminQ, "FROM report_sources\n\t\tWHERE name > $1")
	// sources is querySources' arguments: after, status, state, owner,
	// failing, due.
	sources := func(after string, status, state, owner any, failing, due bool) []any {
		return []any{after, status, state, owner, failing, due}
	}
	stuckQ := sqlFrom(t, adminQ, "SELECT * FROM report_stuck\nWHERE")
	failuresQ := sqlFrom(t, adminQ, "SELECT * FROM report_recent_failures\nWHERE")
	retryQ := sqlFrom(t, adminQ, "SELECT * FROM report_high_retry\nWHERE")
	disabledQ := sqlFrom(t, adminQ, "SELECT * FROM report_disabled_sources\nWHERE")
	deadCountQ := sqlFrom(t, adminQ, "count(*) AS dead FROM report_dead_letters")
	deadQ := sqlFrom(t, adminQ, "SELECT * FROM report_dead_letters\nWHERE")
	taskRunsQ := sqlConst(t, adminQ, "queryTaskRuns")
	taskRunsAfterQ := sqlConst(t, adminQ, "queryTaskRunsAfter")
	runsQ := sqlFrom(t, adminQ, "AS changed, error")
	quietQ := sqlFrom(t, adminQ, "ORDER BY hour DESC, source")
	changesQ := sqlFrom(t, adminQ, "changed_fields, created_at, run_id, eval_status\n")
	evaluationsQ := sqlFrom(t, adminQ, "decision, reason, urgency, created_at\n\t\tFROM evaluations")
	notificationsQ := sqlFrom(t, adminQ, "change_id, attempts, created_at, delivered_at, last_error")
	modelCallsQ := sqlFrom(t, adminQ, "prompt_tokens, output_tokens, created_at\n\t\tFROM model_calls")
	pendingChangesQ := sqlFrom(t, adminQ, "eval_next_at, eval_owner, eval_error")
	pendingNotificationsQ := sqlFrom(t, adminQ, "next_attempt_at, digest_due_at, lease_owner")
	driftRows := sqlConst(t, adminQ, "queryDriftRows")
	for _, q := range []hotQuery{
		{name: "admin: overview charts", sql: sqlFrom(t, adminQ, "SELECT * FROM report_activity_hourly"), allowSources: true,
			index: "activity_hour_totals_pkey"},
		{name: "admin: a page of sources", sql: sourcesQ, args: sources("src-100", "active", nil, nil, false, false), index: "sources_pkey"},
		{name: "admin: due sources", sql: sourcesQ, args: sources("", nil, "due", nil, false, false), index: "sources_due_idx"},
		{name: "admin: sources whose lease expired", sql: sourcesQ, args: sources("", nil, "lease expired", nil, false, false),
			index: "sources_lease_expires_idx"},
		{name: "admin: a source", sql: sqlFrom(t, adminQ, "FROM report_sources WHERE name = $1"), args: []any{"src-6"}, index: "sources_pkey"},
		{name: "admin: a source's runs", sql: sqlFrom(t, adminQ, "started_at - due_at AS late, items_seen, items_created"), args: []any{"src-6"},
			index: "sync_runs_source_started_idx"},
		{name: "admin: a source's quiet hours", sql: sqlFrom(t, adminQ, "WHERE source = $1\n\t\tORDER BY hour DESC"), args: []any{"src-6"}},
		{name: "admin: a source's records", sql: sqlFrom(t, adminQ, "WHERE source = $1 AND record_id > $2"), args: []any{"src-6", ""},
			index: "records_pkey"},
		{name: "admin: a record", sql: sqlFrom(t, adminQ, "first_seen_at, synced_at, deleted_at, last_run_id"), args: []any{"src-1", "hot"},
			index: "records_pkey"},
		{name: "admin: a record's changes", sql: sqlFrom(t, adminQ, "eval_attempts, evaluated_at, eval_error"), args: []any{"src-1", "hot"},
			index: "changes_record_idx"},
		{name: "admin: trail evaluations", sql: sqlFrom(t, adminQ, "notification_id, evaluator, created_at\n\t\tFROM evaluations"),
			args: []any{[]int64{10000, 9999}}, index: "evaluations_change_id_watch_key"},
		{name: "admin: trail model calls", sql: sqlFrom(t, adminQ, "prompt_tokens, output_tokens, error, created_at\n\t\tFROM model_calls"),
			args: []any{[]int64{10000, 9999}}, index: "model_calls_change_idx"},
		{name: "admin: trail notifications", sql: sqlFrom(t, adminQ, "next_attempt_at, delivered_at, last_error\n\t\tFROM notifications"),
			args: []any{[]int64{10000, 9999}}, index: "notifications_change_idx"},
		{name: "admin: stuck", sql: stuckQ, args: []any{nil, nil, nil, nil, nil, nil, nil}, allowSources: true},
		{name: "admin: stuck, second page", sql: stuckQ, args: []any{nil, nil, nil, now.Add(-time.Hour), "change_lease_expired", nil, "src-6"},
			allowSources: true},
		{name: "admin: recent failures, second page", sql: failuresQ,
			args: []any{nil, nil, nil, nil, nil, now.Add(-time.Hour), "evaluation", int64(500), nil, "failed"}, allowSources: true},
		{name: "admin: task runs, second page", sql: taskRunsAfterQ, args: []any{nil, nil, nil, nil, nil, int64(120001)},
			index: "task_runs_updated_idx"},
		{name: "admin: rows of an hour: changes, second page", sql: changesQ,
			args: []any{hour, hour.Add(time.Hour), nil, nil, nil, nil, hour.Add(30 * time.Minute), int64(5000)}},
		{name: "admin: recent failures", sql: failuresQ, args: []any{"sync_run", nil, nil, nil, nil, nil, nil, nil, nil, nil}, allowSources: true},
		{name: "admin: high retry", sql: retryQ, args: []any{nil, nil, nil, nil, nil, nil, nil}, allowSources: true},
		{name: "admin: disabled", sql: disabledQ, args: []any{nil, nil, nil, nil}, allowSources: true},
		{name: "admin: dead per sink", sql: deadCountQ, args: []any{nil, nil}, index: "notifications_dead_idx"},
		{name: "admin: dead letters", sql: deadQ, args: []any{nil, nil, nil, nil, nil}, index: "notifications_dead_idx"},
		{name: "admin: dead letters, second page", sql: deadQ, args: []any{nil, nil, nil, now.Add(-time.Hour), int64(400)},
			index: "notifications_dead_idx"},
		{name: "admin: dead letters of a sink, second page", sql: deadQ, args: []any{"hook", nil, nil, now.Add(-time.Hour), int64(400)},
			index: "notifications_dead_idx"},
		{name: "admin: expensive model calls", sql: sqlFrom(t, adminQ, "report_expensive_evaluations, the 51 slowest calls first"), args: []any{nil},
			index: "model_calls_created_idx"},
		// The rollup of 14 days (migration 44): a small table, which the
		// planner may read whole; TestModelsPageReadsNoHistory bounds it.
		{name: "admin: model drift", sql: sqlFrom(t, adminQ, "FROM report_model_drift_daily")},
		{name: "admin: an owner's model drift", sql: sqlFrom(t, adminQ, "FROM model_drift_days\n"), args: []any{"alice"},
			index: "model_drift_days_owner_idx"},
		{name: "admin: the notify decisions behind a drift number", sql: driftRows, args: []any{today, "llama3.2", "sha256:aaa", "pv-1", "",
			today.Add(24 * time.Hour), int64(0), "notify"}, index: "evaluations_judged_created_idx"},
		{name: "admin: alice's notify decisions behind a drift number, second page", sql: driftRows, args: []any{today, "llama3.2", "sha256:aaa",
			"pv-1", "alice", today.Add(time.Hour), int64(123), "notify"}, index: "evaluations_judged_created_idx"},
		{name: "admin: dead letters of a sink", sql: deadQ, args: []any{"hook", nil, nil, nil, nil}, index: "notifications_dead_idx"},
		{name: "admin: dead letters of an owner", sql: deadQ, args: []any{nil, nil, "alice", nil, nil}},
		{name: "admin: dead per sink of an owner", sql: deadCountQ, args: []any{nil, "alice"}},
		{name: "admin: recent failures of a source", sql: failuresQ, args: []any{nil, "src-6", nil, nil, nil, nil, nil, nil, nil, nil},
			allowSources: true},
		{name: "admin: stuck work of a kind", sql: stuckQ, args: []any{"source_overdue", nil, nil, nil, nil, nil, nil}, allowSources: true},
		{name: "admin: failing sources", sql: sourcesQ, args: sources("", nil, nil, nil, true, false)},
		{name: "admin: requested sources", sql: sourcesQ, args: sources("", nil, "requested", nil, false, false)},
		{name: "admin: running sources", sql: sourcesQ, args: sources("", nil, "running", nil, false, false), index: "sources_lease_expires_idx"},
		{name: "admin: rows of an hour: quiet runs", sql: quietQ, args: []any{hour, hour.Add(time.Hour), nil, nil, nil, nil},
			index: "sync_run_hours_hour_idx"},
		{name: "admin: rows of an hour: one source's runs", sql: runsQ, args: []any{hour, hour.Add(time.Hour), "src-6", nil, nil, false, nil, nil, nil}},
		{name: "admin: rows of an hour: one source's changes", sql: changesQ, args: []any{hour, hour.Add(time.Hour), "src-6", nil, nil, nil, nil, nil}},
		{name: "admin: owners", sql: sqlFrom(t, adminQ, "SELECT owner FROM source_definitions"), index: "source_definitions_owner_idx"},
		{name: "admin: a page of alice's sources", sql: sourcesQ, args: sources("", nil, nil, "alice", false, false), allowSources: true},
		{name: "admin: rows of an hour: runs", sql: runsQ, args: []any{hour, hour.Add(time.Hour), nil, nil, nil, false, nil, nil, nil},
			index: "sync_runs_started_idx"},
		{name: "admin: rows of an hour: changes", sql: changesQ, args: []any{hour, hour.Add(time.Hour), nil, nil, nil, nil, nil, nil},
			index: "changes_created_idx"},
		{name: "admin: rows of an hour: evaluations", sql: evaluationsQ, args: []any{hour, hour.Add(time.Hour), nil, nil, nil, nil, nil},
			index: "evaluations_created_idx"},
		{name: "admin: rows of an hour: notifications", sql: notificationsQ, args: []any{hour, hour.Add(time.Hour), nil, nil, nil, nil, nil},
			index: "notifications_created_idx"},
		{name: "admin: rows of an hour: model calls", sql: modelCallsQ, args: []any{hour, hour.Add(time.Hour), nil, nil, nil, nil},
			index: "model_calls_created_idx"},
		{name: "admin: pending changes", sql: pendingChangesQ, args: []any{nil, nil, nil}, index: "changes_pending_idx"},
		{name: "admin: pending and held notifications", sql: pendingNotificationsQ, args: []any{nil, nil, nil, nil}},
		// The filters of the lists behind numbers (rowQueries' filters; a
		// key filter's list spans all time).
		{name: "admin: sources due now", sql: sourcesQ, args: sources("", nil, nil, nil, false, true), index: "sources_due_idx"},
		{name: "admin: failed runs of an hour", sql: runsQ,
			args: []any{hour, hour.Add(time.Hour), nil, nil, nil, false, []string{"failed", "deferred", "abandoned"}, nil, nil}},
		{name: "admin: a run", sql: runsQ, args: []any{allSince, allUntil, "src-6", nil, int64(5000), false, nil, nil, nil},
			index: "sync_runs_source_started_idx"},
		{name: "admin: when a source last succeeded", sql: sqlFrom(t, adminQ, "SELECT last_success_at FROM sources"), args: []any{"src-6"},
			index: "sources_pkey"},
		{name: "admin: a source's failed runs (it never succeeded)", sql: runsQ, args: []any{allSince, allUntil, "src-6", nil, nil, true, nil, nil, nil},
			index: "sync_runs_source_started_idx"},
		{name: "admin: a source's failed runs since its last success", sql: runsQ,
			args: []any{now.Add(-24 * time.Hour), allUntil, "src-6", nil, nil, true, nil, nil, nil}},
		{name: "admin: a run's changes of a kind", sql: changesQ,
			args: []any{allSince, allUntil, "src-6", nil, []string{"created"}, int64(5000), nil, nil}},
		{name: "admin: notify decisions of an hour", sql: evaluationsQ,
			args: []any{hour, hour.Add(time.Hour), nil, nil, []string{"notify"}, nil, nil}, index: "evaluations_created_idx"},
		{name: "admin: a notification", sql: notificationsQ, args: []any{allSince, allUntil, nil, nil, int64(300), nil, nil},
			index: "notifications_pkey"},
		{name: "admin: pending notifications", sql: pendingNotificationsQ, args: []any{nil, nil, []string{"pending"}, nil}},
		{name: "admin: a task run", sql: taskRunsQ, args: []any{int64(120001), nil, nil, nil, nil}, index: "task_runs_pkey"},
	} {
		q.who = adminQ
		q.allowCurrent = true // a report page
		queries = append(queries, q)
	}
	// The admin pages of one owner (?owner=alice): the owner's overview,
	// the report views' owner columns (migration 26), the models page's
	// expensive calls, as the pages filter them.
	for _, q := range []hotQuery{
		{name: "admin: an owner's overview", sql: sqlFrom(t, adminQ, "FROM report_owner_overview"), args: []any{"alice"}, allowSources: true},
		{name: "admin: an owner's stuck work", sql: stuckQ, args: []any{nil, nil, "alice", nil, nil, nil, nil}, allowSources: true},
		{name: "admin: an owner's recent failures", sql: failuresQ, args: []any{nil, nil, nil, nil, "alice", nil, nil, nil, nil, nil},
			allowSources: true},
		{name: "admin: an owner's failed runs", sql: failuresQ, args: []any{"sync_run", nil, nil, nil, "alice", nil, nil, nil, nil, nil},
			allowSources: true},
		{name: "admin: an owner's high retry", sql: retryQ, args: []any{nil, nil, "alice", nil, nil, nil, nil}, allowSources: true},
		{name: "admin: an owner's disabled sources", sql: disabledQ, args: []any{nil, "alice", nil, nil}, allowSources: true},
		{name: "admin: an owner's task runs", sql: taskRunsQ, args: []any{nil, nil, nil, nil, "alice"}},
		{name: "admin: an owner's expensive model calls", sql: sqlFrom(t, adminQ, "report_expensive_evaluations, the 51 slowest calls first"),
			args: []any{"alice"}, index: "model_calls_created_idx"},
		{name: "admin: an owner's runs of an hour", sql: runsQ, args: []any{hour, hour.Add(time.Hour), nil, "alice", nil, false, nil, nil, nil},
			index: "sync_runs_started_idx"},
		{name: "admin: an owner's quiet runs of an hour", sql: quietQ, args: []any{hour, hour.Add(time.Hour), nil, "alice", nil, nil}},
		{name: "admin: an owner's changes of an hour", sql: changesQ, args: []any{hour, hour.Add(time.Hour), nil, "alice", nil, nil, nil, nil},
			index: "changes_created_idx"},
		{name: "admin: an owner's pending changes", sql: pendingChangesQ, args: []any{nil, "alice", nil}, index: "changes_pending_idx"},
		{name: "admin: an owner's pending and held notifications", sql: pendingNotificationsQ, args: []any{nil, "alice", nil, nil}},
		{name: "admin: scheduled sources", sql: sourcesQ, args: sources("", nil, "scheduled", nil, false, false), allowSources: true},
	} {
		q.who, q.allowCurrent = adminQ, true
		queries = append(queries, q)
	}
	cookbookVars := map[string]string{"source": "src-6", "record_id": "r-5", "run_id": "5000"}
	for _, b := range cookbook(t) {
		if !strings.HasPrefix(b.heading, "1. ") && !strings.HasPrefix(b.heading, "2. ") && !strings.HasPrefix(b.heading, "3. ") &&
			!strings.HasPrefix(b.heading, "4. ") && !strings.HasPrefix(b.heading, "5. ") && !strings.HasPrefix(b.heading, "6. ") {
			continue // 7. reads whole tables by design (docs/cookbook.md, cost of the views)
		}
		sql, err := substitute(b.sql, cookbookVars)
		if err != nil {
			t.Fatal(err)
		}
		q := hotQuery{name: "cookbook: " + b.heading, who: "docs/cookbook.md", sql: sql, allowCurrent: true}
		switch b.heading[:2] {
		case "4.":
			q.index = "changes_run_brin"
		}
		queries = append(queries, q)
	}

	// A partition's index is its parent's (the name the queries were
	// given); an empty partition (the weeks ahead) may be read whole.
	parentIndex, small := map[string]string{}, map[string]bool{}
	rows, err := pool.Query(ctx, `
		SELECT c.relname, p.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_class p ON p.oid = i.inhparent
		WHERE c.relkind = 'i' AND c.relnamespace = current_schema()::regnamespace`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var child, parent string
		if err := rows.Scan(&child, &parent); err != nil {
			t.Fatal(err)
		}
		parentIndex[child] = parent
	}
	rows.Close()
	rows, err = pool.Query(ctx, `SELECT relname FROM pg_class WHERE relnamespace = current_schema()::regnamespace
		AND relkind = 'r' AND relispartition AND reltuples < 1000`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var rel string
		if err := rows.Scan(&rel); err != nil {
			t.Fatal(err)
		}
		small[rel] = true
	}
	rows.Close()

	current := "_" + retention.PartitionName("", retention.WeekOf(now))[1:]
	var doc strings.Builder
	// check fails q when plan p (of kind "" or "generic plan") reads a
	// large table whole, misses the index q was given, or reads a week
	// before q.since; it writes p to doc.
	check := func(q hotQuery, kind string, p plan) {
		var lines []string
		var bad []string
		usesIndex := false
		p.walk(0, func(n plan, depth int) {
			lines = append(lines, strings.Repeat("  ", depth)+n.describe())
			for _, want := range strings.Split(q.index, "|") { // alternatives the planner may choose between
				usesIndex = usesIndex || n.IndexName == want || parentIndex[n.IndexName] == want
			}
			if n.NodeType != "Seq Scan" || q.allowAll || small[n.RelationName] || n.RelationName == q.allowRel ||
				(q.allowCurrent && strings.HasSuffix(n.RelationName, current)) {
				return
			}
			if slices.Contains(bigTables, table(n.RelationName)) || (n.RelationName == "sources" && !q.allowSources) {
				bad = append(bad, n.RelationName)
			}
		})
		tree := strings.Join(lines, "\n")
		name := q.name
		if kind != "" {
			name += ", " + kind + ","
		}
		if len(bad) > 0 {
			t.Errorf("%s (%s) reads %v whole:\n%s", name, q.who, bad, tree)
		}
		if q.index != "" && !usesIndex {
			t.Errorf("%s (%s) does not use %s:\n%s", name, q.who, q.index, tree)
		}
		if !q.since.IsZero() {
			if early := earlierPartitions(p, q.since); len(early) > 0 {
				t.Errorf("%s (%s) reads %v, weeks before its rows' %s:\n%s", name, q.who, early, q.since.UTC().Format(time.DateOnly), tree)
			}
		}
		fmt.Fprintf(&doc, "%s (%s), cost %.0f:\n%s\n\n", name, q.who, p.Total, indent(tree))
	}
	for _, q := range queries {
		p, err := explain(ctx, pool, q)
		if err != nil {
			t.Errorf("%s: explain: %v\n%s", q.name, err, q.sql)
			continue
		}
		check(q, "", p)
		if q.since.IsZero() {
			continue
		}
		g, err := explainGeneric(ctx, pool, q)
		if err != nil {
			t.Errorf("%s: explain the generic plan: %v\n%s", q.name, err, q.sql)
			continue
		}
		check(q, "generic plan", g)
	}
	if testing.Verbose() {
		t.Log("\n" + doc.String())
	}
	if out := os.Getenv("LOOKOUT_PLANS"); out != "" {
		if err := os.WriteFile(out, []byte(doc.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// checkWholeWeeks fails t unless every week of the partitioned history
// before the current one is whole: its rows run from the first hour of
// its Monday to the last hour of its Sunday (UTC), so that the plans do not
// depend on the day the test runs (see history).
func checkWholeWeeks(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	for _, tc := range []struct{ table, key string }{
		{"changes", "created_at"}, {"evaluations", "change_created_at"}, {"notifications", "created_at"},
		{"sync_runs", "started_at"}, {"model_calls", "created_at"},
	} {
		rows, err := pool.Query(context.Background(), fmt.Sprintf(`
			SELECT w, min(k) - w, w + interval '1 week' - max(k)
			FROM (SELECT %[1]s AS k, date_trunc('week', %[1]s AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AS w FROM %[2]s) x
			WHERE w < date_trunc('week', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'
			GROUP BY w ORDER BY w`, tc.key, tc.table))
		if err != nil {
			t.Fatal(err)
		}
		weeks := 0
		for rows.Next() {
			var week time.Time
			var head, tail time.Duration
			if err := rows.Scan(&week, &head, &tail); err != nil {
				t.Fatal(err)
			}
			weeks++
			if head > time.Hour || tail > time.Hour {
				t.Errorf("%s: the week of %s is not whole: its rows start %s after its Monday and end %s before its end",
					tc.table, week.UTC().Format(time.DateOnly), head, tail)
			}
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		if weeks < 3 {
			t.Errorf("%s: %d weeks of history before the current one, want at least 3", tc.table, weeks)
		}
	}
}

// md5hex is PostgreSQL's md5(s).
func md5hex(s string) string {
	sum := md5.Sum([]byte(s))
	return hex.EncodeToString(sum[:])
}

func indent(s string) string { return "    " + strings.ReplaceAll(s, "\n", "\n    ") }
