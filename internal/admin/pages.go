package admin

import (
	"context"
	"errors"
	"fmt"
	"html/template"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/lookout-dev/lookout/internal/control"
	"github.com/lookout-dev/lookout/internal/outbox"
)

func newPage(c *caller, title, nav string) *page {
	return &page{Title: title, Nav: nav, CSRF: c.csrf, User: c.p.Owner, who: c.p}
}

// ownerFilter offers the owner filter on p and returns the owner chosen
// ("" for all).
func (a *Admin) ownerFilter(ctx context.Context, r *http.Request, p *page) (string, error) {
	rows, err := control.ReportRows(ctx, a.svc, p.who, control.ReportOwners)
	if err != nil {
		return "", fmt.Errorf("owners: %w", err)
	}
	a.show(ctx, p, "The owners of definitions (the owner filter)", control.ReportOwners.SQL(), nil)
	owners := make([]string, len(rows))
	for i, o := range rows {
		owners[i] = o.Owner
	}
	p.Owners, p.Owner, p.Path = owners, r.URL.Query().Get("owner"), r.URL.Path
	return p.Owner, nil
}

// card is one number of the overview, with the rows behind it.
type card struct {
	Label, Value, Href, Class string
}

type overviewData struct {
	Cards  []card
	Charts []chart
	// Range is the charts' time range (ranges), RangeLinks the control.
	Range      timeRange
	RangeLinks []card
	// Owner is the owner whose numbers the cards are ("" for the whole
	// system's); the charts are always the whole system's.
	Owner string
}

// withOwner adds the owner filter to a link of the admin page ("" leaves
// it as it is).
func withOwner(href, owner string) string {
	if owner == "" {
		return href
	}
	path, frag, _ := strings.Cut(href, "#")
	sep := "?"
	if strings.Contains(path, "?") {
		sep = "&"
	}
	out := path + sep + "owner=" + url.QueryEscape(owner)
	if frag != "" {
		out += "#" + frag
	}
	return out
}

// chart is a drawn chart with its caption.
type chart struct {
	Title string
	SVG   template.HTML
}

