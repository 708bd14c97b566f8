package evaluator

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/watchspec"
)

// TestEvaluationRowsReadTheDecisionsInPlace checks the values of the
// evaluations' COPY (evaluationColumns' order, NULL where the INSERT path
// writes NULL) and that reading a batch's rows allocates nothing per row:
// the [][]any it replaced boxed about 17 values a row.
func TestEvaluationRowsReadTheDecisionsInPlace(t *testing.T) {
	created := time.Date(2026, 12, 3, 4, 0, 0, 0, time.UTC)
	at := created.Add(time.Second)
	w := &watchspec.Watch{Config: &config.Watch{Name: "w"}, Owner: "alice"}
	conf, call, note := 0.75, int64(9), int64(11)
	decs := make([]decision, 1000)
	idx := make([]int, 0, len(decs))
	for i := range decs {
		c := &change{ID: int64(1000 + i), Source: "s", RecordID: "r", NewHash: "h", CreatedAt: created}
		if i%2 == 1 {
			c.NewHash = ""
		}
		decs[i] = decision{change: c, watch: w, step: "filter", matched: true, verdict: "notify", reason: "why", urgency: "high"}
		if i == 2 {
			decs[i].confidence, decs[i].modelCallID = &conf, &call
		}
		if i == 4 {
			decs[i].noteID = &note
		}
		if i%3 != 0 {
			idx = append(idx, i)
		}
	}
	owner := "evaluator-1"
	rows := newEvaluationRows(decs, idx, &owner, &at)
	n := 0
	for rows.Next() {
		v, err := rows.Values()
		if err != nil || len(v) != len(evaluationColumns) {
			t.Fatalf("row %d: %d values, %v; want %d", n, len(v), err, len(evaluationColumns))
		}
		d := &decs[idx[n]]
		id, _ := v[0].(pgtype.Int64Valuer).Int64Value()
		// A NULL is nil (pgx plans no encoding for it) or a valuer's
		// invalid value.
		var hash pgtype.Text
		if v[4] != nil {
			hash, _ = v[4].(pgtype.TextValuer).TextValue()
		}
		evaluator, _ := v[11].(pgtype.TextValuer).TextValue()
		var confidence pgtype.Float8
		if v[13] != nil {
			confidence, _ = v[13].(pgtype.Float64Valuer).Float64Value()
		}
		for col, want := range map[int]*int64{10: d.noteID, 12: d.modelCallID} {
			var p pgtype.Int8
			if v[col] != nil {
				p, _ = v[col].(pgtype.Int64Valuer).Int64Value()
			}
			if p.Valid != (want != nil) || (want != nil && p.Int64 != *want) {
				t.Fatalf("row %d (decision %d): %s = %+v; want %v", n, idx[n], evaluationColumns[col], p, want)
			}
		}
		createdAt, _ := v[14].(pgtype.TimestamptzValuer).TimestamptzValue()
		changeAt, _ := v[16].(pgtype.TimestamptzValuer).TimestamptzValue()
		if id.Int64 != d.change.ID || hash.Valid != (d.change.NewHash != "") || evaluator.String != owner ||
			confidence.Valid != (d.confidence != nil) || !createdAt.Time.Equal(at) || !changeAt.Time.Equal(created) || v[6] != true {
			t.Fatalf("row %d (decision %d): %+v %+v %+v %+v %+v %+v", n, idx[n], id, hash, evaluator, confidence, createdAt, changeAt)
		}
		n++
	}
	if n != len(idx) {
		t.Fatalf("%d rows; want %d", n, len(idx))
	}
	allocs := testing.AllocsPerRun(20, func() {
		rows := newEvaluationRows(decs, idx, &owner, &at)
		for rows.Next() {
			_, _ = rows.Values()
		}
	})
	if allocs > 2 {
		t.Fatalf("reading %d rows allocated %.0f times; want at most 2 (the source and its row)", len(idx), allocs)
	}
}
