package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/lookout-dev/lookout/internal/definitions"
)

// DescribeQuery names what to describe: a source, or every source of a
// connector kind (http, rss, github, notion, web, imap, file).
type DescribeQuery struct {
	Source    string
	Connector string
	// Sample bounds the records read, newest first: 1 to 1000. Defaults to 200.
	Sample int
}

// FieldInfo is one field of the records as a watch's `when` expression
// sees it.
type FieldInfo struct {
	Path     string   `json:"path" doc:"The field as an expression names it, e.g. record.title or record.extra.stars."`
	Types    []string `json:"types" doc:"JSON types seen: string, number, boolean, array, object, null."`
	Present  int      `json:"present" doc:"How many of the sampled records have the field (non-null)."`
	Examples []any    `json:"examples,omitempty" doc:"Up to three distinct example values (long strings cut)."`
}

// SourceDescription is what DescribeSource returns.
type SourceDescription struct {
	Source    string      `json:"source,omitempty"`
	Connector string      `json:"connector"`
	Sources   []string    `json:"sources,omitempty" doc:"With connector: the sources of that kind sampled."`
	Sampled   int         `json:"sampled" doc:"How many records were read."`
	Fields    []FieldInfo `json:"fields"`
	// Environment documents the other names an expression sees.
	Environment map[string]string `json:"environment"`
	Examples    []string          `json:"examples" doc:"Example when expressions that use these fields."`
}

var environment = map[string]string{
	"record":                "the record after the change: the fields listed here",
	"previous":              "the record before the change; nil for a created record (check previous != nil first)",
	"change.kind":           "created, updated or deleted",
	"change.changed_fields": "the names of the fields that changed, e.g. [\"status\", \"extra\"]",
	"change.version":        "the record's version, 1 when created",
	"changed(name)":         "true when the field changed, e.g. changed(\"status\")",
	"source":                "the source name",
}

// DescribeSource samples the newest mirrored records of a source (or of
// every source of a connector kind p may see) and lists their fields with
// types and example values, so that a watch's expression names real
// fields.
func (s *Service) DescribeSource(ctx context.Context, p Principal, q DescribeQuery) (*SourceDescription, error) {
	sample := q.Sample
	switch {
	case sample == 0:
		sample = 200
	case sample < 1 || sample > 1000:
		return nil, InvalidParameter("sample", sample, "sample must be between 1 and 1000")
	}
	if (q.Source == "") == (q.Connector == "") {
		return nil, InvalidParameter("source", q.Source, "give either source (a source name) or connector (a kind such as http, rss, github, notion, web, imap, file or postgres), not both and not neither")
	}
	out := &SourceDescription{Source: q.Source, Connector: q.Connector, Environment: environment, Fields: []FieldInfo{}}
	var sources []string
	if q.Source != "" {
		ok, err := s.visible(ctx, p, q.Source)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, &NotFoundError{Kind: "source", Name: q.Source, Hint: "list the sources you can watch with GET /v1/sources"}
		}
		err = s.pool.QueryRow(ctx, `SELECT connector FROM sources WHERE name = $1`, q.Source).Scan(&out.Connector)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return nil, fmt.Errorf("describe source %s: %w", q.Source, err)
		}
		sources = []string{q.Source}
	} else {
		rows, err := s.pool.Query(ctx, `SELECT name FROM sources WHERE connector = $1 ORDER BY name`, q.Connector)
		if err != nil {
			return nil, fmt.Errorf("describe connector %s: %w", q.Connector, err)
		}
		all, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return nil, fmt.Errorf("describe connector %s: %w", q.Connector, err)
		}
		for _, name := range all {
			ok, err := s.visible(ctx, p, name)
			if err != nil {
				return nil, err
			}
			if ok {
				sources = append(sources, name)
			}
		}
		out.Sources = sources
	}
	rows, err := s.pool.Query(ctx, `
		SELECT record FROM (
		    SELECT DISTINCT ON (source, record_id) record, id FROM changes_with_record
		    WHERE source = ANY($1) AND record IS NOT NULL
		    ORDER BY source, record_id, id DESC) newest
		ORDER BY id DESC LIMIT $2`, sources, sample)
	if err != nil {
		return nil, fmt.Errorf("describe %s: %w", strings.Join(sources, ", "), err)
	}
	recs, err := pgx.CollectRows(rows, pgx.RowTo[[]byte])
	if err != nil {
		return nil, fmt.Errorf("describe %s: %w", strings.Join(sources, ", "), err)
	}
	fields := map[string]*fieldAcc{}
	for _, raw := range recs {
		var rec map[string]any
		if err := json.Unmarshal(raw, &rec); err != nil {
			continue
		}
		out.Sampled++
		walk("record", rec, fields, 0)
	}
	paths := make([]string, 0, len(fields))
	for p := range fields {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, path := range paths {
		f := fields[path]
		out.Fields = append(out.Fields, FieldInfo{Path: path, Types: f.types, Present: f.present, Examples: f.examples})
	}
	out.Examples = examples(out.Connector, out.Fields)
	return out, nil
}

// visible reports whether p may see source.
func (s *Service) visible(ctx context.Context, p Principal, source string) (bool, error) {
	if _, err := s.store.GetSource(ctx, actor(p), source); err != nil {
		if errors.Is(err, definitions.ErrNotFound) {
			return false, nil
		}
		return false, fmt.Errorf("look up source %s: %w", source, err)
	}
	return true, nil
}

