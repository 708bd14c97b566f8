package bench

import (
	"context"
	"testing"
	"time"

	"github.com/lookout-dev/lookout/internal/pgtest"
)

// TestRunFirstRun runs measurement (11) small: every source created
// through the API runs, woken by the definitions' NOTIFY (the syncer's
// poll is a minute: a first run that waited for it would take that long).
func TestRunFirstRun(t *testing.T) {
	t.Parallel()
	res, err := RunFirstRun(context.Background(), pgtest.Pool(t), 5, 10*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("first runs %s; creates %s", res.Latency, res.Create)
	if res.Latency.N != 5 || res.Create.N != 5 || res.Latency.Max >= res.PollInterval {
		t.Errorf("result %+v", res)
	}
}

// TestRunManyWatches runs measurement (12) small: both phases decide
// every change, and the watches made through the store are loaded.
func TestRunManyWatches(t *testing.T) {
	t.Parallel()
	res, err := RunManyWatches(context.Background(), pgtest.Pool(t), 200, time.Second, 300, 3)
	if err != nil {
		t.Fatal(err)
	}
	if res.Baseline.N == 0 || res.Loaded.N == 0 || res.Watches != 300 || res.HeapMB <= 0 || len(res.Phases) != 4 {
		t.Fatalf("result %+v", res)
	}
	// Alternated: gen's 2 watches, then 300 more, and again.
	for i, want := range []int{2, 302, 2, 302} {
		if got := res.Phases[i].Watches; got != want {
			t.Errorf("phase %d had %d watches loaded, want %d", i+1, got, want)
		}
	}
}
