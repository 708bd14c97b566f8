// Package reports reads the report_* views, lookout's reporting surface:
// it lists them with their descriptions (the views' SQL comments) and
// prints any of them as a table, for the `report` command of both
// binaries. The views themselves are SQL (migrations/0005_reports.up.sql
// and earlier); docs/cookbook.md documents every column.
package reports

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// Prefix starts the name of every report view.
const Prefix = "report_"

// Querier is what reading a report needs of a database handle; a
// *pgxpool.Pool, a *pgx.Conn and a pgx.Tx all are one.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// View is one report view.
type View struct {
	// Name is the view's name, e.g. report_stuck.
	Name string
	// Description is the view's SQL comment.
	Description string
}

// Short is the name without the report_ prefix, as the report command
// takes it.
func (v View) Short() string { return strings.TrimPrefix(v.Name, Prefix) }

// Views lists the report views of the current schema, by name.
func Views(ctx context.Context, q Querier) ([]View, error) {
	rows, err := q.Query(ctx, `
		SELECT c.relname, coalesce(obj_description(c.oid, 'pg_class'), '')
		FROM pg_class c
		WHERE c.relkind = 'v' AND c.relnamespace = current_schema()::regnamespace
		  AND starts_with(c.relname, $1)
		ORDER BY c.relname`, Prefix)
	if err != nil {
		return nil, fmt.Errorf("list report views: %w", err)
	}
	views, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (View, error) {
		var v View
		err := r.Scan(&v.Name, &v.Description)
		return v, err
	})
	if err != nil {
		return nil, fmt.Errorf("list report views: %w", err)
	}
	return views, nil
}

// Options narrow a report.
type Options struct {
	// Source keeps the rows of one source: the view's source column, or its
	// name column for the views of sources.
	Source string
	// Limit is the most rows returned; 0 means no limit.
	Limit int
}

// Table is a report's result.
type Table struct {
	View    string
	Columns []string
	Rows    [][]any
	// More is set when Limit cut rows off.
	More bool
}

// Query reads the view name (report_stuck, or stuck), keeping the view's
// own order. An unknown name is an error listing the known ones.
func Query(ctx context.Context, q Querier, name string, opts Options) (*Table, error) {
	views, err := Views(ctx, q)
	if err != nil {
		return nil, err
	}
	full := name
	if !strings.HasPrefix(full, Prefix) {
		full = Prefix + name
	}
	if !slices.ContainsFunc(views, func(v View) bool { return v.Name == full }) {
		known := make([]string, len(views))
		for i, v := range views {
			known[i] = v.Short()
		}
		return nil, fmt.Errorf("report %q is not known (known: %s)", name, strings.Join(known, ", "))
	}
	ident := pgx.Identifier{full}.Sanitize()
	sql := "SELECT * FROM " + ident
	var args []any
	if opts.Source != "" {
		cols, err := columns(ctx, q, ident)
		if err != nil {
			return nil, err
		}
		switch {
		case slices.Contains(cols, "source"):
			sql += " WHERE source = $1"
		case slices.Contains(cols, "name"):
			sql += " WHERE name = $1"
		default:
			return nil, fmt.Errorf("report %s has no source column to filter on", name)
		}
		args = append(args, opts.Source)
	}
	if opts.Limit > 0 {
		sql += fmt.Sprintf(" LIMIT %d", opts.Limit+1)
	}
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", full, err)
	}
	defer rows.Close()
	t := &Table{View: full}
	for _, fd := range rows.FieldDescriptions() {
		t.Columns = append(t.Columns, fd.Name)
	}
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", full, err)
		}
		t.Rows = append(t.Rows, vals)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", full, err)
	}
	if opts.Limit > 0 && len(t.Rows) > opts.Limit {
		t.Rows, t.More = t.Rows[:opts.Limit], true
	}
	return t, nil
}

