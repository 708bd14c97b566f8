package bench

import (
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/pgtest"
)

// TestWriteComparisonSumsNodesAndRatios reads two runs back from their
// --json files, one of one node and one of a coordinator with two
// workers, and checks the table: the cluster's CPU and WAL per run node
// by node with their sum, each run's load, and the overhead as the
// cluster's sum over the single node's.
func TestWriteComparisonSumsNodesAndRatios(t *testing.T) {
	at := time.Date(2026, 12, 2, 10, 45, 0, 0, time.UTC)
	single := &Labeled{Label: "single 1", Nodes: 1, Result: &Result{Start: at, Load: Load{Min: 20, Max: 31, Samples: 3},
		Schedule: []*ScheduleResult{{Sources: 1000, Demand: 1000.0 / 60, Runs: 1000, RunsPerSec: 16, DBCPU: time.Second, WAL: 400_000}}}}
	citus := &Labeled{Label: "citus 1", Nodes: 3, Result: &Result{Start: at.Add(10 * time.Minute), Load: Load{Min: 25, Max: 40, Samples: 3},
		Schedule: []*ScheduleResult{{Sources: 1000, Demand: 1000.0 / 60, Runs: 1000, RunsPerSec: 12, DBCPU: 2 * time.Second, WAL: 10_000,
			NodeDBCPU: []time.Duration{500 * time.Millisecond, 500 * time.Millisecond}, NodeWAL: []int64{300_000, 290_000}}}}}
	dir := t.TempDir()
	var runs []*Labeled
	for i, r := range []*Labeled{single, citus} {
		path := filepath.Join(dir, r.Label+".json")
		if err := WriteRun(path, r); err != nil {
			t.Fatal(err)
		}
		got, err := ReadRun(path)
		if err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
		runs = append(runs, got)
	}
	var b strings.Builder
	if err := WriteComparison(&b, runs); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"(10) one `syncer run` keeping 1000 sources every 1m0s",
		"single 1   10:45       20-31",
		"citus 1    10:55       25-40",
		"2.000+0.500+0.500 = 3.000", // PG CPU ms per run: coordinator + workers = sum
		"10+300+290 = 600",          // WAL B per run
		"cluster / one node (means of 1 and 1 runs): runs/s 0.75x, PostgreSQL CPU per run 3.00x, WAL per run 1.50x",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the table has no %q:\n%s", want, out)
		}
	}
}

// TestReadRunNamesTheFile checks that a file that is not a run is
// refused with its path.
func TestReadRunNamesTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "table.txt")
	if err := os.WriteFile(path, []byte("(10) one syncer\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := ReadRun(path)
	if err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("ReadRun of a text file: %v, want an error naming %s", err, path)
	}
}

// TestCopyBaselineLikeRecords runs (1)'s COPY baseline: every row is
// copied, and on a Citus coordinator into a table distributed as records
// is (by source, co-located with it), not a local table of the
// coordinator.
func TestCopyBaselineLikeRecords(t *testing.T) {
	pool := pgtest.Pool(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	api := NewAPI(300, 100)
	srv := httptest.NewServer(api)
	defer srv.Close()
	dir := t.TempDir()
	if err := writeConfig(dir, srv.URL); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	cp, err := newCopyBaseline(ctx, pool, api, cfg.Sources[0], nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := cp.measure(ctx); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM records_copy WHERE source = 'tickets'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 300 {
		t.Errorf("records_copy holds %d rows of tickets, want 300", n)
	}
	if !pgtest.OnCitus(t, pool) {
		return
	}
	var same bool
	err = pool.QueryRow(ctx, `
		SELECT c.colocationid = r.colocationid AND column_to_column_name(c.logicalrelid, c.partkey) = 'source'
		FROM pg_dist_partition c, pg_dist_partition r
		WHERE c.logicalrelid = 'records_copy'::regclass AND r.logicalrelid = 'records'::regclass`).Scan(&same)
	if err != nil {
		t.Fatalf("records_copy is not a distributed table: %v", err)
	}
	if !same {
		t.Error("records_copy is not distributed by source with records")
	}
}

// TestHostSpeedReadsTheProbesCPU checks that the host speed probe reads
// the work's CPU time: a thread's rusage that did not move would print 0.
func TestHostSpeedReadsTheProbesCPU(t *testing.T) {
	d, err := HostSpeed()
	if err != nil {
		t.Fatal(err)
	}
	if d <= 0 {
		t.Fatalf("the probe's CPU time is %s; want the time its sort took", d)
	}
	t.Logf("host speed probe: %s", d)
}

// storedReads counts the statements that read a source's stored
// records back by id (changes.Apply reads their hashes), which a first
// sync skips.
type storedReads struct{ n atomic.Int64 }

func (s *storedReads) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.Contains(d.SQL, "FROM records WHERE source = $1 AND record_id = ANY") {
		s.n.Add(1)
	}
	return ctx
}
func (s *storedReads) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TestRunSyncAlternatesSyncsAndCopies runs (1) and (2) on a small API:
// syncPairs initial syncs that each create every record as a first sync
// does (without reading stored records back: a sync of a source that
// synced before does, even into emptied tables, and was 40–70% slower),
// as many COPYs that each fill records_copy, then a re-sync that reads
// every page's stored records and writes nothing.
func TestRunSyncAlternatesSyncsAndCopies(t *testing.T) {
	pc := pgtest.Pool(t).Config()
	reads := &storedReads{}
	pc.ConnConfig.Tracer = reads
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	const n, pageSize = 600, 100
	var res Result
	if err := runSync(ctx, pool, Options{Records: n, PageSize: pageSize}, &res); err != nil {
		t.Fatal(err)
	}
	if got, want := reads.n.Load(), int64(n/pageSize); got != want {
		t.Errorf("%d reads of stored records, want %d (the re-sync's pages only)", got, want)
	}
	if len(res.InitialRuns) != syncPairs || len(res.CopyRuns) != syncPairs {
		t.Errorf("%d syncs and %d COPYs measured, want %d of each", len(res.InitialRuns), len(res.CopyRuns), syncPairs)
	}
	rows, err := pool.Query(ctx, `SELECT items_created FROM sync_runs WHERE source = 'tickets' ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	created, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		t.Fatal(err)
	}
	// The initial syncs; the re-sync is a quiet run, counted in
	// sync_run_hours (runSync's checkQuietRun), not a row of sync_runs.
	want := slices.Repeat([]int{n}, syncPairs)
	if !slices.Equal(created, want) {
		t.Errorf("the runs of tickets created %v records, want %v", created, want)
	}
	var copied int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM records_copy`).Scan(&copied); err != nil {
		t.Fatal(err)
	}
	if copied != n {
		t.Errorf("records_copy holds %d rows after the last COPY, want %d", copied, n)
	}
	if res.Initial <= 0 || res.Copy <= 0 || res.InitialVsCopy <= 0 || res.ResyncRowsWritten != 0 {
		t.Errorf("initial %v, COPY %v, ratio %.2f, re-sync wrote %d rows; want positive times and ratio, no rows",
			res.Initial, res.Copy, res.InitialVsCopy, res.ResyncRowsWritten)
	}
}