func (a *Admin) overview(w http.ResponseWriter, r *http.Request, c *caller) {
	ctx, cancel := pageContext(r)
	defer cancel()
	p := newPage(c, "Overview", "overview")
	owner, err := a.ownerFilter(ctx, r, p)
	if err != nil {
		a.failErr(w, r, err)
		return
	}
	title, q, args := "The whole system at a glance", control.ReportOverview, []any(nil)
	if owner != "" {
		title, q, args = "The numbers of one owner's definitions", control.ReportOwnerOverview, []any{owner}
	}
	rows, _, err := list(ctx, a, p, title, q, args, 0, nil)
	if err != nil {
		a.failErr(w, r, err)
		return
	}
	if len(rows) != 1 {
		if owner != "" {
			a.fail(w, r, http.StatusNotFound, fmt.Sprintf("No source or watch is owned by %q.", owner))
			return
		}
		a.failErr(w, r, fmt.Errorf("%s: %d rows, want 1", title, len(rows)))
		return
	}
	o := rows[0]
	hot := func(n *int64) string {
		if n != nil && *n > 0 {
			return "hot"
		}
		return ""
	}
	d := &overviewData{Cards: []card{
		{"active sources", num(o.ActiveSources), "/admin/sources?status=active", ""},
		{"not active", num(o.InactiveSources), "/admin/disabled", ""},
		{"due now", num(o.SourcesDue), "/admin/sources?due=now", ""},
		{"runs in progress", num(o.RunsInProgress), "/admin/sources?state=running", ""},
		{"failed runs (24h)", num(o.FailedRuns24h), "/admin/failures?kind=sync_run", hot(o.FailedRuns24h)},
		{"pending changes", num(o.PendingChanges), "/admin/rows/pending_changes", ""},
		{"oldest pending change", ago(o.OldestPendingChangeAt), "/admin/rows/pending_changes", ""},
		{"pending notifications", num(o.PendingNotifications), "/admin/rows/pending_notifications?status=pending", ""},
		{"held for digests", num(o.HeldNotifications), "/admin/rows/pending_notifications?status=held", ""},
		{"dead letters", num(o.DeadNotifications), "/admin/dead", hot(o.DeadNotifications)},
		{"stuck", num(o.Stuck), "/admin/stuck", hot(o.Stuck)},
	}, Owner: owner}
	// An owner's numbers link to the owner's rows.
	for i := range d.Cards {
		d.Cards[i].Href = withOwner(d.Cards[i].Href, owner)
	}
	rng, err := rangeOf(r.URL.Query(), "24h")
	if err != nil {
		a.fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	d.Range, d.RangeLinks = rng, rangeLinks(r.URL, rng.Key)
	var act []control.ActivityHourRow
	if rng.Key == "24h" {
		act, _, err = list(ctx, a, p, "The last 24 hours, hour by hour", control.ReportActivity, nil, 0, nil)
	} else {
		act, _, err = list(ctx, a, p, "The last "+rng.Label+", hour by hour", control.ReportActivityRange, []any{rng.Interval()}, 0, nil)
	}
	if err != nil {
		a.failErr(w, r, err)
		return
	}
	// Each bar links to the rows it counts (report_activity_hourly's
	// conditions): runs and lateness are the recorded runs and the quiet
	// runs of the hour, failed runs the failed, deferred and abandoned
	// ones, notify decisions the evaluations that decided notify.
	type spec struct {
		title       string
		value       func(control.ActivityHourRow) float64
		what        string
		filter      string
		class, unit string
	}
	count := func(f func(control.ActivityHourRow) *int64) func(control.ActivityHourRow) float64 {
		return func(h control.ActivityHourRow) float64 {
			if n := f(h); n != nil {
				return float64(*n)
			}
			return 0
		}
	}
	measure := func(f func(control.ActivityHourRow) pgtype.Numeric) func(control.ActivityHourRow) float64 {
		return func(h control.ActivityHourRow) float64 { return toFloat(f(h)) }
	}
	for _, s := range []spec{
		{"Runs per hour", count(func(h control.ActivityHourRow) *int64 { return h.Runs }), "runs", "&quiet=1", "c0", ""},
		{"Failed runs per hour", count(func(h control.ActivityHourRow) *int64 { return h.FailedRuns }), "runs", "&status=failed,deferred,abandoned", "c5", ""},
		{"Changes per hour", count(func(h control.ActivityHourRow) *int64 { return h.Changes }), "changes", "", "c1", ""},
		{"Evaluations per hour", count(func(h control.ActivityHourRow) *int64 { return h.Evaluations }), "evaluations", "", "c2", ""},
		{"Notify decisions per hour", count(func(h control.ActivityHourRow) *int64 { return h.NotifyDecisions }), "evaluations", "&decision=notify", "c2", ""},
		{"Notifications per hour", count(func(h control.ActivityHourRow) *int64 { return h.Notifications }), "notifications", "", "c3", ""},
		{"Model calls per hour", count(func(h control.ActivityHourRow) *int64 { return h.ModelCalls }), "model_calls", "", "c4", ""},
		{"Schedule lateness: average per hour", measure(func(h control.ActivityHourRow) pgtype.Numeric { return h.AvgLatenessSeconds }), "runs", "&quiet=1", "c5", "s"},
		{"Schedule lateness: worst per hour", measure(func(h control.ActivityHourRow) pgtype.Numeric { return h.MaxLatenessSeconds }), "runs", "&quiet=1", "c5", "s"},
	} {
		bars := make([]bar, len(act))
		for i, row := range act {
			h := row.Hour
			v := s.value(row)
			label := h.UTC().Format("15:04")
			if rng.Span > 24*time.Hour {
				label = h.UTC().Format("01-02 15h")
			}
			bars[i] = bar{Label: label, Value: v,
				Href: hourLink(s.what, h) + s.filter,
				Tip:  fmt.Sprintf("%s UTC: %s%s %s (click for the rows)", h.UTC().Format("Jan 2 15:04"), trimFloat(v), s.unit, strings.ToLower(s.title))}
		}
		d.Charts = append(d.Charts, chart{s.title, barChart(s.title, s.class, s.unit, bars)})
	}
	p.Data = d
	a.render(w, r, http.StatusOK, "overview", p)
}

func hourLink(what string, h time.Time) string {
	return "/admin/rows/" + what + "?since=" + url.QueryEscape(h.UTC().Format(time.RFC3339))
}

// sourcesData is the source list.
type sourcesData struct {
	Status, State string
	Filters       []card
	Table         *table
	Next          string
}

func (a *Admin) sources(w http.ResponseWriter, r *http.Request, c *caller) {
	ctx, cancel := pageContext(r)
	defer cancel()
	p := newPage(c, "Sources", "sources")
	qs := r.URL.Query()
	d := &sourcesData{Status: qs.Get("status"), State: qs.Get("state")}
	owner, err := a.ownerFilter(ctx, r, p)
	if err != nil {
		a.failErr(w, r, err)
		return
	}
	d.Filters = append(d.Filters, card{"all", "", "/admin/sources", cls(d.Status == "" && d.State == "")})
	for _, st := range []string{"active", "paused", "disabled", "completed"} {
		d.Filters = append(d.Filters, card{st, "", "/admin/sources?status=" + st, cls(d.Status == st)})
	}
	for _, st := range []string{"due", "running", "requested", "lease expired", "scheduled", "orphaned"} {
		d.Filters = append(d.Filters, card{st, "", "/admin/sources?state=" + url.QueryEscape(st), cls(d.State == st)})
	}
	args := control.SourcesFilter{After: qs.Get("after"), Status: d.Status, State: d.State, Owner: owner,
		Failing: qs.Get("failing") != "", Due: qs.Get("due") != ""}.Args()
	var rows []control.SourceListRow
	rows, d.Table, err = list(ctx, a, p, "A page of sources, by name", control.ReportSources, args, pageSize, sourceLinks)
	if err != nil {
		a.failErr(w, r, err)
		return
	}
	if d.Table.More {
		last := rows[len(rows)-1].Name
		v := url.Values{"after": {last}}
		if d.Status != "" {
			v.Set("status", d.Status)
		}
		if d.State != "" {
			v.Set("state", d.State)
		}
		if owner != "" {
			v.Set("owner", owner)
		}
		for _, f := range []string{"failing", "due"} {
			if qs.Get(f) != "" {
				v.Set(f, qs.Get(f))
			}
		}
		d.Next = "/admin/sources?" + v.Encode()
	}
	p.Data = d
	a.render(w, r, http.StatusOK, "sources", p)
}

// opt is an optional filter's argument: NULL when it is not given.
func opt(v string) any {
	if v == "" {
		return nil
	}
	return v
}

func cls(on bool) string {
	if on {
		return "on"
	}
	return ""
}

// field is a named value of a page's row (a source, a record, a change),
// with the link to the rows behind it.
type field struct {
	Name string
	cellv
}

// fields returns the first row of t as fields.
func fields(t *table) []field {
	if len(t.Rows) == 0 {
		return nil
	}
	out := make([]field, len(t.Columns))
	for i, col := range t.Columns {
		out[i] = field{col, t.Rows[0][i]}
	}
	return out
}

// sourceData is one source's page.
type sourceData struct {
	Name    string
	Source  control.SourceRow
	Fields  []field
	Runs    *table
	Quiet   *table
	Records *table
	Next    string
}

func (a *Admin) source(w http.ResponseWriter, r *http.Request, c *caller) {
	ctx, cancel := pageContext(r)
	defer cancel()
	name := r.PathValue("name")
	p := newPage(c, "Source "+name, "sources")
	d := &sourceData{Name: name}
	src, t, err := list(ctx, a, p, "The source", control.ReportSource, []any{name}, 0, links)
	if err != nil {
		a.failErr(w, r, err)
		return
	}
	if len(src) == 0 {
		a.fail(w, r, http.StatusNotFound, fmt.Sprintf("Source %q is not registered.", name))
		return
	}
	d.Source = src[0]
	d.Fields = fields(t)
	if _, d.Runs, err = list(ctx, a, p, "Its recorded runs, newest first", control.ReportSourceRuns, []any{name}, 25, withSource(name)); err != nil {
		a.failErr(w, r, err)
		return
	}
	if _, d.Quiet, err = list(ctx, a, p, "Its quiet runs per hour", control.ReportSourceQuiet, []any{name}, 24, withSource(name)); err != nil {
		a.failErr(w, r, err)
		return
	}
	after := r.URL.Query().Get("after")
	var records []control.SourceRecordRow
	if records, d.Records, err = list(ctx, a, p, "Its records, by id", control.ReportSourceRecords, []any{name, after}, pageSize, withSource(name)); err != nil {
		a.failErr(w, r, err)
		return
	}
	if d.Records.More {
		last := records[len(records)-1].RecordID
		d.Next = "/admin/sources/" + url.PathEscape(name) + "?after=" + url.QueryEscape(last) + "#records"
	}
	p.Data = d
	a.render(w, r, http.StatusOK, "source", p)
}

// sourceAction pauses, resumes or runs a source now, then goes back.
func (a *Admin) sourceAction(w http.ResponseWriter, r *http.Request, c *caller) {
	name, action := r.PathValue("name"), r.PathValue("action")
	var err error
	var done string
	switch action {
	case "pause":
		_, err = a.svc.OperatorPauseSource(r.Context(), c.p, name, strings.TrimSpace(r.PostFormValue("reason")))
		done = "paused " + name
	case "resume":
		var st *control.SourceState
		st, err = a.svc.OperatorResumeSource(r.Context(), c.p, name)
		done = "resumed " + name
		if err == nil && st.PreviousStatus == "active" {
			done = name + " was active already"
		}
	case "run":
		err = a.svc.RunNow(r.Context(), c.p, name)
		done = "asked for a run of " + name + " at the next poll"
	default:
		a.fail(w, r, http.StatusNotFound, fmt.Sprintf("There is no source action %q (pause, resume, run).", action))
		return
	}
	a.afterAction(w, r, done, err)
}

// afterAction redirects back to the page the form was on, with the outcome.
func (a *Admin) afterAction(w http.ResponseWriter, r *http.Request, done string, err error) {
	back := safeNext(r.PostFormValue("back"))
	v := url.Values{}
	if err != nil {
		var nf *control.NotFoundError
		var ce *control.ConflictError
		var fe *control.ForbiddenError
		switch {
		case errors.As(err, &nf), errors.As(err, &ce), errors.As(err, &fe):
			v.Set("error", err.Error())
		default:
			rid := requestID()
			a.logger.Error("admin action", "path", r.URL.Path, "error", err, "request_id", rid)
			v.Set("error", "the action failed; the error is logged with request id "+rid)
		}
	} else {
		v.Set("done", done)
	}
	back, frag, _ := strings.Cut(back, "#")
	sep := "?"
	if strings.Contains(back, "?") {
		sep = "&"
	}
	target := back + sep + v.Encode()
	if frag != "" {
		target += "#" + frag
	}
	http.Redirect(w, r, target, http.StatusSeeOther)
}

// reportPage shows one report view.
func (a *Admin) reportPage(which string) authedHandler {
	type spec struct {
		title   string
		list    rowLister
		what    string
		filters []string
		// keys is the view's order: the keyset of the pages.
		keys keyset
		// after, when set, is the statement of the next pages (list's
		// filters, then the cursor); list then takes the filters only.
		after rowLister
	}
	specs := map[string]spec{
		"stuck": {"Stuck work", listOf(control.ReportStuck), "Expired leases, runs longer than their source's stuck_after, changes and notifications waiting longer than it. A healthy system shows none.", []string{"kind", "source", "owner:definition_owner"},
			keyset{{col: "since", nulls: true}, {col: "kind"}, {col: "id", nulls: true}, {col: "source"}}, nil},
		"failures": {"Recent failures", listOf(control.ReportFailures), "Failed, deferred and abandoned runs, evaluation errors and holds, failed model calls and delivery attempts of the last 24 hours, newest first.", []string{"kind", "source", "watch", "sink", "owner"},
			keyset{{col: "at", desc: true}, {col: "kind"}, {col: "id", desc: true}, {col: "watch", nulls: true}, {col: "status"}}, nil},
		"retry": {"High retry", listOf(control.ReportHighRetry), "Failing sources, retried changes and notifications, most attempts first.", []string{"kind", "source", "owner"},
			keyset{{col: "attempts", desc: true}, {col: "kind"}, {col: "source"}, {col: "id", nulls: true}}, nil},
		"disabled": {"Disabled sources", listOf(control.ReportDisabled), "Disabled, completed and paused sources: why and since when. Resume makes one active again and due now.", []string{"status", "owner"},
			keyset{{col: "since", desc: true, nulls: true}, {col: "name"}}, nil},
		"tasks": {"Task runs", listOf(control.ReportTaskRuns), "Claims and executions of task watches (docs/tasks.md), most recently changed first: who claimed each, how long it ran, what the executor returned, retries, why it failed, whether it ran more than once.", []string{"id", "source", "status", "record_id", "owner"},
			keyset{{col: "id", desc: true}}, listOf(control.ReportTaskRunsAfter)},
	}
	s := specs[which]
	return func(w http.ResponseWriter, r *http.Request, c *caller) {
		ctx, cancel := pageContext(r)
		defer cancel()
		p := newPage(c, s.title, which)
		if _, err := a.ownerFilter(ctx, r, p); err != nil {
			a.failErr(w, r, err)
			return
		}
		qs := r.URL.Query()
		cursor, err := s.keys.values(qs["after"])
		if err != nil {
			a.fail(w, r, http.StatusBadRequest, err.Error())
			return
		}
		run, args := s.list, append(filterArgs(qs, s.filters), cursor...)
		if s.after != nil {
			if len(qs["after"]) == 0 {
				args = args[:len(s.filters)]
			} else {
				run = s.after
			}
		}
		t, err := run(ctx, a, p, s.title, args, a.conf.ListPage, links)
		if err != nil {
			a.failErr(w, r, err)
			return
		}
		d := &reportData{What: s.what, Table: t, Which: which, Filters: activeFilters(qs, s.filters)}
		if t.More {
			if d.Next, err = s.keys.nextLink(r.URL.Path, qs, t.values[len(t.values)-1]); err != nil {
				a.failErr(w, r, err)
				return
			}
		}
		p.Data = d
		a.render(w, r, http.StatusOK, "report", p)
	}
}

type reportData struct {
	Which, What string
	Table       *table
	Filters     [][2]string
	// Next is the next page, when there is one.
	Next string
}

// filterArgs returns the arguments of a page's equality filters, in
// order (NULL for one not given): each is a query parameter, written
// "param:column" in the page's list when the statement's column differs
// (report_stuck's owner filter reads definition_owner: its owner column
// is the holder of a lease). An id is a number: anything else is an id
// no row has.
func filterArgs(qs url.Values, filters []string) []any {
	args := make([]any, 0, len(filters))
	for _, pc := range filters {
		param, _, _ := strings.Cut(pc, ":")
		v := qs.Get(param)
		switch {
		case v == "":
			args = append(args, nil)
		case param == "id":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				n = -1
			}
			args = append(args, n)
		default:
			args = append(args, v)
		}
	}
	return args
}