func columns(ctx context.Context, q Querier, ident string) ([]string, error) {
	rows, err := q.Query(ctx, "SELECT * FROM "+ident+" LIMIT 0")
	if err != nil {
		return nil, fmt.Errorf("read columns of %s: %w", ident, err)
	}
	defer rows.Close()
	var cols []string
	for _, fd := range rows.FieldDescriptions() {
		cols = append(cols, fd.Name)
	}
	rows.Close()
	return cols, rows.Err()
}

// Format selects how Write prints a table.
type Format struct {
	// Wide prints long text whole instead of cutting it at 60 characters.
	Wide bool
	// Expanded prints one "column: value" line per column, rows separated
	// by a rule (psql's \x), for views with long rows.
	Expanded bool
}

// maxCell is the width text is cut to unless Format.Wide.
const maxCell = 60

// Write prints t: a header and one line per row, or with f.Expanded one
// block per row. NULL prints as "-", times in UTC, intervals as Go
// durations.
func Write(w io.Writer, t *Table, f Format) error {
	if len(t.Rows) == 0 {
		_, err := fmt.Fprintf(w, "%s: no rows\n", t.View)
		return err
	}
	cell := func(v any) string {
		s := Cell(v)
		if !f.Wide && !f.Expanded && utf8.RuneCountInString(s) > maxCell {
			s = string([]rune(s)[:maxCell-1]) + "…"
		}
		return s
	}
	if f.Expanded {
		width := 0
		for _, c := range t.Columns {
			width = max(width, len(c))
		}
		for i, row := range t.Rows {
			fmt.Fprintf(w, "-[ %s row %d ]%s\n", t.View, i+1, strings.Repeat("-", 20))
			for j, v := range row {
				fmt.Fprintf(w, "%-*s  %s\n", width, t.Columns[j], cell(v))
			}
		}
	} else {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, strings.Join(t.Columns, "\t"))
		for _, row := range t.Rows {
			cells := make([]string, len(row))
			for j, v := range row {
				cells[j] = cell(v)
			}
			fmt.Fprintln(tw, strings.Join(cells, "\t"))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if t.More {
		_, err := fmt.Fprintf(w, "(more rows: raise --limit, or query %s with SQL)\n", t.View)
		return err
	}
	return nil
}

// Cell renders one value of a report row on one line.
func Cell(v any) string {
	switch x := v.(type) {
	case nil:
		return "-"
	case string:
		return strings.Join(strings.Fields(x), " ")
	case time.Time:
		switch {
		case x.IsZero():
			return "-"
		case x.Year() > 9000 || x.Year() < 1:
			return "infinity"
		}
		return x.UTC().Format("2006-01-02T15:04:05Z")
	case pgtype.InfinityModifier:
		return x.String()
	case pgtype.Interval:
		if !x.Valid {
			return "-"
		}
		d := time.Duration(x.Microseconds)*time.Microsecond + time.Duration(x.Days)*24*time.Hour +
			time.Duration(x.Months)*30*24*time.Hour
		if d >= time.Second || d <= -time.Second {
			d = d.Round(time.Second)
		}
		return d.String()
	case pgtype.Numeric:
		f, err := x.Float64Value()
		if err != nil || !f.Valid {
			return "-"
		}
		return Cell(f.Float64)
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1e15 {
			return strconv.FormatInt(int64(x), 10)
		}
		return strconv.FormatFloat(x, 'f', -1, 64)
	case float32:
		return Cell(float64(x))
	case map[string]any:
		b, _ := json.Marshal(x)
		return string(b)
	case []byte:
		return string(x)
	case fmt.Stringer:
		return x.String()
	}
	if rv := reflect.ValueOf(v); rv.Kind() == reflect.Slice {
		parts := make([]string, rv.Len())
		for i := range parts {
			parts[i] = Cell(rv.Index(i).Interface())
		}
		return strings.Join(parts, ",")
	}
	return fmt.Sprint(v)
}
