package evaluator

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/lookout-dev/lookout/internal/changes"
	"github.com/lookout-dev/lookout/internal/definitions"
	"github.com/lookout-dev/lookout/internal/normalize"
)

// A change is judged with every watch committed before it, even a watch
// whose create took its config version before another create the
// evaluator had already applied, and committed after it: the evaluator
// asks in its claim transaction for definitions its follower has not
// seen, not for a higher version.
func TestChangeJudgedWithAWatchCommittedLateWithASmallerVersion(t *testing.T) {
	const source = "tickets"
	const global = "sinks:\n  log: {type: log}\n"
	pool := applied(t, global, map[string]string{"tickets.yaml": `name: tickets
connector: github
github: {repo: acme/app}
every: 1h
watches:
  - name: on-fire
    when: 'record.title contains "fire"'
    notify: [log]
`}, source)
	ctx := context.Background()
	cfg := loadConfig(t, global, nil)
	ev := following(t, pool, cfg)
	if n, err := ev.Drain(ctx); err != nil || n != 1 {
		t.Fatalf("first drain: %d, %v; want 1", n, err)
	}
	store := definitions.NewStore(pool, &definitions.Validator{Global: &cfg.Global})
	watch := func(name string) []byte { return []byte(`{"name": "` + name + `", "when": "true", "notify": ["log"]}`) }

	h, err := normalize.NewHasher(nil)
	if err != nil {
		t.Fatal(err)
	}
	change := func(id string) {
		t.Helper()
		r := rec(id, "record "+id, "open")
		h.Hash(&r)
		if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := changes.Apply(ctx, tx, source, 0, []normalize.Record{r}, h)
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	judgedBy := func(id string) map[string]bool {
		t.Helper()
		rows, err := pool.Query(ctx, `SELECT DISTINCT e.watch FROM evaluations e JOIN changes c ON c.source = e.source AND c.id = e.change_id WHERE c.record_id = $1`, id)
		if err != nil {
			t.Fatal(err)
		}
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]bool{}
		for _, n := range names {
			out[n] = true
		}
		return out
	}

	// Alice's create takes its version and stays open; Bob's, later,
	// commits first and is applied with change 2.
	aliceTx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer aliceTx.Rollback(ctx)
	alices, err := store.In(aliceTx).CreateWatch(ctx, definitions.Actor{Owner: "alice"}, source, watch("alices"))
	if err != nil {
		t.Fatal(err)
	}
	bobs, err := store.CreateWatch(ctx, definitions.Actor{Owner: "bob"}, source, watch("bobs"))
	if err != nil {
		t.Fatal(err)
	}
	if alices.Version >= bobs.Version {
		t.Fatalf("versions: alice's %d, bob's %d; want alice's first", alices.Version, bobs.Version)
	}
	change("2")
	if n, err := ev.Drain(ctx); err != nil || n != 1 {
		t.Fatalf("drain of change 2: %d, %v; want 1", n, err)
	}
	if got := judgedBy("2"); !got["bobs"] || got["alices"] {
		t.Errorf("change 2 judged by %v, want bobs and not alices (not committed)", got)
	}

	if err := aliceTx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	change("3")
	if n, err := ev.Drain(ctx); err != nil || n != 1 {
		t.Fatalf("drain of change 3: %d, %v; want 1", n, err)
	}
	if got := judgedBy("3"); !got["alices"] || !got["bobs"] {
		t.Errorf("change 3 judged by %v, want alices (committed before it, with a version below one applied) and bobs", got)
	}
}
