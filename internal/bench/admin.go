package bench

import (
	"context"
	_ "embed"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lookout-dev/lookout/internal/admin"
	"github.com/lookout-dev/lookout/internal/control"
	"github.com/lookout-dev/lookout/internal/retention"
	"github.com/lookout-dev/lookout/internal/tokens"
)

// AdminResult is the admin page measurement: the dataset and each page's
// response times.
type AdminResult struct {
	Sources, Changes int
	Rows             map[string]int64 // table → rows
	Fill             time.Duration
	Pages            []PageTiming
}

// PageTiming is one page's response times over the runs.
type PageTiming struct {
	Path          string
	P50, P95, Max time.Duration
}

// adminFill generates a lookout that ran for 30 days with `sources`
// sources and `changes` changes: 1% of the sources paused or disabled, one
// recorded run per ten changes (1% failed), quiet runs of every source for
// the last 25 hours (sync_run_hours), 0.1% of the sources overdue by
// ten minutes, a record per five changes, an
// evaluation per change, a notification per twenty (1% dead), a model call
// per hundred, a small backlog. Secondary indexes are set aside during the
// load and rebuilt from their own definitions.
//
//go:embed admin_fill.sql
var adminFill string

// adminPages are the pages measured.
var adminPages = []string{
	"/admin/",
	"/admin/sources",
	"/admin/sources?state=due",
	"/admin/sources?status=paused",
	"/admin/sources/src-7",
	"/admin/record?source=src-8&id=r-7",
	"/admin/stuck",
	"/admin/failures",
	"/admin/retry",
	"/admin/dead",
	"/admin/models",
	"/admin/disabled",
	"/admin/rows/changes",
	"/admin/rows/pending_changes",
}

// RunAdmin fills pool like a lookout with `sources` sources and `changes`
// changes and times every admin page `runs` times (after one warm-up),
// through HTTP with an admin token.
func RunAdmin(ctx context.Context, pool *pgxpool.Pool, sources, changes, runs int, log io.Writer) (*AdminResult, error) {
	res := &AdminResult{Sources: sources, Changes: changes, Rows: map[string]int64{}}
	start := time.Now()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	// One statement at a time (the fill has parameters), in one session
	// (the temporary table).
	for _, st := range splitSQL(adminFill) {
		t := time.Now()
		st = strings.NewReplacer("$1::int", strconv.Itoa(sources), "$2::int", strconv.Itoa(changes)).Replace(st)
		if _, err := conn.Exec(ctx, st); err != nil {
			conn.Release()
			return nil, fmt.Errorf("fill: %w\n%s", err, st)
		}
		if log != nil && time.Since(t) > 5*time.Second {
			fmt.Fprintf(log, "    %6.1fs  %.70s\n", time.Since(t).Seconds(), firstLine(st))
		}
	}
	conn.Release()
	// The pruner gives the weeks of the history their partitions (the rows
	// came in the default partition), as a lookout that ran for weeks has
	// them.
	t := time.Now()
	if _, err := retention.New(pool, retention.Config{BatchSize: 50_000, Interval: time.Hour}, slog.New(slog.DiscardHandler)).Prune(ctx); err != nil {
		return nil, fmt.Errorf("make the partitions: %w", err)
	}
	if log != nil {
		fmt.Fprintf(log, "    %6.1fs  partitions made by the pruner\n", time.Since(t).Seconds())
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE sources, sync_runs, sync_run_hours, records, changes, evaluations, notifications, model_calls`); err != nil {
		return nil, fmt.Errorf("vacuum: %w", err)
	}
	res.Fill = time.Since(start)
	for _, t := range []string{"sources", "sync_runs", "sync_run_hours", "records", "changes", "evaluations", "notifications", "model_calls"} {
		var n int64
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+t).Scan(&n); err != nil {
			return nil, err
		}
		res.Rows[t] = n
	}

	svc := control.New(pool, nil, nil, control.Config{}, slog.New(slog.DiscardHandler))
	logger := slog.New(slog.DiscardHandler)
	if log != nil {
		logger = slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelError}))
	}
	adm, err := admin.New(svc, admin.Config{}, logger)
	if err != nil {
		return nil, err
	}
	srv := httptest.NewServer(adm.Handler())
	defer srv.Close()
	_, secret, err := tokens.Create(ctx, pool, tokens.NewToken{Owner: "bench", Scope: tokens.ScopeAdmin})
	if err != nil {
		return nil, err
	}
	get := func(path string) (time.Duration, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+secret)
		t := time.Now()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		d := time.Since(t)
		if resp.StatusCode != http.StatusOK {
			return 0, fmt.Errorf("GET %s: %s", path, resp.Status)
		}
		return d, nil
	}
	for _, p := range adminPages {
		if _, err := get(p); err != nil { // warm-up
			return nil, err
		}
		ds := make([]time.Duration, 0, runs)
		for range runs {
			d, err := get(p)
			if err != nil {
				return nil, err
			}
			ds = append(ds, d)
		}
		slices.Sort(ds)
		res.Pages = append(res.Pages, PageTiming{Path: p, P50: ds[len(ds)/2], P95: ds[(len(ds)*95+99)/100-1], Max: ds[len(ds)-1]})
	}
	return res, nil
}

// splitSQL splits a script into statements: a line ending in ";" ends one,
// except inside a $$ body.
func splitSQL(script string) []string {
	var out []string
	var cur strings.Builder
	inBody := false
	for _, line := range strings.Split(script, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "--") && !inBody {
			continue
		}
		cur.WriteString(line + "\n")
		if strings.Count(line, "$$")%2 == 1 {
			inBody = !inBody
		}
		if !inBody && strings.HasSuffix(strings.TrimSpace(line), ";") {
			if st := strings.TrimSpace(cur.String()); st != "" {
				out = append(out, st)
			}
			cur.Reset()
		}
	}
	if st := strings.TrimSpace(cur.String()); st != "" {
		out = append(out, st)
	}
	return out
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

// WriteAdmin prints the admin measurement.
func WriteAdmin(out io.Writer, r *AdminResult) {
	fmt.Fprintf(out, "  dataset filled in %.0fs:", r.Fill.Seconds())
	for _, t := range []string{"sources", "sync_runs", "sync_run_hours", "records", "changes", "evaluations", "notifications", "model_calls"} {
		fmt.Fprintf(out, " %s %d,", t, r.Rows[t])
	}
	fmt.Fprintln(out)
	fmt.Fprintf(out, "  %-40s %9s %9s %9s\n", "page", "p50 ms", "p95 ms", "max ms")
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	for _, p := range r.Pages {
		flag := ""
		if p.P95 > 200*time.Millisecond {
			flag = "  over 200 ms"
		}
		fmt.Fprintf(out, "  %-40s %9.1f %9.1f %9.1f%s\n", p.Path, ms(p.P50), ms(p.P95), ms(p.Max), flag)
	}
	fmt.Fprintln(out)
}
