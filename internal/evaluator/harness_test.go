package evaluator

import (
	"cmp"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lookout-dev/lookout/internal/changes"
	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/normalize"
	"github.com/lookout-dev/lookout/internal/pgtest"
	"github.com/lookout-dev/lookout/internal/semantic/ollamatest"
)

const testDigest = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"

// harness is an evaluator on a fresh schema, with its configuration loaded
// from files (so validation runs as in production) and a fake Ollama.
type harness struct {
	t    *testing.T
	ctx  context.Context
	pool *pgxpool.Pool
	fake *ollamatest.Server
	cfg  *config.Config
	ev   *Evaluator
}

// baseGlobal is lookout.yaml for the tests; {{OLLAMA}} is the fake's URL.
const baseGlobal = `
ollama:
  host: {{OLLAMA}}
  model: llama3.2
  timeout: 2s
  rate_limit: {per_second: 1000, burst: 10}
evaluator:
  lease: 10s
  max_attempts: 3
sinks:
  log: {type: log}
`

// newHarness loads global (lookout.yaml) and sources (file name -> YAML).
func newHarness(t *testing.T, global string, sources map[string]string) *harness {
	t.Helper()
	return newHarnessWith(t, Config{}, global, sources)
}

// newHarnessWith is newHarness with the evaluator settings a test sets in
// o (see testConfig) put over the loaded ones: a clock, for one.
func newHarnessWith(t *testing.T, o Config, global string, sources map[string]string) *harness {
	t.Helper()
	h := &harness{t: t, ctx: context.Background()}
	h.fake = ollamatest.New(t, map[string]string{"llama3.2:latest": testDigest})
	h.cfg = loadConfig(t, strings.ReplaceAll(global, "{{OLLAMA}}", h.fake.URL), sources)
	h.pool = pgtest.Pool(t)
	for _, s := range h.cfg.Sources {
		if _, err := h.pool.Exec(h.ctx, `INSERT INTO sources (name, connector, config_hash) VALUES ($1, $2, $3)`, s.Name, s.Connector, s.Hash); err != nil {
			t.Fatal(err)
		}
	}
	o.Owner = cmp.Or(o.Owner, "test-evaluator")
	ev, err := New(h.pool, testConfig(h.cfg, o), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("evaluator.New: %v", err)
	}
	h.ev = ev
	return h
}

