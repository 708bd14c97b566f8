package retention

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/db"
	"github.com/lookout-dev/lookout/internal/idempotency"
	"github.com/lookout-dev/lookout/internal/metrics"
	"github.com/lookout-dev/lookout/internal/pgtest"
)

// rowCase is one table pruned by rows through its owner: the rows a test
// inserts (labelled), the window, and the labels that must survive.
type rowCase struct {
	table string
	conf  Config
	// fill inserts five rows that must go and some that must stay.
	fill func(f *fixture)
	// labels reads the labels of the rows left.
	labels string
	keep   []string
}

// pruneRows checks a table pruned by rows: a dry run counts the five old
// rows and deletes nothing; the prune deletes them in batches of two
// (three statements, the last one short) and keeps the rest; a second
// prune finds nothing.
func pruneRows(t *testing.T, c rowCase) {
	t.Helper()
	f := newFixture(t)
	c.fill(f)
	all := f.labels(c.labels)
	c.conf.BatchSize = 2
	m := metrics.New()
	c.conf.Metrics = m
	p := f.pruner(c.conf)
	ctx := context.Background()

	dry, err := p.DryRun(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if tr := tableResult(t, dry, c.table); tr.Rows != 5 || tr.Batches != 0 {
		t.Errorf("dry run: %s would delete %d rows in %d batches, want 5 in 0", c.table, tr.Rows, tr.Batches)
	}
	if got := f.labels(c.labels); !slices.Equal(got, all) {
		t.Fatalf("the dry run deleted rows: %v, want %v", got, all)
	}

	res, err := p.Prune(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if tr := tableResult(t, res, c.table); tr.Rows != 5 || tr.Batches != 3 {
		t.Errorf("%s: deleted %d rows in %d batches, want 5 in 3 (batches of 2)", c.table, tr.Rows, tr.Batches)
	}
	if got := f.labels(c.labels); !slices.Equal(got, c.keep) {
		t.Errorf("%s after prune: %v, want %v", c.table, got, c.keep)
	}
	if got := counter(t, m, "lookout_retention_rows_pruned_total", c.table); got != 5 {
		t.Errorf("lookout_retention_rows_pruned_total{table=%q} = %v, want 5", c.table, got)
	}

	again, err := p.Prune(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if tr := tableResult(t, again, c.table); tr.Rows != 0 || tr.Batches != 1 {
		t.Errorf("a second prune of %s deleted %d rows in %d batches, want 0 in 1", c.table, tr.Rows, tr.Batches)
	}
}

// counter reads the value of a counter of m for table.
func counter(t *testing.T, m *metrics.Metrics, name, table string) float64 {
	t.Helper()
	families, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, fam := range families {
		if fam.GetName() != name {
			continue
		}
		for _, s := range fam.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "table" && l.GetValue() == table {
					return s.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no %s{table=%q}", name, table)
	return 0
}

// The rows' ages: their times are the fixture's clock less these
// (fixture.ago), as are the pruner's cutoffs (Config.Now).
const (
	day  = 24 * time.Hour
	week = 7 * day
)

// Finished task runs that will not be tried again and whose state the
// tool shows are pruned; attempts in progress, runs waiting for a retry
// and runs whose tool write is due are not.
func TestPruneTaskRuns(t *testing.T) {
	t.Parallel()
	run := func(f *fixture, label, status, finished, retry, tool string) {
		f.exec(`INSERT INTO task_runs (source, task, record_id, record_version, content_version, idempotency_key, title,
		            run_id, status, claimed_by, claimed_at, claim_expires_at, finished_at, retry_at, tool_action, executor)
		        VALUES ('s', 't', $1, 1, 'v1', 's:' || $1 || ':v1:t', $1, 'run-x', $2, 'syncer-1', `+f.ago(30*day)+`,
		                `+f.ago(30*day)+` + interval '30 minutes', `+finished+`, `+retry+`, nullif($3, ''), 'command')`,
			label, status, tool)
	}
	pruneRows(t, rowCase{table: "task_runs", conf: Config{TaskRuns: week},
		fill: func(f *fixture) {
			run(f, "old-completed-1", "completed", f.ago(30*day), "NULL", "")
			run(f, "old-completed-2", "completed", f.ago(30*day), "NULL", "")
			run(f, "old-failed", "failed", f.ago(30*day), "NULL", "")
			run(f, "old-released-no-retry", "released", f.ago(30*day), "NULL", "")
			run(f, "old-lost-no-retry", "lost", f.ago(30*day), "NULL", "")
			run(f, "keep-old-running", "running", "NULL", "NULL", "")
			run(f, "keep-old-claimed", "claimed", "NULL", "NULL", "")
			run(f, "keep-old-released-retry-due", "released", f.ago(30*day), f.ago(30*day), "")
			run(f, "keep-old-expired-retry-due", "expired", f.ago(30*day), f.ago(30*day), "")
			run(f, "keep-old-completed-tool-write-due", "completed", f.ago(30*day), "NULL", "complete")
			run(f, "keep-recent-completed", "completed", f.ago(time.Hour), "NULL", "")
		},
		labels: `SELECT title FROM task_runs`,
		keep: []string{"keep-old-claimed", "keep-old-completed-tool-write-due", "keep-old-expired-retry-due",
			"keep-old-released-retry-due", "keep-old-running", "keep-recent-completed"},
	})
}

// Processed webhook events are pruned; one not processed yet (pending, or
// claimed by a syncer) is not, however old.
func TestPruneInboundEvents(t *testing.T) {
	t.Parallel()
	event := func(f *fixture, label string, valid bool, processed, outcome, claimed string) {
		payload := `'{}'`
		if !valid {
			payload = "NULL"
		}
		f.exec(`INSERT INTO inbound_events (source, delivery_id, signature_valid, payload, payload_hash, received_at,
		            processed_at, outcome, claimed_by, claim_expires_at)
		        VALUES ('s', $1, $2, `+payload+`, 'h', `+f.ago(30*day)+`, `+processed+`, nullif($3, ''), nullif($4, ''),
		                CASE WHEN $4 <> '' THEN now() + interval '1 minute' END)`, label, valid, outcome, claimed)
	}
	pruneRows(t, rowCase{table: "inbound_events", conf: Config{InboundEvents: week},
		fill: func(f *fixture) {
			event(f, "old-created", true, f.ago(30*day), "created", "")
			event(f, "old-unchanged", true, f.ago(30*day), "unchanged", "")
			event(f, "old-ignored", true, f.ago(30*day), "ignored", "")
			event(f, "old-failed", true, f.ago(30*day), "failed", "")
			event(f, "old-rejected", false, f.ago(30*day), "rejected", "")
			event(f, "keep-old-pending", true, "NULL", "", "")
			event(f, "keep-old-claimed", true, "NULL", "", "syncer-1")
			f.exec(`INSERT INTO inbound_events (source, delivery_id, signature_valid, payload, payload_hash, received_at, processed_at, outcome)
			        VALUES ('s', 'keep-recent', true, '{}', 'h', ` + f.ago(0) + `, ` + f.ago(0) + `, 'created')`)
		},
		labels: `SELECT delivery_id FROM inbound_events`,
		keep:   []string{"keep-old-claimed", "keep-old-pending", "keep-recent"},
	})
}

// Idempotency keys past their 24h window are pruned; a key in its window
// is not.
func TestPruneIdempotencyKeys(t *testing.T) {
	t.Parallel()
	if RetentionKeysMin := config.RetentionIdempotencyKeysDefault; RetentionKeysMin != idempotency.TTLDefault {
		t.Fatalf("retention.idempotency_keys defaults to %s, the keys' window is %s", RetentionKeysMin, idempotency.TTLDefault)
	}
	key := func(f *fixture, label, at string) {
		f.exec(`INSERT INTO idempotency_keys (owner, key, operation, request_hash, status, response, created_at)
		        VALUES ('alice', $1, 'create_source', 'h', 201, '{}', `+at+`)`, label)
	}
	pruneRows(t, rowCase{table: "idempotency_keys", conf: Config{IdempotencyKeys: 24 * time.Hour},
		fill: func(f *fixture) {
			for _, l := range []string{"old-1", "old-2", "old-3", "old-4", "old-5"} {
				key(f, l, f.ago(2*day))
			}
			key(f, "keep-in-window", f.ago(23*time.Hour))
			key(f, "keep-new", f.ago(0))
		},
		labels: `SELECT key FROM idempotency_keys`,
		keep:   []string{"keep-in-window", "keep-new"},
	})
}

// The records of deleted definitions are pruned by age.
func TestPruneDefinitionDeletions(t *testing.T) {
	t.Parallel()
	pruneRows(t, rowCase{table: "definition_deletions", conf: Config{DefinitionDeletions: week},
		fill: func(f *fixture) {
			f.exec(`INSERT INTO definition_deletions (version, source, managed_by, deleted_at)
			        SELECT i, 'old-' || i, 'api', ` + f.ago(30*day) + ` FROM generate_series(1, 5) i`)
			f.exec(`INSERT INTO definition_deletions (version, source, managed_by, deleted_at) VALUES (6, 'keep-recent', 'api', ` + f.ago(0) + `)`)
		},
		labels: `SELECT source FROM definition_deletions`,
		keep:   []string{"keep-recent"},
	})
}

// Sign-in links of /me that expired, or were used, before the cutoff are
// pruned; a link still valid, or used or expired since, is not.
func TestPruneSignInLinks(t *testing.T) {
	t.Parallel()
	pruneRows(t, rowCase{table: "sign_in_links", conf: Config{SignInLinks: week},
		fill: func(f *fixture) {
			f.exec(`INSERT INTO api_tokens (owner, scope, name, prefix, hash) VALUES ('alice', 'user', 'assistant', 'lk_x', '\x00')`)
			// The token's id as an argument: Citus refuses a subquery in
			// an INSERT's VALUES (both tables are reference tables there).
			token := f.id(`SELECT id FROM api_tokens`)
			link := func(label, created, expires, used string) {
				f.exec(`INSERT INTO sign_in_links (hash, token_id, owner, created_at, expires_at, used_at)
				        VALUES (convert_to($1, 'UTF8'), $2, 'alice', `+created+`, `+expires+`, `+used+`)`, label, token)
			}
			for _, l := range []string{"old-expired-1", "old-expired-2", "old-expired-3"} {
				link(l, f.ago(30*day), f.ago(30*day-time.Hour), "NULL")
			}
			link("old-used-1", f.ago(30*day), f.ago(30*day-time.Hour), f.ago(30*day))
			// Used 8 days ago, though minted with a (hypothetical) expiry in the future.
			link("old-used-2", f.ago(8*day), f.ago(-time.Hour), f.ago(8*day))
			link("keep-valid", f.ago(time.Minute), f.ago(-10*time.Minute), "NULL")
			link("keep-used-recently", f.ago(2*day), f.ago(2*day-time.Hour), f.ago(2*day))
			link("keep-expired-recently", f.ago(6*day), f.ago(6*day-time.Hour), "NULL")
		},
		labels: `SELECT convert_from(hash, 'UTF8') FROM sign_in_links`,
		keep:   []string{"keep-expired-recently", "keep-used-recently", "keep-valid"},
	})
}

// Delivery attempts that started before the cutoff are pruned, whatever
// their notification's state.
func TestPruneDeliveryAttempts(t *testing.T) {
	t.Parallel()
	pruneRows(t, rowCase{table: "delivery_attempts", conf: Config{DeliveryAttempts: week},
		fill: func(f *fixture) {
			attempt := func(label, started string) {
				f.exec(`INSERT INTO delivery_attempts (source, notification_id, notification_created_at, sink, attempt, started_at,
				            duration_ms, outcome, error)
				        VALUES ('s', 1, `+started+`, 'hook', 1, `+started+`, 12.5, 'retry', $1)`, label)
			}
			for _, l := range []string{"old-1", "old-2", "old-3", "old-4", "old-5"} {
				attempt(l, f.ago(30*day))
			}
			attempt("keep-6-days", f.ago(6*day))
			attempt("keep-now", f.ago(0))
		},
		labels: `SELECT error FROM delivery_attempts`,
		keep:   []string{"keep-6-days", "keep-now"},
	})
}

// Audit entries are pruned by age.
func TestPruneAuditLog(t *testing.T) {
	t.Parallel()
	pruneRows(t, rowCase{table: "audit_log", conf: Config{AuditLog: 365 * 24 * time.Hour},
		fill: func(f *fixture) {
			f.exec(`INSERT INTO audit_log (at, actor, via, action, kind, target, owner)
			        SELECT ` + f.ago(400*day) + `, 'alice', 'api', 'create', 'source', 'old-' || i, 'alice'
			        FROM generate_series(1, 5) i`)
			f.exec(`INSERT INTO audit_log (at, actor, via, action, kind, target, owner)
			        VALUES (` + f.ago(300*day) + `, 'alice', 'api', 'create', 'source', 'keep-300-days', 'alice'),
			               (` + f.ago(0) + `, 'alice', 'api', 'create', 'source', 'keep-now', 'alice')`)
		},
		labels: `SELECT target FROM audit_log`,
		keep:   []string{"keep-300-days", "keep-now"},
	})
}

// The days of model budgets past the window are pruned; the current UTC
// day (of the fixture's clock) is not.
func TestPruneModelBudgets(t *testing.T) {
	t.Parallel()
	pruneRows(t, rowCase{table: "model_budgets", conf: Config{ModelBudgets: week},
		fill: func(f *fixture) {
			today := "'" + f.now.UTC().Format(time.DateOnly) + "'::date"
			f.exec(`INSERT INTO model_budgets (source, watch, day, calls)
			        SELECT 's', 'old-' || i, ` + today + ` - 30 - i, 3 FROM generate_series(1, 5) i`)
			f.exec(`INSERT INTO model_budgets (source, watch, day, calls)
			        VALUES ('s', 'keep-today', ` + today + `, 1), ('s', 'keep-3-days', ` + today + ` - 3, 1)`)
		},
		labels: `SELECT watch FROM model_budgets`,
		keep:   []string{"keep-3-days", "keep-today"},
	})
}

// Finished briefings not used within the window are pruned; one being
// written (a held claim) and one used lately are not.
func TestPruneBriefings(t *testing.T) {
	t.Parallel()
	brief := func(f *fixture, label, state, updated, hit string) {
		f.exec(`INSERT INTO briefings (prompt_version, model_digest, input_hash, source, watch, model, state, owner,
		            lease_expires_at, created_at, updated_at, last_hit_at)
		        VALUES ('pv', 'd', $1, 's', 'w', 'm', $2, CASE WHEN $2 = 'writing' THEN 'evaluator-1' END,
		                CASE WHEN $2 = 'writing' THEN now() + interval '1 minute' END, `+f.ago(30*day)+`, `+updated+`, `+hit+`)`,
			label, state)
	}
	pruneRows(t, rowCase{table: "briefings", conf: Config{Briefings: week},
		fill: func(f *fixture) {
			brief(f, "old-ok-1", "ok", f.ago(30*day), "NULL")
			brief(f, "old-ok-2", "ok", f.ago(30*day), "NULL")
			brief(f, "old-ok-hit-long-ago", "ok", f.ago(30*day), f.ago(20*day))
			brief(f, "old-failed-1", "failed", f.ago(30*day), "NULL")
			brief(f, "old-failed-2", "failed", f.ago(30*day), "NULL")
			brief(f, "keep-old-writing", "writing", f.ago(30*day), "NULL")
			brief(f, "keep-old-hit-lately", "ok", f.ago(30*day), f.ago(time.Hour))
			brief(f, "keep-recent", "ok", f.ago(time.Hour), "NULL")
		},
		labels: `SELECT input_hash FROM briefings`,
		keep:   []string{"keep-old-hit-lately", "keep-old-writing", "keep-recent"},
	})
}

// Cached verdicts made and last used before the window are pruned; one
// used lately is not.
func TestPruneVerdicts(t *testing.T) {
	t.Parallel()
	verdict := func(f *fixture, label, created, hit string) {
		f.exec(`INSERT INTO verdicts (prompt_version, model_digest, input_hash, model, source, watch, should_notify, urgency,
		            confidence, reason, created_at, last_hit_at)
		        VALUES ('pv', 'd', $1, 'm', 's', 'w', false, 'low', 0.5, 'r', `+created+`, `+hit+`)`, label)
	}
	pruneRows(t, rowCase{table: "verdicts", conf: Config{Verdicts: week},
		fill: func(f *fixture) {
			for _, l := range []string{"old-1", "old-2", "old-3", "old-4"} {
				verdict(f, l, f.ago(30*day), "NULL")
			}
			verdict(f, "old-hit-long-ago", f.ago(30*day), f.ago(20*day))
			verdict(f, "keep-old-hit-lately", f.ago(30*day), f.ago(time.Hour))
			verdict(f, "keep-recent", f.ago(time.Hour), "NULL")
		},
		labels: `SELECT input_hash FROM verdicts`,
		keep:   []string{"keep-old-hit-lately", "keep-recent"},
	})
}

// Embedded decisions of the drift report older than the window are
// pruned; a pending one (waiting or held for the embedding model) is not.
func TestPruneDriftEmbeddings(t *testing.T) {
	t.Parallel()
	n := 0
	row := func(f *fixture, label, state, at string) {
		n++
		emb := "NULL"
		if state == "embedded" {
			emb = "ARRAY[1, 0]::real[]"
		}
		f.exec(`INSERT INTO drift_embeddings (model_call_id, call_created_at, source, watch, model, reason, state, embedding)
		        VALUES ($1, `+at+`, 's', 'w', 'm', $2, $3, `+emb+`)`, n, label, state)
	}
	pruneRows(t, rowCase{table: "drift_embeddings", conf: Config{DriftEmbeddings: week},
		fill: func(f *fixture) {
			for _, l := range []string{"old-1", "old-2", "old-3", "old-4", "old-5"} {
				row(f, l, "embedded", f.ago(30*day))
			}
			row(f, "keep-old-pending", "pending", f.ago(30*day))
			row(f, "keep-recent", "embedded", f.ago(time.Hour))
		},
		labels: `SELECT reason FROM drift_embeddings`,
		keep:   []string{"keep-old-pending", "keep-recent"},
	})
}

// The quiet runs' hours that ended before the cutoff are pruned; the hour
// the cutoff falls in and the current hour are not.
func TestPruneSyncRunHours(t *testing.T) {
	t.Parallel()
	hour := func(f *fixture, label, at string) {
		f.exec(`INSERT INTO sync_run_hours (source, hour, runs, first_started_at, last_started_at, last_finished_at)
		        VALUES ($1, `+at+`, 10, `+at+`, `+at+`, `+at+`)`, label)
	}
	pruneRows(t, rowCase{table: "sync_run_hours", conf: Config{SyncRunHours: 24 * time.Hour},
		fill: func(f *fixture) {
			// The fixture's clock's hour.
			this := at(f.now.Truncate(time.Hour))
			for i, l := range []string{"old-1", "old-2", "old-3"} {
				hour(f, l, this+" - interval '3 days' - interval '"+string(rune('1'+i))+" hours'")
			}
			hour(f, "old-10-days", this+" - interval '10 days'")
			// Ended exactly a day ago, or before: out of the window.
			hour(f, "old-ended-at-cutoff", this+" - interval '25 hours'")
			// Ends less than a day ago: part of it is in the window.
			hour(f, "keep-cutoff-hour", this+" - interval '24 hours'")
			hour(f, "keep-current", this)
		},
		labels: `SELECT source FROM sync_run_hours`,
		keep:   []string{"keep-current", "keep-cutoff-hour"},
	})
}

// The admin page's totals of hours past the window are pruned; the last
// 24 hours and the current hour are not.
func TestPruneActivityHourTotals(t *testing.T) {
	t.Parallel()
	pruneRows(t, rowCase{table: "activity_hour_totals", conf: Config{ActivityHourTotals: 48 * time.Hour},
		fill: func(f *fixture) {
			// The fixture's clock's hour.
			this := at(f.now.Truncate(time.Hour))
			f.exec(`INSERT INTO activity_hour_totals (hour, backend, runs)
			        SELECT ` + this + ` - interval '5 days', i, 1 FROM generate_series(1, 4) i`)
			f.exec(`INSERT INTO activity_hour_totals (hour, backend, runs) VALUES (` + this + ` - interval '49 hours', 9, 1),
			        (` + this + ` - interval '48 hours', 10, 1), (` + this + ` - interval '1 hour', 11, 1), (` + this + `, 12, 1)`)
		},
		labels: `SELECT backend::text FROM activity_hour_totals`,
		keep:   []string{"10", "11", "12"},
	})
}

// The tables pruned by rows follow the windows set: with none set, a
// prune touches none of them; with all set, the dry run and the prune
// name each one.
func TestRowTablesFollowTheirWindows(t *testing.T) {
	t.Parallel()
	all := Config{TaskRuns: week, InboundEvents: week, IdempotencyKeys: week, DefinitionDeletions: week, AuditLog: week,
		ModelBudgets: week, Briefings: week, Verdicts: week, SyncRunHours: week, ActivityHourTotals: week,
		SignInLinks: week, DeliveryAttempts: week, BatchSize: 10}
	if !all.Enabled() || (Config{}).Enabled() {
		t.Fatalf("Enabled: %v with the row tables' windows, %v with none", all.Enabled(), (Config{}).Enabled())
	}
	f := newFixture(t)
	res, err := f.pruner(all).Prune(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tr := range res.Tables {
		names = append(names, tr.Table)
	}
	want := "delivery_attempts task_runs inbound_events idempotency_keys definition_deletions sign_in_links audit_log model_budgets briefings verdicts sync_run_hours activity_hour_totals"
	if got := strings.Join(names, " "); got != want {
		t.Errorf("pruned tables: %s, want %s", got, want)
	}
	res, err = f.pruner(Config{BatchSize: 10}).Prune(context.Background())
	if err != nil || len(res.Tables) != 0 {
		t.Errorf("prune without windows = %+v, %v; want no table", res.Tables, err)
	}
}

// Every window of lookout.yaml's retention block reaches its table's
// pruner.
func TestFromConfigCarriesEveryWindow(t *testing.T) {
	r := config.Retention{Changes: 1 * time.Hour, SyncRuns: 2 * time.Hour, Evaluations: 3 * time.Hour,
		Notifications: 4 * time.Hour, ModelCalls: 5 * time.Hour, TaskRuns: 6 * time.Hour, InboundEvents: 7 * time.Hour,
		IdempotencyKeys: 8 * time.Hour, DefinitionDeletions: 9 * time.Hour, AuditLog: 10 * time.Hour,
		ModelBudgets: 11 * time.Hour, Briefings: 12 * time.Hour, Verdicts: 13 * time.Hour, SyncRunHours: 14 * time.Hour,
		ActivityHourTotals: 15 * time.Hour, DriftEmbeddings: 16 * time.Hour, DeliveryAttempts: 17 * time.Hour,
		SignInLinks: 18 * time.Hour, BatchSize: 7, Interval: time.Minute}
	c := FromConfig(r)
	windows := map[string]time.Duration{}
	for _, tb := range tables {
		windows[tb.name] = tb.window(c)
	}
	for _, tb := range rowTables {
		windows[tb.name] = tb.window(c)
	}
	seen := map[time.Duration]bool{}
	for _, w := range r.Windows() {
		got, ok := windows[w.Key]
		if !ok || got != w.Window {
			t.Errorf("retention.%s = %s reaches the pruner as %s (a table: %v)", w.Key, w.Window, got, ok)
		}
		seen[w.Window] = true
	}
	if len(seen) != 18 || len(windows) != 18 {
		t.Errorf("%d distinct windows, %d tables; want 18 of each", len(seen), len(windows))
	}
}

// Migration 21 (the prune indexes, config_version.deletions_pruned_through)
// goes down and up again on a schema holding rows.
func TestMigration21DownAndUp(t *testing.T) {
	t.Parallel()
	const indexes, before = 21, 20
	_, url := pgtest.Schema(t)
	pool := pgtest.PoolFor(t, url)
	pgtest.SkipOnCitus(t, pool, "the down migrations run on one PostgreSQL only: migration 57's down makes triggers on evaluations, which Citus refuses on a distributed table")
	ctx := context.Background()
	f := &fixture{t: t, pool: pool}
	f.exec(`INSERT INTO audit_log (actor, via, action, kind, target, owner) VALUES ('alice', 'api', 'create', 'source', 's', 'alice')`)
	if v, err := db.MigrateTo(ctx, pool, before); err != nil || v != before {
		t.Fatalf("migrate down to %d: %d, %v", before, v, err)
	}
	if f.exists("task_runs_finished_idx") || f.exists("audit_log_at_idx") {
		t.Errorf("after the down migration the prune indexes are still there")
	}
	if v, err := db.MigrateTo(ctx, pool, indexes); err != nil || v != indexes {
		t.Fatalf("migrate up to %d: %d, %v", indexes, v, err)
	}
	for _, idx := range []string{"model_budgets_day_idx", "briefings_unused_idx", "verdicts_created_idx", "inbound_events_processed_idx",
		"definition_deletions_deleted_idx", "task_runs_finished_idx", "task_runs_updated_idx", "audit_log_at_idx"} {
		if !f.exists(idx) {
			t.Errorf("after the up migration %s is missing", idx)
		}
	}
	if got := f.id(`SELECT deletions_pruned_through FROM config_version`); got != 0 {
		t.Errorf("deletions_pruned_through = %d, want 0", got)
	}
	if got := f.labels(`SELECT target FROM audit_log`); !slices.Equal(got, []string{"s"}) {
		t.Errorf("audit_log after down and up: %v", got)
	}
}

// A batch skips the rows another transaction holds (FOR UPDATE SKIP
// LOCKED): the prune neither waits for it nor deletes the row under it; a
// later prune takes it. With the batch size equal to the rows to delete,
// the prune takes one more statement to see that nothing is left.
func TestPruneByRowsSkipsLockedRowsAndBatchBoundary(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	f.exec(`INSERT INTO idempotency_keys (owner, key, operation, request_hash, status, response, created_at)
	        SELECT 'alice', 'old-' || i, 'create_source', 'h', 201, '{}', ` + f.ago(2*day) + ` FROM generate_series(1, 4) i`)
	tx, err := f.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SELECT 1 FROM idempotency_keys WHERE owner = 'alice' AND key = 'old-1' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	conf := Config{IdempotencyKeys: 24 * time.Hour, BatchSize: 3}
	res := prune(t, f, conf)
	if tr := tableResult(t, res, "idempotency_keys"); tr.Rows != 3 || tr.Batches != 2 {
		t.Errorf("with old-1 locked: deleted %d rows in %d batches, want 3 in 2", tr.Rows, tr.Batches)
	}
	if got := f.labels(`SELECT key FROM idempotency_keys`); !slices.Equal(got, []string{"old-1"}) {
		t.Errorf("left %v, want the locked old-1", got)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	f.exec(`INSERT INTO idempotency_keys (owner, key, operation, request_hash, status, response, created_at)
	        VALUES ('alice', 'old-5', 'create_source', 'h', 201, '{}', ` + f.ago(2*day) + `),
	               ('alice', 'old-6', 'create_source', 'h', 201, '{}', ` + f.ago(2*day) + `)`)
	res = prune(t, f, conf)
	if tr := tableResult(t, res, "idempotency_keys"); tr.Rows != 3 || tr.Batches != 2 {
		t.Errorf("three old keys, batches of 3: deleted %d rows in %d batches, want 3 in 2 (the second finds none)", tr.Rows, tr.Batches)
	}
	if got := f.labels(`SELECT key FROM idempotency_keys`); len(got) != 0 {
		t.Errorf("left %v, want none", got)
	}
}
