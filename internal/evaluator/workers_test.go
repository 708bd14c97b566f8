package evaluator

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/ollama/ollama/api"

	"github.com/lookout-dev/lookout/internal/db"
	"github.com/lookout-dev/lookout/internal/normalize"
	"github.com/lookout-dev/lookout/internal/outbox"
	"github.com/lookout-dev/lookout/internal/semantic/ollamatest"
	"github.com/lookout-dev/lookout/internal/testsignal"
)

// TestIdleWorkerTakesANotifyWhileAnotherIsBusy: a change committed while
// one worker waits for a slow model call is decided by the idle worker on
// its NOTIFY, without waiting for the busy batch to end (nor for the
// catch-up timer, an hour here).
func TestIdleWorkerTakesANotifyWhileAnotherIsBusy(t *testing.T) {
	t.Parallel()
	global := strings.Replace(strings.Replace(baseGlobal, "timeout: 2s", "timeout: 60s", 1), "lease: 10s", "lease: 2m", 1)
	h := newHarness(t, global, map[string]string{"tasks.yaml": tasksSource})
	h.fake.SetAnswer(func(req *api.ChatRequest) ollamatest.Answer {
		a := ollamatest.DefaultAnswer(req)
		a.Hang = strings.Contains(req.Messages[1].Content, "SLOW")
		return a
	})
	ev, err := New(h.pool, testConfig(h.cfg, Config{Owner: "workers", Workers: 2, CatchUpInterval: time.Hour}),
		slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := ev.Start(h.ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		h.fake.Release()
		_ = ev.Stop()
	})
	testsignal.Eventually(t, "listener connected", ev.Listening)

	// One worker takes a batch whose model call does not return.
	h.sync("tasks", rec("S-1", "SLOW", "open"))
	testsignal.Eventually(t, "the worker's slow model call", func() bool { n, _ := h.fake.InFlight(); return n == 1 })

	// A change that needs no model, committed (and NOTIFYed) meanwhile.
	h.sync("tasks", rec("N-1", "shipped", "done"))
	testsignal.Eventually(t, "the new change decided by the idle worker", func() bool {
		return h.change(h.lastChange("tasks", "N-1")).Status == "done"
	})
	if n, _ := h.fake.InFlight(); n != 1 {
		t.Errorf("the slow model call ended (%d in flight) before the new change was checked", n)
	}
	if st := h.change(h.lastChange("tasks", "S-1")); st.Status != "pending" {
		t.Errorf("S-1 is %s: the busy worker's batch had ended", st.Status)
	}
	if e := h.one("tasks", "N-1", "closed"); e.Decision != "notify" {
		t.Errorf("N-1 closed: %+v", e)
	}
	h.fake.Release()
	testsignal.Eventually(t, "the slow batch to finish", func() bool {
		return h.change(h.lastChange("tasks", "S-1")).Status == "done"
	})
}

