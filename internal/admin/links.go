package admin

import (
	"fmt"
	"net/url"
	"time"

	"github.com/lookout-dev/lookout/internal/control"
)

// links is the linker of report rows: every number leads to the rows it
// counts, and every name or id to its page. A source's name leads to the
// source's page; a record (or a change, an evaluation, a model call or a
// notification of one) to the record's page with its decision trail; a
// run id to the run's row; a count of a run's changes to those changes; a
// source's failure count to its failed runs since its last success; the
// quiet runs of an hour to that hour's row; the attempts of a
// notification to its row. Numbers that are attributes of their row and
// count no rows (durations, lateness, tokens, versions, exit codes) link
// nowhere: TestEveryNumberLinks lists them.
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
	record, kind := str("record_id"), str("kind")
	change := ""
	if c, ok := row["change_id"].(int64); ok {
		change = fmt.Sprintf("change-%d", c)
	}
	switch col {
	case "name", "source":
		if source != "" {
			return sourceLink(source)
		}
	case "record_id":
		if source != "" && record != "" {
			return recordLink(source, record, "")
		}
	case "run_id", "last_run_id", "sync_run_id":
		return runLink(source, row[col])
	case "failure_count":
		return failedLink(source)
	case "items_created", "items_updated", "items_deleted", "changed":
		return runChangesLink(source, row["run_id"], col)
	case "runs", "not_modified":
		if h, ok := row["hour"].(time.Time); ok && source != "" {
			return "/admin/rows/quiet?" + url.Values{"source": {source}, "since": {h.UTC().Format(time.RFC3339)}}.Encode()
		}
	case "eval_attempts":
		// A change's attempts are counted on its row: its page.
		if id, ok := row["change_id"].(int64); ok && source != "" && record != "" {
			return recordLink(source, record, fmt.Sprintf("change-%d", id))
		}
	case "executions", "retry_count", "correction_count":
		// A task run's executions, retries and corrections are counted
		// on its row.
		return tasksLink(row["id"])
	case "attempts":
		switch kind {
		case "source":
			return failedLink(source)
		case "change":
			return recordLink(source, record, fmt.Sprintf("change-%v", row["id"]))
		case "model_call", "evaluation":
			if source != "" && record != "" {
				return recordLink(source, record, change)
			}
		default: // a notification's attempts, counted on its row
			if id, ok := row["notification_id"]; ok {
				return notificationLink(id)
			}
			return notificationLink(row["id"])
		}
	case "manual_retries", "duplicates_suppressed":
		if id, ok := row["notification_id"]; ok {
			return notificationLink(id)
		}
		return notificationLink(row["id"])
	case "id", "change_id", "model_call_id", "notification_id", "evaluation_id":
		if col == "id" {
			switch kind {
			case "sync_run", "run_too_long", "source_lease_expired", "source_overdue":
				return runLink(source, row["id"])
			case "change", "evaluation", "change_lease_expired", "change_pending_too_long":
				change = fmt.Sprintf("change-%v", row["id"])
			}
		}
		if source != "" && record != "" {
			return recordLink(source, record, change)
		}
		if source != "" {
			return sourceLink(source)
		}
	case "sink":
		if s := str("sink"); s != "" {
			return "/admin/dead?sink=" + url.QueryEscape(s)
		}
	}
	return ""
}

func sourceLink(source string) string {
	return "/admin/sources/" + url.PathEscape(source)
}

func recordLink(source, record, frag string) string {
	l := "/admin/record?" + url.Values{"source": {source}, "id": {record}}.Encode()
	if frag != "" {
		l += "#" + frag
	}
	return l
}

// runLink is a run's row (all time: a run id picks it). A task run's
// run_id is text, the executor's: no sync run.
func runLink(source string, id any) string {
	if _, ok := id.(int64); !ok {
		return ""
	}
	v := url.Values{"id": {fmt.Sprint(id)}}
	if source != "" {
		v.Set("source", source)
	}
	return "/admin/rows/runs?" + v.Encode()
}

// runChangesLink is a run's changes of one kind (created, updated,
// deleted; every kind for col "changed").
func runChangesLink(source string, run any, col string) string {
	if run == nil || source == "" {
		return ""
	}
	v := url.Values{"source": {source}, "run_id": {fmt.Sprint(run)}}
	switch col {
	case "items_created":
		v.Set("kind", "created")
	case "items_updated":
		v.Set("kind", "updated")
	case "items_deleted":
		v.Set("kind", "deleted")
	}
	return "/admin/rows/changes?" + v.Encode()
}

// failedLink is the failed runs a source's failure_count counts.
func failedLink(source string) string {
	if source == "" {
		return ""
	}
	return "/admin/rows/runs?" + url.Values{"source": {source}, "since_success": {"1"}}.Encode()
}

// notificationLink is a notification's row.
func notificationLink(id any) string {
	if id == nil {
		return ""
	}
	return "/admin/rows/notifications?id=" + url.QueryEscape(fmt.Sprint(id))
}

// tasksLink is a task run's row.
func tasksLink(id any) string {
	if id == nil {
		return ""
	}
	return "/admin/tasks?id=" + url.QueryEscape(fmt.Sprint(id))
}

// sourceLinks links the rows of the source list, whose name is a source.
func sourceLinks(col string, row map[string]any) string {
	m := make(map[string]any, len(row)+1)
	for k, v := range row {
		m[k] = v
	}
	m["source"] = row["name"]
	return links(col, m)
}

// withSource links the rows of one source's tables (which have no source
// column) like links does.
func withSource(source string) linker {
	return withRecord(source, "")
}

// withRecord links the rows of one record's tables (which have no source
// or record column) like links does.
func withRecord(source, record string) linker {
	return func(col string, row map[string]any) string {
		m := make(map[string]any, len(row)+2)
		for k, v := range row {
			m[k] = v
		}
		m["source"] = source
		if record != "" {
			m["record_id"] = record
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
		if _, ok := control.DriftCounts[col]; !ok {
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
