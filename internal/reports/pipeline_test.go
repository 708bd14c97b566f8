package reports

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lookout-dev/lookout/internal/config"
	_ "github.com/lookout-dev/lookout/internal/connectors/file"
	"github.com/lookout-dev/lookout/internal/evaluator"
	"github.com/lookout-dev/lookout/internal/notify"
	"github.com/lookout-dev/lookout/internal/pgtest"
	"github.com/lookout-dev/lookout/internal/semantic/ollamatest"
	"github.com/lookout-dev/lookout/internal/sources"
	"github.com/lookout-dev/lookout/internal/syncer"
	"github.com/lookout-dev/lookout/internal/tasks"
)

// world is a database filled by the real pipeline — syncer, evaluator
// with a (fake) model, deliverer — from a configuration directory.
type world struct {
	t    *testing.T
	ctx  context.Context
	dir  string
	pool *pgxpool.Pool
	log  *slog.Logger
	cfg  *config.Config
	// runs holds the sync run ids in order: created, edited, deleted,
	// failed, recovered.
	runs []int64
}

const global = `
ollama:
  host: {{OLLAMA}}
  model: llama3.2
  timeout: 2s
  rate_limit: {per_second: 1000, burst: 10}
evaluator: {lease: 10s}
sinks:
  log: {type: log}
  hook: {type: log}
  flaky: {type: log}
defaults:
  jitter: 0s
  rate_limit: {per_second: 1000, burst: 100}
`

const tasksSource = `name: tasks
connector: file
file: {paths: ["data/tasks.jsonl"]}
fields:
  status: item.state
watches:
  - name: urgent
    when: record.status == "open"
    ask: Is this task urgent for the on-call engineer?
    notify: [log]
  - name: closed
    when: change.kind == "updated" && changed("status") && record.status == "done"
    notify: [log, hook, flaky]
  - name: open
    when: record.status == "open"
    dedupe: record
    notify: [log]
`

const archiveSource = `name: archive
connector: file
file: {paths: ["data/archive.jsonl"]}
`

// The tasks file at each step.
const (
	tasksV1 = `{"id": "t-1", "title": "URGENT: database down", "state": "open"}
{"id": "t-2", "title": "Write docs", "state": "open"}
{"id": "t-3", "title": "Fix login", "state": "open"}
{"id": "t-4", "title": "Refactor", "state": "open"}
{"id": "t-5", "title": "Old task", "state": "open"}
`
	// t-2 renamed, t-3 done.
	tasksV2 = `{"id": "t-1", "title": "URGENT: database down", "state": "open"}
{"id": "t-2", "title": "Write better docs", "state": "open"}
{"id": "t-3", "title": "Fix login", "state": "done"}
{"id": "t-4", "title": "Refactor", "state": "open"}
{"id": "t-5", "title": "Old task", "state": "open"}
`
	// t-5 gone.
	tasksV3 = `{"id": "t-1", "title": "URGENT: database down", "state": "open"}
{"id": "t-2", "title": "Write better docs", "state": "open"}
{"id": "t-3", "title": "Fix login", "state": "done"}
{"id": "t-4", "title": "Refactor", "state": "open"}
`
	tasksBroken = tasksV3 + "{not json\n"
)

// sinks: log delivers, hook refuses for good, flaky fails for now.
type recorder struct {
	mu   sync.Mutex
	keys []string
}

func (r *recorder) Deliver(_ context.Context, n *notify.Notification) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.keys = append(r.keys, n.DedupeKey)
	return nil
}

type refusing struct{}

func (refusing) Deliver(context.Context, *notify.Notification) error {
	return &notify.PermanentError{Err: errors.New("webhook answered 410 Gone")}
}

type failing struct{}

func (failing) Deliver(context.Context, *notify.Notification) error {
	return errors.New("webhook answered 503 Service Unavailable")
}