// The claim itself reads the snapshot a created change left to its record
// (one round trip, no fillSnapshots query), and the snapshot a change
// stores when its record moved on.
func TestClaimReadsCreatedSnapshotsFromTheRecord(t *testing.T) {
	t.Parallel()
	pool, _ := commitSetup(t, "", "  - {name: any, notify: [log]}\n")
	ctx := context.Background()
	apply(t, pool, normalize.Record{ID: "C1", Title: "created", Status: "open"})
	apply(t, pool, normalize.Record{ID: "U1", Title: "first", Status: "open"})
	apply(t, pool, normalize.Record{ID: "U1", Title: "second", Status: "open"})
	var stored int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM changes WHERE record IS NULL`).Scan(&stored); err != nil || stored != 1 {
		t.Fatalf("%d changes without a snapshot of their own (%v), want 1 (C1's)", stored, err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	// Restricted to the changes' one source: on Citus a claim statement runs
	// per shard (db.ClaimGroups).
	var srcs []string
	if err := tx.QueryRow(ctx, `SELECT array_agg(DISTINCT source) FROM changes`).Scan(&srcs); err != nil {
		t.Fatal(err)
	}
	claimed, err := scanClaimed(tx.Query(ctx, claimSQL, 10, srcs))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, c := range claimed {
		if c.Record == nil {
			t.Errorf("change %d of %s: claimed without its snapshot", c.ID, c.RecordID)
			continue
		}
		got[c.RecordID] = fmt.Sprint(c.Record["title"])
	}
	if got["C1"] != "created" || got["U1"] != "first" {
		t.Errorf("claimed snapshots %v, want C1 created and U1's first version (its later change waits)", got)
	}
}

// A batch that notifies wakes the deliverers (<schema>.outbox) once it
// committed (Drain: at once; run: wakeLoop, TestClaimCommitsWithoutNotify).
func TestCommitThatNotifiesWakesTheDeliverers(t *testing.T) {
	t.Parallel()
	pool, e := commitSetup(t, "", "  - {name: any, notify: [log]}\n")
	ctx := context.Background()
	schema, err := db.CurrentSchema(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{outbox.Channel(schema)}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	apply(t, pool, normalize.Record{ID: "N1", Title: "new", Status: "open"})
	drain(t, e)
	wctx, cancel := context.WithTimeout(ctx, testsignal.Timeout())
	defer cancel()
	if _, err := conn.Conn().WaitForNotification(wctx); err != nil {
		t.Fatalf("no wake-up of the deliverers after a batch that notified: %v", err)
	}
	if n := notes(t, pool); n["any"].rows != 1 {
		t.Errorf("notifications %v, want one of watch any", n)
	}
}

// notifyTracer records, per connection, whether each pg_notify it sent was
// inside a transaction, and whether with synchronous_commit off.
type notifyTracer struct {
	mu     sync.Mutex
	inTx   map[*pgx.Conn]bool
	inside int // pg_notify sent inside a transaction
	async  int // pg_notify sent alone, committed asynchronously
}

func (n *notifyTracer) saw(conn *pgx.Conn, sql string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	q := strings.ToLower(strings.TrimSpace(sql))
	switch {
	case strings.HasPrefix(q, "begin"):
		n.inTx[conn] = true
	case q == "commit" || q == "rollback":
		n.inTx[conn] = false
	case strings.Contains(q, "pg_notify") && strings.Contains(q, ".outbox"):
		if n.inTx[conn] {
			n.inside++
		} else if strings.Contains(q, "'synchronous_commit', 'off'") {
			n.async++
		}
	}
}

func (n *notifyTracer) TraceQueryStart(ctx context.Context, conn *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	n.saw(conn, d.SQL)
	return ctx
}
func (n *notifyTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (n *notifyTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}
func (n *notifyTracer) TraceBatchQuery(_ context.Context, conn *pgx.Conn, d pgx.TraceBatchQueryData) {
	n.saw(conn, d.SQL)
}
func (n *notifyTracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// TestClaimCommitsWithoutNotify: the running evaluator's claim transaction
// sends no NOTIFY (PostgreSQL holds a lock through the commit of one that
// does, WAL flush included, so the claim's commit and the change log
// writer's flushed one after the other); the deliverers are woken after
// the commit, by a NOTIFY alone that commits asynchronously, and the
// notifications are there when they wake. Before the wake-up left the
// claim: 1 NOTIFY inside the transaction, 0 alone.
func TestClaimCommitsWithoutNotify(t *testing.T) {
	t.Parallel()
	base, e := commitSetup(t, "", "  - {name: any, notify: [log]}\n")
	ctx := context.Background()
	tr := &notifyTracer{inTx: map[*pgx.Conn]bool{}}
	cfg := base.Config().Copy()
	cfg.ConnConfig.Tracer = tr
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	e.pool = pool
	schema, err := db.CurrentSchema(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := base.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{outbox.Channel(schema)}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Stop() })
	apply(t, base, normalize.Record{ID: "N1", Title: "new", Status: "open"})
	wctx, cancel := context.WithTimeout(ctx, testsignal.Timeout())
	defer cancel()
	if _, err := conn.Conn().WaitForNotification(wctx); err != nil {
		t.Fatalf("no wake-up of the deliverers after a batch that notified: %v", err)
	}
	if n := notes(t, base); n["any"].rows != 1 {
		t.Errorf("notifications %v when the deliverers woke, want one of watch any", n)
	}
	tr.mu.Lock()
	inside, async := tr.inside, tr.async
	tr.mu.Unlock()
	if inside != 0 || async != 1 {
		t.Errorf("outbox NOTIFYs: %d inside a transaction, %d alone with synchronous_commit off; want 0 and 1", inside, async)
	}
}
