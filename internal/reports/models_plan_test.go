package reports

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/lookout-dev/lookout/internal/pgtest"
)

// judgedDays is the 14 days up to now of model-judged decisions, 1,000
// a day: each a model call and its evaluation (a model step, or every
// fifth a cache hit answered by the call of the day before), two model
// digests (the newer one for the last five days), owners alice, bob and
// none; and as many deterministic decisions, which the drift does not
// count.
const judgedDays = `
INSERT INTO model_calls (id, source, record_id, watch, model, model_digest, prompt_version, input_ref, input_hash, outcome,
                         latency_ms, prompt_tokens, output_tokens, created_at, owner)
SELECT i, 'src-' || i % 50, 'r-' || i, 'w', 'llama3.2', CASE WHEN i > 9000 THEN 'sha256:bbb' ELSE 'sha256:aaa' END, 'pv-1',
       'change:' || i, md5(i::text), 'ok', 300 + i % 1000, 400, 40,
       now() - (14000 - i) * interval '1 day' / 1000,
       (ARRAY['alice', 'bob', ''])[1 + i % 3]
FROM generate_series(1, 14000) i;
-- Counted as the evaluator counts the evaluations it inserts (migration 57).
WITH ins AS (
INSERT INTO evaluations (change_id, source, record_id, watch, step, matched, decision, confidence, model_call_id, evaluator,
                         created_at, owner, change_created_at)
SELECT i, 'src-' || i % 50, 'r-' || i, 'w', CASE WHEN i % 5 = 0 AND i > 1000 THEN 'cache' ELSE 'model' END, true,
       CASE WHEN i % 4 = 0 THEN 'notify' ELSE 'skip' END, 0.5 + (i % 5) / 10.0,
       CASE WHEN i % 5 = 0 AND i > 1000 THEN i - 1000 ELSE i END, 'evaluator-1',
       now() - (14000 - i) * interval '1 day' / 1000,
       (ARRAY['alice', 'bob', ''])[1 + i % 3], now() - (14000 - i) * interval '1 day' / 1000
FROM generate_series(1, 14000) i
RETURNING created_at, decision, step, owner, confidence, model_call_id)
SELECT count_evaluations(array_agg(created_at), array_agg(decision), array_agg(step), array_agg(owner), array_agg(confidence),
                         array_agg(model_call_id))
FROM ins;
INSERT INTO evaluations (change_id, source, record_id, watch, step, matched, decision, evaluator, created_at, owner, change_created_at)
SELECT 100000 + i, 'src-' || i % 50, 'r-' || i, 'w', 'filter', false, 'skip', 'evaluator-1',
       now() - i * interval '1 day' / 1000, '', now() - i * interval '1 day' / 1000
FROM generate_series(1, 14000) i;
ANALYZE model_calls, evaluations;
`

