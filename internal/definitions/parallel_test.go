package definitions_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/definitions"
)

// fileSource is the definition of a file source named name, as the API
// receives it.
func fileSource(name string) []byte {
	return fmt.Appendf(nil, `{"name": %q, "connector": "file", "file": {"paths": ["%s.json"]}, "watches": [{"name": "any"}]}`, name, name)
}

// beginOn begins a transaction on a connection of its own, released (and
// the transaction rolled back if still open) when the test ends.
func beginOn(t *testing.T, pool *pgxpool.Pool) (pgx.Tx, uint32) {
	t.Helper()
	ctx := context.Background()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		conn.Release()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = tx.Rollback(context.Background())
		conn.Release()
	})
	return tx, conn.Conn().PgConn().PID()
}

// completesWithoutWaiting runs create in tx (on backend pid) while
// another transaction, holder, is open, and fails the test if the backend
// waits for a lock instead of completing: then holder is rolled back to
// let it go. No timing: the backend either returns or shows up in
// pg_blocking_pids.
func completesWithoutWaiting(t *testing.T, pool *pgxpool.Pool, holder, tx pgx.Tx, pid uint32, create func(pgx.Tx) error) {
	t.Helper()
	ctx := context.Background()
	done := make(chan error, 1)
	go func() { done <- create(tx) }()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(time.Minute)
	for {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("create while another transaction is open: %v", err)
			}
			return
		case <-tick.C:
			var blockers []int32
			if err := pool.QueryRow(ctx, `SELECT pg_blocking_pids($1)`, int32(pid)).Scan(&blockers); err != nil {
				t.Fatal(err)
			}
			if len(blockers) > 0 {
				var query string
				_ = pool.QueryRow(ctx, `SELECT query FROM pg_stat_activity WHERE pid = $1`, int32(pid)).Scan(&query)
				_ = holder.Rollback(ctx)
				<-done
				t.Fatalf("the create waits for a lock held by backend %v (the other owner's open transaction) in: %s", blockers, query)
			}
		case <-deadline:
			t.Fatal("the create neither completed nor waited for a lock in a minute")
		}
	}
}

// Creates of different owners commit in parallel: while alice's create
// is open (not committed), bob's create completes and commits. (They
// used to wait for each other on the config_version row.)
func TestCreatesOfDifferentOwnersCommitInParallel(t *testing.T) {
	t.Parallel()
	pool, _ := setup(t)
	ctx := context.Background()
	s := newStore(t, pool)

	aliceTx, _ := beginOn(t, pool)
	a, _, err := s.In(aliceTx).CreateSource(ctx, definitions.Actor{Owner: "alice"}, fileSource("alices"))
	if err != nil {
		t.Fatal(err)
	}
	bobTx, bobPID := beginOn(t, pool)
	var b *definitions.Source
	completesWithoutWaiting(t, pool, aliceTx, bobTx, bobPID, func(tx pgx.Tx) error {
		var err error
		if b, _, err = s.In(tx).CreateSource(ctx, definitions.Actor{Owner: "bob"}, fileSource("bobs")); err != nil {
			return err
		}
		return tx.Commit(ctx)
	})
	if err := aliceTx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if a.Version == b.Version {
		t.Errorf("alice's and bob's creates have the same version %d", a.Version)
	}
	for _, name := range []string{"alices", "bobs"} {
		if _, err := definitions.Lookup(ctx, pool, name); err != nil {
			t.Errorf("source %s after both commits: %v", name, err)
		}
	}
}

