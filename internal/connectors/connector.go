// Package connectors defines how lookout reads external systems and keeps
// the registry of connector types, in the manner of database/sql.Register:
// each connector package registers its name with the decoder of its block
// and its constructor (see Register), and internal/connectors/all links
// them all.
//
// A connector turns one configured source into pages of raw items. It owns
// the protocol (HTTP, files, feeds) and the cursor format; it does not touch
// the database, normalize items or decide anything. The syncer drives it:
// it commits each page in one transaction together with the cursor the page
// carries, so a run that stops half-way resumes from the last committed page.
package connectors

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// Connector fetches the items of one source.
//
// Fetch reads the source starting from cursor (nil on the first run) and
// calls emit once per page, in order. ctx bounds the whole run; connectors
// check it between requests and pass it to every request. When emit returns
// an error, Fetch stops and returns that error unchanged.
//
// Fetch returns the cursor to store after a complete run and whether the run
// saw the complete set of items (a snapshot, so that records not seen are
// deleted). Errors are wrapped with context; the sentinels below tell the
// syncer what to do:
//
//   - ErrNotModified: the source answered "not modified"; nothing to write,
//     the run succeeds.
//   - ErrUnauthorized: credentials were refused (401/403); the source is
//     disabled until an operator fixes the configuration.
//   - *RetryLaterError: the upstream asked to wait (429/503, rate-limit
//     headers); the run pauses and resumes from its cursor at RetryAt
//     instead of failing.
//   - *ItemError: one item is malformed; the run fails, naming the item.
//
// Any other error fails the run and counts towards the source's backoff.
// A retry means calling Fetch again with the last committed cursor.
//
// Resuming: a connector that reads several pages gives each page a Cursor
// that says where the run goes on after it (the next page's URL, cursor or
// number, plus what the run has learnt so far), and Fetch accepts such a
// mid-run cursor as well as a final one. A run cut short by a
// *RetryLaterError, a crash or a page limit therefore goes on from the page
// after the last committed one. A resumed run has not seen the whole set,
// so it never reports Complete.
//
// Every request is bounded by the source's timeout as well as by ctx; a
// connector that must pause before its next request (X-RateLimit-Remaining
// 0 on a successful page) returns a *RetryLaterError after emitting the
// page, rather than sending a request it knows will be refused.
type Connector interface {
	Fetch(ctx context.Context, cursor json.RawMessage, emit EmitFunc) (Result, error)
}

// Snapshotter is implemented by connectors whose every complete run
// returns the full set of items (a file glob, an http endpoint configured
// with snapshot: true). The syncer then remembers the ids a run sees, to
// record deletions; for other connectors it keeps no per-run id set, so a
// large incremental source costs no memory per record.
type Snapshotter interface {
	Snapshot() bool
}

// KeyChecker is implemented by incremental connectors that can tell which
// of the records a source mirrors are still upstream (postgres: a lookup
// by key), so that items deleted without a trace (a row's DELETE) are
// found without reading the whole set. After a successful run whose
// Result.CheckKeys is true, the syncer pages through the source's live
// records in record id order (a keyset, a bounded page at a time) and
// calls Present with each page's ids, bounded by ctx; the ids it does not
// return are recorded as deleted, behind the deletion guard of snapshot
// sources (max_delete_fraction). Its errors fail the run as Fetch's do;
// the run's cursor is then not stored, so the next run checks again.
type KeyChecker interface {
	Present(ctx context.Context, ids []string) ([]string, error)
}

// Verifier is implemented by connectors whose settings name things only
// the upstream knows (the properties of a Notion database). Verify reads
// what it needs (one or two requests) and returns a configuration error
// (*config.Error) naming the source file, the key and what the upstream
// has instead. A Fetch verifies on its first run anyway; Verify lets
// `syncer check` do it before (unless --offline). Errors other than
// configuration errors follow Connector's (ErrUnauthorized, ErrNotFound,
// *RetryLaterError, network errors).
type Verifier interface {
	Verify(ctx context.Context) error
}

// EmitFunc receives one page. The page's Cursor, when set, is stored in the
// same transaction as its items.
type EmitFunc func(ctx context.Context, page Page) error

// Page is one batch of raw items.
type Page struct {
	// Items are decoded JSON values (see normalize.Decode), normally objects.
	Items []Item
	// Cursor is the resume point after this page, or nil to keep the last one.
	Cursor json.RawMessage
}

// Item is one raw item with where it came from, for error messages.
type Item struct {
	Value any
	Raw   json.RawMessage
	// Loc is a human-readable origin: "items/a.jsonl:12", "https://…/page/2 [3]".
	Loc string
	// Deleted says the item was deleted upstream, as EventResult.Deleted
	// does for an event's items: an incremental source that reads deleted
	// items (a row postgres.deleted_when selects) reports them so, with
	// their last content, and the syncer records their records as deleted
	// in the page's transaction (one deleted change; none when the record
	// is already deleted or was never mirrored).
	Deleted bool
}

// Result is the outcome of a complete Fetch.
type Result struct {
	// Cursor is stored after the run; nil keeps the last page's cursor.
	Cursor json.RawMessage
	// Complete is true when the run returned every item the source has, so
	// records not seen in the run are recorded as deleted.
	Complete bool
	// CheckKeys asks the syncer to check, after the run, which of the
	// records it mirrors are still upstream (the connector is a
	// KeyChecker; see there). Only a connector that is a KeyChecker sets it.
	CheckKeys bool
	// Requests counts upstream requests made.
	Requests int
	// MinInterval is a lower bound on the next run the upstream asked for
	// (feed ttl, X-Poll-Interval, a rate-limit budget spent until its
	// reset), or 0.
	MinInterval time.Duration
}

// Sentinel errors; see Connector.
var (
	ErrNotModified  = errors.New("not modified")
	ErrUnauthorized = errors.New("unauthorized")
)

// RetryLaterError says the upstream asked not to be called before RetryAt.
type RetryLaterError struct {
	RetryAt time.Time
	Reason  string
	// Status is the HTTP status code of the answer that asked (429, 503),
	// or 0 when no upstream answer did (a local rate limit, an IMAP
	// server).
	Status int
}

func (e *RetryLaterError) Error() string {
	return fmt.Sprintf("upstream asked to retry after %s: %s", e.RetryAt.UTC().Format(time.RFC3339), e.Reason)
}

// ItemError is a malformed item.
type ItemError struct {
	Loc string
	Err error
}

func (e *ItemError) Error() string { return e.Loc + ": " + e.Err.Error() }
func (e *ItemError) Unwrap() error { return e.Err }

// DialFunc opens a network connection, bounded by ctx.
type DialFunc func(ctx context.Context, network, address string) (net.Conn, error)

// Env is what a factory may use to build a connector.
type Env struct {
	// Dir is the configuration directory; relative paths resolve against it.
	Dir string
	// HTTP is the client for upstream requests. It applies the source's and
	// the host's rate limits and honours Retry-After; connectors use it for
	// every request.
	HTTP *http.Client
	// Dial opens the TCP connections of connectors that speak a protocol
	// other than HTTP (imap). The syncer's dials through the egress policy,
	// like its HTTP transport. Defaults to a net.Dialer's DialContext.
	Dial DialFunc
	// Logger is scoped to the source.
	Logger *slog.Logger
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time
}
