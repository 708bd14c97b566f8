package control

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/lookout-dev/lookout/internal/outbox"
)

// Notification is a notification as the API shows it: one row of the
// outbox (one per sink the watch notifies).
type Notification struct {
	ID       int64  `json:"id" doc:"Notification id; also the event id of the stream."`
	Kind     string `json:"kind" enum:"single,digest,alert" doc:"single (one change), digest (a summary of several) or alert (an operator alert; admins only)."`
	Status   string `json:"status" doc:"Delivery state: pending, held (for a digest), delivered, digested or dead."`
	Source   string `json:"source"`
	Watch    string `json:"watch"`
	RecordID string `json:"record_id"`
	Sink     string `json:"sink" doc:"The sink this row is delivered to."`
	// DedupeKey is the notification's idempotency key (the webhook-id of
	// the webhook sink).
	DedupeKey   string          `json:"dedupe_key"`
	ChangeID    *int64          `json:"change_id,omitempty" doc:"The change that was judged; pass it to explain."`
	Title       string          `json:"title"`
	Body        string          `json:"body,omitempty"`
	Urgency     string          `json:"urgency" doc:"low, medium or high."`
	Reason      string          `json:"reason,omitempty" doc:"Why the watch notified (the model's reason, or the filter's)."`
	Payload     json.RawMessage `json:"payload" doc:"The JSON the webhook sink sends (record, change, watch, ...)."`
	CreatedAt   time.Time       `json:"created_at"`
	DeliveredAt *time.Time      `json:"delivered_at,omitempty"`
}

func fromNote(n outbox.Note) Notification {
	p := json.RawMessage(n.Payload)
	if len(p) == 0 {
		p = json.RawMessage("{}")
	}
	return Notification{ID: n.ID, Kind: n.Kind, Status: n.Status, Source: n.Source, Watch: n.Watch, RecordID: n.RecordID,
		Sink: n.Sink, DedupeKey: n.DedupeKey, ChangeID: n.ChangeID, Title: n.Title, Body: n.Body, Urgency: n.Urgency,
		Reason: n.Reason, Payload: p, CreatedAt: n.CreatedAt, DeliveredAt: n.DeliveredAt}
}

// NotificationQuery selects a page of notifications.
type NotificationQuery struct {
	// Cursor continues a listing (the previous page's NextCursor).
	Cursor string
	// Limit bounds the page: 1 to 200. Defaults to 50.
	Limit int
	// Source and Watch filter; "" matches every one.
	Source, Watch string
}

// NotificationPage is a page of notifications, newest first.
type NotificationPage struct {
	Items []Notification `json:"items"`
	// NextCursor continues the listing with older rows; "" at the end.
	NextCursor string `json:"next_cursor,omitempty" doc:"Pass as cursor to get the next (older) page; absent on the last page."`
}

// ListNotifications returns a page of p's notifications, newest first.
func (s *Service) ListNotifications(ctx context.Context, p Principal, q NotificationQuery) (*NotificationPage, error) {
	before, limit, err := pageBounds(q.Cursor, q.Limit)
	if err != nil {
		return nil, err
	}
	pq, err := s.scope(ctx, p)
	if err != nil {
		return nil, err
	}
	pq.Before, pq.Limit, pq.Source, pq.Watch = before, limit+1, q.Source, q.Watch
	notes, err := outbox.Page(ctx, s.pool, pq)
	if err != nil {
		return nil, err
	}
	page := &NotificationPage{Items: []Notification{}}
	for i, n := range notes {
		if i == limit {
			page.NextCursor = encodeCursor(notes[i-1].ID)
			break
		}
		page.Items = append(page.Items, fromNote(n))
	}
	return page, nil
}

func pageLimit(n int) (int, error) {
	switch {
	case n == 0:
		return 50, nil
	case n < 1 || n > 200:
		return 0, InvalidParameter("limit", n, "limit must be between 1 and 200")
	}
	return n, nil
}

// StreamQuery starts a notification stream.
type StreamQuery struct {
	// After is the id of the last notification the client has (the SSE
	// Last-Event-ID); the stream starts with the ones after it. 0 starts
	// with the notifications created from now on.
	After int64
	// Source and Watch filter; "" matches every one.
	Source, Watch string
}

