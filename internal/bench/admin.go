package bench

import (
	"context"
	_ "embed"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
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
	Fill             time.Duration    // 0 when a kept schema was timed
	// PartitionsMade is how many partitions the pruner made after the
	// fill: 0 when the fill gave every week its partition before loading.
	PartitionsMade int
	Pages          []PageTiming
	// Load is the machine's 1-minute load average while the pages were
	// timed (/proc/loadavg after each page): lowest and highest seen; 0 where
	// there is no /proc.
	LoadMin, LoadMax float64
}

// PageTiming is one page's response times over the runs.
type PageTiming struct {
	Path          string
	P50, P95, Max time.Duration
}

// AdminOptions shape the admin page measurement.
type AdminOptions struct {
	// Sources and Changes size the dataset filled (Fill).
	Sources, Changes int
	// Runs is how many times each page is fetched after a warm-up.
	Runs int
	// Fill generates the dataset first; without it the pool's schema is
	// one filled by an earlier run.
	Fill bool
	// Pages, when set, times only the pages whose path (as adminPages
	// writes it) it matches. Defaults to every page.
	Pages *regexp.Regexp
}

// adminFill generates a lookout that ran for 30 days with `sources`
// sources and `changes` changes: half of the sources defined through the
// API by 1,000 owners, 1% of the sources paused or disabled, one
// recorded run per ten changes (1% failed), quiet runs of every source for
// the last 25 hours (sync_run_hours), 0.1% of the sources overdue by
// ten minutes, a record per five changes, an
// evaluation per change, a notification per twenty (1% dead), a model call
// per hundred, a small backlog. The weeks get their partitions before the
// rows come, and secondary indexes are set aside during the load and
// rebuilt from their own definitions.
//
//go:embed admin_fill.sql
var adminFill string

// adminClock moves the generated sources' schedule to now (their names
// are src-N).
const adminClock = `
	UPDATE sources SET
	    next_run_at = now() + interval '5 minutes' + (split_part(name, '-', 2)::int % 300) * interval '1 second'
	                  - CASE WHEN split_part(name, '-', 2)::int % 1000 = 3 THEN interval '15 minutes' ELSE interval '0' END,
	    last_run_at = now() - interval '4 minutes',
	    last_success_at = now() - interval '4 minutes'`

// AdminOwner is an owner of the generated dataset (100 sources with their
// history), for the owner filters.
const AdminOwner = "owner-8"

// adminPages are the pages measured: every page of docs/admin.md, with
// its filters, the owner filter and a second page of the long lists. The
// rows of an hour read the last whole hour of the dataset ({hour}), which
// a kept dataset no longer has at the current hour.
var adminPages = []string{
	"/admin/",
	"/admin/sources",
	"/admin/sources?after=src-50000",
	"/admin/sources?status=active",
	"/admin/sources?status=paused",
	"/admin/sources?status=disabled",
	"/admin/sources?state=due",
	"/admin/sources?state=running",
	"/admin/sources?state=requested",
	"/admin/sources?state=lease+expired",
	"/admin/sources?state=scheduled",
	"/admin/sources?failing=1",
	"/admin/sources?due=now",
	"/admin/sources?owner=" + AdminOwner,
	"/admin/sources/src-7",
	"/admin/sources/src-7?after=r-50000",
	"/admin/record?source=src-8&id=r-7",
	"/admin/stuck",
	"/admin/stuck?kind=source_overdue",
	"/admin/failures",
	"/admin/failures?kind=sync_run",
	"/admin/failures?source=src-101",
	"/admin/retry",
	"/admin/retry?kind=source",
	"/admin/dead",
	"/admin/dead?sink=hook",
	"/admin/dead?owner=" + AdminOwner,
	"/admin/models",
	"/admin/models?owner=" + AdminOwner,
	"/admin/disabled",
	"/admin/disabled?status=paused",
	"/admin/tasks",
	"/admin/tasks?id=1",
	"/admin/rows/runs?since={hour}",
	"/admin/rows/runs?since={hour}&source=src-7",
	"/admin/rows/quiet?since={hour}",
	"/admin/rows/changes?since={hour}",
	"/admin/rows/changes?since={hour}&source=src-7",
	"/admin/rows/evaluations?since={hour}",
	"/admin/rows/evaluations?since={hour}&owner=" + AdminOwner,
	"/admin/rows/notifications?since={hour}",
	"/admin/rows/model_calls?since={hour}",
	"/admin/rows/pending_changes",
	"/admin/rows/pending_notifications",
	// The lists behind the numbers of the overview and of the tables.
	"/admin/rows/runs?since={hour}&quiet=1",
	"/admin/rows/runs?since={hour}&status=failed,deferred,abandoned",
	"/admin/rows/runs?source=src-7&since_success=1",
	"/admin/rows/runs?source=src-7&id=1",
	"/admin/rows/changes?source=src-7&run_id=1&kind=created",
	"/admin/rows/evaluations?since={hour}&decision=notify",
	"/admin/rows/notifications?id=1",
	"/admin/rows/pending_notifications?status=pending",
}

// adminTables are the tables whose rows the measurement reports.
var adminTables = []string{"sources", "source_definitions", "sync_runs", "sync_run_hours", "records", "changes", "evaluations",
	"notifications", "model_calls"}