func activeFilters(qs url.Values, cols []string) [][2]string {
	var out [][2]string
	for _, pc := range cols {
		param, _, _ := strings.Cut(pc, ":")
		if v := qs.Get(param); v != "" {
			out = append(out, [2]string{param, v})
		}
	}
	return out
}

type deadData struct {
	Sinks []card
	Total int64
	// AllHref is the "all" chip: every sink, the other filters kept.
	AllHref             string
	Sink, Source, Owner string
	// Back is this page with its filters: where the forms come back to.
	Back  string
	Table *table
	// IDs are the ids of the rows listed: what the bulk retry retries.
	IDs []int64
	// Next is the next page (the filters kept), when there is one.
	Next string
}

// deadFilters are the filters of the dead letters page: its table and
// its bulk retry ("Retry N listed") take all three; its counts per sink
// the other two.
var deadFilters = []string{"sink", "source", "owner"}

func (a *Admin) dead(w http.ResponseWriter, r *http.Request, c *caller) {
	ctx, cancel := pageContext(r)
	defer cancel()
	p := newPage(c, "Dead letters", "dead")
	qs := r.URL.Query()
	d := &deadData{Sink: qs.Get("sink"), Source: qs.Get("source")}
	owner, err := a.ownerFilter(ctx, r, p)
	if err != nil {
		a.failErr(w, r, err)
		return
	}
	d.Owner = owner
	// The chips count the dead letters of the source and owner shown, so
	// that each chip's number is the rows its link lists.
	others := url.Values{}
	for _, k := range []string{"source", "owner"} {
		if v := qs.Get(k); v != "" {
			others.Set(k, v)
		}
	}
	counts, _, err := list(ctx, a, p, "Dead notifications per sink", control.ReportDeadCount,
		control.DeadFilter{Source: others.Get("source"), Owner: others.Get("owner")}.CountArgs(), 0, nil)
	if err != nil {
		a.failErr(w, r, err)
		return
	}
	deadLink := func(sink string) string {
		v := url.Values{}
		for k, vs := range others {
			v[k] = vs
		}
		if sink != "" {
			v.Set("sink", sink)
		}
		if len(v) == 0 {
			return "/admin/dead"
		}
		return "/admin/dead?" + v.Encode()
	}
	d.AllHref, d.Back = deadLink(""), deadLink(d.Sink)
	for _, row := range counts {
		n, sink := row.Dead, row.Sink
		d.Total += n
		d.Sinks = append(d.Sinks, card{sink, num(n), deadLink(sink), cls(d.Sink == sink)})
	}
	f := control.DeadFilter{Sink: d.Sink, Source: d.Source, Owner: qs.Get("owner")}
	if after := qs.Get("after"); after != "" {
		if f.AfterAt, f.AfterID, err = deadCursor(after); err != nil {
			a.fail(w, r, http.StatusBadRequest, err.Error())
			return
		}
	}
	var rows []control.DeadRow
	if rows, d.Table, err = list(ctx, a, p, "Dead notifications, newest first", control.ReportDead, f.Args(), min(a.conf.ListPage, deadPage), links); err != nil {
		a.failErr(w, r, err)
		return
	}
	for _, row := range rows {
		d.IDs = append(d.IDs, row.ID)
	}
	if d.Table.More {
		last := rows[len(rows)-1]
		at := "none"
		if last.DeadAt != nil {
			at = last.DeadAt.UTC().Format(time.RFC3339Nano)
		}
		v := url.Values{}
		for _, k := range deadFilters {
			if x := qs.Get(k); x != "" {
				v.Set(k, x)
			}
		}
		v.Set("after", at+","+strconv.FormatInt(d.IDs[len(d.IDs)-1], 10))
		d.Next = "/admin/dead?" + v.Encode()
	}
	p.Data = d
	a.render(w, r, http.StatusOK, "dead", p)
}

