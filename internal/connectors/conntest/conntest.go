// Package conntest holds helpers for connector tests: run a connector and
// collect its pages, mirror them into a real Postgres through
// changes.Apply, and drive the syncer over a configuration written to a
// temporary directory. It is imported by tests only.
package conntest

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lookout-dev/lookout/internal/changes"
	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/connectors"
	"github.com/lookout-dev/lookout/internal/normalize"
	"github.com/lookout-dev/lookout/internal/syncer"
)

// Run is what one Fetch did.
type Run struct {
	Pages  []connectors.Page
	Result connectors.Result
	Err    error
}

// Fetch runs conn from cursor, collecting every page.
func Fetch(t testing.TB, conn connectors.Connector, cursor json.RawMessage) Run {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var r Run
	r.Result, r.Err = conn.Fetch(ctx, cursor, func(_ context.Context, p connectors.Page) error {
		r.Pages = append(r.Pages, p)
		return nil
	})
	return r
}

// Items returns the values of every item of the run, in order.
func (r Run) Items() []map[string]any {
	var out []map[string]any
	for _, p := range r.Pages {
		for _, it := range p.Items {
			m, _ := it.Value.(map[string]any)
			out = append(out, m)
		}
	}
	return out
}

// IDs returns the "id" key of every item, as a string (fmt %v).
func (r Run) IDs() []string {
	var out []string
	for _, m := range r.Items() {
		out = append(out, toString(m["id"]))
	}
	return out
}

// Cursor is the cursor the syncer would hold after the run: the last
// non-nil page cursor of a page that had items, then the result's cursor
// when the run succeeded. It mirrors what the syncer commits.
func (r Run) Cursor(prev json.RawMessage) json.RawMessage {
	cur := prev
	for _, p := range r.Pages {
		if len(p.Items) > 0 && p.Cursor != nil {
			cur = p.Cursor
		}
	}
	if r.Err == nil && r.Result.Cursor != nil {
		cur = r.Result.Cursor
	}
	return cur
}

func toString(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case nil:
		return ""
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// Mirror maps the run's items with the default field mapping (plus f) and
// writes them with changes.Apply into pool, as source, in one transaction
// per page, the way the syncer does. It creates the sources row if needed.
func Mirror(t testing.TB, pool *pgxpool.Pool, source string, f normalize.FieldExprs, volatile []string, r Run) changes.Stats {
	t.Helper()
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `INSERT INTO sources (name, connector, config_hash) VALUES ($1, 'test', 'x') ON CONFLICT DO NOTHING`, source); err != nil {
		t.Fatalf("insert source: %v", err)
	}
	m, err := normalize.NewMapper(f, volatile)
	if err != nil {
		t.Fatalf("mapper: %v", err)
	}
	var total changes.Stats
	for _, p := range r.Pages {
		recs := make([]normalize.Record, 0, len(p.Items))
		for _, it := range p.Items {
			rec, err := m.Map(it.Value, it.Raw)
			if err != nil {
				t.Fatalf("map %s: %v", it.Loc, err)
			}
			recs = append(recs, rec)
		}
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			st, err := changes.Apply(ctx, tx, source, 0, recs, m.Hasher())
			total.Add(st)
			return err
		})
		if err != nil {
			t.Fatalf("apply: %v", err)
		}
	}
	return total
}

// Change is one row of the changes table.
type Change struct {
	RecordID      string
	Kind          string
	Version       int
	ChangedFields []string
	Record        map[string]any
}

// Changes lists the changes of source in order.
func Changes(t testing.TB, pool *pgxpool.Pool, source string) []Change {
	t.Helper()
	rows, err := pool.Query(context.Background(), `
		SELECT record_id, kind, version, changed_fields, record FROM changes WHERE source = $1 ORDER BY id`, source)
	if err != nil {
		t.Fatalf("list changes: %v", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Change, error) {
		var c Change
		err := row.Scan(&c.RecordID, &c.Kind, &c.Version, &c.ChangedFields, &c.Record)
		return c, err
	})
	if err != nil {
		t.Fatalf("list changes: %v", err)
	}
	return out
}

// WriteConfig writes a configuration directory: files maps paths relative
// to the directory (lookout.yaml, sources/x.yaml, data/...) to contents.
// It returns the directory.
func WriteConfig(t testing.TB, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, config.SourcesDir), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range files {
		WriteFile(t, filepath.Join(dir, name), body)
	}
	return dir
}

// WriteFile writes body to path, creating directories.
func WriteFile(t testing.TB, path, body string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// Syncer loads the configuration in dir and builds a syncer on pool.
func Syncer(t testing.TB, pool *pgxpool.Pool, dir string) *syncer.Syncer {
	t.Helper()
	cfg, err := config.Load(dir)
	if err != nil {
		t.Fatalf("load config: %v", err)
	}
	sconf := syncer.FromConfig(cfg)
	sconf.Owner = "test"
	s, err := syncer.New(pool, sconf, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("build syncer: %v", err)
	}
	if err := s.Register(context.Background()); err != nil {
		t.Fatalf("register: %v", err)
	}
	return s
}

// SyncNow makes every source due and runs them once.
func SyncNow(t testing.TB, pool *pgxpool.Pool, s *syncer.Syncer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := pool.Exec(ctx, `UPDATE sources SET next_run_at = now() - interval '1 second', run_requested_at = now()`); err != nil {
		t.Fatalf("make sources due: %v", err)
	}
	if _, err := s.RunDue(ctx); err != nil {
		t.Fatalf("run due: %v", err)
	}
}

// LastRun returns the status and error of the latest run of source.
func LastRun(t testing.TB, pool *pgxpool.Pool, source string) (status, errText string) {
	t.Helper()
	var e *string
	err := pool.QueryRow(context.Background(), `
		SELECT status, error FROM sync_runs WHERE source = $1 ORDER BY id DESC LIMIT 1`, source).Scan(&status, &e)
	if err != nil {
		t.Fatalf("last run of %s: %v", source, err)
	}
	if e != nil {
		errText = *e
	}
	return status, errText
}
