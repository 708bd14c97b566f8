// Package conntest holds helpers for connector tests: write a configuration
// directory, run a connector and collect its pages, and mirror them into a
// real Postgres through changes.Apply and changes.Delete the way the syncer
// commits them. It imports nothing above the connectors (not the syncer),
// and is imported by tests only.
package conntest

import (
	"context"
	"encoding/json"
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
	"github.com/lookout-dev/lookout/internal/sources"
)

// Run is what one Fetch did.
type Run struct {
	Pages  []connectors.Page
	Result connectors.Result
	Err    error
	// Snapshot is whether the connector returns the full set on every
	// complete run (connectors.Snapshotter).
	Snapshot bool
}

// Fetch runs conn from cursor, collecting every page.
func Fetch(t testing.TB, conn connectors.Connector, cursor json.RawMessage) Run {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var r Run
	if sn, ok := conn.(connectors.Snapshotter); ok {
		r.Snapshot = sn.Snapshot()
	}
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
// per page, the way the syncer does; the items the connector says were
// deleted (Item.Deleted) are recorded as deleted with changes.Delete in
// their page's transaction, after its records, as the syncer's mapPage
// and queue do (and are not seen). After a complete run of a snapshot
// connector it records the records the run did not see as deleted. It
// creates the sources row if needed.
func Mirror(t testing.TB, pool *pgxpool.Pool, source string, f normalize.FieldExprs, volatile []string, r Run) changes.Stats {
	t.Helper()
	ctx := context.Background()
	if err := sources.Ensure(ctx, pool, source, "test"); err != nil {
		t.Fatal(err)
	}
	m, err := normalize.NewMapper(f, volatile)
	if err != nil {
		t.Fatalf("mapper: %v", err)
	}
	var total changes.Stats
	seen := map[string]bool{}
	for _, p := range r.Pages {
		recs := make([]normalize.Record, 0, len(p.Items))
		var deleted []string
		for _, it := range p.Items {
			rec, err := m.Map(it.Value, it.Raw)
			if err != nil {
				t.Fatalf("map %s: %v", it.Loc, err)
			}
			if it.Deleted {
				deleted = append(deleted, rec.ID)
				continue
			}
			recs = append(recs, rec)
			seen[rec.ID] = true
		}
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			st, err := changes.Apply(ctx, tx, source, 0, recs, m.Hasher())
			if err != nil {
				return err
			}
			del, err := changes.Delete(ctx, tx, source, 0, deleted)
			if err != nil {
				return err
			}
			total.Add(st)
			total.Add(del)
			return nil
		})
		if err != nil {
			t.Fatalf("apply: %v", err)
		}
	}
	if r.Err != nil || !r.Result.Complete || !r.Snapshot {
		return total
	}
	missing, _, err := changes.Missing(ctx, pool, source, seen)
	if err != nil {
		t.Fatalf("missing records: %v", err)
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		st, err := changes.Delete(ctx, tx, source, 0, missing)
		total.Add(st)
		return err
	})
	if err != nil {
		t.Fatalf("delete: %v", err)
	}
	return total
}

// KeyCheckPage is how many record ids CheckKeys asks the connector about
// at once: the syncer's page of a key check.
const KeyCheckPage = 5000

// KeyCheck is what CheckKeys did: the record ids it asked about, in how
// many calls to Present, the ones found missing (in record id order), and
// what recording them as deleted wrote.
type KeyCheck struct {
	Asked, Calls int
	Missing      []string
	Stats        changes.Stats
}

// CheckKeys does what the syncer does after a run that asked for a key
// check (Result.CheckKeys): it asks kc which of the live records of
// source are still upstream, KeyCheckPage ids at a time in record id
// order (changes.LiveIDs), and records the others as deleted with
// changes.Delete, in one transaction.
func CheckKeys(t testing.TB, pool *pgxpool.Pool, source string, kc connectors.KeyChecker) KeyCheck {
	t.Helper()
	ctx := context.Background()
	var kcheck KeyCheck
	after := ""
	for {
		ids, err := changes.LiveIDs(ctx, pool, source, after, KeyCheckPage)
		if err != nil {
			t.Fatal(err)
		}
		if len(ids) == 0 {
			break
		}
		kcheck.Asked += len(ids)
		kcheck.Calls++
		present, err := kc.Present(ctx, ids)
		if err != nil {
			t.Fatalf("check which of %d records after %q are still upstream: %v", len(ids), after, err)
		}
		there := make(map[string]bool, len(present))
		for _, id := range present {
			there[id] = true
		}
		for _, id := range ids {
			if !there[id] {
				kcheck.Missing = append(kcheck.Missing, id)
			}
		}
		if len(ids) < KeyCheckPage {
			break
		}
		after = ids[len(ids)-1]
	}
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var err error
		kcheck.Stats, err = changes.Delete(ctx, tx, source, 0, kcheck.Missing)
		return err
	})
	if err != nil {
		t.Fatalf("record deletions: %v", err)
	}
	return kcheck
}

// Change is one row of the changes table.
type Change struct {
	RecordID      string
	Kind          string
	Version       int
	ChangedFields []string
	Record        map[string]any
}

// Changes lists the changes of source in order, each with the snapshot of
// its version (changes_with_record).
func Changes(t testing.TB, pool *pgxpool.Pool, source string) []Change {
	t.Helper()
	rows, err := pool.Query(context.Background(), `
		SELECT record_id, kind, version, changed_fields, record FROM changes_with_record WHERE source = $1 ORDER BY id`, source)
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

// LoadSource writes a configuration directory whose one source file,
// sources/s.yaml, is body, and loads it: the connector's block is decoded
// and checked by the registered connector.
func LoadSource(t testing.TB, body string) (*config.Config, error) {
	t.Helper()
	return config.Load(WriteConfig(t, map[string]string{"sources/s.yaml": body}))
}
