package admin

import (
	"net/http"
	"strings"

	"github.com/lookout-dev/lookout/internal/control"
)

// searchData is the search page: what the text names.
type searchData struct {
	Text string
	// Sources whose name holds the text (the exact name first), watches
	// whose name holds it or whose owner it is, rows whose id it is.
	Sources, Watches, IDs *table
	// Owner is set when the text is an owner of definitions: the link
	// to the overview of the owner's numbers.
	Owner string
}

// search finds what the search box's text (q=) names: sources and
// watches by name, an owner, and any row by id (a run, a change, an
// evaluation, a model call, a notification, a task run). One source
// found by its exact name, and nothing else, opens its page.
func (a *Admin) search(w http.ResponseWriter, r *http.Request, c *caller) {
	ctx, cancel := pageContext(r)
	defer cancel()
	text := strings.TrimSpace(r.URL.Query().Get("q"))
	p := newPage(c, "Search", "")
	p.Search = text
	d := &searchData{Text: text}
	p.Data = d
	if text == "" {
		a.render(w, r, http.StatusOK, "search", p)
		return
	}
	p.Title = "Search: " + text
	f := control.SearchFilter{Text: text}
	sources, st, err := list(ctx, a, p, "Sources whose name holds the text", control.ReportSearchSources, f.SourcesArgs(), pageSize, links)
	if err != nil {
		a.failErr(w, r, err)
		return
	}
	d.Sources = st
	if _, d.Watches, err = list(ctx, a, p, "Watches whose name holds the text, or of the owner", control.ReportSearchWatches, f.WatchesArgs(), pageSize, links); err != nil {
		a.failErr(w, r, err)
		return
	}
	ids, it, err := list(ctx, a, p, "Rows whose id is the number", control.ReportSearchIDs, f.IDArgs(), 0, searchLinks)
	if err != nil {
		a.failErr(w, r, err)
		return
	}
	d.IDs = it
	owners, err := control.ReportRows(ctx, a.svc, p.who, control.ReportOwners)
	if err != nil {
		a.failErr(w, r, err)
		return
	}
	for _, o := range owners {
		if o.Owner == text {
			d.Owner = text
		}
	}
	if len(sources) == 1 && sources[0].Name == text && len(ids) == 0 && len(d.Watches.Rows) == 0 && d.Owner == "" {
		http.Redirect(w, r, sourceLink(text), http.StatusSeeOther)
		return
	}
	a.render(w, r, http.StatusOK, "search", p)
}

// searchLinks links a row found by its id to its page: a run to its row,
// a task run to its row, a notification to its row with its detail, and
// the rows of a record (a change, an evaluation, a model call) to the
// record's decision trail.
func searchLinks(col string, row map[string]any) string {
	if col != "id" {
		return links(col, row)
	}
	kind, _ := row["kind"].(string)
	switch kind {
	case "notification":
		return notificationLink(row["id"])
	case "task_run":
		return tasksLink(row["id"])
	case "evaluation", "model_call":
		source, _ := row["source"].(string)
		record, _ := row["record_id"].(string)
		return recordLink(source, record, "")
	}
	return links(col, row)
}