// A follower never misses a change, even one that commits after a change
// with a larger version it already applied: alice's create takes its
// version first and commits last.
func TestFollowerSeesAChangeCommittedLateWithASmallerVersion(t *testing.T) {
	t.Parallel()
	pool, dir := setup(t)
	apply(t, pool, dir)
	cfg, err := config.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var got []*definitions.Delta
	f := definitions.NewFollower(pool, &cfg.Global, func(_ context.Context, d *definitions.Delta) error {
		got = append(got, d)
		return nil
	})
	if _, err := f.CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
	s := newStore(t, pool)

	aliceTx, _ := beginOn(t, pool)
	early, _, err := s.In(aliceTx).CreateSource(ctx, definitions.Actor{Owner: "alice"}, fileSource("early"))
	if err != nil {
		t.Fatal(err)
	}
	bobTx, bobPID := beginOn(t, pool)
	var late *definitions.Source
	completesWithoutWaiting(t, pool, aliceTx, bobTx, bobPID, func(tx pgx.Tx) error {
		var err error
		if late, _, err = s.In(tx).CreateSource(ctx, definitions.Actor{Owner: "bob"}, fileSource("late")); err != nil {
			return err
		}
		return tx.Commit(ctx)
	})
	if early.Version >= late.Version {
		t.Fatalf("versions: early %d, late %d; want early < late", early.Version, late.Version)
	}

	names := func(d *definitions.Delta) []string {
		var out []string
		for _, s := range d.Sources {
			out = append(out, s.Row.Name)
		}
		return out
	}
	d, err := f.CatchUp(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d == nil || d.Full || fmt.Sprint(names(d)) != "[late]" || d.To != late.Version {
		t.Fatalf("catch-up after bob's commit = %+v, want a delta of late to version %d", d, late.Version)
	}
	if behind, err := f.Behind(ctx, pool); err != nil || behind {
		t.Errorf("Behind before alice's commit = %v, %v; want false", behind, err)
	}

	if err := aliceTx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if behind, err := f.Behind(ctx, pool); err != nil || !behind {
		t.Errorf("Behind after alice's commit = %v, %v; want true", behind, err)
	}
	d, err = f.CatchUp(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d == nil || d.Full || fmt.Sprint(names(d)) != "[early]" {
		t.Fatalf("catch-up after alice's commit = %+v, want a delta of early (version %d, committed after version %d)", d, early.Version, late.Version)
	}
	if d.To != late.Version || f.Version() != late.Version {
		t.Errorf("version after the late commit: delta to %d, follower %d; want %d (the highest applied)", d.To, f.Version(), late.Version)
	}
	if behind, err := f.Behind(ctx, pool); err != nil || behind {
		t.Errorf("Behind after the catch-up = %v, %v; want false", behind, err)
	}
}

// Watches of different owners on one shared source are created in
// parallel too: while alice's create of a watch on blog is open, bob's
// completes. (The source's row was locked FOR UPDATE by each.)
func TestWatchCreatesOnASharedSourceCommitInParallel(t *testing.T) {
	t.Parallel()
	pool, dir := setup(t)
	apply(t, pool, dir)
	ctx := context.Background()
	s := newStore(t, pool)

	aliceTx, _ := beginOn(t, pool)
	if _, err := s.In(aliceTx).CreateWatch(ctx, definitions.Actor{Owner: "alice"}, "blog", []byte(`{"name": "alices"}`)); err != nil {
		t.Fatal(err)
	}
	bobTx, bobPID := beginOn(t, pool)
	completesWithoutWaiting(t, pool, aliceTx, bobTx, bobPID, func(tx pgx.Tx) error {
		if _, err := s.In(tx).CreateWatch(ctx, definitions.Actor{Owner: "bob"}, "blog", []byte(`{"name": "bobs"}`)); err != nil {
			return err
		}
		return tx.Commit(ctx)
	})
	if err := aliceTx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	ws, err := definitions.WatchesOf(ctx, pool, "blog")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, w := range ws {
		names = append(names, w.Name)
	}
	if fmt.Sprint(names) != "[alices any bobs]" {
		t.Errorf("watches of blog = %v, want [alices any bobs]", names)
	}
}

// listen LISTENs on the definitions' channel of pool's schema on a
// connection of its own, released when the test ends.
func listen(t *testing.T, pool *pgxpool.Pool) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Release)
	var schema string
	if err := conn.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{definitions.Channel(schema)}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	return conn.Conn()
}

// nextNotification waits (a minute at most) for the next notification on conn.
func nextNotification(t *testing.T, conn *pgx.Conn, what string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := conn.WaitForNotification(ctx)
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
	return n.Payload
}