// deadCursor reads the after= of a dead letters page: the dead_at of the
// last row shown (RFC 3339, or "none" when it had none: nil), a comma,
// its id.
func deadCursor(after string) (*time.Time, int64, error) {
	at, id, _ := strings.Cut(after, ",")
	n, err := strconv.ParseInt(id, 10, 64)
	if err != nil {
		return nil, 0, fmt.Errorf("after=%q is not a cursor of this list (a time or none, a comma, a notification id).", after)
	}
	if at == "none" {
		return nil, n, nil
	}
	t, err := time.Parse(time.RFC3339Nano, at)
	if err != nil {
		return nil, 0, fmt.Errorf("after=%q is not a cursor of this list (a time or none, a comma, a notification id).", after)
	}
	return &t, n, nil
}

// retryDead retries the dead notifications whose ids are posted (id=,
// once per row): one row's Retry posts its id, the bulk retry the ids of
// the rows its page lists, so that it retries exactly those and never
// more (at most a page of them). The sink, source and owner of the page
// are posted too and narrow it further: a listed row that no longer
// matches them is left alone.
func (a *Admin) retryDead(w http.ResponseWriter, r *http.Request, c *caller) {
	if err := r.ParseForm(); err != nil {
		a.fail(w, r, http.StatusBadRequest, fmt.Sprintf("The form does not parse: %v.", err))
		return
	}
	posted := r.PostForm["id"]
	if len(posted) == 0 {
		a.fail(w, r, http.StatusBadRequest, "Retry needs the ids of the dead notifications to retry (id=, once per notification).")
		return
	}
	if len(posted) > deadPage {
		a.fail(w, r, http.StatusBadRequest, fmt.Sprintf("Retry takes at most %d ids (a page of dead letters), not %d.", deadPage, len(posted)))
		return
	}
	ids := make([]int64, 0, len(posted))
	for _, id := range posted {
		n, err := strconv.ParseInt(id, 10, 64)
		if err != nil || n <= 0 {
			a.fail(w, r, http.StatusBadRequest, fmt.Sprintf("%q is not a notification id.", id))
			return
		}
		ids = append(ids, n)
	}
	f := outbox.Filter{Sink: r.PostFormValue("sink"), Source: r.PostFormValue("source"), Owner: r.PostFormValue("owner")}
	scope := "notification " + posted[0]
	if len(ids) == 1 {
		f.ID = ids[0]
	} else {
		f.IDs = ids
		scope = fmt.Sprintf("the %d listed", len(ids))
	}
	var of []string
	for _, kv := range [][2]string{{"sink", f.Sink}, {"source", f.Source}, {"owner", f.Owner}} {
		if kv[1] != "" {
			of = append(of, kv[0]+" "+kv[1])
		}
	}
	if len(of) > 0 {
		scope += " of " + strings.Join(of, ", ")
	}
	n, err := a.svc.RetryDead(r.Context(), c.p, f)
	a.afterAction(w, r, fmt.Sprintf("sent %d dead notification(s) back to pending (%s)", n, scope), err)
}