func newWorld(t *testing.T) *world {
	t.Helper()
	w := &world{t: t, ctx: context.Background(), dir: t.TempDir(), log: slog.New(slog.DiscardHandler)}
	fake := ollamatest.New(t, map[string]string{"llama3.2:latest": "sha256:" + strings.Repeat("a", 64)})
	w.write("lookout.yaml", strings.ReplaceAll(global, "{{OLLAMA}}", fake.URL))
	w.write("sources/tasks.yaml", tasksSource)
	w.write("sources/archive.yaml", archiveSource)
	w.write("data/archive.jsonl", `{"id": "a-1", "title": "kept"}`+"\n")
	cfg, err := config.Load(w.dir)
	if err != nil {
		t.Fatalf("load config: %v", err)
	}
	w.cfg = cfg
	w.pool = pgtest.Pool(t)
	return w
}

func (w *world) write(name, content string) {
	w.t.Helper()
	p := filepath.Join(w.dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		w.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		w.t.Fatal(err)
	}
}

func (w *world) exec(sql string, args ...any) {
	w.t.Helper()
	if _, err := w.pool.Exec(w.ctx, sql, args...); err != nil {
		w.t.Fatalf("%s: %v", sql, err)
	}
}

// sync makes every source due and runs them once; it records the tasks
// run's id.
func (w *world) sync() {
	w.t.Helper()
	sconf := syncer.FromConfig(w.cfg)
	sconf.Owner = "syncer-1"
	s, err := syncer.New(w.pool, sconf, w.log)
	if err != nil {
		w.t.Fatal(err)
	}
	if err := s.Register(w.ctx); err != nil {
		w.t.Fatal(err)
	}
	w.exec(`UPDATE sources SET next_run_at = now() WHERE status = 'active'`)
	if _, err := s.RunDue(w.ctx); err != nil {
		w.t.Fatal(err)
	}
	var id int64
	if err := w.pool.QueryRow(w.ctx, `SELECT max(id) FROM sync_runs WHERE source = 'tasks'`).Scan(&id); err != nil {
		w.t.Fatal(err)
	}
	w.runs = append(w.runs, id)
}

// evaluate drains the changes, then delivers what is due.
func (w *world) evaluate() {
	w.t.Helper()
	econf := evaluator.FromConfig(w.cfg)
	econf.Owner = "evaluator-1"
	econf.BatchSize = 50
	ev, err := evaluator.New(w.pool, econf, w.log)
	if err != nil {
		w.t.Fatal(err)
	}
	if _, err := ev.Drain(w.ctx); err != nil {
		w.t.Fatal(err)
	}
	sinks := map[string]notify.Sink{"log": &recorder{}, "hook": refusing{}, "flaky": failing{}}
	dconf := notify.DelivererConfigFrom(&w.cfg.Global)
	dconf.Owner = "deliverer-1"
	d := notify.NewDeliverer(w.pool, sinks, dconf, w.log)
	if _, err := d.DeliverDue(w.ctx); err != nil {
		w.t.Fatal(err)
	}
}