// A create in a Deferred store sends no NOTIFY in its transaction (whose
// commit would then hold PostgreSQL's NOTIFY queue lock through its WAL
// flush, and every other create's commit would wait for it): the first
// notification after its commit is the marker sent after it, and Wake
// sends one.
func TestDeferredCreateNotifiesOnlyOnWake(t *testing.T) {
	t.Parallel()
	pool, dir := setup(t)
	apply(t, pool, dir)
	ctx := context.Background()
	s := newStore(t, pool)
	l := listen(t, pool)

	tx, _ := beginOn(t, pool)
	w, err := s.Deferred(tx).CreateWatch(ctx, definitions.Actor{Owner: "alice"}, "blog", []byte(`{"name": "alices"}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// Notifications arrive in the order their transactions committed.
	if _, err := pool.Exec(ctx, `SELECT pg_notify(current_schema() || '.config', 'marker')`); err != nil {
		t.Fatal(err)
	}
	if got := nextNotification(t, l, "the marker"); got != "marker" {
		t.Fatalf("first notification after the create's commit = %q, want the marker sent after it: the create's transaction notified", got)
	}
	if err := s.Wake(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := nextNotification(t, l, "the wake-up"), fmt.Sprint(w.Version); got != want {
		t.Errorf("the wake-up's payload = %q, want the last version taken, %s", got, want)
	}
}

// A change on the pool wakes the followers after it committed: the
// notification arrives by the time the create returns.
func TestCreateOnThePoolWakesTheFollowers(t *testing.T) {
	t.Parallel()
	pool, dir := setup(t)
	apply(t, pool, dir)
	ctx := context.Background()
	s := newStore(t, pool)
	l := listen(t, pool)
	w, err := s.CreateWatch(ctx, definitions.Actor{Owner: "alice"}, "blog", []byte(`{"name": "alices"}`))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := nextNotification(t, l, "the wake-up"), fmt.Sprint(w.Version); got != want {
		t.Errorf("the wake-up's payload = %q, want the create's version %s", got, want)
	}
}

// countingTx counts the statements sent through a transaction.
type countingTx struct {
	pgx.Tx
	sent []string
}

func (c *countingTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	c.sent = append(c.sent, sql)
	return c.Tx.Exec(ctx, sql, args...)
}

func (c *countingTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	c.sent = append(c.sent, sql)
	return c.Tx.Query(ctx, sql, args...)
}

func (c *countingTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	c.sent = append(c.sent, sql)
	return c.Tx.QueryRow(ctx, sql, args...)
}

// A watch's create in a Deferred store (the API's) is two statements:
// the source read FOR SHARE and the insert, which takes the config
// version and refuses a name in use (it was four: the version, the
// source, the name's check, the insert). A name in use still gets the
// conflict that names it, and takes one more read.
func TestDeferredCreateWatchIsTwoStatements(t *testing.T) {
	t.Parallel()
	pool, dir := setup(t)
	apply(t, pool, dir)
	ctx := context.Background()
	s := newStore(t, pool)

	tx, _ := beginOn(t, pool)
	ctx1 := &countingTx{Tx: tx}
	w, err := s.Deferred(ctx1).CreateWatch(ctx, definitions.Actor{Owner: "alice"}, "blog", []byte(`{"name": "alices"}`))
	if err != nil {
		t.Fatal(err)
	}
	if len(ctx1.sent) != 2 {
		t.Errorf("a watch's create sent %d statements, want 2:\n%s", len(ctx1.sent), strings.Join(ctx1.sent, "\n"))
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	var v int64
	if err := pool.QueryRow(ctx, `SELECT last_value FROM config_version_seq`).Scan(&v); err != nil {
		t.Fatal(err)
	}
	if w.Version != v || w.Owner != "alice" || w.ManagedBy != definitions.ManagedByAPI {
		t.Errorf("created %+v, want version %d (the last taken), owner alice, managed by the API", w, v)
	}

	tx2, _ := beginOn(t, pool)
	_, err = s.Deferred(tx2).CreateWatch(ctx, definitions.Actor{Owner: "alice"}, "blog", []byte(`{"name": "alices"}`))
	var ce *definitions.ConflictError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), `you already have watch "alices" of source "blog"`) {
		t.Errorf("a second create of the name: %v, want the conflict naming alice's watch", err)
	}
	_, err = s.Deferred(tx2).CreateWatch(ctx, definitions.Actor{Owner: "bob"}, "blog", []byte(`{"name": "alices"}`))
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), `watch name "alices" is not available on source "blog"`) || strings.Contains(err.Error(), "alice'") {
		t.Errorf("another owner's create of the name: %v, want the conflict that does not say whose it is", err)
	}
}

// A watch's create on a source an earlier create read is one statement
// (queryCreateWatchOnSource: the source's lock FOR SHARE and the insert),
// and only while the source is as read: a source whose definition
// changed, orphaned, or given to another owner since (here by an
// operator's SQL, which nothing in this process saw) is read again, and
// the create answers as a create that read it first (created against the
// new definition, refused as orphaned, not found).
func TestCreateWatchOnAKnownSourceIsOneStatement(t *testing.T) {
	t.Parallel()
	pool, dir := setup(t)
	apply(t, pool, dir)
	ctx := context.Background()
	s := newStore(t, pool)
	create := func(name string) (*definitions.Watch, []string, error) {
		t.Helper()
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		c := &countingTx{Tx: tx}
		w, err := s.Deferred(c).CreateWatch(ctx, definitions.Actor{Owner: "alice"}, "blog", []byte(`{"name": "`+name+`"}`))
		end := tx.Commit
		if err != nil {
			end = tx.Rollback // its lock on the source goes with it
		}
		if err := end(ctx); err != nil {
			t.Fatal(err)
		}
		return w, c.sent, err
	}
	exec := func(sql string) {
		t.Helper()
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}

	if _, sent, err := create("first"); err != nil || len(sent) != 2 {
		t.Fatalf("the first create on blog: %v, %d statements, want 2 (the source's read, the insert):\n%s", err, len(sent), strings.Join(sent, "\n"))
	}
	w, sent, err := create("second")
	if err != nil || len(sent) != 1 || !strings.Contains(sent[0], "FOR SHARE") || !strings.Contains(sent[0], "INSERT INTO watches") {
		t.Fatalf("the second create on blog: %v, %d statements, want 1 (the source's lock and the insert):\n%s", err, len(sent), strings.Join(sent, "\n"))
	}
	if w.Source != "blog" || w.Name != "second" || w.Owner != "alice" || w.ManagedBy != definitions.ManagedByAPI || w.Version == 0 {
		t.Errorf("created %+v, want alice's watch second of blog, managed by the API, with a version", w)
	}
	if n := count(t, pool, `SELECT count(*) FROM watches WHERE source = 'blog' AND name = 'second' AND owner = 'alice'`); n != 1 {
		t.Errorf("watches second of alice: %d, want 1", n)
	}

	// A name in use: the statement inserts nothing, the create reads the
	// source and names the holder, as before.
	_, _, err = create("second")
	var ce *definitions.ConflictError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), `you already have watch "second" of source "blog"`) {
		t.Errorf("a second create of the name: %v, want the conflict naming alice's watch", err)
	}

	// The source changed since it was read: read again, and the create
	// made; the next one is one statement again.
	exec(`UPDATE source_definitions SET definition_hash = 'changed' WHERE name = 'blog'`)
	if _, sent, err := create("third"); err != nil || len(sent) != 3 {
		t.Errorf("a create on a changed source: %v, %d statements, want 3 (the one that inserted nothing, the read, the insert):\n%s", err, len(sent), strings.Join(sent, "\n"))
	}
	if _, sent, err := create("fourth"); err != nil || len(sent) != 1 {
		t.Errorf("the create after it: %v, %d statements, want 1", err, len(sent))
	}

	// Orphaned since: refused, nothing created.
	exec(`UPDATE source_definitions SET orphaned_at = now() WHERE name = 'blog'`)
	if _, _, err := create("fifth"); !errors.As(err, &ce) || !strings.Contains(err.Error(), "is orphaned") {
		t.Errorf("a create on a source orphaned since: %v, want the orphaned conflict", err)
	}
	// Another owner's since: not found, nothing created.
	exec(`UPDATE source_definitions SET orphaned_at = NULL, owner = 'carol' WHERE name = 'blog'`)
	if _, _, err := create("sixth"); !errors.Is(err, definitions.ErrNotFound) {
		t.Errorf("a create on a source carol's since: %v, want not found", err)
	}
	if n := count(t, pool, `SELECT count(*) FROM watches WHERE name IN ('fifth', 'sixth')`); n != 0 {
		t.Errorf("watches created on the orphaned or unseen source: %d, want 0", n)
	}
}
