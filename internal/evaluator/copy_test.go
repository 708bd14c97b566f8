package evaluator

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lookout-dev/lookout/internal/normalize"
)

// TestCopyWritesWhatTheInsertWrites commits one batch of decisions on two
// schemas holding the same changes: on one as a first attempt, whose
// evaluations go in with COPY (evaluationRows), on the other as a retry,
// whose evaluations go in with the INSERT of unnest. Every column of every
// evaluations row (the notification's by its dedupe key, title, body and
// payload) must be the same: the COPY writes its values and NULLs as the
// INSERT does.
func TestCopyWritesWhatTheInsertWrites(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	ctx := context.Background()
	rowsOf := func(attempts int) []string {
		t.Helper()
		pool, e := commitSetupWith(t, Config{Now: func() time.Time { return now }}, "", `
  - {name: urgent, when: 'record.status == "open" && "urgent" in record.labels', notify: [log], urgency: high}
  - {name: open, when: 'record.status == "open"', notify: [log]}
  - {name: typed, when: 'int(record.body) > 0'}
`)
		apply(t, pool,
			normalize.Record{ID: "T1", Title: "first", Status: "open", Labels: []string{"urgent"}, Body: "1", URL: "https://x/1",
				Extra: map[string]any{"n": int64(1)}},
			normalize.Record{ID: "T2", Title: "", Status: "closed", Body: "two"},
			normalize.Record{ID: "T3", Title: "third", Status: "open", Labels: []string{"ops"}, Body: "3"})
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx) //nolint:errcheck // committed by commitClaim
		claimed, err := scanChanges(tx.Query(ctx, `
			SELECT ch.id, ch.source, ch.record_id, ch.kind, ch.version, coalesce(ch.new_hash, ''), ch.changed_fields,
			       ch.record, ch.previous, $1::int, ch.created_at
			FROM changes ch WHERE source = 'tasks' ORDER BY id FOR UPDATE`, attempts))
		if err != nil {
			t.Fatal(err)
		}
		if err := fillSnapshots(ctx, tx, claimed); err != nil {
			t.Fatal(err)
		}
		decs := e.evaluate(claimed, nil)
		if _, _, err := e.commitClaim(ctx, tx, claimed, claimed, nil, decs, ""); err != nil {
			t.Fatalf("commit at attempt %d: %v", attempts, err)
		}
		rows, err := pool.Query(ctx, `
			SELECT concat_ws(' | ', ev.change_id, ev.source, ev.record_id, ev.watch, coalesce(ev.content_hash, '<null>'), ev.step,
			       ev.matched, ev.decision, ev.reason, ev.urgency, coalesce(n.dedupe_key, '<null>'), n.title, n.body, n.payload::text,
			       ev.evaluator, coalesce(ev.model_call_id::text, '<null>'), coalesce(ev.confidence::text, '<null>'),
			       ev.created_at IS NOT NULL, ev.owner, ev.change_created_at = ch.created_at)
			FROM evaluations ev LEFT JOIN notifications n ON n.source = ev.source AND n.id = ev.notification_id
			JOIN changes ch ON ch.source = ev.source AND ch.id = ev.change_id
			ORDER BY ev.change_id, ev.watch`)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for rows.Next() {
			var s string
			if err := rows.Scan(&s); err != nil {
				t.Fatal(err)
			}
			out = append(out, s)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	copied, inserted := rowsOf(1), rowsOf(2)
	if len(copied) != 9 {
		t.Fatalf("%d evaluations written by the COPY, want 9 (3 changes, 3 watches):\n%s", len(copied), strings.Join(copied, "\n"))
	}
	if !slices.Equal(copied, inserted) {
		t.Errorf("the COPY wrote\n%s\nthe INSERT\n%s", strings.Join(copied, "\n"), strings.Join(inserted, "\n"))
	}
	var errs, notes int
	for _, r := range copied {
		if strings.Contains(r, " | error | ") {
			errs++
		}
		if strings.Contains(r, `"dedupe_key"`) {
			notes++
		}
	}
	if errs == 0 || notes == 0 {
		t.Errorf("%d error decisions and %d notifications among the rows; want some of each:\n%s", errs, notes, strings.Join(copied, "\n"))
	}
}