// Stream sends p's notifications in id order as they are created, until
// ctx ends or send fails: first those after q.After (catch-up), then new
// ones as the outbox wakes the hub, or every StreamPoll. Each row is sent
// once per stream, also when its transaction committed after a newer
// row's (within StreamLookback). keepalive, if set, is called when the
// stream opens and when nothing was sent for a while, so that clients
// see the stream open and proxies keep the connection.
func (s *Service) Stream(ctx context.Context, p Principal, q StreamQuery, send func(Notification) error, keepalive func() error) error {
	var wake <-chan struct{}
	if s.hub != nil {
		ch, cancel := s.hub.Subscribe()
		defer cancel()
		wake = ch
	}
	cursor := q.After
	sent := map[int64]time.Time{}
	if cursor == 0 {
		latest, err := s.latestID(ctx, p, q)
		if err != nil {
			return err
		}
		cursor = latest
		// From now on: the rows of the look-back window that exist now
		// are the past, marked sent without sending them, so that only
		// rows committed after the stream opened are streamed (one below
		// latest whose transaction commits later still is).
		if _, err := s.streamOnce(ctx, p, q, &cursor, sent, func(Notification) error { return nil }); err != nil {
			return err
		}
	}
	if keepalive != nil {
		// Right away, so that the client sees the stream open before the
		// first notification.
		if err := keepalive(); err != nil {
			return err
		}
	}
	poll := time.NewTicker(s.conf.StreamPoll)
	defer poll.Stop()
	quiet := 0
	for {
		n, err := s.streamOnce(ctx, p, q, &cursor, sent, send)
		if err != nil {
			return err
		}
		if n > 0 {
			quiet = 0
		}
		select {
		case <-ctx.Done():
			return nil
		case <-wake:
		case <-poll.C:
			quiet++
			if keepalive != nil && quiet >= 3 {
				quiet = 0
				if err := keepalive(); err != nil {
					return err
				}
			}
		}
	}
}

func (s *Service) latestID(ctx context.Context, p Principal, q StreamQuery) (int64, error) {
	pq, err := s.scope(ctx, p)
	if err != nil {
		return 0, err
	}
	pq.Limit, pq.Source, pq.Watch = 1, q.Source, q.Watch
	notes, err := outbox.Page(ctx, s.pool, pq)
	if err != nil || len(notes) == 0 {
		return 0, err
	}
	return notes[0].ID, nil
}

// streamOnce sends what is new since the cursor and returns how many.
func (s *Service) streamOnce(ctx context.Context, p Principal, q StreamQuery, cursor *int64, sent map[int64]time.Time, send func(Notification) error) (int, error) {
	pq, err := s.scope(ctx, p)
	if err != nil {
		return 0, err
	}
	pq.Source, pq.Watch, pq.Recent, pq.Limit = q.Source, q.Watch, s.conf.StreamLookback, 500
	n := 0
	for {
		pq.After = *cursor
		notes, err := outbox.Page(ctx, s.pool, pq)
		if err != nil {
			if ctx.Err() != nil {
				return n, nil
			}
			return n, fmt.Errorf("stream notifications: %w", err)
		}
		fresh := 0
		for _, note := range notes {
			if _, done := sent[note.ID]; done || note.ID <= q.After {
				continue
			}
			if err := send(fromNote(note)); err != nil {
				return n, err
			}
			sent[note.ID] = time.Now()
			*cursor = max(*cursor, note.ID)
			n++
			fresh++
		}
		if len(notes) < pq.Limit || fresh == 0 {
			break
		}
	}
	// Forget what no longer falls in the look-back window.
	cut := time.Now().Add(-2 * s.conf.StreamLookback)
	for id, at := range sent {
		if at.Before(cut) && id <= *cursor {
			delete(sent, id)
		}
	}
	return n, nil
}

// NotificationDelivery is a notification with the state of its delivery:
// what a user's page shows of one.
type NotificationDelivery struct {
	Notification
	// Attempts is how many deliveries were tried.
	Attempts int
	// Duplicates counts the later notifications of the same key that this
	// one absorbed.
	Duplicates int
	// NextAttemptAt is when a pending row is tried next.
	NextAttemptAt time.Time
	// DeadAt is when the row gave up (nil unless dead).
	DeadAt *time.Time
	// LastError is the last attempt's error, as the deliverer stored it
	// (secrets redacted); "" when none failed.
	LastError string
}

// GetNotification returns p's notification id with its delivery state; a
// notification of another owner does not exist for p.
func (s *Service) GetNotification(ctx context.Context, p Principal, id int64) (*NotificationDelivery, error) {
	notFound := &NotFoundError{Kind: "notification", Name: fmt.Sprint(id)}
	pq, err := s.scope(ctx, p)
	if err != nil {
		return nil, err
	}
	pq.Before, pq.Limit = id+1, 1
	notes, err := outbox.Page(ctx, s.pool, pq)
	if err != nil {
		return nil, fmt.Errorf("notification %d: %w", id, err)
	}
	if len(notes) == 0 || notes[0].ID != id {
		return nil, notFound
	}
	f := outbox.Filter{ID: id, Owner: p.listOwner(), Limit: 1}
	rows, err := outbox.List(ctx, s.pool, f)
	if err != nil {
		return nil, fmt.Errorf("notification %d: %w", id, err)
	}
	if len(rows) == 0 {
		return nil, notFound
	}
	r := rows[0]
	out := &NotificationDelivery{Notification: fromNote(notes[0]), Attempts: r.Attempts, Duplicates: r.Duplicates,
		NextAttemptAt: r.NextAttemptAt, DeadAt: r.DeadAt}
	if r.LastError != nil {
		out.LastError = *r.LastError
	}
	return out, nil
}