// populate runs the story: five tasks created; one renamed and one done
// (a notification the hook refuses, one the flaky sink keeps failing, one
// duplicate suppressed); one deleted; a run failing on a malformed line;
// a run after the fix; and the archive source paused by an operator.
func (w *world) populate() {
	w.t.Helper()
	w.write("data/tasks.jsonl", tasksV1)
	w.sync()
	w.evaluate()
	w.write("data/tasks.jsonl", tasksV2)
	w.sync()
	w.evaluate()
	w.write("data/tasks.jsonl", tasksV3)
	w.sync()
	w.evaluate()
	w.write("data/tasks.jsonl", tasksBroken)
	w.sync()
	w.write("data/tasks.jsonl", tasksV3)
	w.sync()
	w.evaluate()
	if _, err := sources.Pause(w.ctx, w.pool, "archive", "moving the archive", timeNow()); err != nil {
		w.t.Fatal(err)
	}
	// The archive also takes webhooks (what a webhook: block registers):
	// a delivery mirrored, one ignored, one rejected, and a
	// reconciliation run that repaired a change no event brought.
	w.exec(`UPDATE sources SET webhook = 'standard', silence_alert_seconds = 86400 WHERE name = 'archive'`)
	w.exec(`INSERT INTO inbound_events (source, delivery_id, event_type, object_id, received_at, signature_valid, payload, payload_hash,
	                                    processed_at, outcome, detail)
	        VALUES ('archive', 'msg_1', 'item.updated', 'a-1', now() - interval '2 hours', true, '{"type": "item.updated"}', 'h1', now(), 'updated', NULL),
	               ('archive', 'msg_2', 'item.viewed', 'a-1', now() - interval '1 hour', true, '{"type": "item.viewed"}', 'h2', now(), 'ignored',
	                'event type "item.viewed" is not mapped by this source (webhook.events)'),
	               ('archive', 'sha256:h3', '', NULL, now() - interval '30 minutes', false, NULL, 'h3', now(), 'rejected',
	                'signature does not match the body')`)
	w.exec(`UPDATE sync_runs SET repaired = 1 WHERE id = (SELECT max(id) FROM sync_runs WHERE source = 'archive')`)
	w.taskRuns()
}

// taskRuns records what a task watch on the tasks source left: t-1
// executed and completed, t-4 failed twice then for good.
func (w *world) taskRuns() {
	w.t.Helper()
	now := timeNow()
	for _, tr := range []struct {
		record   string
		ends     []string
		exitCode int
	}{{"t-1", []string{tasks.StatusCompleted}, 0}, {"t-4", []string{tasks.StatusReleased, tasks.StatusReleased, tasks.StatusFailed}, 3}} {
		for i, status := range tr.ends {
			c := tasks.Claim{Source: "tasks", Task: "execute", RecordID: tr.record, RecordVersion: 1, ContentVersion: "00ff",
				IdempotencyKey: "tasks:" + tr.record + ":v00ff:execute", Title: tr.record, By: "lookout@syncer-1", At: now.Add(-time.Hour),
				Lease: 30 * time.Minute, Executor: "command"}
			r, err := tasks.ClaimTask(w.ctx, w.pool, c)
			if err != nil || r == nil {
				w.t.Fatalf("claim %s: %v, %v", tr.record, r, err)
			}
			if _, err := tasks.Confirming(w.ctx, w.pool, r, now.Add(-time.Hour)); err != nil {
				w.t.Fatal(err)
			}
			if ok, err := tasks.Start(w.ctx, w.pool, r, now.Add(-59*time.Minute), ""); err != nil || !ok {
				w.t.Fatalf("start %s: %v, %v", tr.record, ok, err)
			}
			e := tasks.End{Status: status, At: now.Add(-58 * time.Minute), ExitCode: &tr.exitCode, Failures: i + 1}
			switch status {
			case tasks.StatusCompleted:
				e.Result, e.Failures = []byte(`{"done": true}`), 0
			case tasks.StatusReleased:
				e.Error, e.RetryAt = "agent.sh exited with status 3: boom", new(now.Add(-time.Hour))
			default:
				e.Error = "agent.sh exited with status 3: boom (attempt 3 of 3: no attempts left)"
			}
			if _, err := tasks.EndAttempt(w.ctx, w.pool, r, e, tasks.StatusRunning); err != nil {
				w.t.Fatal(err)
			}
		}
	}
}

// query runs sql and returns its rows as maps of column to value.
func (w *world) query(sql string, args ...any) ([]map[string]any, error) {
	rows, err := w.pool.Query(w.ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []map[string]any
	fds := rows.FieldDescriptions()
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			return nil, err
		}
		m := make(map[string]any, len(vals))
		for i, v := range vals {
			m[fds[i].Name] = v
		}
		out = append(out, m)
	}
	return out, rows.Err()
}
