// Package bench measures lookout against baselines measured in the same
// run: the syncer's initial and unchanged re-sync of records from a local
// HTTP API beside a plain COPY of the same rows.
package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lookout-dev/lookout/internal/config"
	_ "github.com/lookout-dev/lookout/internal/connectors/httpjson"
	"github.com/lookout-dev/lookout/internal/db"
	"github.com/lookout-dev/lookout/internal/normalize"
	"github.com/lookout-dev/lookout/internal/syncer"
)

// Options configure a run.
type Options struct {
	// DatabaseURL is the database; a fresh schema is created in it.
	DatabaseURL string
	// Records is the number of records to mirror. Defaults to 100,000.
	Records int
	// PageSize is the API's page size. Defaults to 1,000.
	PageSize int
	// Keep leaves the benchmark schema in place for inspection.
	Keep bool
	Out  io.Writer
}

// Result holds the measured figures.
type Result struct {
	Records                     int
	Initial, Resync, Copy       time.Duration
	InitialRate, ResyncRate     float64 // records/s
	CopyRate                    float64 // rows/s
	ResyncRowsWritten           int64
	InitialVsCopy, ResyncVsCopy float64
}

// API is a local fixture JSON API: pages of realistic ticket records,
// rendered once so that the server costs little next to the syncer.
type API struct {
	pages [][]byte
	Items []map[string]any
}

// NewAPI renders n items in pages of size per page.
func NewAPI(n, size int) *API {
	a := &API{}
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for p := 0; p*size < n; p++ {
		var b strings.Builder
		b.WriteString(`{"data":[`)
		for i := p * size; i < min((p+1)*size, n); i++ {
			if i > p*size {
				b.WriteByte(',')
			}
			ts := base.Add(time.Duration(i) * time.Minute).Format(time.RFC3339)
			fmt.Fprintf(&b, `{"id":%d,"title":"Ticket %d: printer on floor %d is jammed again","body":"Reported by the front desk. The printer shows error E%d and the tray is stuck; please check the rollers and replace the toner if needed.","url":"https://tickets.example.com/t/%d","author":"user%d","status":"%s","labels":["facilities","floor-%d"],"created_at":"%s","updated_at":"%s","priority":%d,"assignee":"agent%d"}`,
				i, i, i%12, i%97, i, i%500, []string{"open", "pending", "closed"}[i%3], i%12, ts, ts, i%4, i%40)
		}
		next := "null"
		if (p+1)*size < n {
			next = fmt.Sprintf(`"/tickets?page=%d"`, p+2)
		}
		fmt.Fprintf(&b, `],"links":{"next":%s}}`, next)
		a.pages = append(a.pages, []byte(b.String()))
	}
	return a
}

// ServeHTTP answers GET /tickets?page=N.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p, err := strconv.Atoi(r.URL.Query().Get("page"))
	if err != nil || p < 1 || p > len(a.pages) {
		http.Error(w, "no such page", http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(a.pages[p-1])
}

// Run performs the measurements and prints a report to o.Out.
func Run(ctx context.Context, o Options) (*Result, error) {
	if o.Records <= 0 {
		o.Records = 100_000
	}
	if o.PageSize <= 0 {
		o.PageSize = 1000
	}
	out := o.Out
	if out == nil {
		out = os.Stdout
	}
	schema := fmt.Sprintf("bench_%d", time.Now().UnixNano())
	admin, err := db.Open(ctx, o.DatabaseURL)
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+db.Quote(schema)); err != nil {
		return nil, fmt.Errorf("create schema: %w", err)
	}
	if !o.Keep {
		defer admin.Exec(context.WithoutCancel(ctx), "DROP SCHEMA "+db.Quote(schema)+" CASCADE")
	}
	url := o.DatabaseURL
	if strings.Contains(url, "?") {
		url += "&search_path=" + schema
	} else {
		url += "?search_path=" + schema
	}
	pool, err := db.Open(ctx, url)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	if _, err := db.Migrate(ctx, pool); err != nil {
		return nil, err
	}

	api := NewAPI(o.Records, o.PageSize)
	srv := httptest.NewServer(api)
	defer srv.Close()

	dir, err := os.MkdirTemp("", "lookout-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if err := writeConfig(dir, srv.URL); err != nil {
		return nil, err
	}
	cfg, err := config.Load(dir)
	if err != nil {
		return nil, err
	}
	s, err := syncer.New(pool, cfg, syncer.Config{Owner: "bench"}, slog.New(slog.DiscardHandler))
	if err != nil {
		return nil, err
	}
	if err := s.Register(ctx); err != nil {
		return nil, err
	}
	res := &Result{Records: o.Records}

	// (a) initial sync
	start := time.Now()
	if _, err := s.RunDue(ctx); err != nil {
		return nil, err
	}
	res.Initial = time.Since(start)
	if err := checkRun(ctx, pool, o.Records, "items_created"); err != nil {
		return nil, err
	}

	// (b) unchanged re-sync: nothing may be written but the run's own rows.
	if _, err := pool.Exec(ctx, `UPDATE sources SET next_run_at = now()`); err != nil {
		return nil, err
	}
	before, err := tupleWrites(ctx, pool)
	if err != nil {
		return nil, err
	}
	start = time.Now()
	if _, err := s.RunDue(ctx); err != nil {
		return nil, err
	}
	res.Resync = time.Since(start)
	if err := checkRun(ctx, pool, o.Records, "items_unchanged"); err != nil {
		return nil, err
	}
	after, err := tupleWrites(ctx, pool)
	if err != nil {
		return nil, err
	}
	res.ResyncRowsWritten = after - before

	// (c) plain COPY of the same rows into a table like records.
	res.Copy, err = copyBaseline(ctx, pool, api, cfg.Sources[0])
	if err != nil {
		return nil, err
	}

	sec := func(d time.Duration) float64 { return d.Seconds() }
	res.InitialRate = float64(o.Records) / sec(res.Initial)
	res.ResyncRate = float64(o.Records) / sec(res.Resync)
	res.CopyRate = float64(o.Records) / sec(res.Copy)
	res.InitialVsCopy = res.InitialRate / res.CopyRate
	res.ResyncVsCopy = res.ResyncRate / res.CopyRate

	fmt.Fprintf(out, "lookout benchmark: %d records from a local HTTP API (pages of %d), fresh schema %s\n\n", o.Records, o.PageSize, schema)
	fmt.Fprintf(out, "  %-32s %10s %14s %10s\n", "measurement", "seconds", "records/s", "vs COPY")
	fmt.Fprintf(out, "  %-32s %10.2f %14.0f %10.2f\n", "(a) initial sync", sec(res.Initial), res.InitialRate, res.InitialVsCopy)
	fmt.Fprintf(out, "  %-32s %10.2f %14.0f %10.2f\n", "(b) unchanged re-sync", sec(res.Resync), res.ResyncRate, res.ResyncVsCopy)
	fmt.Fprintf(out, "  %-32s %10.2f %14.0f %10.2f\n", "(c) plain COPY of the same rows", sec(res.Copy), res.CopyRate, 1.0)
	fmt.Fprintf(out, "\n  re-sync wrote %d record/change rows (target 0)\n", res.ResyncRowsWritten)
	return res, nil
}

