// Package e2e tests the pipeline end to end on a real PostgreSQL: config
// directory -> syncer -> records/changes -> evaluator -> notifications ->
// sinks, with the behaviours the design promises (no change on an
// unchanged re-sync, catch-up after downtime, no double notification with
// several evaluators, bad input recorded as a failed run without damage).
package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lookout-dev/lookout/internal/clitest"
	"github.com/lookout-dev/lookout/internal/config"
	_ "github.com/lookout-dev/lookout/internal/connectors/file"
	_ "github.com/lookout-dev/lookout/internal/connectors/httpjson"
	"github.com/lookout-dev/lookout/internal/evaluator"
	"github.com/lookout-dev/lookout/internal/notify"
	"github.com/lookout-dev/lookout/internal/pgtest"
	"github.com/lookout-dev/lookout/internal/syncer"
)

// env is one test's configuration directory and database.
type env struct {
	t    *testing.T
	dir  string
	pool *pgxpool.Pool
	url  string
	log  *slog.Logger
	// daemons are the binaries a test started (binaries).
	daemons []*clitest.DaemonTest
}

func newEnv(t *testing.T) *env {
	t.Helper()
	_, url := pgtest.Schema(t)
	e := &env{t: t, dir: t.TempDir(), url: url, log: slog.New(slog.DiscardHandler)}
	if testing.Verbose() {
		e.log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	e.pool = pgtest.PoolFor(t, url)
	e.write("lookout.yaml", "sinks:\n  log: {type: log}\n  rec: {type: log}\ndefaults:\n  jitter: 0s\n")
	if err := os.MkdirAll(filepath.Join(e.dir, "sources"), 0o755); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *env) write(name, content string) {
	e.t.Helper()
	p := filepath.Join(e.dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		e.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) remove(name string) {
	e.t.Helper()
	if err := os.Remove(filepath.Join(e.dir, name)); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) config() *config.Config {
	e.t.Helper()
	cfg, err := config.Load(e.dir)
	if err != nil {
		e.t.Fatalf("load config: %v", err)
	}
	return cfg
}

func (e *env) syncer(owner string) *syncer.Syncer {
	e.t.Helper()
	sconf := syncer.FromConfig(e.config())
	sconf.Owner = owner
	s, err := syncer.New(e.pool, sconf, e.log)
	if err != nil {
		e.t.Fatalf("syncer: %v", err)
	}
	if err := s.Register(context.Background()); err != nil {
		e.t.Fatal(err)
	}
	return s
}

func (e *env) evaluator(owner string, pool *pgxpool.Pool) *evaluator.Evaluator {
	e.t.Helper()
	if pool == nil {
		pool = e.pool
	}
	econf := evaluator.FromConfig(e.config())
	econf.Owner = owner
	econf.BatchSize = 50
	ev, err := evaluator.New(pool, econf, e.log)
	if err != nil {
		e.t.Fatalf("evaluator: %v", err)
	}
	return ev
}

// sync runs every due source once, after making them all due.
func (e *env) sync() {
	e.t.Helper()
	ctx := context.Background()
	if _, err := e.pool.Exec(ctx, `UPDATE sources SET next_run_at = now()`); err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.syncer("syncer-1").RunDue(ctx); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) count(sql string, args ...any) int {
	e.t.Helper()
	var n int
	if err := e.pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		e.t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// recorder is a sink that remembers what it received.
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

func (r *recorder) received() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.keys...)
}

func (e *env) deliver(rec *recorder) int {
	e.t.Helper()
	cfg := e.config()
	dconf := notify.DelivererConfigFrom(&cfg.Global)
	dconf.Owner = "d1"
	d := notify.NewDeliverer(e.pool, map[string]notify.Sink{"log": rec, "rec": rec}, dconf, e.log)
	n, err := d.DeliverDue(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	return n
}

const tasksSource = `name: tasks
connector: file
file:
  paths: ["data/*.jsonl"]
fields:
  status: item.state
watches:
  - name: urgent
    when: record.status == "open" && "urgent" in record.labels
  - name: closed
    when: change.kind == "updated" && changed("status") && record.status == "done"
    notify: [log, rec]
`

func taskLine(i int, state string, urgent bool) string {
	labels := `["x"]`
	if urgent {
		labels = `["urgent"]`
	}
	return fmt.Sprintf(`{"id": "t-%03d", "title": "Task %d", "state": %q, "labels": %s}`, i, i, state, labels)
}

func tasks(n int, edit func(i int) string) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		line := taskLine(i, "open", i%5 == 0)
		if edit != nil {
			if l := edit(i); l != "" {
				line = l
			}
		}
		b.WriteString(line + "\n")
	}
	return b.String()
}

func loadErr(e *env) (*config.Config, error) { return config.Load(e.dir) }
