package watchdog

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/definitions"
	"github.com/lookout-dev/lookout/internal/notify"
	"github.com/lookout-dev/lookout/internal/pgtest"
)

// followSetup is a watchdog that follows the definitions, as the
// evaluator wires it: no Config.Sources, every change of the definitions
// handed to Apply by a Follower.
type followSetup struct {
	*setup
	follower *definitions.Follower
	store    *definitions.Store
}

func newFollowSetup(t *testing.T, global string, sources ...string) *followSetup {
	t.Helper()
	s := newSetup(t, global, sources...)
	conf := FromConfig(s.cfg)
	conf.Sources = nil // from the definitions
	conf.Metrics = s.m
	s.dog = New(s.pool, conf, slog.New(slog.DiscardHandler))
	f := &followSetup{setup: s,
		follower: definitions.NewFollower(s.pool, &s.cfg.Global, s.dog.Apply),
		store:    definitions.NewStore(s.pool, &definitions.Validator{Global: &s.cfg.Global})}
	f.reload()
	return f
}

// reload loads the configuration directory, applies it to the
// definitions (what the reloader does on a file change or SIGHUP) and
// lets the follower catch up.
func (f *followSetup) reload() {
	f.t.Helper()
	cfg, err := config.Load(f.dir)
	if err != nil {
		f.t.Fatal(err)
	}
	if _, err := definitions.Apply(context.Background(), f.pool, cfg, definitions.ApplyOptions{Force: true}); err != nil {
		f.t.Fatal(err)
	}
	f.catchUp()
}

func (f *followSetup) catchUp() {
	f.t.Helper()
	if _, err := f.follower.CatchUp(context.Background()); err != nil {
		f.t.Fatal(err)
	}
}