func writeConfig(dir, apiURL string) error {
	if err := os.MkdirAll(filepath.Join(dir, "sources"), 0o755); err != nil {
		return err
	}
	global := "sinks: {log: {type: log}}\nsyncer: {batch_size: 1000}\ndefaults: {jitter: 0s}\n"
	if err := os.WriteFile(filepath.Join(dir, "lookout.yaml"), []byte(global), 0o644); err != nil {
		return err
	}
	src := fmt.Sprintf(`name: tickets
connector: http
rate_limit: {per_second: 100000, burst: 100}
http:
  url: %s/tickets?page=1
  items: body.data
  next: body.links.next
  max_pages: 100000
`, apiURL)
	return os.WriteFile(filepath.Join(dir, "sources", "tickets.yaml"), []byte(src), 0o644)
}

func checkRun(ctx context.Context, pool *pgxpool.Pool, n int, column string) error {
	var status string
	var got int
	var errText *string
	err := pool.QueryRow(ctx, `SELECT status, `+column+`, error FROM sync_runs ORDER BY id DESC LIMIT 1`).Scan(&status, &got, &errText)
	if err != nil {
		return fmt.Errorf("read run: %w", err)
	}
	if status != "succeeded" || got != n {
		e := ""
		if errText != nil {
			e = *errText
		}
		return fmt.Errorf("benchmark run %s with %s=%d, want %d: %s", status, column, got, n, e)
	}
	return nil
}

// tupleWrites counts rows inserted or updated in records and changes.
func tupleWrites(ctx context.Context, pool *pgxpool.Pool) (int64, error) {
	var n int64
	// pg_stat_xact is per transaction; use the cumulative view, flushed.
	if _, err := pool.Exec(ctx, `SELECT pg_stat_force_next_flush()`); err != nil {
		return 0, err
	}
	err := pool.QueryRow(ctx, `
		SELECT coalesce(sum(n_tup_ins + n_tup_upd + n_tup_del), 0)::bigint
		FROM pg_stat_user_tables
		WHERE schemaname = current_schema() AND relname IN ('records', 'changes')`).Scan(&n)
	return n, err
}

// copyBaseline COPYs the same normalized rows into a table like records and
// returns how long the COPY took. Rows are prepared before timing: the
// baseline is the database's best case.
func copyBaseline(ctx context.Context, pool *pgxpool.Pool, api *API, src *config.Source) (time.Duration, error) {
	if _, err := pool.Exec(ctx, `CREATE TABLE records_copy (LIKE records INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING INDEXES)`); err != nil {
		return 0, err
	}
	m, err := normalize.NewMapper(normalize.FieldExprs{}, src.Volatile)
	if err != nil {
		return 0, err
	}
	var rows [][]any
	for _, page := range api.pages {
		doc, err := normalize.Decode(page)
		if err != nil {
			return 0, err
		}
		for _, it := range doc.(map[string]any)["data"].([]any) {
			r, err := m.Map(it, nil)
			if err != nil {
				return 0, err
			}
			rows = append(rows, []any{"tickets", r.ID, 1, r.Hash, r.Title, r.Body, r.URL, r.Author, r.Status,
				r.Labels, r.CreatedAt, r.UpdatedAt, string(normalize.Canonical(r.Extra)), string(r.Raw)})
		}
	}
	cols := []string{"source", "record_id", "version", "content_hash", "title", "body", "url", "author", "status",
		"labels", "external_created_at", "external_updated_at", "extra", "raw"}
	start := time.Now()
	n, err := pool.CopyFrom(ctx, pgx.Identifier{"records_copy"}, cols, pgx.CopyFromRows(rows))
	if err != nil {
		return 0, fmt.Errorf("copy: %w", err)
	}
	d := time.Since(start)
	if int(n) != len(rows) {
		return 0, fmt.Errorf("copied %d rows of %d", n, len(rows))
	}
	return d, nil
}
