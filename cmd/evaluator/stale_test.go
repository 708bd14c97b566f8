package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/lookout-dev/lookout/internal/clitest"
	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/connectors/conntest"
	"github.com/lookout-dev/lookout/internal/definitions"
	"github.com/lookout-dev/lookout/internal/notify"
	"github.com/lookout-dev/lookout/internal/pgtest"
)

// `evaluator run`'s watchdog checks the staleness of the sources of the
// definitions as they are now: a source created through the API while it
// runs, a file source added by a reload; not a file source removed.
func TestRunStaleCheckFollowsTheDefinitions(t *testing.T) {
	_, url := pgtest.Schema(t)
	t.Setenv("DATABASE_URL", url)
	pool := pgtest.PoolFor(t, url)
	ctx := context.Background()
	source := func(name string) string {
		return "name: " + name + "\nconnector: file\nfile: {paths: [x.jsonl]}\nevery: 1m\n"
	}
	dir := conntest.WriteConfig(t, map[string]string{
		"lookout.yaml":         "sinks:\n  log: {type: log}\nalerts: {notify: [log], interval: 1s}\nevaluator: {catch_up_interval: 1s}\n",
		"sources/kept.yaml":    source("kept"),
		"sources/dropped.yaml": source("dropped"),
	})
	count := func(sql string, args ...any) int {
		t.Helper()
		var n int
		if err := pool.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		return n
	}
	alerts := func(source string) int {
		return count(`SELECT count(*) FROM notifications WHERE kind = 'alert' AND dedupe_key LIKE 'alert/stale/' || $1 || '/%'`, source)
	}
	// register writes the sources row a syncer would have written a day
	// ago, with its last success ago.
	const register = `INSERT INTO sources (name, connector, config_hash, created_at, next_run_at, last_success_at)
		VALUES ($1, 'file', 'h', now() - interval '1 day', now(), now() - $2::interval)
		ON CONFLICT (name) DO UPDATE SET last_success_at = excluded.last_success_at`
	for _, name := range []string{"kept", "dropped"} {
		if _, err := pool.Exec(ctx, register, name, "0s"); err != nil {
			t.Fatal(err)
		}
	}
	d := clitest.StartDaemon(t, dir, runDaemon)

	// A source created through the API (the control plane's call) while
	// the evaluator runs, registered, its last success 3 hours ago.
	cfg, err := config.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	store := definitions.NewStore(pool, &definitions.Validator{Global: &cfg.Global})
	if _, _, err := store.CreateSource(ctx, definitions.Actor{Owner: "alice"},
		[]byte(`{"name": "alice-feed", "connector": "file", "file": {"paths": ["a.json"]}, "every": "10m", "jitter": "0s"}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, register, "alice-feed", "3 hours"); err != nil {
		t.Fatal(err)
	}
	d.WaitFor("the stale alert of the API's source", func() bool { return alerts("alice-feed") > 0 })
	var raw []byte
	if err := pool.QueryRow(ctx, `SELECT payload FROM notifications WHERE dedupe_key LIKE 'alert/stale/alice-feed/%'`).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	var p notify.Payload
	if err := json.Unmarshal(raw, &p); err != nil || p.Alert == nil || p.Alert.Details["source_owner"] != "alice" ||
		p.Alert.Details["stale_after_seconds"] != float64(1800) {
		t.Errorf("payload %s (%v): want source_owner alice and 3 x every (10m, no jitter)", raw, err)
	}

	// A reload: added appears, dropped goes.
	conntest.WriteFile(t, filepath.Join(dir, "sources", "added.yaml"), source("added"))
	if err := os.Remove(filepath.Join(dir, "sources", "dropped.yaml")); err != nil {
		t.Fatal(err)
	}
	d.WaitFor("the reload in the definitions", func() bool {
		return count(`SELECT count(*) FROM source_definitions WHERE name IN ('added', 'dropped')`) == 1 &&
			count(`SELECT count(*) FROM source_definitions WHERE name = 'added'`) == 1
	})
	version := count(`SELECT last_value FROM config_version_seq`)
	d.WaitFor("the evaluator at the reloaded version", func() bool {
		_, m := d.Get("/metrics")
		return clitest.Value(m, "lookout_config_version") >= float64(version)
	})
	// Both go stale in one transaction: the check that sees added stale
	// sees dropped stale too.
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		for _, name := range []string{"added", "dropped"} {
			if _, err := tx.Exec(ctx, register, name, "3 hours"); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	d.WaitFor("the stale alert of the added source", func() bool { return alerts("added") > 0 })
	if n := alerts("dropped"); n != 0 {
		t.Errorf("the removed source raised %d stale alert(s)", n)
	}
	if n := alerts("kept"); n != 0 {
		t.Errorf("the fresh source raised %d stale alert(s)", n)
	}
}
