package evaluator

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/ollama/ollama/api"

	"github.com/lookout-dev/lookout/internal/changes"
	"github.com/lookout-dev/lookout/internal/normalize"
	"github.com/lookout-dev/lookout/internal/pgtest"
	"github.com/lookout-dev/lookout/internal/semantic/ollamatest"
	"github.com/lookout-dev/lookout/internal/testsignal"
)

// anySource is a source with one deterministic watch that matches every change.
const anySource = `
name: tasks
connector: file
file: {paths: [x.jsonl]}
watches:
  - name: any
    when: "true"
`

// TestFrozenClaimIsTakenOver: an evaluator that stops talking in the middle
// of a deterministic batch (SIGSTOP, a half-open connection) holds the
// claim's row locks only until the lease: the server ends its idle
// transaction, and another evaluator evaluates the changes while the frozen
// one is still frozen. The frozen one cannot commit afterwards.
func TestFrozenClaimIsTakenOver(t *testing.T) {
	t.Parallel()
	h := newHarness(t, baseGlobal, map[string]string{"tasks.yaml": anySource})
	h.sync("tasks", rec("T-1", "a", ""), rec("T-2", "b", ""), rec("T-3", "c", ""))
	// The lease is also the claim's statement timeout: on Citus, whose
	// claim reads its candidates on every shard first, a busy machine
	// (load 40 on 2 cores) took longer than 1 s for it.
	lease := time.Second
	if pgtest.OnCitus(t, h.pool) {
		lease = 5 * time.Second
	}
	newEvaluator := func(owner string) *Evaluator {
		ev, err := New(h.pool, testConfig(h.cfg, Config{Owner: owner, Lease: lease}), slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		return ev
	}
	frozen, taker := newEvaluator("frozen"), newEvaluator("taker")

	// The frozen evaluator claims the batch the way every batch starts, then
	// never says another word on that connection.
	tx, claimed, err := frozen.claim(h.ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.WithoutCancel(h.ctx))
	if len(claimed) != 3 {
		t.Fatalf("claimed %d changes, want 3", len(claimed))
	}

	testsignal.Eventually(t, "another evaluator to take the frozen claim over", func() bool {
		if _, err := taker.Drain(h.ctx); err != nil {
			t.Fatalf("Drain: %v", err)
		}
		return h.count(`SELECT count(*) FROM changes WHERE eval_status = 'done'`) == 3
	})
	if n := h.count(`SELECT count(*) FROM evaluations WHERE evaluator = 'taker'`); n != 3 {
		t.Errorf("evaluations by the taker = %d, want 3", n)
	}
	// The frozen evaluator resumes: its session was ended by the server.
	if err := tx.Commit(h.ctx); err == nil {
		t.Errorf("the frozen claim committed after it was taken over")
	} else {
		t.Logf("the frozen evaluator's commit: %v", err)
	}
	if n := h.count(`SELECT count(*) FROM evaluations`); n != 3 {
		t.Errorf("evaluations = %d, want 3 (one per change)", n)
	}
}

// syncLeased writes recs as the syncer would and, in the same transaction,
// leases their changes to owner with a lease that already expired: the
// state a killed evaluator leaves behind.
func (h *harness) syncLeased(source, owner string, recs ...normalize.Record) {
	h.t.Helper()
	src := h.cfg.Source(source)
	hasher, err := normalize.NewHasher(src.Volatile)
	if err != nil {
		h.t.Fatal(err)
	}
	ids := make([]string, len(recs))
	for i := range recs {
		hasher.Hash(&recs[i])
		ids[i] = recs[i].ID
	}
	err = pgx.BeginFunc(h.ctx, h.pool, func(tx pgx.Tx) error {
		if _, err := changes.Apply(h.ctx, tx, source, 0, recs, hasher); err != nil {
			return err
		}
		_, err := tx.Exec(h.ctx, `
			UPDATE changes SET eval_owner = $3, eval_lease_expires_at = now() - interval '1 second', eval_attempts = 1
			WHERE source = $1 AND record_id = ANY($2) AND eval_status = 'pending'`, source, ids, owner)
		return err
	})
	if err != nil {
		h.t.Fatalf("sync %s: %v", source, err)
	}
}

// TestExpiredLeaseIsRescuedWhileWorkersAreBusy: a killed evaluator's leased
// model batch is taken over once its lease expired, even when every worker
// of the live evaluator is busy with a slow model call.
func TestExpiredLeaseIsRescuedWhileWorkersAreBusy(t *testing.T) {
	t.Parallel()
	global := strings.Replace(strings.Replace(baseGlobal, "timeout: 2s", "timeout: 60s", 1), "lease: 10s", "lease: 2m", 1)
	h := newHarness(t, global, map[string]string{"tasks.yaml": tasksSource})
	h.fake.SetAnswer(func(req *api.ChatRequest) ollamatest.Answer {
		a := ollamatest.DefaultAnswer(req)
		a.Hang = strings.Contains(req.Messages[1].Content, "SLOW")
		return a
	})
	ev, err := New(h.pool, testConfig(h.cfg, Config{Owner: "live", Workers: 1, CatchUpInterval: 100 * time.Millisecond}),
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

	// The only worker takes a batch whose model call does not return.
	h.sync("tasks", rec("S-1", "SLOW", "open"))
	testsignal.Eventually(t, "the worker's slow model call", func() bool { n, _ := h.fake.InFlight(); return n == 1 })

	// A killed evaluator's batch, its lease expired.
	h.syncLeased("tasks", "dead#00000001", rec("D-1", "URGENT: disk full", "open"), rec("D-2", "all good", "open"))
	testsignal.Eventually(t, "the dead evaluator's changes taken over", func() bool {
		return h.count(`SELECT count(*) FROM changes WHERE record_id IN ('D-1', 'D-2') AND eval_status = 'done'`) == 2
	})
	if n, _ := h.fake.InFlight(); n != 1 {
		t.Errorf("the worker's model call ended (%d in flight) before the takeover was checked", n)
	}
	if st := h.change(h.lastChange("tasks", "S-1")); st.Status != "pending" {
		t.Errorf("S-1 is %s: the worker was not busy during the takeover", st.Status)
	}
	if e := h.one("tasks", "D-1", "urgent"); e.Decision != "notify" || e.Step != "model" {
		t.Errorf("D-1: %+v", e)
	}
	h.fake.Release()
	testsignal.Eventually(t, "the slow batch to finish", func() bool {
		return h.change(h.lastChange("tasks", "S-1")).Status == "done"
	})
}

// TestFencedCommitLogsNoDecision: an evaluator whose lease was taken over
// while it waited for the model throws its decisions away; it says so, and
// logs none of them as decisions.
func TestFencedCommitLogsNoDecision(t *testing.T) {
	t.Parallel()
	global := strings.Replace(strings.Replace(baseGlobal, "timeout: 2s", "timeout: 60s", 1), "lease: 10s", "lease: 2m", 1)
	h := newHarness(t, global, map[string]string{"tasks.yaml": tasksSource})
	h.fake.SetAnswer(func(req *api.ChatRequest) ollamatest.Answer {
		a := ollamatest.DefaultAnswer(req)
		a.Hang = true
		return a
	})
	logs := &syncBuffer{}
	ev, err := New(h.pool, testConfig(h.cfg, Config{Owner: "fenced"}), slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	h.sync("tasks", rec("T-1", "URGENT: database down", "open"))
	id := h.lastChange("tasks", "T-1")
	var wg sync.WaitGroup
	wg.Go(func() {
		if _, err := ev.Drain(h.ctx); err != nil {
			t.Errorf("Drain: %v", err)
		}
	})
	testsignal.Eventually(t, "the model call", func() bool { n, _ := h.fake.InFlight(); return n == 1 })
	// Another evaluator takes the change over while the model answers.
	h.exec(`UPDATE changes SET eval_owner = 'thief', eval_lease_expires_at = now() + interval '1 hour' WHERE id = $1`, id)
	h.fake.Release()
	wg.Wait()

	out := logs.String()
	if !strings.Contains(out, "lost lease on changes") {
		t.Fatalf("no lost-lease warning:\n%s", out)
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "msg=decision") || strings.Contains(line, `msg="decision held"`) {
			t.Errorf("a fenced evaluator logged a decision: %s", line)
		}
	}
	if n := h.count(`SELECT count(*) FROM evaluations WHERE change_id = $1 AND watch = 'urgent'`, id); n != 0 {
		t.Errorf("the fenced evaluator wrote %d model decisions", n)
	}
}