func (f *followSetup) writeSource(name, body string) {
	f.t.Helper()
	if err := os.WriteFile(filepath.Join(f.dir, "sources", name+".yaml"), []byte(body), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

func (f *followSetup) payload(dedupePrefix string) notify.Payload {
	f.t.Helper()
	var raw []byte
	if err := f.pool.QueryRow(context.Background(), `SELECT payload FROM notifications WHERE dedupe_key LIKE $1 || '%' AND sink = 'log'`, dedupePrefix).
		Scan(&raw); err != nil {
		f.t.Fatalf("the alert %s: %v", dedupePrefix, err)
	}
	var p notify.Payload
	if err := json.Unmarshal(raw, &p); err != nil {
		f.t.Fatal(err)
	}
	return p
}

// A source created through the API (the definitions' Store, as the
// control plane calls it), registered by a syncer and without a
// successful run past its window, raises a stale alert naming its owner;
// the stale window is computed from its definition as for a file.
func TestStaleSourceCreatedThroughTheAPI(t *testing.T) {
	t.Parallel()
	f := newFollowSetup(t, testGlobal, "tasks")
	f.addSource("tasks", `last_success_at = now()`)
	ctx := context.Background()
	alice := definitions.Actor{Owner: "alice"}
	if _, _, err := f.store.CreateSource(ctx, alice, []byte(`{"name": "alice-feed", "connector": "file", "file": {"paths": ["a.json"]},
		"every": "10m", "stale_after": "30m"}`)); err != nil {
		t.Fatal(err)
	}
	f.catchUp()
	if got := f.dog.Covered(); !slices.Equal(got, []string{"alice-feed", "tasks"}) {
		t.Fatalf("covered %v, want the file source and the API's", got)
	}
	// The syncer registered it a day ago; its last success was an hour ago.
	f.addSource("alice-feed", `last_success_at = now() - interval '1 hour', last_run_at = now() - interval '1 minute', failure_count = 3,
		last_error = '503 Service Unavailable'`)

	res := f.check()
	if got := kinds(res); !slices.Equal(got, []string{"stale:alice-feed"}) {
		t.Fatalf("raised %v, want [stale:alice-feed]", got)
	}
	a := res.Raised[0]
	if !strings.Contains(a.Title, "stale_after 30m0s") || !strings.Contains(a.Body, "Source of alice (managed by api).") ||
		!strings.Contains(a.Body, "503 Service Unavailable") {
		t.Errorf("alert: %q\n%s", a.Title, a.Body)
	}
	p := f.payload("alert/stale/alice-feed/")
	if p.Alert == nil || p.Alert.Details["source_owner"] != "alice" || p.Alert.Details["managed_by"] != "api" ||
		p.Alert.Details["stale_after_seconds"] != float64(1800) {
		t.Errorf("payload alert = %+v", p.Alert)
	}
	// Alerts stay the operator's: the row has no owner (the API lists
	// alerts to admins only).
	if n := f.count(`SELECT count(*) FROM notifications WHERE kind = 'alert' AND owner <> ''`); n != 0 {
		t.Errorf("%d alert rows carry an owner", n)
	}

	// Paused through the API: not covered; deleted: not covered.
	if _, err := f.store.PauseSource(ctx, alice, "alice-feed", true, "holiday"); err != nil {
		t.Fatal(err)
	}
	f.catchUp()
	if got := f.dog.Covered(); !slices.Equal(got, []string{"tasks"}) {
		t.Errorf("covered %v after the pause, want [tasks]", got)
	}
	if _, err := f.store.PauseSource(ctx, alice, "alice-feed", false, ""); err != nil {
		t.Fatal(err)
	}
	f.catchUp()
	if got := f.dog.Covered(); !slices.Equal(got, []string{"alice-feed", "tasks"}) {
		t.Errorf("covered %v after the resume", got)
	}
	if err := f.store.DeleteSource(ctx, alice, "alice-feed"); err != nil {
		t.Fatal(err)
	}
	f.catchUp()
	if got := f.dog.Covered(); !slices.Equal(got, []string{"tasks"}) {
		t.Errorf("covered %v after the delete, want [tasks]", got)
	}
	// Its row is left in sources, stale again (a new instance): no alert.
	f.exec(`UPDATE sources SET last_success_at = now() - interval '2 hours' WHERE name = 'alice-feed'`)
	if res := f.check(); len(res.Raised) != 0 {
		t.Errorf("a deleted source raised %v", kinds(res))
	}
}

// A file source added to the configuration directory and reloaded is
// covered; a file source removed is not checked any more, however stale
// its row in sources.
func TestStaleCheckFollowsReloads(t *testing.T) {
	t.Parallel()
	f := newFollowSetup(t, testGlobal, "kept", "dropped")
	f.addSource("kept", `last_success_at = now()`)
	f.addSource("dropped", `last_success_at = now()`)
	if got := f.dog.Covered(); !slices.Equal(got, []string{"dropped", "kept"}) {
		t.Fatalf("covered %v", got)
	}

	f.writeSource("added", "name: added\nconnector: file\nfile:\n  paths: [x.json]\nevery: 1m\n")
	if err := os.Remove(filepath.Join(f.dir, "sources", "dropped.yaml")); err != nil {
		t.Fatal(err)
	}
	f.reload()
	if got := f.dog.Covered(); !slices.Equal(got, []string{"added", "kept"}) {
		t.Fatalf("covered %v after the reload, want [added kept]", got)
	}
	f.addSource("added", `last_success_at = now() - interval '3 hours'`)
	f.exec(`UPDATE sources SET last_success_at = now() - interval '3 hours' WHERE name = 'dropped'`)
	res := f.check()
	if got := kinds(res); !slices.Equal(got, []string{"stale:added"}) {
		t.Fatalf("raised %v, want the added source only", got)
	}
	if p := f.payload("alert/stale/added/"); p.Alert.Details["managed_by"] != "file:sources/added.yaml" || p.Alert.Details["source_owner"] != nil {
		t.Errorf("details %v", p.Alert.Details)
	}

	// An edit of the window is followed too: kept's own stale_after.
	f.writeSource("kept", "name: kept\nconnector: file\nfile:\n  paths: [x.json]\nevery: 1m\nstale_after: 10m\n")
	f.reload()
	f.exec(`UPDATE sources SET last_success_at = now() - interval '20 minutes' WHERE name = 'kept'`)
	if got := kinds(f.check()); !slices.Equal(got, []string{"stale:kept"}) {
		t.Errorf("raised %v after kept's stale_after became 10m", got)
	}
}

// A definition no syncer registered in the sources table (no syncer runs,
// or none accepts it) is stale once its window has passed since it was
// defined: a source that never runs is not silent.
func TestStaleDefinitionNeverRegistered(t *testing.T) {
	t.Parallel()
	f := newFollowSetup(t, testGlobal, "tasks")
	f.addSource("tasks", `last_success_at = now()`)
	if _, _, err := f.store.CreateSource(context.Background(), definitions.Actor{Owner: "bob"},
		[]byte(`{"name": "orphan", "connector": "file", "file": {"paths": ["a.json"]}}`)); err != nil {
		t.Fatal(err)
	}
	f.catchUp()
	if res := f.check(); len(res.Raised) != 0 {
		t.Fatalf("a definition made a moment ago raised %v", kinds(res))
	}
	// Defined three hours ago: catch up on a fresh follower (a restart).
	f.exec(`UPDATE source_definitions SET created_at = now() - interval '3 hours' WHERE name = 'orphan'`)
	f.follower = definitions.NewFollower(f.pool, &f.cfg.Global, f.dog.Apply)
	f.catchUp()
	res := f.check()
	if got := kinds(res); !slices.Equal(got, []string{"stale:orphan"}) {
		t.Fatalf("raised %v, want [stale:orphan]", got)
	}
	a := res.Raised[0]
	if !strings.Contains(a.Title, "source orphan is stale: never run in the 3h0m") ||
		!strings.Contains(a.Body, "no syncer has registered it in the sources table") || a.Details["source_owner"] != "bob" {
		t.Errorf("alert: %q\n%s\n%v", a.Title, a.Body, a.Details)
	}
	if res := f.check(); len(res.Raised) != 0 {
		t.Errorf("second check raised %v", kinds(res))
	}
	// A syncer registers it and runs it: not stale, and once seen
	// registered it is not asked about again.
	f.addSource("orphan", `last_success_at = now()`)
	if res := f.check(); len(res.Raised) != 0 {
		t.Errorf("the registered source raised %v", kinds(res))
	}
	if _, probe, _, _ := f.dog.cov.plan(time.Now()); len(probe) != 0 {
		t.Errorf("still probing %v for a row in sources", probe)
	}
}

// The default stale window of a cron source is the one StaleAfterFor
// computes, reused within the hour and computed again after it; the
// shortest window of the covered sources follows the definitions.
func TestCronWindowIsReused(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC) // a Friday
	weekdays := &config.Source{Name: "w", Cron: "0 9 * * 1-5", Timezone: "UTC"}
	want := (&config.Alerts{}).StaleAfterFor(weekdays, now)
	if want != 3*72*time.Hour {
		t.Fatalf("StaleAfterFor = %s, want 3 x the weekend (216h)", want)
	}
	var c coverage
	c.init([]*config.Source{weekdays}, 0)
	if shortest, _, _, ok := c.plan(now); !ok || shortest != want {
		t.Errorf("shortest = %s (%v), want %s", shortest, ok, want)
	}
	if _, win, ok := c.lookup("w", now); !ok || win != want {
		t.Errorf("window = %s (%v), want %s", win, ok, want)
	}
	// A cached value is kept within the hour, computed again after it.
	c.cron[cronSpec{weekdays.Cron, weekdays.Timezone}] = cronWindow{window: time.Minute, at: now}
	if _, win, _ := c.lookup("w", now.Add(30*time.Minute)); win != time.Minute {
		t.Errorf("within the hour: %s, want the cached 1m0s", win)
	}
	if _, win, _ := c.lookup("w", now.Add(cronWindowTTL)); win != want {
		t.Errorf("after the hour: %s, want %s", win, want)
	}
	// A source with a shorter window lowers the shortest at the next plan.
	c.apply(&definitions.Delta{Sources: []*definitions.SourceDef{{Row: definitions.Source{Name: "m"}, Config: &config.Source{Name: "m", Every: time.Minute}}}})
	if shortest, _, _, _ := c.plan(now.Add(cronWindowTTL)); shortest != config.StaleAfterFloor {
		t.Errorf("shortest = %s after adding an every-1m source, want %s", shortest, config.StaleAfterFloor)
	}
	// alerts.stale_after wins over the schedule.
	c.init([]*config.Source{weekdays}, 2*time.Hour)
	if _, win, _ := c.lookup("w", now); win != 2*time.Hour {
		t.Errorf("with alerts.stale_after: %s", win)
	}
}

// BenchmarkStaleCheck100k: one check (every query of the watchdog; the
// stale one with 100,000 covered sources passed as arrays) over 100,000
// active sources, 1% of them stale. The first check raises their alerts;
// the measured ones find the dedupe keys and write nothing.
func BenchmarkStaleCheck100k(b *testing.B) {
	const n = 100_000
	pool := pgtest.Pool(b)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `INSERT INTO sources (name, connector, config_hash, created_at, next_run_at, last_success_at)
		SELECT 's' || i, 'file', 'h', now() - interval '1 day', now() + interval '1 minute',
		       CASE WHEN i % 100 = 0 THEN now() - interval '3 hours' ELSE now() END
		FROM generate_series(1, $1) i`, n); err != nil {
		b.Fatal(err)
	}
	d := &definitions.Delta{Full: true}
	for i := range n {
		name := "s" + strconv.Itoa(i+1)
		src := &config.Source{Name: name, Every: time.Minute}
		if i%10 == 0 {
			src.Every, src.Cron, src.Timezone = 0, "0 9 * * 1-5", "Europe/Paris"
		}
		d.Sources = append(d.Sources, &definitions.SourceDef{Row: definitions.Source{Name: name, Owner: "o", ManagedBy: "api"}, Config: src})
	}
	dog := New(pool, Config{Enabled: true, Notify: []string{"log"}, Interval: time.Minute}, slog.New(slog.DiscardHandler))
	if err := dog.Apply(ctx, d); err != nil {
		b.Fatal(err)
	}
	res, err := dog.Check(ctx)
	if err != nil || len(res.Raised) != n/100 {
		b.Fatalf("first check raised %d alerts (%v), want %d", len(res.Raised), err, n/100)
	}
	b.ResetTimer()
	for b.Loop() {
		res, err := dog.Check(ctx)
		if err != nil || len(res.Raised) != 0 {
			b.Fatalf("check raised %d (%v)", len(res.Raised), err)
		}
	}
}
