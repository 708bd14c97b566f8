package admin

import (
	"bytes"
	"fmt"
	"net/http"

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
	rec, err := a.rowsOf(ctx, p, query{title: "The record as mirrored now", sql: queryRecord, args: []any{source, id}}, 0, links)
	if err != nil {
		a.failErr(w, r, err)
		return
	}
	d.Record = fields(rec)
	chs, err := a.rowsOf(ctx, p, query{title: "Its changes, newest first", sql: queryRecordChanges, args: []any{source, id}}, 20, withRecord(source, id))
	if err != nil {
		a.failErr(w, r, err)
		return
	}
	if len(rec.Rows) == 0 && len(chs.Rows) == 0 {
		a.fail(w, r, http.StatusNotFound, fmt.Sprintf("Source %q has no record %q (and no change of one).", source, id))
		return
	}
	d.More = chs.More
	ids := make([]int64, 0, len(chs.Raw))
	for _, row := range chs.Raw {
		ids = append(ids, row["change_id"].(int64))
	}
	link := withRecord(source, id)
	evals, err := a.rowsOf(ctx, p, query{title: "What each watch decided", sql: queryTrailEvaluations, args: []any{ids}}, 0, link)
	if err != nil {
		a.failErr(w, r, err)
		return
	}
	calls, err := a.rowsOf(ctx, p, query{title: "The model calls", sql: queryTrailModelCalls, args: []any{ids}}, 0, link)
	if err != nil {
		a.failErr(w, r, err)
		return
	}
	notes, err := a.rowsOf(ctx, p, query{title: "The notifications", sql: queryTrailNotifications, args: []any{ids}}, 0, link)
	if err != nil {
		a.failErr(w, r, err)
		return
	}
	for i, row := range chs.Raw {
		cid := row["change_id"].(int64)
		ct := changeTrail{ID: cid, Evaluations: pick(evals, cid), ModelCalls: pick(calls, cid), Notifications: pick(notes, cid)}
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

// pick returns the rows of t about change id, without the change_id column.
func pick(t *table, id int64) *table {
	out := &table{}
	skip := -1
	for i, col := range t.Columns {
		if col == "change_id" {
			skip = i
			continue
		}
		out.Columns = append(out.Columns, col)
	}
	for i, row := range t.Raw {
		if cid, _ := row["change_id"].(int64); cid != id {
			continue
		}
		cells := make([]cellv, 0, len(t.Rows[i]))
		for j, c := range t.Rows[i] {
			if j != skip {
				cells = append(cells, c)
			}
		}
		out.Rows = append(out.Rows, cells)
		out.Raw = append(out.Raw, row)
	}
	return out
}
