package admin

import (
	"context"
	"fmt"
	"html/template"
	"math"
	"net/http"
	"net/url"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/lookout-dev/lookout/internal/control"
	"github.com/lookout-dev/lookout/internal/reports"
	"github.com/lookout-dev/lookout/internal/webui"
)

// page is what every template gets.
type page struct {
	Title string
	// User is who is signed in.
	User string
	// Nav names the navigation entry to highlight.
	Nav  string
	CSRF string
	// Flash and Error are the outcome of the action that led here.
	Flash, Error string
	// Queries are the statements the page ran, shown under "SQL".
	Queries []shown
	// Owners, when set, offer the owner filter; Owner is the one chosen.
	Owners []string
	Owner  string
	// Path is the page's path (the owner filter's form action).
	Path string
	// Search is the text of the search box (the search page's).
	Search string
	Data   any
	// who reads the page: its statements run as this caller's
	// (control.Service.Report).
	who control.Principal
}

// shown is one statement a page ran, as it ran.
type shown struct {
	Title string
	SQL   string
	Args  []string
	// Views are the definitions of the report views the statement reads.
	Views []viewDef
}

type viewDef struct {
	Name, SQL string
}

var navItems = []struct{ Key, Href, Label string }{
	{"overview", "/admin/", "Overview"},
	{"sources", "/admin/sources", "Sources"},
	{"stuck", "/admin/stuck", "Stuck"},
	{"failures", "/admin/failures", "Failures"},
	{"retry", "/admin/retry", "High retry"},
	{"dead", "/admin/dead", "Dead letters"},
	{"models", "/admin/models", "Models"},
	{"model-drift", "/admin/model-drift", "Drift"},
	{"disabled", "/admin/disabled", "Disabled"},
	{"tasks", "/admin/tasks", "Tasks"},
}

var funcs = template.FuncMap{
	"nav":  func() any { return navItems },
	"cell": reports.Cell,
	"ago":  ago,
	"num":  num,
	"q":    url.QueryEscape,
	"path": url.PathEscape,
	"join": strings.Join,
	"inc":  func(i int) int { return i + 1 },
}

func (a *Admin) parseTemplates() (err error) {
	a.pages, err = webui.ParseTemplates(templateFS, "templates", funcs)
	if err != nil {
		return fmt.Errorf("admin page: %w", err)
	}
	return nil
}

// render writes a page; a template error is logged and answered with a 500.
func (a *Admin) render(w http.ResponseWriter, r *http.Request, status int, name string, p *page) {
	if p.Flash == "" {
		p.Flash = r.URL.Query().Get("done")
	}
	if p.Error == "" {
		p.Error = r.URL.Query().Get("error")
	}
	a.pages.Render(w, a.logger, "admin", status, name, p)
}

// fail answers with an error page.
func (a *Admin) fail(w http.ResponseWriter, r *http.Request, status int, msg string) {
	a.render(w, r, status, "error", &page{Title: http.StatusText(status), Error: msg})
}

// failErr answers a failed query: logged, and a 500 that says so.
func (a *Admin) failErr(w http.ResponseWriter, r *http.Request, err error) {
	rid := requestID()
	a.logger.Error("admin page", "path", r.URL.Path, "error", err, "request_id", rid)
	a.fail(w, r, http.StatusInternalServerError, "The page could not be read from the database; the error is logged with request id "+rid+".")
}

var viewName = regexp.MustCompile(`\breport_[a-z_]+\b`)

var viewDefs sync.Map // report view name → definition

// show records a statement under the page's SQL (its title, its text as
// control runs it, its arguments), with the definitions of the report
// views it reads.
func (a *Admin) show(ctx context.Context, p *page, title, text string, args []any) {
	s := shown{Title: title, SQL: strings.TrimSpace(dedent(text))}
	for _, v := range args {
		s.Args = append(s.Args, reports.Cell(v))
	}
	seen := map[string]bool{}
	for _, v := range viewName.FindAllString(text, -1) {
		if seen[v] {
			continue
		}
		seen[v] = true
		if d, ok := viewDefs.Load(v); ok {
			s.Views = append(s.Views, viewDef{v, d.(string)})
			continue
		}
		defs, err := control.ReportRows(ctx, a.svc, p.who, control.ReportViewDef, v)
		if err == nil && len(defs) == 1 && defs[0].Definition != "" {
			viewDefs.Store(v, defs[0].Definition)
			s.Views = append(s.Views, viewDef{v, defs[0].Definition})
		}
	}
	p.Queries = append(p.Queries, s)
}