// TestModelsPageReadsNoHistory: every statement of /admin/models reads a
// bounded number of rows, whatever the history holds: the drift table of
// 14 days (the fleet's and an owner's) reads no evaluation and no model
// call — it reads their per-day rollup — and the most expensive calls read
// the model calls of their 24 hours and 51 evaluations at most. On the
// admin benchmark's 10 million changes the drift read the 45,000
// model-judged evaluations of 14 days and their model calls on every
// request (docs/benchmarks.md, (9)). Checked on the rows the plans' scans
// returned and discarded (EXPLAIN ANALYZE); no timing.
func TestModelsPageReadsNoHistory(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, judgedDays); err != nil {
		t.Fatalf("fill: %v", err)
	}
	// A held decision replaced by the model's (the evaluator's ON
	// CONFLICT … DO UPDATE), and a model step changed in place.
	if _, err := pool.Exec(ctx, `
		INSERT INTO evaluations (change_id, source, record_id, watch, step, matched, decision, evaluator, created_at, owner, change_created_at)
		VALUES (200001, 'src-1', 'r-h', 'w', 'budget', true, 'hold', 'evaluator-1', now(), 'bob', now());
		UPDATE evaluations SET step = 'model', decision = 'notify', confidence = 0.9, model_call_id = 13999
		WHERE change_id = 200001;
		UPDATE evaluations SET decision = 'duplicate', confidence = NULL WHERE change_id = 13998`); err != nil {
		t.Fatal(err)
	}
	// The drift as the view before migration 44 computed it from the
	// evaluations, beside the view's and the owner's statement.
	const fromHistory = `
		SELECT date_trunc('day', e.created_at, 'UTC') AS day, mc.model, mc.model_digest, mc.prompt_version,
		       count(*) AS evaluations, count(*) FILTER (WHERE e.step = 'model') AS judged,
		       count(*) FILTER (WHERE e.step = 'cache') AS cache_hits,
		       count(*) FILTER (WHERE e.decision IN ('notify', 'duplicate')) AS notify,
		       count(*) FILTER (WHERE e.decision = 'skip') AS skip,
		       round((count(*) FILTER (WHERE e.decision IN ('notify', 'duplicate')))::numeric / count(*), 3) AS notify_rate,
		       round(avg(e.confidence)::numeric, 3) AS avg_confidence
		FROM evaluations e JOIN model_calls mc ON mc.id = e.model_call_id
		WHERE e.step IN ('model', 'cache') AND e.created_at >= date_trunc('day', now(), 'UTC') - interval '13 days'
		  AND ($1 = '*' OR e.owner = $1)
		GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4`
	rowsOf := func(sql string, args ...any) []string {
		t.Helper()
		rows, err := pool.Query(ctx, sql, args...)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out []string
		for rows.Next() {
			v, err := rows.Values()
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, fmt.Sprint(v))
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	for _, c := range []struct{ owner, sql string }{
		{"*", `SELECT * FROM report_model_drift_daily`},
		{"alice", sqlConst(t, "internal/control/report_queries.go", "queryDriftOwner")},
		{"bob", sqlConst(t, "internal/control/report_queries.go", "queryDriftOwner")},
		{"", sqlConst(t, "internal/control/report_queries.go", "queryDriftOwner")},
	} {
		want := rowsOf(fromHistory, c.owner)
		var got []string
		if c.owner == "*" {
			got = rowsOf(c.sql)
		} else {
			got = rowsOf(c.sql, c.owner)
		}
		if len(want) < 10 || strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("owner %q: the drift reads\n%s\nthe evaluations say\n%s", c.owner, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
	const adminQ = "internal/control/report_queries.go"
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	for _, q := range []struct {
		name string
		sql  string
		args []any
		// history: the most rows it may read of evaluations and
		// model_calls; any: of every table.
		history, any float64
	}{
		{"model drift", sqlConst(t, adminQ, "queryDrift"), nil, 0, 500},
		{"an owner's model drift", sqlConst(t, adminQ, "queryDriftOwner"), []any{"alice"}, 0, 200},
		// A day holds 1,000 model calls; 51 of them probe their evaluation.
		{"expensive model calls", sqlConst(t, adminQ, "queryExpensive"), []any{nil}, 1100, 1200},
		{"an owner's expensive model calls", sqlConst(t, adminQ, "queryExpensive"), []any{"alice"}, 1100, 1200},
		{"owners", sqlConst(t, adminQ, "queryOwners"), nil, 0, 100},
	} {
		p, err := explainAnalyzed(ctx, conn, q.sql, q.args...)
		if err != nil {
			t.Fatalf("%s: %v", q.name, err)
		}
		var lines []string
		var history, all float64
		p.walk(0, func(n plan, depth int) {
			s := strings.Repeat("  ", depth) + strings.TrimSpace(n.JoinType+" "+n.NodeType)
			if n.IndexName != "" {
				s += " using " + n.IndexName
			}
			if n.RelationName != "" {
				s += " on " + n.RelationName
			}
			lines = append(lines, fmt.Sprintf("%s (rows %.0f, loops %.0f, removed %.0f, buffers %d)", s, n.ActualRows, n.Loops, n.RemovedByFilter, n.Hit+n.Read))
			if n.RelationName == "" {
				return
			}
			read := (n.ActualRows + n.RemovedByFilter) * n.Loops
			all += read
			if tb := table(n.RelationName); tb == "evaluations" || tb == "model_calls" {
				history += read
			}
		})
		tree := strings.Join(lines, "\n")
		t.Logf("%s:\n%s", q.name, tree)
		if history > q.history {
			t.Errorf("%s read %.0f rows of evaluations and model calls, want at most %.0f: it reads the history:\n%s", q.name, history, q.history, tree)
		}
		if all > q.any {
			t.Errorf("%s read %.0f rows, want at most %.0f:\n%s", q.name, all, q.any, tree)
		}
	}
}
