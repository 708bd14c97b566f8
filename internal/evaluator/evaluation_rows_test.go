package evaluator

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/db"
	"github.com/lookout-dev/lookout/internal/pgtest"
	"github.com/lookout-dev/lookout/internal/watchspec"
)

// TestEvaluationRowsReadTheDecisionsInPlace copies a batch's evaluations
// into a table like evaluations and reads them back: each column as the
// decision and its change hold it, NULL where the INSERT path writes NULL
// (an empty hash, no confidence, model call or notification); and
// encoding the rows allocates nothing per row.
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
		decs[i] = decision{change: c, watch: w, step: "filter", matched: i%5 != 0, verdict: "notify", reason: "why", urgency: "high"}
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

	pool := pgtest.Pool(t)
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `CREATE TEMP TABLE evaluations (LIKE evaluations INCLUDING DEFAULTS)`); err != nil {
		t.Fatal(err)
	}
	if n, err := db.CopyFrom(ctx, tx, "evaluations", evaluationColumns, copyEvaluations, evaluationRows(decs, idx, &owner, &at)); err != nil || n != int64(len(idx)) {
		t.Fatalf("COPY: %d rows, %v; want %d", n, err, len(idx))
	}
	type row struct {
		ChangeID                  int64
		Source, RecordID, Watch   string
		ContentHash               *string
		Step                      string
		Matched                   bool
		Decision, Reason, Urgency string
		NotificationID            *int64
		Evaluator                 string
		ModelCallID               *int64
		Confidence                *float64
		CreatedAt                 time.Time
		Owner                     string
		ChangeCreatedAt           time.Time
	}
	rows, err := tx.Query(ctx, `SELECT change_id, source, record_id, watch, content_hash, step, matched, decision, reason, urgency,
		notification_id, evaluator, model_call_id, confidence, created_at, owner, change_created_at
		FROM pg_temp.evaluations ORDER BY change_id`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(idx) {
		t.Fatalf("%d rows; want %d", len(got), len(idx))
	}
	for n, g := range got {
		d := &decs[idx[n]]
		c := d.change
		if g.ChangeID != c.ID || g.Source != c.Source || g.RecordID != c.RecordID || g.Watch != "w" ||
			(g.ContentHash == nil) != (c.NewHash == "") || g.Step != d.step || g.Matched != d.matched ||
			g.Decision != d.verdict || g.Reason != d.reason || g.Urgency != d.urgency || g.Evaluator != owner ||
			!g.CreatedAt.Equal(at) || g.Owner != "alice" || !g.ChangeCreatedAt.Equal(created) {
			t.Fatalf("row %d (decision %d): %+v", n, idx[n], g)
		}
		for name, p := range map[string][2]*int64{"notification_id": {g.NotificationID, d.noteID}, "model_call_id": {g.ModelCallID, d.modelCallID}} {
			if (p[0] == nil) != (p[1] == nil) || (p[0] != nil && *p[0] != *p[1]) {
				t.Fatalf("row %d (decision %d): %s = %v; want %v", n, idx[n], name, p[0], p[1])
			}
		}
		if (g.Confidence == nil) != (d.confidence == nil) || (g.Confidence != nil && *g.Confidence != *d.confidence) {
			t.Fatalf("row %d (decision %d): confidence = %v; want %v", n, idx[n], g.Confidence, d.confidence)
		}
	}

	p := make([]byte, 65536-5)
	allocs := testing.AllocsPerRun(20, func() {
		in := evaluationRows(decs, idx, &owner, &at)
		for {
			if _, err := in.Read(p); err == io.EOF {
				break
			}
		}
	})
	if allocs > 3 {
		t.Fatalf("encoding %d rows allocated %.0f times; want at most 3 (the COPY, its buffer and its rows' function)", len(idx), allocs)
	}
}