type fieldAcc struct {
	types    []string
	present  int
	examples []any
	seen     map[string]bool
}

func walk(path string, v any, out map[string]*fieldAcc, depth int) {
	if m, ok := v.(map[string]any); ok && depth < 3 {
		if depth > 0 {
			add(path, v, out)
		}
		for k, sub := range m {
			walk(path+"."+k, sub, out, depth+1)
		}
		return
	}
	add(path, v, out)
}

func add(path string, v any, out map[string]*fieldAcc) {
	f := out[path]
	if f == nil {
		f = &fieldAcc{seen: map[string]bool{}}
		out[path] = f
	}
	t := jsonType(v)
	if !slices.Contains(f.types, t) {
		f.types = append(f.types, t)
		sort.Strings(f.types)
	}
	if v == nil {
		return
	}
	f.present++
	if t == "object" || len(f.examples) >= 3 {
		return
	}
	ex := v
	if s, ok := v.(string); ok {
		if s == "" {
			return
		}
		if r := []rune(s); len(r) > 80 {
			ex = string(r[:80]) + "…"
		}
	}
	if a, ok := v.([]any); ok && len(a) > 5 {
		ex = a[:5]
	}
	key, _ := json.Marshal(ex)
	if !f.seen[string(key)] {
		f.seen[string(key)] = true
		f.examples = append(f.examples, ex)
	}
}

func jsonType(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "string"
	case float64, json.Number:
		return "number"
	case bool:
		return "boolean"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return fmt.Sprintf("%T", v)
}

// examples writes a few expressions over the fields described: for a
// web source, the conditions of docs/web.md (a text appears, a line is
// added, a price falls under a threshold, a restock) over its values.
func examples(connector string, fields []FieldInfo) []string {
	out := []string{`change.kind == "created"`}
	if connector == "web" {
		return append(out, webExamples(fields)...)
	}
	for _, f := range fields {
		if len(f.Examples) == 0 {
			continue
		}
		switch {
		case f.Path == "record.labels":
			for _, ex := range f.Examples {
				if a, ok := ex.([]any); ok && len(a) > 0 {
					if s, ok := a[0].(string); ok {
						out = append(out, fmt.Sprintf("%q in record.labels", s))
						break
					}
				}
			}
		case f.Path == "record.status":
			if s, ok := f.Examples[0].(string); ok {
				out = append(out, fmt.Sprintf(`changed("status") && record.status == %q`, s))
			}
		case f.Path == "record.title":
			out = append(out, `record.title contains "release"`)
		case strings.HasPrefix(f.Path, "record.extra.") && slices.Equal(f.Types, []string{"number"}):
			if len(out) < 6 {
				// An extra key is read with get(): a source without
				// fields.extra refuses record.extra.<key> (docs/config.md#watches).
				out = append(out, fmt.Sprintf("(get(record.extra, %q) ?? 0) > %v", strings.TrimPrefix(f.Path, "record.extra."), f.Examples[0]))
			}
		}
	}
	return out
}

// webExamples are the conditions of docs/web.md over a web source's
// fields. A whole-page record (it has extra.diff) gets a line that
// appears; an item gets a text that appears in its body.
func webExamples(fields []FieldInfo) []string {
	byPath := make(map[string]FieldInfo, len(fields))
	for _, f := range fields {
		byPath[f.Path] = f
	}
	var out []string
	if _, page := byPath["record.extra.diff"]; page {
		for _, ex := range byPath["record.extra.added"].Examples {
			if a, ok := ex.([]any); ok && len(a) > 0 {
				if line, ok := a[0].(string); ok && line != "" {
					out = append(out, fmt.Sprintf(`any(get(record.extra, "added") ?? [], {# contains %q})`, clipWords(line, 40)))
					break
				}
			}
		}
	} else if body := byPath["record.body"]; len(body.Examples) > 0 {
		if s, ok := body.Examples[0].(string); ok {
			if w := lastWord(s); w != "" {
				out = append(out, fmt.Sprintf(`record.body contains %q && !((previous?.body ?? "") contains %q)`, w, w))
			}
		}
	}
	if p := byPath["record.extra.price"]; len(p.Examples) > 0 && slices.Equal(p.Types, []string{"number"}) {
		out = append(out, fmt.Sprintf(`(get(record.extra, "price") ?? 1e9) < %v && (previous == nil || (get(previous.extra, "price") ?? 1e9) >= %v)`, p.Examples[0], p.Examples[0]))
	}
	if a := byPath["record.extra.availability"]; len(a.Examples) > 0 {
		out = append(out, `get(record.extra, "availability") == "InStock" && previous != nil && get(previous.extra, "availability") != "InStock"`)
	}
	return out
}

// lastWord is the last whole word of an example text (its last word
// when the example was cut), without punctuation around it.
func lastWord(s string) string {
	cut := strings.HasSuffix(s, "…")
	words := strings.Fields(strings.TrimSuffix(s, "…"))
	if cut && len(words) > 0 {
		words = words[:len(words)-1]
	}
	for i := len(words) - 1; i >= 0; i-- {
		if w := strings.Trim(words[i], `.,;:!?()[]{}"'`); w != "" {
			return w
		}
	}
	return ""
}

// clipWords cuts s to at most n bytes, at a word boundary.
func clipWords(s string, n int) string {
	if len(s) <= n {
		return s
	}
	if i := strings.LastIndexByte(s[:n], ' '); i > 0 {
		return s[:i]
	}
	return s
}
