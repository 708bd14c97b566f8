package notion

import (
	"fmt"
	"strings"
)

// Value turns one property value object of the API into plain JSON:
//
//	title, rich_text          the plain text ("" when empty)
//	select, status            the option name, or null
//	multi_select              the option names
//	date                      {"start": ..., "end": ... or null}, or null
//	number                    the number, or null
//	checkbox                  true or false
//	url, email, phone_number  the string, or null
//	people                    [{"id": ..., "name": ..., "email": ...}] (name and email when shared)
//	created_by, last_edited_by {"id": ..., "name": ...}
//	created_time, last_edited_time  the timestamp
//	relation                  the related page ids
//	formula                   its typed value (string, number, boolean or date as above)
//	rollup                    its typed value (number, date, or the list of its values)
//	files                     the file names
//	unique_id                 "PREFIX-7", or the number without a prefix
//
// Other types (button, verification, ...) are null.
func Value(v any) any {
	m, ok := v.(map[string]any)
	if !ok {
		return nil
	}
	t, _ := m["type"].(string)
	x := m[t]
	switch t {
	case "title", "rich_text":
		return plainText(x)
	case "select", "status":
		if o, ok := x.(map[string]any); ok {
			return o["name"]
		}
		return nil
	case "multi_select":
		names := []any{}
		for _, o := range list(x) {
			if om, ok := o.(map[string]any); ok {
				names = append(names, om["name"])
			}
		}
		return names
	case "date":
		return date(x)
	case "number", "checkbox", "url", "email", "phone_number", "created_time", "last_edited_time":
		return x
	case "people":
		out := []any{}
		for _, u := range list(x) {
			out = append(out, user(u))
		}
		return out
	case "created_by", "last_edited_by":
		return user(x)
	case "relation":
		ids := []any{}
		for _, r := range list(x) {
			if rm, ok := r.(map[string]any); ok {
				ids = append(ids, rm["id"])
			}
		}
		return ids
	case "formula":
		return typed(x)
	case "rollup":
		r, ok := x.(map[string]any)
		if !ok {
			return nil
		}
		if rt, _ := r["type"].(string); rt == "array" {
			out := []any{}
			for _, e := range list(r["array"]) {
				out = append(out, Value(e))
			}
			return out
		}
		return typed(r)
	case "files":
		names := []any{}
		for _, f := range list(x) {
			if fm, ok := f.(map[string]any); ok {
				names = append(names, fm["name"])
			}
		}
		return names
	case "unique_id":
		u, ok := x.(map[string]any)
		if !ok {
			return nil
		}
		if p, _ := u["prefix"].(string); p != "" {
			return fmt.Sprintf("%s-%v", p, u["number"])
		}
		return u["number"]
	}
	return nil
}

// typed reads a {"type": T, T: value} object (formula, rollup results).
func typed(x any) any {
	m, ok := x.(map[string]any)
	if !ok {
		return nil
	}
	t, _ := m["type"].(string)
	if t == "date" {
		return date(m["date"])
	}
	return m[t]
}

func date(x any) any {
	d, ok := x.(map[string]any)
	if !ok {
		return nil
	}
	return map[string]any{"start": d["start"], "end": d["end"]}
}

func user(x any) any {
	u, ok := x.(map[string]any)
	if !ok {
		return nil
	}
	out := map[string]any{"id": u["id"]}
	if n, ok := u["name"].(string); ok {
		out["name"] = n
	}
	if p, ok := u["person"].(map[string]any); ok {
		if e, ok := p["email"].(string); ok {
			out["email"] = e
		}
	}
	return out
}

func list(x any) []any {
	l, _ := x.([]any)
	return l
}

func plainText(x any) string {
	var b strings.Builder
	for _, rt := range list(x) {
		if m, ok := rt.(map[string]any); ok {
			if s, ok := m["plain_text"].(string); ok {
				b.WriteString(s)
			}
		}
	}
	return b.String()
}

// shape turns a page object into the item the connector emits:
//
//	id          the page id
//	url         the page's Notion URL
//	title       the text of the title property
//	status      the value of the status property named in the block (when set)
//	created_at  created_time
//	updated_at  last_edited_time
//	author      created_by's id
//	archived    archived or in the trash
//	properties  every property by name, as plain JSON (see Value)
//
// The page as received is kept as the record's raw JSON.
func shape(pg map[string]any, status string) map[string]any {
	props := map[string]any{}
	title := ""
	raw, _ := pg["properties"].(map[string]any)
	for name, v := range raw {
		props[name] = Value(v)
		if vm, ok := v.(map[string]any); ok && vm["type"] == "title" {
			title = plainText(vm["title"])
		}
	}
	archived := pg["archived"] == true || pg["in_trash"] == true
	out := map[string]any{
		"id":         pg["id"],
		"url":        pg["url"],
		"title":      title,
		"created_at": pg["created_time"],
		"updated_at": pg["last_edited_time"],
		"archived":   archived,
		"properties": props,
	}
	if u, ok := pg["created_by"].(map[string]any); ok {
		out["author"] = u["id"]
	}
	if status != "" {
		if s, ok := props[status].(string); ok {
			out["status"] = s
		}
	}
	return out
}
