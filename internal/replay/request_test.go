package replay_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lookout-dev/lookout/internal/pgtest"
	"github.com/lookout-dev/lookout/internal/replay"
)

func request(watch string) replay.Request {
	now := time.Now().Truncate(time.Microsecond)
	return replay.Request{Owner: "alice", Source: "tickets", Watch: watch, Definition: json.RawMessage(`{"name": "tickets", "watches": [{"name": "` + watch + `"}]}`),
		Since: now.Add(-time.Hour), Until: now, MaxCalls: 5}
}

func rows(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM dry_run_requests`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A request is answered by one of the workers running, with the report
// its run made, and forgotten once read.
func TestRequestIsAnsweredByOneWorker(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	var mu sync.Mutex
	var ran []string
	var got *replay.Request
	for _, by := range []string{"eval-a", "eval-b"} {
		w := replay.NewWorker(pool, by, func(_ context.Context, r *replay.Request) (*replay.Report, error) {
			mu.Lock()
			defer mu.Unlock()
			ran, got = append(ran, by), r
			return &replay.Report{Changes: 7, Calls: 2, Filter: map[string]int{"skip": 5}, Model: map[string]int{"notify": 2},
				Rows: []replay.Row{{ChangeID: 3, RecordID: "T-3", Watch: r.Watch, New: "notify", NewStep: "model", Reason: "by " + by}}}, nil
		}, slog.New(slog.DiscardHandler))
		if err := w.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = w.Stop() })
	}
	want := request("urgent")
	id, err := replay.Submit(ctx, pool, want, time.Now().Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	rep, err := replay.Await(ctx, pool, id, time.Minute, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(ran) != 1 {
		t.Fatalf("ran by %v, want one worker", ran)
	}
	if rep.Changes != 7 || rep.Calls != 2 || len(rep.Rows) != 1 || rep.Rows[0].Reason != "by "+ran[0] || rep.Model["notify"] != 2 {
		t.Errorf("report = %+v", rep)
	}
	want.ID = id
	if got.ID != want.ID || got.Owner != want.Owner || got.Source != want.Source || got.Watch != want.Watch || got.MaxCalls != want.MaxCalls ||
		!got.Since.Equal(want.Since) || !got.Until.Equal(want.Until) || !strings.Contains(string(got.Definition), `"urgent"`) {
		t.Errorf("the worker ran %+v, want %+v", got, want)
	}
	if n := rows(t, pool); n != 0 {
		t.Errorf("%d request row(s) left after the answer was read", n)
	}
}

// With no evaluator, the wait ends with an error naming the request, and
// the request is withdrawn: an evaluator started later does not run it.
func TestAwaitWithoutWorkerWithdrawsTheRequest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	id, err := replay.Submit(ctx, pool, request("urgent"), time.Now().Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	_, err = replay.Await(ctx, pool, id, 300*time.Millisecond, slog.New(slog.DiscardHandler))
	var pending *replay.PendingError
	if !errors.As(err, &pending) || pending.ID != id || pending.Status != replay.StatusPending {
		t.Fatalf("await without an evaluator: %v", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "dry run request "+strconv.FormatInt(id, 10)+" was not taken by any evaluator within 300ms") ||
		!strings.Contains(msg, "is an evaluator running?") {
		t.Errorf("message: %s", msg)
	}
	if r, err := replay.Claim(ctx, pool, "late"); err != nil || r != nil {
		t.Errorf("claim after the wait: %+v, %v", r, err)
	}
	if n := rows(t, pool); n != 0 {
		t.Errorf("%d request row(s) left", n)
	}
}

// A request the evaluator could not answer is an error with its reason.
func TestFailedRequestGivesItsReason(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	id, err := replay.Submit(ctx, pool, request("urgent"), time.Now().Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	r, err := replay.Claim(ctx, pool, "eval-a")
	if err != nil || r == nil || r.ID != id {
		t.Fatalf("claim: %+v, %v", r, err)
	}
	if err := replay.Finish(ctx, pool, id, "eval-a", nil, errors.New("model llama3.2 is not pulled")); err != nil {
		t.Fatal(err)
	}
	_, err = replay.Await(ctx, pool, id, time.Minute, slog.New(slog.DiscardHandler))
	var failed *replay.FailedError
	if !errors.As(err, &failed) || err.Error() != "dry run request "+strconv.FormatInt(id, 10)+" failed in the evaluator: model llama3.2 is not pulled" {
		t.Errorf("await of a failed request: %v", err)
	}
}

// Replicas claim with SKIP LOCKED: a request being claimed is not
// claimed twice, and an expired one is not claimed at all.
func TestClaimSkipsLockedAndExpiredRequests(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	if _, err := replay.Submit(ctx, pool, request("old"), time.Now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	a, err := replay.Submit(ctx, pool, request("a"), time.Now().Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	b, err := replay.Submit(ctx, pool, request("b"), time.Now().Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	first, err := replay.Claim(ctx, tx, "eval-a")
	if err != nil || first == nil || first.ID != a {
		t.Fatalf("first claim: %+v, %v", first, err)
	}
	second, err := replay.Claim(ctx, pool, "eval-b") // a is locked by the open claim
	if err != nil || second == nil || second.ID != b {
		t.Fatalf("second claim: %+v, %v", second, err)
	}
	if third, err := replay.Claim(ctx, pool, "eval-c"); err != nil || third != nil {
		t.Errorf("third claim: %+v, %v (the expired request is not claimed)", third, err)
	}
}
