package admin

import (
	"fmt"
	"net/url"
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