func loadConfig(t *testing.T, global string, sources map[string]string) *config.Config {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "sources"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "lookout.yaml"), []byte(global), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, body := range sources {
		if err := os.WriteFile(filepath.Join(dir, "sources", name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := config.Load(dir)
	if err != nil {
		t.Fatalf("config.Load: %v", err)
	}
	return cfg
}

// rec is a record with a title and a status.
func rec(id, title, status string) normalize.Record {
	return normalize.Record{ID: id, Title: title, Status: status}
}

// sync writes recs as the syncer would (one transaction, changes.Apply).
func (h *harness) sync(source string, recs ...normalize.Record) changes.Stats {
	h.t.Helper()
	src := h.cfg.Source(source)
	hasher, err := normalize.NewHasher(src.Volatile)
	if err != nil {
		h.t.Fatal(err)
	}
	for i := range recs {
		hasher.Hash(&recs[i])
	}
	var st changes.Stats
	err = pgx.BeginFunc(h.ctx, h.pool, func(tx pgx.Tx) error {
		st, err = changes.Apply(h.ctx, tx, source, 0, recs, hasher)
		return err
	})
	if err != nil {
		h.t.Fatalf("sync %s: %v", source, err)
	}
	return st
}

// resetMirror forgets the source's records, as a re-created source or a
// restored mirror would: the next sync creates every record again.
func (h *harness) resetMirror(source string) {
	h.t.Helper()
	h.exec(`DELETE FROM records WHERE source = $1`, source)
}

func (h *harness) drain() int {
	h.t.Helper()
	n, err := h.ev.Drain(h.ctx)
	if err != nil {
		h.t.Fatalf("Drain: %v", err)
	}
	return n
}

func (h *harness) exec(sql string, args ...any) {
	h.t.Helper()
	if _, err := h.pool.Exec(h.ctx, sql, args...); err != nil {
		h.t.Fatalf("%s: %v", sql, err)
	}
}

func (h *harness) count(sql string, args ...any) int {
	h.t.Helper()
	var n int
	if err := h.pool.QueryRow(h.ctx, sql, args...).Scan(&n); err != nil {
		h.t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// evaluation is an evaluations row.
type evaluation struct {
	ChangeID    int64
	Step        string
	Matched     bool
	Decision    string
	Reason      string
	Urgency     string
	Confidence  *float64
	ModelCallID *int64
	NoteID      *int64
}

// evaluations returns record's evaluations for watch, oldest change first.
func (h *harness) evaluations(source, record, watch string) []evaluation {
	h.t.Helper()
	rows, err := h.pool.Query(h.ctx, `
		SELECT change_id, step, matched, decision, reason, coalesce(urgency, ''), confidence, model_call_id, notification_id
		FROM evaluations WHERE source = $1 AND record_id = $2 AND watch = $3 ORDER BY change_id`, source, record, watch)
	if err != nil {
		h.t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (evaluation, error) {
		var e evaluation
		err := r.Scan(&e.ChangeID, &e.Step, &e.Matched, &e.Decision, &e.Reason, &e.Urgency, &e.Confidence, &e.ModelCallID, &e.NoteID)
		return e, err
	})
	if err != nil {
		h.t.Fatal(err)
	}
	return out
}

// one returns the single evaluation of record for watch.
func (h *harness) one(source, record, watch string) evaluation {
	h.t.Helper()
	evs := h.evaluations(source, record, watch)
	if len(evs) != 1 {
		h.t.Fatalf("%s/%s %s: %d evaluations, want 1: %+v", source, record, watch, len(evs), evs)
	}
	return evs[0]
}

// changeState is the evaluation state of a change.
type changeState struct {
	Status   string
	Owner    *string
	NextAt   time.Time
	Attempts int
	Error    *string
}

func (h *harness) change(id int64) changeState {
	h.t.Helper()
	var s changeState
	if err := h.pool.QueryRow(h.ctx, `
		SELECT eval_status, eval_owner, greatest(eval_next_at, 'epoch'), eval_attempts, eval_error FROM changes WHERE id = $1`, id).Scan(
		&s.Status, &s.Owner, &s.NextAt, &s.Attempts, &s.Error); err != nil {
		h.t.Fatal(err)
	}
	return s
}

// lastChange returns the id of record's newest change.
func (h *harness) lastChange(source, record string) int64 {
	h.t.Helper()
	var id int64
	if err := h.pool.QueryRow(h.ctx, `SELECT max(id) FROM changes WHERE source = $1 AND record_id = $2`, source, record).Scan(&id); err != nil {
		h.t.Fatal(err)
	}
	return id
}

// makeDue lets held changes be claimed now, as if their backoff elapsed,
// and closes the model client's breaker.
func (h *harness) makeDue() {
	h.t.Helper()
	h.exec(`UPDATE changes SET eval_next_at = now() WHERE eval_status = 'pending'`)
	if h.ev.judge != nil {
		h.ev.judge.Client().ResetBreaker()
	}
}

// testConfig returns the evaluator settings of cfg with those a test set
// in o (its non-zero fields) put over them.
func testConfig(cfg *config.Config, o Config) Config {
	c := FromConfig(cfg)
	c.Owner, c.OnBatch, c.Metrics = o.Owner, o.OnBatch, o.Metrics
	c.Lease = cmp.Or(o.Lease, c.Lease)
	c.BatchSize = cmp.Or(o.BatchSize, c.BatchSize)
	c.CatchUpInterval = cmp.Or(o.CatchUpInterval, c.CatchUpInterval)
	c.MaxAttempts = cmp.Or(o.MaxAttempts, c.MaxAttempts)
	c.Workers = cmp.Or(o.Workers, c.Workers)
	if o.Now != nil {
		c.Now = o.Now
	}
	if o.Model.Now != nil {
		c.Model.Now = o.Model.Now
	}
	return c
}
