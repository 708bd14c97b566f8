package admin

import (
	"bytes"
	"context"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/lookout-dev/lookout/internal/control"
	"github.com/lookout-dev/lookout/internal/reports"
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
	Data any
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

func (a *Admin) parseTemplates() error {
	a.pages = map[string]*template.Template{}
	names, err := templateFS.ReadDir("templates")
	if err != nil {
		return err
	}
	for _, e := range names {
		name := strings.TrimSuffix(e.Name(), ".html")
		if name == "layout" {
			continue
		}
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+e.Name())
		if err != nil {
			return fmt.Errorf("parse admin template %s: %w", e.Name(), err)
		}
		a.pages[name] = t
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
	var buf bytes.Buffer
	if err := a.pages[name].Execute(&buf, p); err != nil {
		a.logger.Error("render admin page", "page", name, "error", err)
		http.Error(w, "the page could not be rendered; the error is logged", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
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

// query is a statement of a page, with its arguments.
type query struct {
	title string
	sql   string
	args  []any
}

var viewName = regexp.MustCompile(`\breport_[a-z_]+\b`)

var viewDefs sync.Map // report view name → definition

// show records q under the page's SQL, with the definitions of the report
// views it reads.
func (a *Admin) show(ctx context.Context, p *page, q query) {
	s := shown{Title: q.title, SQL: strings.TrimSpace(dedent(q.sql))}
	for _, v := range q.args {
		s.Args = append(s.Args, reports.Cell(v))
	}
	seen := map[string]bool{}
	for _, v := range viewName.FindAllString(q.sql, -1) {
		if seen[v] {
			continue
		}
		seen[v] = true
		if d, ok := viewDefs.Load(v); ok {
			s.Views = append(s.Views, viewDef{v, d.(string)})
			continue
		}
		var def string
		err := a.svc.Report(ctx, p.who, queryViewDef, []any{v}, func(rows pgx.Rows) error {
			var err error
			def, err = pgx.CollectExactlyOneRow(rows, pgx.RowTo[string])
			return err
		})
		if err == nil && def != "" {
			viewDefs.Store(v, def)
			s.Views = append(s.Views, viewDef{v, def})
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
	// Raw keeps the values by column, for the handler.
	Raw []map[string]any
}

// cellv is one shown value, with the link to the rows behind it.
type cellv struct {
	Text  string
	Href  string
	Class string
}

// linker returns the link of a column's value in a row ("" for none).
type linker func(col string, row map[string]any) string

// rowsOf runs q, records it under the page's SQL and returns its rows
// (at most limit; More when there were more: q should ask for limit+1).
func (a *Admin) rowsOf(ctx context.Context, p *page, q query, limit int, link linker) (*table, error) {
	a.show(ctx, p, q)
	t := &table{}
	err := a.svc.Report(ctx, p.who, q.sql, q.args, func(rows pgx.Rows) error {
		for _, fd := range rows.FieldDescriptions() {
			t.Columns = append(t.Columns, fd.Name)
		}
		for rows.Next() {
			vals, err := rows.Values()
			if err != nil {
				return err
			}
			if limit > 0 && len(t.Rows) == limit {
				t.More = true
				continue
			}
			m := make(map[string]any, len(vals))
			for i, v := range vals {
				m[t.Columns[i]] = v
			}
			cells := make([]cellv, len(vals))
			for i, v := range vals {
				c := cellv{Text: reports.Cell(v)}
				if c.Text != "-" && link != nil {
					c.Href = link(t.Columns[i], m)
				}
				switch v.(type) {
				case int64, int32, int16, float64, float32, pgtype.Numeric:
					c.Class = "n"
				}
				cells[i] = c
			}
			t.Rows = append(t.Rows, cells)
			t.Raw = append(t.Raw, m)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", q.title, err)
	}
	return t, nil
}

// one runs q and returns its single row by column.
func (a *Admin) one(ctx context.Context, p *page, q query) (map[string]any, error) {
	a.show(ctx, p, q)
	var m map[string]any
	err := a.svc.Report(ctx, p.who, q.sql, q.args, func(rows pgx.Rows) error {
		var err error
		m, err = pgx.CollectExactlyOneRow(rows, pgx.RowToMap)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", q.title, err)
	}
	return m, nil
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