// dedent removes the common leading tabs of a Go raw string's lines.
func dedent(s string) string {
	lines := strings.Split(strings.Trim(s, "\n"), "\n")
	min := -1
	for _, l := range lines {
		if strings.TrimSpace(l) == "" {
			continue
		}
		n := len(l) - len(strings.TrimLeft(l, "\t"))
		if min < 0 || n < min {
			min = n
		}
	}
	for i, l := range lines {
		if len(l) >= min && min > 0 {
			lines[i] = l[min:]
		}
	}
	return strings.Join(lines, "\n")
}

// table is a result as the page shows it.
type table struct {
	Columns []string
	Rows    [][]cellv
	// More is set when the page limit cut rows off.
	More bool
	// values are the shown rows' values by column: what the links and
	// the keyset of the next page read (the handlers read the typed rows).
	values []map[string]any
}

// cellv is one shown value, with the link to the rows behind it.
type cellv struct {
	Text  string
	Href  string
	Class string
	// Title is the exact value, when Text is a rounded or relative one.
	Title string
}

// linker returns the link of a column's value in a row ("" for none).
type linker func(col string, row map[string]any) string

// list runs q with args through control (control.ReportRows), records it
// under the page's SQL and returns its typed rows and the table the page
// shows: at most limit rows (0: all), More when there were more (q asks
// for limit+1).
func list[T any](ctx context.Context, a *Admin, p *page, title string, q control.ReportQuery[T], args []any, limit int, link linker) ([]T, *table, error) {
	a.show(ctx, p, title, q.SQL(), args)
	rows, err := control.ReportRows(ctx, a.svc, p.who, q, args...)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", title, err)
	}
	t := &table{Columns: columnsOf(reflect.TypeFor[T]())}
	if limit > 0 && len(rows) > limit {
		rows, t.More = rows[:limit], true
	}
	for _, r := range rows {
		t.add(valuesOf(r), link)
	}
	return rows, t, nil
}

// columnsOf is the columns of a row type: its fields' db tags, in order.
func columnsOf(rt reflect.Type) []string {
	cols := make([]string, 0, rt.NumField())
	for i := range rt.NumField() {
		if c := rt.Field(i).Tag.Get("db"); c != "" {
			cols = append(cols, c)
		}
	}
	return cols
}

// valuesOf is a typed row's values by column: a nil pointer, an invalid
// numeric or interval are NULL (nil).
func valuesOf(row any) map[string]any {
	rv := reflect.ValueOf(row)
	rt := rv.Type()
	m := make(map[string]any, rt.NumField())
	for i := range rt.NumField() {
		c := rt.Field(i).Tag.Get("db")
		if c == "" {
			continue
		}
		f := rv.Field(i)
		if f.Kind() == reflect.Pointer {
			if f.IsNil() {
				m[c] = nil
				continue
			}
			f = f.Elem()
		}
		v := f.Interface()
		switch x := v.(type) {
		case pgtype.Numeric:
			if !x.Valid {
				v = nil
			}
		case pgtype.Interval:
			if !x.Valid {
				v = nil
			}
		case pgtype.Timestamptz:
			switch {
			case !x.Valid:
				v = nil
			case x.InfinityModifier != pgtype.Finite:
				v = x.InfinityModifier
			default:
				v = x.Time
			}
		}
		m[c] = v
	}
	return m
}

// plain is v without its pointer (nil for a nil one).
func plain(v any) any {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer {
		return v
	}
	if rv.IsNil() {
		return nil
	}
	return rv.Elem().Interface()
}

// add appends a row (its values by column) to the table.
func (t *table) add(m map[string]any, link linker) {
	cells := make([]cellv, len(t.Columns))
	for i, col := range t.Columns {
		v := m[col]
		c := human(col, v)
		if c.Text != "-" && link != nil {
			c.Href = link(col, m)
		}
		cells[i] = c
	}
	t.Rows = append(t.Rows, cells)
	t.values = append(t.values, m)
}