type modelsData struct {
	Expensive *table
	Drift     *table
	Charts    []chart
}

func (a *Admin) models(w http.ResponseWriter, r *http.Request, c *caller) {
	ctx, cancel := pageContext(r)
	defer cancel()
	p := newPage(c, "Models", "models")
	d := &modelsData{}
	owner, err := a.ownerFilter(ctx, r, p)
	if err != nil {
		a.failErr(w, r, err)
		return
	}
	drift, args := control.ReportDrift, []any{}
	if owner != "" {
		drift = control.ReportDriftOwner
		args = append(args, owner)
	}
	if _, d.Expensive, err = list(ctx, a, p, "The most expensive model calls of the last 24 hours", control.ReportExpensive, []any{opt(owner)}, pageSize, links); err != nil {
		a.failErr(w, r, err)
		return
	}
	var days []control.DriftRow
	if days, d.Drift, err = list(ctx, a, p, "Model drift of the last 14 days", drift, args, 0, driftLinks(owner)); err != nil {
		a.failErr(w, r, err)
		return
	}
	d.Charts = driftCharts(days)
	p.Data = d
	a.render(w, r, http.StatusOK, "models", p)
}

// driftCharts draws the notify rate and the average confidence per day of
// each model digest and prompt version (over all watches).
func driftCharts(rows []control.DriftRow) []chart {
	type key struct{ digest, prompt string }
	type acc struct{ evals, notify, confSum, confN float64 }
	days := []string{}
	dayIdx := map[string]int{}
	series := map[key]map[string]*acc{}
	var keys []key
	for _, row := range rows {
		day := "-"
		if row.Day != nil {
			day = row.Day.UTC().Format("01-02")
		}
		if _, ok := dayIdx[day]; !ok {
			dayIdx[day] = len(days)
			days = append(days, day)
		}
		k := key{shortDigest(deref(row.ModelDigest)), deref(row.PromptVersion)}
		if series[k] == nil {
			series[k] = map[string]*acc{}
			keys = append(keys, k)
		}
		ac := series[k][day]
		if ac == nil {
			ac = &acc{}
			series[k][day] = ac
		}
		n := float64(deref(row.Evaluations))
		ac.evals += n
		ac.notify += float64(deref(row.Notify))
		if row.AvgConfidence.Valid {
			ac.confSum += toFloat(row.AvgConfidence) * n
			ac.confN += n
		}
	}
	slices.Sort(days)
	var rate, conf []line
	for _, k := range keys {
		rl := line{Name: k.digest + " · " + k.prompt, Values: make([]float64, len(days))}
		cl := line{Name: rl.Name, Values: make([]float64, len(days))}
		for i, day := range days {
			rl.Values[i], cl.Values[i] = math.NaN(), math.NaN()
			if ac := series[k][day]; ac != nil && ac.evals > 0 {
				rl.Values[i] = ac.notify / ac.evals
				if ac.confN > 0 {
					cl.Values[i] = ac.confSum / ac.confN
				}
			}
		}
		rate, conf = append(rate, rl), append(conf, cl)
	}
	const rt, ct = "Notify rate per day, by model digest and prompt version", "Average confidence per day, by model digest and prompt version"
	return []chart{{rt, lineChart(rt, "", days, rate, 1)}, {ct, lineChart(ct, "", days, conf, 1)}}
}

