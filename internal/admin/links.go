package admin

import (
	"fmt"
	"net/url"
	"time"
)

// links is the linker of report rows: a source's name leads to the
// source's page, a record (or a change, an evaluation, a model call or a
// notification of one) to the record's page with its decision trail.
func links(col string, row map[string]any) string {
	str := func(k string) string {
		if v, ok := row[k].(string); ok {
			return v
		}
		return ""
	}
	source := str("source")
	if source == "" {
		if _, isSource := row["connector"]; isSource {
			source = str("name")
		}
	}
	record := str("record_id")
	switch col {
	case "name", "source":
		if source != "" {
			return "/admin/sources/" + url.PathEscape(source)
		}
	case "record_id":
		if source != "" && record != "" {
			return recordLink(source, record, "")
		}
	case "id", "change_id", "model_call_id", "notification_id", "run_id":
		if col == "run_id" {
			if source != "" {
				return "/admin/sources/" + url.PathEscape(source) + "#runs"
			}
			return ""
		}
		if source != "" && record != "" {
			frag := ""
			if c, ok := row["change_id"].(int64); ok {
				frag = fmt.Sprintf("change-%d", c)
			}
			return recordLink(source, record, frag)
		}
		if source != "" {
			return "/admin/sources/" + url.PathEscape(source)
		}
	case "sink":
		if s := str("sink"); s != "" {
			return "/admin/dead?sink=" + url.QueryEscape(s)
		}
	}
	return ""
}

func recordLink(source, record, frag string) string {
	l := "/admin/record?" + url.Values{"source": {source}, "id": {record}}.Encode()
	if frag != "" {
		l += "#" + frag
	}
	return l
}

// withSource links the rows of one source's tables (which have no source
// column) like links does.
func withSource(source string) linker {
	return func(col string, row map[string]any) string {
		m := make(map[string]any, len(row)+1)
		for k, v := range row {
			m[k] = v
		}
		m["source"] = source
		if col == "run_id" {
			return ""
		}
		return links(col, m)
	}
}

// driftLinks links each count of the drift table (a row per day, model,
// model digest and prompt version) to the evaluations it counts, of owner
// when the page is filtered by one; the table's other columns link like
// links does.
func driftLinks(owner string) linker {
	return func(col string, row map[string]any) string {
		if _, ok := driftCounts[col]; !ok {
			return links(col, row)
		}
		day, ok := row["day"].(time.Time)
		if !ok {
			return ""
		}
		return driftLink(col, day, fmt.Sprint(row["model"]), fmt.Sprint(row["model_digest"]), fmt.Sprint(row["prompt_version"]), owner)
	}
}

// driftLink is the address of the evaluations behind one count of the
// drift table.
func driftLink(count string, day time.Time, model, digest, prompt, owner string) string {
	v := url.Values{"count": {count}, "day": {day.UTC().Format(time.DateOnly)}, "model": {model},
		"digest": {digest}, "prompt": {prompt}}
	if owner != "" {
		v.Set("owner", owner)
	}
	return "/admin/rows/drift?" + v.Encode()
}
