// Package audit owns the audit_log table: one row for every change made
// through the API, MCP or the api binary's commands, and for every
// user's object an apply of the configuration directory orphaned or
// adopted — who (actor, token),
// what (action on a kind of object, and whose object), when, and the
// object before and after. Record it in the transaction of the change, so
// that a change and its audit row commit together. Secrets are never
// recorded: callers pass the object as its API shows it. Named queries are
// in queries.go.
package audit

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/lookout-dev/lookout/internal/db"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Querier runs statements: a pgx.Tx, a *pgxpool.Pool or a *pgx.Conn.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Channels a change came through (audit_log.via).
const (
	ViaAPI = "api"
	ViaMCP = "mcp"
	ViaCLI = "cli"
	// ViaAdmin is the admin page (/admin) of the api deployment.
	ViaAdmin = "admin"
	// ViaConfig is the apply of the configuration directory (a daemon's
	// start or reload, or `apply`): a source orphaned or adopted, with
	// the users' watches on it.
	ViaConfig = "config"
	// ViaMe is a user's page (/me) of the api deployment.
	ViaMe = "me"
)

// Entry is one audit_log row.
type Entry struct {
	ID int64     `json:"id"`
	At time.Time `json:"at"`
	// Actor is the owner of the token that made the change (or the
	// operator's user name for ViaCLI).
	Actor   string `json:"actor"`
	TokenID *int64 `json:"token_id,omitempty"`
	Via     string `json:"via"`
	// Action is what was done: create, update, delete, pause, resume,
	// run_now, revoke; orphan and adopt (ViaConfig).
	Action string `json:"action"`
	// Kind and Target name the object: watch and "source/watch", source
	// and its name, token and its id.
	Kind   string `json:"kind"`
	Target string `json:"target"`
	// Owner is whose object it is (an admin may change another's).
	Owner     string          `json:"owner"`
	Before    json.RawMessage `json:"before,omitempty"`
	After     json.RawMessage `json:"after,omitempty"`
	RequestID string          `json:"request_id,omitempty"`
}

// Record inserts e (ID and At are set by the database). Before and After
// are marshalled from any value; nil stores NULL.
func Record(ctx context.Context, q Querier, e Entry, before, after any) error {
	args, err := insertArgs(e, before, after)
	if err != nil {
		return err
	}
	if _, err := q.Exec(ctx, queryInsert, args...); err != nil {
		return fmt.Errorf("audit %s %s %s: %w", e.Action, e.Kind, e.Target, err)
	}
	return nil
}

// Queue is Record's insert queued in b, to be sent in the change's
// transaction with other statements in one round trip (the caller sends
// b before it commits, or with its COMMIT). Before and After are
// marshalled now: what the caller changes in them afterwards is not
// recorded. A failure of the insert is the batch's.
func Queue(b *pgx.Batch, e Entry, before, after any) error {
	args, err := insertArgs(e, before, after)
	if err != nil {
		return err
	}
	b.Queue(queryInsert, args...)
	return nil
}

// insertArgs are queryInsert's arguments for e, before and after
// marshalled: what Record sends and Queue queues.
func insertArgs(e Entry, before, after any) ([]any, error) {
	b, err := marshal(before)
	if err != nil {
		return nil, fmt.Errorf("audit %s %s %s: %w", e.Action, e.Kind, e.Target, err)
	}
	a, err := marshal(after)
	if err != nil {
		return nil, fmt.Errorf("audit %s %s %s: %w", e.Action, e.Kind, e.Target, err)
	}
	return []any{e.Actor, e.TokenID, e.Via, e.Action, e.Kind, e.Target, e.Owner, b, a, e.RequestID}, nil
}

func marshal(v any) ([]byte, error) {
	if v == nil {
		return nil, nil
	}
	if raw, ok := v.(json.RawMessage); ok {
		if len(raw) == 0 {
			return nil, nil
		}
		return raw, nil
	}
	return json.Marshal(v)
}

// Filter selects entries for List; zero fields match everything.
type Filter struct {
	Owner  string
	Kind   string
	Target string
	// Before lists entries with a smaller id (a cursor); 0 from the newest.
	Before int64
	// Limit bounds the listing. Defaults to 50.
	Limit int
}

// List returns the newest entries f selects, newest first.
func List(ctx context.Context, q Querier, f Filter) ([]Entry, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = 50
	}
	rows, err := q.Query(ctx, queryList, f.Owner, f.Kind, f.Target, f.Before, limit)
	if err != nil {
		return nil, fmt.Errorf("list audit log: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Entry, error) {
		var e Entry
		var rid *string
		err := r.Scan(&e.ID, &e.At, &e.Actor, &e.TokenID, &e.Via, &e.Action, &e.Kind, &e.Target, &e.Owner, &e.Before, &e.After, &rid)
		if rid != nil {
			e.RequestID = *rid
		}
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("list audit log: %w", err)
	}
	return out, nil
}

// Prune deletes at most limit entries recorded before before and returns
// how many. internal/retention calls it until a batch is short.
func Prune(ctx context.Context, q db.Querier, before time.Time, limit int) (int64, error) {
	n, err := db.PruneEachShard(ctx, q, "audit_log", before, limit, queryPruneCandidates, queryPrune)
	if err != nil {
		return n, fmt.Errorf("prune audit entries recorded before %s: %w", before.UTC().Format(time.RFC3339), err)
	}
	return n, nil
}

// CountPrunable counts the entries Prune would delete (a dry run).
func CountPrunable(ctx context.Context, q Querier, before time.Time) (int64, error) {
	rows, err := q.Query(ctx, queryCountPrunable, before)
	var n int64
	if err == nil {
		n, err = pgx.CollectExactlyOneRow(rows, pgx.RowTo[int64])
	}
	if err != nil {
		return 0, fmt.Errorf("count audit entries recorded before %s: %w", before.UTC().Format(time.RFC3339), err)
	}
	return n, nil
}