// deref is *v, or T's zero value for nil.
func deref[T any](v *T) T {
	var zero T
	if v == nil {
		return zero
	}
	return *v
}

func shortDigest(d string) string {
	d = strings.TrimPrefix(d, "sha256:")
	if len(d) > 12 {
		d = d[:12]
	}
	if d == "" || d == "<nil>" {
		return "(unknown digest)"
	}
	return d
}

type rowsData struct {
	What, Title string
	// Hint says which rows these are (the window, the filters, a cell of
	// the drift table).
	Hint  string
	Table *table
	// Next is the next page, when there is one.
	Next string
	// Quiet is the quiet runs of the same hours, beside the recorded runs
	// (quiet=1): a chart of runs counts both.
	Quiet *table
	// RangeLinks is the time range control of a timed list (range=).
	RangeLinks []card
	// Notification is the one notification a list picked by id= shows
	// whole: its body, its payload, its attempts and retries.
	Notification *notificationDetail
}

// The window of a list picked by a key filter: all time.
var (
	allSince = time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC)
	allUntil = time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)
)

// rows lists the rows behind a number: a window of a table (since=,
// until=; the current hour by default), or the pending work, narrowed by
// source= and the list's filters.
func (a *Admin) rows(w http.ResponseWriter, r *http.Request, c *caller) {
	ctx, cancel := pageContext(r)
	defer cancel()
	what := r.PathValue("what")
	spec, ok := rowQueries[what]
	if !ok {
		a.fail(w, r, http.StatusNotFound, fmt.Sprintf("There is no list of %q.", what))
		return
	}
	qs := r.URL.Query()
	p := newPage(c, spec.title, rowsNav(what, qs))
	d := &rowsData{What: what, Title: spec.title}
	if !spec.untimed {
		d.RangeLinks = rangeLinks(r.URL, qs.Get("range"))
	}
	source := qs.Get("source")
	var args []any
	fargs, filteredBy, keyed, err := spec.filterArgs(qs)
	if err != nil {
		a.fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	// next is the query of the next page: this one's, its window fixed.
	next := url.Values{}
	for k, vs := range qs {
		next[k] = vs
	}
	if spec.untimed {
		args = []any{opt(source)}
	} else {
		since, until, hint := a.window(qs, keyed)
		d.Hint = hint
		if qs.Get("since") == "" && !keyed {
			// The next pages are of this hour, even when the next one
			// has begun.
			next.Set("since", since.UTC().Format(time.RFC3339))
		}
		if qs.Get("since_success") != "" {
			last, _, err := list(ctx, a, p, "When the source last succeeded", control.ReportSourceLastSuccess, []any{source}, 0, nil)
			if err != nil {
				a.failErr(w, r, err)
				return
			}
			d.Hint = "The failed runs of " + source + " since it last succeeded (what its failure_count counts)"
			if len(last) == 1 && last[0].LastSuccessAt != nil {
				since = *last[0].LastSuccessAt
				d.Hint += ", " + since.UTC().Format("2006-01-02 15:04:05") + " UTC"
			}
		}
		args = []any{since, until, opt(source)}
	}
	if spec.owned {
		owner, err := a.ownerFilter(ctx, r, p)
		if err != nil {
			a.failErr(w, r, err)
			return
		}
		args = append(args, opt(owner))
	}
	args = append(args, fargs...)
	cursor, err := spec.keys.values(qs["after"])
	if err != nil {
		a.fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	args = append(args, cursor...)
	if d.Table, err = spec.list(ctx, a, p, spec.title, args, a.conf.ListPage, links); err != nil {
		a.failErr(w, r, err)
		return
	}
	if d.Table.More {
		if d.Next, err = spec.keys.nextLink(r.URL.Path, next, d.Table.values[len(d.Table.values)-1]); err != nil {
			a.failErr(w, r, err)
			return
		}
	}
	if what == "runs" && qs.Get("quiet") != "" && !filteredBy && len(qs["after"]) == 0 {
		q := rowQueries["quiet"]
		quiet := append(append([]any(nil), args[:q.params()]...), make([]any, len(q.keys))...)
		if d.Quiet, err = q.list(ctx, a, p, q.title, quiet, 200, links); err != nil {
			a.failErr(w, r, err)
			return
		}
	}
	if what == "notifications" && qs.Get("id") != "" && len(d.Table.Rows) == 1 {
		if d.Notification, err = a.notification(ctx, p, qs.Get("id")); err != nil {
			a.failErr(w, r, err)
			return
		}
	}
	if what == "runs" && qs.Get("id") != "" && len(d.Table.Rows) == 0 {
		d.Hint = "Run " + qs.Get("id") + " is not recorded: a run that succeeded and changed nothing is counted only in its source's quiet runs of the hour."
	}
	p.Data = d
	a.render(w, r, http.StatusOK, "rows", p)
}

// rowsNav is the navigation entry a list of rows belongs to: the page its
// rows are about. A source's rows are the source's (Sources); failed runs
// are failures (Failures); model calls and the evaluations behind a
// notify count are the models' (Models); notifications the outbox's
// (Dead letters, where the outbox is shown); the rest (an hour's runs,
// changes, evaluations, the pending work) are the overview's numbers and
// bars.
func rowsNav(what string, qs url.Values) string {
	switch {
	case qs.Get("since_success") != "" || (what == "runs" && qs.Get("status") != ""):
		return "failures"
	case qs.Get("source") != "":
		return "sources"
	case what == "model_calls":
		return "models"
	case what == "notifications" && qs.Get("id") != "":
		return "dead"
	}
	return "overview"
}

// driftCountTitles name the counts of the drift table on their rows page.
var driftCountTitles = map[string]string{
	"evaluations": "model-judged evaluations",
	"judged":      "evaluations the model judged (step model)",
	"cache_hits":  "evaluations answered from the verdict cache (step cache)",
	"notify":      "notify decisions (notify or duplicate)",
	"skip":        "skip decisions",
}

// driftRows lists the evaluations behind one count of the models page's
// drift table (count=, day=, model=, digest=, prompt=, owner=), newest
// first, a page of 200 at a time (after=, the cursor of the next page).
func (a *Admin) driftRows(w http.ResponseWriter, r *http.Request, c *caller) {
	ctx, cancel := pageContext(r)
	defer cancel()
	qs := r.URL.Query()
	count := qs.Get("count")
	if !control.DriftCounts[count] {
		a.fail(w, r, http.StatusBadRequest, fmt.Sprintf("count=%q is not a count of the drift table (evaluations, judged, cache_hits, notify, skip).", count))
		return
	}
	day, err := time.Parse(time.DateOnly, qs.Get("day"))
	if err != nil {
		a.fail(w, r, http.StatusBadRequest, fmt.Sprintf("day=%q is not a day (YYYY-MM-DD, UTC).", qs.Get("day")))
		return
	}
	// The first page ends before the next day; the next ones before the
	// last row shown.
	beforeAt, beforeID := day.Add(24*time.Hour), int64(0)
	if after := qs.Get("after"); after != "" {
		at, id, _ := strings.Cut(after, ",")
		t, err1 := time.Parse(time.RFC3339Nano, at)
		n, err2 := strconv.ParseInt(id, 10, 64)
		if err1 != nil || err2 != nil {
			a.fail(w, r, http.StatusBadRequest, fmt.Sprintf("after=%q is not a cursor of this list (a time, a comma, an evaluation id).", after))
			return
		}
		beforeAt, beforeID = t, n
	}
	model, digest, prompt, owner := qs.Get("model"), qs.Get("digest"), qs.Get("prompt"), qs.Get("owner")
	p := newPage(c, "Evaluations behind the model drift", "models")
	d := &rowsData{What: "drift", Title: p.Title,
		Hint: fmt.Sprintf("The %s of %s (UTC) by %s, digest %s, prompt version %s", driftCountTitles[count],
			day.Format(time.DateOnly), model, shortDigest(digest), prompt)}
	if owner != "" {
		d.Hint += ", of " + owner
	}
	d.Hint += ": the rows the models page counts, newest first."
	args := control.DriftRowsFilter{Day: day, Model: model, Digest: digest, Prompt: prompt, Owner: owner,
		BeforeAt: beforeAt, BeforeID: beforeID, Count: count}.Args()
	var rows []control.DriftEvaluationRow
	if rows, d.Table, err = list(ctx, a, p, "The evaluations counted in the cell", control.ReportDriftRows, args, 200, links); err != nil {
		a.failErr(w, r, err)
		return
	}
	if d.Table.More {
		last := rows[len(rows)-1]
		at, id := last.CreatedAt, last.EvaluationID
		v := qs
		v.Set("after", at.UTC().Format(time.RFC3339Nano)+","+strconv.FormatInt(id, 10))
		d.Next = "/admin/rows/drift?" + v.Encode()
	}
	p.Data = d
	a.render(w, r, http.StatusOK, "rows", p)
}

// params is how many parameters the list's statement takes before its
// filters' ones.
func (q rowQuery) params() int {
	n := 3 // since, until, source
	if q.untimed {
		n = 1
	}
	if q.owned {
		n++
	}
	return n
}

// filterArgs returns the arguments of the list's filters, in order (NULL,
// or false for a flag, when one is not given), whether any was given, and
// whether a key filter picks the rows.
func (q rowQuery) filterArgs(qs url.Values) (args []any, given, keyed bool, err error) {
	for _, f := range q.filters {
		v := qs.Get(f.name)
		if v == "" {
			if f.flag {
				args = append(args, false)
			} else {
				args = append(args, nil)
			}
			continue
		}
		if f.needsSource && qs.Get("source") == "" {
			return nil, false, false, fmt.Errorf("%s= needs source=", f.name)
		}
		given, keyed = true, keyed || f.key
		switch {
		case f.flag:
			args = append(args, true)
		case f.list:
			args = append(args, strings.Split(v, ","))
		case f.number:
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return nil, false, false, fmt.Errorf("%s=%q is not a number", f.name, v)
			}
			args = append(args, n)
		default:
			args = append(args, v)
		}
	}
	return args, given, keyed, nil
}

// window reads the window of a timed list: since= (a time, or "all"),
// until= (a time, or "now"); by default the current hour, or all time for
// a list picked by a key filter.
func (a *Admin) window(qs url.Values, keyed bool) (since, until time.Time, hint string) {
	s, u := qs.Get("since"), qs.Get("until")
	if rng, err := rangeOf(qs, ""); err == nil && rng.Key != "" {
		// The last span, until now; its next pages keep the start
		// (since=) the first page had.
		since := a.now().UTC().Add(-rng.Span)
		if t, err := time.Parse(time.RFC3339, s); err == nil {
			since = t
		}
		return since, allUntil, "The last " + rng.Label + " (since " + since.UTC().Format("2006-01-02 15:04") + " UTC)"
	}
	if s == "all" || (s == "" && keyed) {
		return allSince, allUntil, "All time"
	}
	since, err := time.Parse(time.RFC3339, s)
	if err != nil {
		since = a.now().UTC().Truncate(time.Hour)
	}
	until = since.Add(time.Hour)
	if t, err := time.Parse(time.RFC3339, u); err == nil && t.After(since) {
		until = t
	}
	if u == "now" {
		return since, allUntil, "Since " + since.UTC().Format("2006-01-02 15:04:05") + " UTC"
	}
	return since, until, since.UTC().Format("2006-01-02 15:04") + " to " + until.UTC().Format("15:04") + " UTC"
}

// toFloat reads a number of a report row.
func toFloat(v any) float64 {
	switch x := v.(type) {
	case int64:
		return float64(x)
	case int32:
		return float64(x)
	case int:
		return float64(x)
	case float64:
		return x
	case float32:
		return float64(x)
	case pgtype.Numeric:
		f, err := x.Float64Value()
		if err == nil && f.Valid {
			return f.Float64
		}
	}
	return 0
}
