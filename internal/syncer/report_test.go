package syncer

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lookout-dev/lookout/internal/connectors"
)

// Every run records when it was due and why (the interval reason in force
// at the claim), so "why did it run?" has an answer after later runs
// rewrote the source's row; stuck_after reaches sources.stuck_after_seconds.
func TestRunRecordsWhyItWasDue(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	var calls atomic.Int32
	fetch := func(ctx context.Context, env connectors.Env, cursor json.RawMessage, emit connectors.EmitFunc) (connectors.Result, error) {
		if calls.Add(1) == 1 {
			return connectors.Result{}, errors.New("upstream on fire")
		}
		return connectors.Result{Complete: true}, nil
	}
	cfg := loadConfig(t, fastLimits, map[string]string{"s": "every: 1m\njitter: 0s\nstuck_after: 45m\n"},
		map[string]fetchFunc{"s": fetch})
	s := h.syncer(cfg, Config{})

	var stuck int
	if err := h.pool.QueryRow(context.Background(), `SELECT stuck_after_seconds FROM sources WHERE name = 's'`).Scan(&stuck); err != nil {
		t.Fatal(err)
	}
	if stuck != 45*60 {
		t.Errorf("stuck_after_seconds = %d, want 2700", stuck)
	}

	type due struct {
		at     time.Time
		reason string
	}
	var want []due
	for range 2 {
		src := h.source("s")
		want = append(want, due{src.NextRunAt, src.IntervalReason})
		if n := h.runAt(s, "s"); n != 1 {
			t.Fatalf("ran %d sources, want 1", n)
		}
	}
	rows, err := h.pool.Query(context.Background(), `SELECT due_at, due_reason FROM sync_runs WHERE source = 's' ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []due
	for rows.Next() {
		var d due
		if err := rows.Scan(&d.at, &d.reason); err != nil {
			t.Fatal(err)
		}
		got = append(got, d)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("%d runs, want 2", len(got))
	}
	for i := range got {
		if !got[i].at.Equal(want[i].at) || got[i].reason != want[i].reason {
			t.Errorf("run %d: due %s %q, want %s %q", i+1, got[i].at, got[i].reason, want[i].at, want[i].reason)
		}
	}
	if !strings.Contains(got[1].reason, "backoff after 1 consecutive failure(s)") {
		t.Errorf("the retry's due_reason %q does not name the backoff", got[1].reason)
	}
}
