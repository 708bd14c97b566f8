package bench

import (
	"context"
	"testing"

	"github.com/lookout-dev/lookout/internal/pgtest"
)

// TestRunAdmin runs the admin page measurement small: the fill loads every
// row into the partition of its week (none into a default partition, so
// the pruner has nothing to move), every measured page answers 200 with
// an admin token (RunAdmin fails otherwise), the models page's drift
// counts the model steps, and timing a filled schema
// again without the fill reads the same dataset.
func TestRunAdmin(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	res, err := RunAdmin(ctx, pool, AdminOptions{Sources: 300, Changes: 3000, Runs: 1, Fill: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"sources": 300, "source_definitions": 300, "changes": 3200, "evaluations": 3000,
		"notifications": 150, "model_calls": 30, "sync_runs": 300, "records": 600, "sync_run_hours": 300 * 25}
	for table, n := range want {
		if res.Rows[table] != n {
			t.Errorf("%s: %d rows, want %d", table, res.Rows[table], n)
		}
	}
	if res.PartitionsMade != 0 {
		t.Errorf("the pruner made %d partitions after the fill: the fill did not make every week's", res.PartitionsMade)
	}
	for _, table := range []string{"changes", "evaluations", "notifications", "sync_runs", "model_calls"} {
		var n int64
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+table+`_default`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Errorf("%s_default holds %d rows: the fill did not make the partition of their week", table, n)
		}
	}
	if len(res.Pages) != len(adminPages) {
		t.Fatalf("%d pages timed, want %d", len(res.Pages), len(adminPages))
	}
	for _, p := range res.Pages {
		if p.P50 <= 0 || p.P95 < p.P50 || p.Max < p.P95 {
			t.Errorf("%s: p50 %v, p95 %v, max %v", p.Path, p.P50, p.P95, p.Max)
		}
	}
	// The models page's drift counts every model step (model_drift_days,
	// kept by count_evaluations, migrations 44 and 57, which joins each
	// step to its model call: the fill writes the calls first).
	var judged int64
	if err := pool.QueryRow(ctx, `SELECT coalesce(sum(judged), 0)::bigint FROM model_drift_days`).Scan(&judged); err != nil {
		t.Fatal(err)
	}
	if judged != want["model_calls"] {
		t.Errorf("model_drift_days counts %d model steps, want %d", judged, want["model_calls"])
	}
	// The owner filter finds the generated owner's sources.
	var owned int64
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM report_sources WHERE owner = $1`, AdminOwner).Scan(&owned); err != nil {
		t.Fatal(err)
	}
	if owned == 0 {
		t.Errorf("no source of %s", AdminOwner)
	}

	again, err := RunAdmin(ctx, pool, AdminOptions{Runs: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if again.Rows["changes"] != res.Rows["changes"] || again.Fill != 0 {
		t.Errorf("timed again: %d changes, fill %v; want %d, no fill", again.Rows["changes"], again.Fill, res.Rows["changes"])
	}
}
