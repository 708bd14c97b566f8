package connectors

import (
	"context"
	"errors"
	"fmt"
)

// Event is a webhook delivery the api's ingest stored (inbound_events),
// as the syncer hands it to a connector.
type Event struct {
	// Type is the provider's event type (GitHub's X-GitHub-Event:
	// issues, pull_request, issue_comment), Action the payload's action.
	Type, Action string
	// Payload is the delivery's JSON body, decoded (see normalize.Decode:
	// numbers are int64 or float64).
	Payload map[string]any
	// Raw is the body as received.
	Raw []byte
	// DeliveryID names the delivery in errors and logs.
	DeliveryID string
}

// EventResult is what an event says about the source's items.
type EventResult struct {
	// Items are the items the event brings, in the shape Fetch emits
	// them: the syncer maps them with the source's fields and writes them
	// through the same changes writer as a poll, so an event and a poll
	// that see the same content write one change.
	Items []Item
	// Deleted says the items were deleted upstream (an issue deleted):
	// their records are recorded as deleted.
	Deleted bool
	// Fetched counts the upstream requests made to complete the items.
	Fetched int
}

// EventMapper is implemented by connectors whose upstream sends webhooks
// (github). MapEvent turns a stored delivery into the items Fetch would
// emit for the objects it is about. When the payload carries only part of
// an object (GitHub's issue_comment, pull_request), it fetches the
// object through the connector's client — the source's rate limits and
// host budget apply — bounded by ctx.
//
// Errors: *IgnoredError says the event is not one the source mirrors (a
// type it does not map, another repository); the event is marked
// ignored. *RetryLaterError and other errors leave the event to be tried
// again (up to a limit, then it is marked failed and the source's
// reconciliation poll repairs what it missed); ErrUnauthorized likewise.
//
// FetchKey tells, without a request, whether MapEvent would fetch: it
// names the upstream object MapEvent requests to complete ev ("issue
// 12"), or returns "" when the payload carries its items (MapEvent then
// sends no request, and also "" for an event MapEvent ignores or refuses
// before any request). The syncer writes the events with "" first, in
// their own transaction, so that they never wait for another event's
// request, and maps the events of one batch that share a key with one
// MapEvent call (of the latest of them, whose items every one of them
// brings): one request per object and batch.
type EventMapper interface {
	MapEvent(ctx context.Context, ev Event) (EventResult, error)
	FetchKey(ev Event) string
}

// IgnoredError is an event the source does not mirror.
type IgnoredError struct {
	Reason string
}

func (e *IgnoredError) Error() string { return "ignored: " + e.Reason }

// Ignore returns an *IgnoredError with a formatted reason.
func Ignore(format string, args ...any) error {
	return &IgnoredError{Reason: fmt.Sprintf(format, args...)}
}

// IsIgnored reports whether err is an *IgnoredError, and its reason.
func IsIgnored(err error) (string, bool) {
	var ie *IgnoredError
	if errors.As(err, &ie) {
		return ie.Reason, true
	}
	return "", false
}
