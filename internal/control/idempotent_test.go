package control

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lookout-dev/lookout/internal/audit"
)

// roundTrips records what a pool's connections send and wait on: a
// statement, or a batch (its statements together, in one round trip).
type roundTrips struct {
	mu   sync.Mutex
	sent []string
}

func (r *roundTrips) add(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sent = append(r.sent, strings.Join(strings.Fields(s), " "))
}

func (r *roundTrips) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.sent
	r.sent = nil
	return s
}

func (r *roundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	r.add(d.SQL)
	return ctx
}
func (r *roundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (r *roundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	var qs []string
	for _, q := range d.Batch.QueuedQueries {
		qs = append(qs, q.SQL)
	}
	r.add("batch: " + strings.Join(qs, "; "))
	return ctx
}
func (r *roundTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (r *roundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// A watch's create through Idempotent, with a key, sends its BEGIN with
// the key's claim and its audit row and the key's answer with its
// COMMIT, each in one round trip: BEGIN and the claim, the owner's lock
// and count (alice has limits), the source's lock and the insert (one
// statement once a create read the source: 6 round trips before), then
// the last batch. Before, the audit row, the answer and the COMMIT were
// three round trips (9 in all), and BEGIN and the claim two (7).
func TestIdempotentCreateWatchSendsItsLastWritesWithTheCommit(t *testing.T) {
	t.Parallel()
	s := defService(t)
	ctx := context.Background()
	mustCreateSource(t, s, alice, feedSource)
	rt := &roundTrips{}
	cfg := s.pool.Config()
	cfg.ConnConfig.Tracer = rt
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	s.pool = pool // the store keeps its own pool: its wake-up is not counted

	create := func(name string) *Answer {
		t.Helper()
		body := []byte(`{"source": "go-blog", "watch": {"name": "` + name + `", "when": "true"}}`)
		a, err := s.Idempotent(ctx, alice, "key-"+name, "create_watch", body, func(ctx context.Context, tx pgx.Tx) (*Answer, error) {
			out, err := s.CreateWatch(ctx, tx, alice, CreateWatchRequest{Source: "go-blog", Watch: json.RawMessage(`{"name": "` + name + `", "when": "true"}`)})
			if err != nil {
				return nil, err
			}
			b, err := json.Marshal(out)
			return &Answer{Status: 201, Body: b}, err
		})
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	create("first") // prepares the statements on the one connection
	rt.take()
	first := create("second")
	sent := rt.take()
	// The source was read by the first create: the second locks it in
	// its insert (definitions' queryCreateWatchOnSource).
	// The key is one row, inserted with its answer at the COMMIT: the
	// claim is a lock and a read, and nothing updates the key.
	if len(sent) != 5 || !strings.HasPrefix(sent[0], "batch: BEGIN; SELECT pg_advisory_xact_lock") ||
		!strings.Contains(sent[0], "FROM idempotency_keys") ||
		!strings.Contains(sent[3], "FOR SHARE") || !strings.Contains(sent[3], "INSERT INTO watches") ||
		!strings.HasPrefix(sent[4], "batch: ") || !strings.Contains(sent[4], "INSERT INTO audit_log") ||
		!strings.Contains(sent[4], "INSERT INTO idempotency_keys") || !strings.HasSuffix(sent[4], "; COMMIT") ||
		strings.Contains(strings.Join(sent, "\n"), "UPDATE idempotency_keys") {
		t.Errorf("a create sent %d round trips, want 5, the first BEGIN and the key's lock and read, the fourth the source's lock and the insert, the last the audit row, the key with its answer and the COMMIT, and no update of the key:\n%s", len(sent), strings.Join(sent, "\n"))
	}

	// All of it committed: the watch, its audit row, the key's answer
	// (a retry gets it).
	var audited int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM audit_log WHERE kind = 'watch' AND target = 'go-blog/second'`).Scan(&audited); err != nil || audited != 1 {
		t.Errorf("audit rows of the create: %d %v, want 1", audited, err)
	}
	again := create("second")
	if !again.Replayed || string(again.Body) != string(first.Body) {
		t.Errorf("retry: %+v, want the first answer replayed", again)
	}
}

// An error of a queued write rolls the whole create back, and the key
// stays free: nothing of the create is kept.
func TestIdempotentQueuedWriteFailureRollsBack(t *testing.T) {
	t.Parallel()
	s := defService(t)
	ctx := context.Background()
	mustCreateSource(t, s, alice, feedSource)
	// An audit row that cannot be written: audit_log's check refuses a
	// via it does not know.
	p := alice
	p.Via = "test"
	run := func(p Principal) (*Answer, error) {
		return s.Idempotent(ctx, p, "key-1", "create_watch", []byte(`{}`), func(ctx context.Context, tx pgx.Tx) (*Answer, error) {
			if _, err := s.CreateWatch(ctx, tx, p, CreateWatchRequest{Source: "go-blog", Watch: json.RawMessage(`{"name": "w", "when": "true"}`)}); err != nil {
				return nil, err
			}
			return &Answer{Status: 201, Body: []byte(`{}`)}, nil
		})
	}
	if _, err := run(p); err == nil || !strings.Contains(err.Error(), "audit_log_via_check") {
		t.Fatalf("create with an audit row refused: %v, want the check's error", err)
	}
	var watches, keys int
	if err := s.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM watches WHERE name = 'w'), (SELECT count(*) FROM idempotency_keys)`).Scan(&watches, &keys); err != nil {
		t.Fatal(err)
	}
	if watches != 0 || keys != 0 {
		t.Errorf("after the failed create: %d watches, %d keys, want none", watches, keys)
	}
	// The key is free: the same create by alice through the API succeeds.
	if a, err := run(alice); err != nil || a.Replayed {
		t.Errorf("the create again: %+v %v", a, err)
	}
	entries, err := audit.List(ctx, s.pool, audit.Filter{Kind: "watch"})
	if err != nil || len(entries) != 1 || entries[0].Via != "api" {
		t.Errorf("audit rows: %+v %v, want the one of the create that committed", entries, err)
	}
}