// RunAdmin fills pool like a lookout with o.Sources sources and o.Changes
// changes (unless the schema was filled already) and times every admin
// page o.Runs times (after one warm-up), through HTTP with an admin token.
func RunAdmin(ctx context.Context, pool *pgxpool.Pool, o AdminOptions, log io.Writer) (*AdminResult, error) {
	res := &AdminResult{Sources: o.Sources, Changes: o.Changes, Rows: map[string]int64{}}
	if o.Fill {
		start := time.Now()
		made, err := fillAdmin(ctx, pool, o.Sources, o.Changes, log)
		if err != nil {
			return nil, err
		}
		res.PartitionsMade = made
		res.Fill = time.Since(start)
	}
	// The schedule as a syncer that keeps up leaves it, whenever the
	// dataset was made: every source's next run in the 5 minutes after the
	// next 5 (no source falls due while the pages are timed), but for the
	// 0.1% overdue by ten minutes.
	if _, err := pool.Exec(ctx, adminClock); err != nil {
		return nil, fmt.Errorf("set the schedule to now: %w", err)
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE sources`); err != nil {
		return nil, fmt.Errorf("vacuum sources: %w", err)
	}
	for _, t := range adminTables {
		var n int64
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+t).Scan(&n); err != nil {
			return nil, fmt.Errorf("count %s: %w", t, err)
		}
		res.Rows[t] = n
	}
	res.Sources, res.Changes = int(res.Rows["sources"]), int(res.Rows["changes"])

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
	var last time.Time
	if err := pool.QueryRow(ctx, `SELECT date_trunc('hour', max(created_at), 'UTC') - interval '1 hour' FROM changes`).Scan(&last); err != nil {
		return nil, fmt.Errorf("the dataset's last hour: %w", err)
	}
	hour := url.QueryEscape(last.UTC().Format(time.RFC3339))
	res.LoadMin = math.Inf(1)
	for _, page := range adminPages {
		if o.Pages != nil && !o.Pages.MatchString(page) {
			continue
		}
		p := strings.ReplaceAll(page, "{hour}", hour)
		if _, err := get(p); err != nil { // warm-up
			return nil, err
		}
		ds := make([]time.Duration, 0, o.Runs)
		for range o.Runs {
			d, err := get(p)
			if err != nil {
				return nil, err
			}
			ds = append(ds, d)
		}
		slices.Sort(ds)
		res.Pages = append(res.Pages, PageTiming{Path: page, P50: ds[len(ds)/2], P95: ds[(len(ds)*95+99)/100-1], Max: ds[len(ds)-1]})
		l := loadAverage()
		res.LoadMin, res.LoadMax = min(res.LoadMin, l), max(res.LoadMax, l)
	}
	return res, nil
}

// fillAdmin generates the dataset (admin_fill.sql), has the partitions
// checked by the pruner and the tables vacuumed and analyzed; it returns
// how many partitions the pruner made.
func fillAdmin(ctx context.Context, pool *pgxpool.Pool, sources, changes int, log io.Writer) (int, error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return 0, fmt.Errorf("fill: %w", err)
	}
	// One statement at a time (the fill has parameters), in one session
	// (the temporary table).
	for _, st := range splitSQL(adminFill) {
		t := time.Now()
		st = strings.NewReplacer("$1::int", strconv.Itoa(sources), "$2::int", strconv.Itoa(changes)).Replace(st)
		if _, err := conn.Exec(ctx, st); err != nil {
			conn.Release()
			return 0, fmt.Errorf("fill: %w\n%s", err, st)
		}
		if log != nil && time.Since(t) > 5*time.Second {
			fmt.Fprintf(log, "    %6.1fs  %.70s\n", time.Since(t).Seconds(), firstLine(st))
		}
	}
	conn.Release()
	// The weeks have their partitions already (the fill made them); the
	// pruner makes the weeks ahead it wants and moves what the default
	// partitions hold, which should be nothing.
	t := time.Now()
	pr, err := retention.New(pool, retention.Config{BatchSize: 50_000, Interval: time.Hour}, slog.New(slog.DiscardHandler)).Prune(ctx)
	if err != nil {
		return 0, fmt.Errorf("make the partitions: %w", err)
	}
	if log != nil {
		fmt.Fprintf(log, "    %6.1fs  the pruner made %d partitions\n", time.Since(t).Seconds(), len(pr.Made))
	}
	t = time.Now()
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE `+strings.Join(adminTables, ", ")); err != nil {
		return 0, fmt.Errorf("vacuum: %w", err)
	}
	if log != nil {
		fmt.Fprintf(log, "    %6.1fs  VACUUM ANALYZE\n", time.Since(t).Seconds())
	}
	return len(pr.Made), nil
}

// loadAverage is the 1-minute load average of the machine, 0 where
// /proc/loadavg cannot be read.
func loadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f, _, _ := strings.Cut(string(b), " ")
	l, _ := strconv.ParseFloat(f, 64)
	return l
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
	if r.Fill > 0 {
		fmt.Fprintf(out, "  dataset filled in %.0fs:", r.Fill.Seconds())
	} else {
		fmt.Fprintf(out, "  dataset:")
	}
	for i, t := range adminTables {
		fmt.Fprintf(out, " %s %d", t, r.Rows[t])
		if i < len(adminTables)-1 {
			fmt.Fprint(out, ",")
		}
	}
	fmt.Fprintln(out)
	if r.LoadMax > 0 {
		fmt.Fprintf(out, "  load average (1 min) while timing: %.2f to %.2f\n", r.LoadMin, r.LoadMax)
	}
	fmt.Fprintf(out, "  %-46s %9s %9s %9s\n", "page", "p50 ms", "p95 ms", "max ms")
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	for _, p := range r.Pages {
		flag := ""
		if p.P95 > 200*time.Millisecond {
			flag = "  over 200 ms"
		}
		fmt.Fprintf(out, "  %-46s %9.1f %9.1f %9.1f%s\n", p.Path, ms(p.P50), ms(p.P95), ms(p.Max), flag)
	}
	fmt.Fprintln(out)
}
