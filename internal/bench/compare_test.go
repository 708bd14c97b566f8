package bench

import (
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
	if _, _, err := copyBaseline(ctx, pool, api, cfg.Sources[0], nil); err != nil {
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
