package admin

import (
	"bytes"
	"fmt"
	"net/http"
	"reflect"

	"github.com/lookout-dev/lookout/internal/control"

	"github.com/lookout-dev/lookout/internal/explain"
)

// recordData is a record's page: the record, its changes newest first, and
// under each change the decision trail of every watch.
type recordData struct {
	Source, ID string
	Record     []field
	Changes    []changeTrail
	More       bool
	// Explain is what `evaluator explain SOURCE RECORD_ID` prints.
	Explain string
}

type changeTrail struct {
	ID            int64
	Fields        []field
	Evaluations   *table
	ModelCalls    *table
	Notifications *table
}

func (a *Admin) record(w http.ResponseWriter, r *http.Request, c *caller) {
	ctx, cancel := pageContext(r)
	defer cancel()
	source, id := r.URL.Query().Get("source"), r.URL.Query().Get("id")
	if source == "" || id == "" {
		a.fail(w, r, http.StatusBadRequest, "The record page needs ?source=NAME&id=RECORD_ID.")
		return
	}
	p := newPage(c, "Record "+source+"/"+id, "sources")
	d := &recordData{Source: source, ID: id}
	_, rec, err := list(ctx, a, p, "The record as mirrored now", control.ReportRecord, []any{source, id}, 0, links)
	if err != nil {
		a.failErr(w, r, err)
		return
	}
	d.Record = fields(rec)
	changes, chs, err := list(ctx, a, p, "Its changes, newest first", control.ReportRecordChanges, []any{source, id}, 20, withRecord(source, id))
	if err != nil {
		a.failErr(w, r, err)
		return
	}
	if len(rec.Rows) == 0 && len(chs.Rows) == 0 {
		a.fail(w, r, http.StatusNotFound, fmt.Sprintf("Source %q has no record %q (and no change of one).", source, id))
		return
	}
	d.More = chs.More
	ids := make([]int64, 0, len(changes))
	for _, ch := range changes {
		ids = append(ids, ch.ChangeID)
	}
	link := withRecord(source, id)
	evals, _, err := list(ctx, a, p, "What each watch decided", control.ReportTrailEvaluations, []any{ids}, 0, link)
	if err != nil {
		a.failErr(w, r, err)
		return
	}
	calls, _, err := list(ctx, a, p, "The model calls", control.ReportTrailModelCalls, []any{ids}, 0, link)
	if err != nil {
		a.failErr(w, r, err)
		return
	}
	notes, _, err := list(ctx, a, p, "The notifications", control.ReportTrailNotifications, []any{ids}, 0, link)
	if err != nil {
		a.failErr(w, r, err)
		return
	}
	for i, ch := range changes {
		cid := ch.ChangeID
		ct := changeTrail{ID: cid,
			Evaluations:   byChange(evals, func(e control.TrailEvaluationRow) int64 { return e.ChangeID }, cid, link),
			ModelCalls:    byChange(calls, func(m control.TrailModelCallRow) int64 { return deref(m.ChangeID) }, cid, link),
			Notifications: byChange(notes, func(n control.TrailNotificationRow) int64 { return deref(n.ChangeID) }, cid, link)}
		for j, col := range chs.Columns {
			ct.Fields = append(ct.Fields, field{col, chs.Rows[i][j]})
		}
		d.Changes = append(d.Changes, ct)
	}
	if len(ids) > 0 {
		trails, err := a.svc.ExplainRecord(ctx, c.p, a.conf.Config, source, id, 20)
		if err != nil {
			a.failErr(w, r, err)
			return
		}
		var buf bytes.Buffer
		explain.WriteTrails(&buf, trails)
		d.Explain = buf.String()
	}
	p.Data = d
	a.render(w, r, http.StatusOK, "record", p)
}

// byChange is the table of the rows about change cid, without the
// change_id column.
func byChange[T any](rows []T, changeID func(T) int64, cid int64, link linker) *table {
	t := &table{}
	for _, col := range columnsOf(reflect.TypeFor[T]()) {
		if col != "change_id" {
			t.Columns = append(t.Columns, col)
		}
	}
	for _, row := range rows {
		if changeID(row) == cid {
			t.add(valuesOf(row), link)
		}
	}
	return t
}
