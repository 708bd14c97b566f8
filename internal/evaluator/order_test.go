package evaluator

import (
	"context"
	"slices"
	"testing"
)

// claimedIDs runs the claim (rescue: the takeover of expired leases) and
// returns the ids it locked, in order, rolling the claim back.
func (h *harness) claimedIDs(rescue bool) []int64 {
	h.t.Helper()
	tx, claimed, err := h.ev.claim(h.ctx, rescue)
	if err != nil {
		h.t.Fatalf("claim: %v", err)
	}
	defer tx.Rollback(context.WithoutCancel(h.ctx))
	ids := make([]int64, len(claimed))
	for i, c := range claimed {
		ids[i] = c.ID
	}
	return ids
}

// TestEarlierPendingChangeHoldsLaterOnesBack: the changes of one record are
// evaluated in order. A pending earlier change — leased to another
// evaluator, or waiting for its retry at eval_next_at — keeps the claim
// (and the rescue) from taking a later change of its record, whatever
// history the record has and whichever pending change is the oldest; once
// the earlier change can be taken again, both are evaluated, in order.
func TestEarlierPendingChangeHoldsLaterOnesBack(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// hold makes the record's earlier pending change not claimable;
		// release makes it claimable again.
		hold, release string
		// rescued is whether the rescue (expired leases only) takes the
		// earlier change once released.
		rescued bool
	}{
		{name: "leased to another evaluator",
			hold: `UPDATE changes SET eval_owner = 'other#00000001', eval_lease_expires_at = now() + interval '1 hour',
			       eval_attempts = 1 WHERE id = $1`,
			// The other evaluator died: its lease expired.
			release: `UPDATE changes SET eval_lease_expires_at = now() - interval '1 second' WHERE id = $1`,
			rescued: true},
		{name: "waiting for its retry",
			hold: `UPDATE changes SET eval_next_at = now() + interval '1 hour', eval_attempts = 1,
			       eval_error = 'any: model down' WHERE id = $1`,
			release: `UPDATE changes SET eval_next_at = now() WHERE id = $1`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, baseGlobal, map[string]string{"tasks.yaml": anySource})
			// T-1 has an evaluated history; T-0, another record, has an
			// older pending change that waits for its retry, so the
			// oldest pending change is not T-1's.
			for _, title := range []string{"a", "b", "c"} {
				h.sync("tasks", rec("T-1", title, ""))
				if n := h.drain(); n < 1 {
					t.Fatalf("history: drained %d changes, want at least 1", n)
				}
			}
			h.sync("tasks", rec("T-0", "zero", ""))
			zero := h.lastChange("tasks", "T-0")
			h.exec(`UPDATE changes SET eval_next_at = now() + interval '1 hour', eval_attempts = 1 WHERE id = $1`, zero)

			h.sync("tasks", rec("T-1", "earlier", ""))
			earlier := h.lastChange("tasks", "T-1")
			h.exec(tc.hold, earlier)
			h.sync("tasks", rec("T-1", "later", ""))
			later := h.lastChange("tasks", "T-1")
			h.sync("tasks", rec("T-2", "other record", ""))
			other := h.lastChange("tasks", "T-2")

			if got := h.claimedIDs(false); !slices.Equal(got, []int64{other}) {
				t.Errorf("claim took %v, want only %d (T-2): T-1's later change %d must wait behind %d", got, other, later, earlier)
			}
			if got := h.claimedIDs(true); len(got) != 0 {
				t.Errorf("rescue took %v, want nothing: no lease expired", got)
			}
			if n := h.drain(); n != 1 {
				t.Fatalf("drained %d changes, want 1 (T-2)", n)
			}
			if st := h.change(later); st.Status != "pending" || st.Attempts != 0 {
				t.Errorf("T-1's later change while the earlier one is held: %+v, want pending and never claimed", st)
			}

			h.exec(tc.release, earlier)
			if got := h.claimedIDs(false); !slices.Equal(got, []int64{earlier}) {
				t.Errorf("claim after the release took %v, want only the earlier change %d", got, earlier)
			}
			want := []int64(nil)
			if tc.rescued {
				want = []int64{earlier}
			}
			if got := h.claimedIDs(true); !slices.Equal(got, want) {
				t.Errorf("rescue after the release took %v, want %v", got, want)
			}
			if n := h.drain(); n != 2 {
				t.Fatalf("drained %d changes after the release, want 2 (T-1's earlier and later)", n)
			}
			var order []int64
			rows, err := h.pool.Query(h.ctx, `SELECT change_id FROM evaluations WHERE change_id = ANY($1) ORDER BY id`,
				[]int64{earlier, later})
			if err != nil {
				t.Fatal(err)
			}
			for rows.Next() {
				var id int64
				if err := rows.Scan(&id); err != nil {
					t.Fatal(err)
				}
				order = append(order, id)
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(order, []int64{earlier, later}) {
				t.Errorf("evaluations of T-1's changes in order %v, want %v", order, []int64{earlier, later})
			}
			if st := h.change(zero); st.Status != "pending" {
				t.Errorf("T-0's held change is %s, want still pending (it waits for its retry)", st.Status)
			}
		})
	}
}