// human is a value as the page shows it, in units a person reads: a time
// as how long ago (or from now) it is, a duration in ms or seconds (the
// columns ms, latency_ms, *_seconds, *_s) as "1.2 s" or "3m 05s", a rate
// (*_rate) as a percentage, a size (*_bytes) in kB, MB or GB. The exact
// value is the cell's title (a tooltip). Counts stay counts.
func human(col string, v any) cellv {
	c := cellv{Text: reports.Cell(v)}
	switch v.(type) {
	case int64, int32, int16, float64, float32, pgtype.Numeric:
		c.Class = "n"
	}
	if c.Text == "-" {
		return c
	}
	switch x := v.(type) {
	case time.Time:
		if x.Year() > 9000 || x.Year() < 1 {
			return c
		}
		return timeCell(x)
	case pgtype.Interval:
		c.Title = c.Text
		c.Text = humanDuration(time.Duration(x.Microseconds)*time.Microsecond + time.Duration(x.Days)*24*time.Hour +
			time.Duration(x.Months)*30*24*time.Hour)
		return c
	}
	f, isNum := number(v)
	if !isNum {
		return c
	}
	exact := c.Text
	switch {
	case col == "ms" || strings.HasSuffix(col, "_ms"):
		c.Text = humanDuration(time.Duration(f * float64(time.Millisecond)))
	case strings.HasSuffix(col, "_seconds") || strings.HasSuffix(col, "_s"):
		c.Text = humanDuration(time.Duration(f * float64(time.Second)))
	case strings.HasSuffix(col, "_rate"):
		c.Text = strconv.FormatFloat(f*100, 'f', -1, 64) + "%"
		if f*100 != math.Trunc(f*1000)/10 {
			c.Text = strconv.FormatFloat(f*100, 'f', 1, 64) + "%"
		}
	case strings.HasSuffix(col, "_bytes"):
		c.Text = humanBytes(f)
	default:
		return c
	}
	c.Title = exact + " (" + col + ")"
	return c
}

// number reads a numeric value.
func number(v any) (float64, bool) {
	switch v.(type) {
	case int64, int32, int16, int, float64, float32, pgtype.Numeric:
		return toFloat(v), true
	}
	return 0, false
}

// timeCell is a time as how long ago it is, the exact UTC time its title.
func timeCell(t time.Time) cellv {
	return cellv{Text: ago(t), Title: t.UTC().Format("2006-01-02 15:04:05.000 UTC")}
}

// humanDuration writes d for a person: "850 ms", "1.2 s", "3m 05s",
// "2h 10m", "3d 4h".
func humanDuration(d time.Duration) string {
	neg := ""
	if d < 0 {
		neg, d = "-", -d
	}
	var s string
	switch {
	case d < time.Second:
		s = strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', -1, 64)
		if len(s) > 5 {
			s = strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 1, 64)
		}
		s += " ms"
	case d < time.Minute:
		s = strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + " s"
	case d < time.Hour:
		s = fmt.Sprintf("%dm %02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		s = fmt.Sprintf("%dh %02dm", int(d.Hours()), int(d.Minutes())%60)
	default:
		s = fmt.Sprintf("%dd %dh", int(d.Hours())/24, int(d.Hours())%24)
	}
	return neg + s
}

// humanBytes writes a size in B, kB, MB or GB (powers of 1,000).
func humanBytes(n float64) string {
	for _, u := range []string{"B", "kB", "MB", "GB"} {
		if math.Abs(n) < 1000 || u == "GB" {
			if u == "B" {
				return strconv.FormatFloat(n, 'f', 0, 64) + " B"
			}
			return strconv.FormatFloat(n, 'f', 1, 64) + " " + u
		}
		n /= 1000
	}
	return ""
}

func ago(t any) string {
	var tt time.Time
	switch x := t.(type) {
	case time.Time:
		tt = x
	case *time.Time:
		if x == nil {
			return "-"
		}
		tt = *x
	default:
		return reports.Cell(t)
	}
	if tt.IsZero() {
		return "-"
	}
	d := time.Since(tt)
	suffix := " ago"
	if d < 0 {
		d, suffix = -d, " from now"
	}
	switch {
	case d < time.Minute:
		return strconv.Itoa(int(d.Seconds())) + "s" + suffix
	case d < time.Hour:
		return strconv.Itoa(int(d.Minutes())) + "m" + suffix
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm%s", int(d.Hours()), int(d.Minutes())%60, suffix)
	}
	return strconv.Itoa(int(d.Hours()/24)) + "d" + suffix
}

// num renders a count or measure with thousands separators.
func num(v any) string {
	v = plain(v)
	s := reports.Cell(v)
	neg := strings.HasPrefix(s, "-") && s != "-"
	if neg {
		s = s[1:]
	}
	intPart, frac, hasFrac := strings.Cut(s, ".")
	if _, err := strconv.ParseInt(intPart, 10, 64); err != nil {
		return reports.Cell(v)
	}
	var b strings.Builder
	for i, r := range intPart {
		if i > 0 && (len(intPart)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	out := b.String()
	if hasFrac {
		out += "." + frac
	}
	if neg {
		out = "-" + out
	}
	return out
}
