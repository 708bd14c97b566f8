package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/lookout-dev/lookout/internal/control"
)

// notificationDetail is a notification shown whole, under its row in
// /admin/rows/notifications?id=N (where its attempts link): what it says,
// what its sink is sent, and what is known of its attempts.
type notificationDetail struct {
	Row control.NotificationDetailRow
	// Fields are the row's columns but the body and the payload.
	Fields []field
	// Body is the text; Payload the JSON the sink is sent, indented.
	Body, Payload string
	// Attempts is the history of its delivery: when it was enqueued,
	// each attempt (delivery_attempts: its time, duration, outcome,
	// status, error and the receiver's answer), its manual retries from
	// the audit log, and when it was delivered, became dead or is due
	// next, oldest first. A row whose attempts were pruned, or made
	// before the table existed, shows what the row keeps of its last.
	Attempts []attemptEvent
}

// attemptEvent is one event of a notification's delivery history; Took,
// Status and Outcome are an attempt's ("" for the other events).
type attemptEvent struct {
	at      time.Time
	At      cellv
	What    string
	Outcome string
	Took    string
	Status  string
	Detail  string
	// Response is the start of the receiver's answer to an attempt.
	Response string
}

func (a *Admin) notification(ctx context.Context, p *page, id string) (*notificationDetail, error) {
	n, err := strconv.ParseInt(id, 10, 64)
	if err != nil {
		return nil, nil
	}
	rows, t, err := list(ctx, a, p, "The notification, whole", control.ReportNotification, []any{n}, 0, links)
	if err != nil || len(rows) == 0 {
		return nil, err
	}
	row := rows[0]
	d := &notificationDetail{Row: row}
	for _, f := range fields(t) {
		switch f.Name {
		case "body", "payload":
			continue
		}
		d.Fields = append(d.Fields, f)
	}
	d.Body = deref(row.Body)
	var buf bytes.Buffer
	if err := json.Indent(&buf, row.Payload, "", "  "); err == nil {
		d.Payload = buf.String()
	} else {
		d.Payload = string(row.Payload)
	}
	retries, _, err := list(ctx, a, p, "Its manual retries (the audit log)", control.ReportNotificationRetries, []any{n}, 0, nil)
	if err != nil {
		return nil, err
	}
	attempts, _, err := list(ctx, a, p, "Its delivery attempts", control.ReportDeliveryAttempts, []any{n, nil}, 0, nil)
	if err != nil {
		return nil, err
	}
	recorded := 0
	for _, r := range attempts {
		if r.Attempt == nil {
			continue // the notification's row: no attempt yet
		}
		recorded++
		e := attemptEvent{at: *r.StartedAt, At: timeCell(*r.StartedAt), What: fmt.Sprintf("attempt %d", *r.Attempt),
			Outcome: deref(r.Outcome), Took: humanDuration(time.Duration(deref(r.DurationMS) * float64(time.Millisecond))),
			Detail: deref(r.Error), Response: deref(r.Response)}
		if r.HTTPStatus != nil {
			e.Status = strconv.Itoa(int(*r.HTTPStatus))
		}
		d.Attempts = append(d.Attempts, e)
	}
	d.Attempts = append(d.Attempts, attemptEvent{at: row.CreatedAt, At: timeCell(row.CreatedAt), What: "enqueued",
		Detail: fmt.Sprintf("for sink %s, dedupe key %s", row.Sink, row.DedupeKey)})
	for _, r := range retries {
		d.Attempts = append(d.Attempts, attemptEvent{at: r.At, At: timeCell(r.At), What: "retried by hand",
			Detail: fmt.Sprintf("%s via %s (audit %d): back to pending, attempts from zero", r.Actor, r.Via, r.AuditID)})
	}
	if row.LastAttemptAt != nil && recorded == 0 {
		what := fmt.Sprintf("attempt %d (the last)", row.Attempts)
		detail := "succeeded"
		if row.LastError != nil {
			detail = "failed: " + *row.LastError
		}
		d.Attempts = append(d.Attempts, attemptEvent{at: *row.LastAttemptAt, At: timeCell(*row.LastAttemptAt), What: what, Detail: detail})
	}
	if row.DeliveredAt != nil {
		d.Attempts = append(d.Attempts, attemptEvent{at: *row.DeliveredAt, At: timeCell(*row.DeliveredAt), What: "delivered",
			Detail: fmt.Sprintf("after %d attempt(s)", row.Attempts)})
	}
	if row.DeadAt != nil {
		d.Attempts = append(d.Attempts, attemptEvent{at: *row.DeadAt, At: timeCell(*row.DeadAt), What: "dead",
			Detail: fmt.Sprintf("after %d attempt(s): %s", row.Attempts, deref(row.LastError))})
	}
	if row.Status == "pending" {
		d.Attempts = append(d.Attempts, attemptEvent{at: row.NextAttemptAt, At: timeCell(row.NextAttemptAt), What: "next attempt due",
			Detail: fmt.Sprintf("%d attempt(s) so far", row.Attempts)})
	}
	slices.SortStableFunc(d.Attempts, func(x, y attemptEvent) int { return x.at.Compare(y.at) })
	return d, nil
}
