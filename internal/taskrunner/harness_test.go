package taskrunner_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/connectors/conntest"
	"github.com/lookout-dev/lookout/internal/connectors/notion/notiontest"
	"github.com/lookout-dev/lookout/internal/pgtest"
	"github.com/lookout-dev/lookout/internal/redact"
	"github.com/lookout-dev/lookout/internal/syncer"
	"github.com/lookout-dev/lookout/internal/taskrunner"
	"github.com/lookout-dev/lookout/internal/tasks"
	"github.com/lookout-dev/lookout/internal/testsignal"

	_ "github.com/lookout-dev/lookout/internal/connectors/all"
)

func TestMain(m *testing.M) {
	os.Setenv("LOOKOUT_TEST_NOTION_TOKEN", "secret_test")
	os.Setenv("LOOKOUT_TEST_AGENT_SECRET", "whsec_c2VjcmV0LWtleS1vZi10aGUtYWdlbnQ=")
	os.Exit(m.Run())
}

// taskProps is the seed's task database.
func taskProps() []notiontest.Property {
	return []notiontest.Property{
		{Name: "Name", Type: "title"},
		{Name: "Status", Type: "status", Options: []string{"Todo", "InProgress", "Complete", "Failed", "Blocked"}},
		{Name: "Priority", Type: "number"},
		{Name: "ClaimedBy", Type: "rich_text"},
		{Name: "ClaimedAt", Type: "date"},
		{Name: "ClaimExpiresAt", Type: "date"},
		{Name: "RunId", Type: "rich_text"},
		{Name: "RetryCount", Type: "number"},
		{Name: "LastError", Type: "rich_text"},
		{Name: "CompletedAt", Type: "date"},
	}
}

// world is a task database in the fake Notion API, an agent script and a
// configuration directory with a notion source whose task watch runs it.
type world struct {
	t     testing.TB
	pool  *pgxpool.Pool
	url   string
	fake  *notiontest.Server
	agent *agent
	dir   string
	logs  *syncBuffer
	// now is the clock of the fake, the syncers and the task runners
	// (options.now); nil for time.Now.
	now func() time.Time
}

// options change the source file.
type options struct {
	// task is the task watch's YAML (indented under "  - "), without the
	// executor, which is the agent's command unless it sets one.
	task string
	// fields is the fields: block ("" declares extra.priority).
	fields string
	// lookout is lookout.yaml.
	lookout string
	// mode is the agent's behaviour.
	mode string
	// every is the source's schedule. Defaults to 1h.
	every string
	// extra is appended to the source file (watches:).
	extra string
	// rate is the source's rate_limit. Defaults to 1000/s.
	rate string
	// now is the clock of the fake API (the times it records requests
	// at), the syncers (host budgets and blocks) and the task runners.
	// Defaults to time.Now.
	now func() time.Time
}

func newWorld(t testing.TB, o options) *world {
	t.Helper()
	_, url := pgtest.Schema(t)
	w := &world{t: t, url: url, pool: pgtest.PoolFor(t, url), fake: notiontest.New(t, taskProps()...), logs: &syncBuffer{}, now: o.now}
	if o.now != nil {
		w.fake.SetNow(o.now)
	}
	w.agent = newAgent(t, o.mode)
	if o.task == "" {
		o.task = "name: execute\n    when: record.status == \"Todo\"\n    order: [extra.priority desc, created_at asc]\n    lease: 30s\n    timeout: 10s\n    backoff: {min: 1ms, max: 1ms}\n"
	}
	if !strings.Contains(o.task, "command:") && !strings.Contains(o.task, "webhook:") {
		o.task += fmt.Sprintf("    command: [%s]\n", w.agent.script)
	}
	if o.fields == "" {
		o.fields = "fields:\n  extra:\n    priority: item.properties.Priority\n"
	}
	if o.lookout == "" {
		o.lookout = "defaults:\n  host_rate_limit: {per_second: 1000, burst: 1000}\n"
	}
	o.lookout = strings.ReplaceAll(o.lookout, "FAKE_HOST", strings.TrimPrefix(w.fake.URL, "http://"))
	if o.every == "" {
		o.every = "1h"
	}
	if o.rate == "" {
		o.rate = "{per_second: 1000, burst: 1000}"
	}
	src := fmt.Sprintf(`name: tasks
connector: notion
every: %s
rate_limit: %s
notion:
  database: %s
  token: ${LOOKOUT_TEST_NOTION_TOKEN}
  base_url: %s
  task: {}
%stasks:
  - %s%s`, o.every, o.rate, strings.ReplaceAll(w.fake.DatabaseID, "-", ""), w.fake.URL, o.fields, o.task, o.extra)
	w.dir = conntest.WriteConfig(t, map[string]string{"lookout.yaml": o.lookout, "sources/tasks.yaml": src})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("logs:\n%s", w.logs.String())
		}
	})
	return w
}

// addTask adds a Todo task with a priority.
func (w *world) addTask(name string, priority float64) string {
	return w.fake.AddPage(map[string]any{"Name": notiontest.Title(name), "Status": notiontest.Status("Todo"),
		"Priority": notiontest.Number(priority)})
}

// replica is one syncer with its task runner.
type replica struct {
	name   string
	syncer *syncer.Syncer
	runner *taskrunner.Runner
	passes atomic.Int64
}

// replica builds a syncer and a task runner named name on pool (the
// world's when nil); tweak changes the runner's settings.
func (w *world) replica(name string, pool *pgxpool.Pool, tweak func(*taskrunner.Config)) *replica {
	w.t.Helper()
	if pool == nil {
		pool = w.pool
	}
	cfg, err := config.Load(w.dir)
	if err != nil {
		w.t.Fatalf("load config: %v", err)
	}
	// Through the redaction handler, as the daemon logs (cli.Env.Logger).
	logger := slog.New(redact.NewHandler(slog.NewTextHandler(w.logs, &slog.HandlerOptions{Level: slog.LevelDebug}),
		redact.New("harness-secret"))).With("replica", name)
	rep := &replica{name: name}
	sc := syncer.FromConfig(cfg)
	sc.Owner = name
	sc.PollInterval = 20 * time.Millisecond
	if w.now != nil {
		sc.Now = w.now
	}
	sc.AfterRun = func(source string, runID int64) {
		rep.passes.Add(1)
		rep.runner.AfterRun(source, runID)
	}
	if rep.syncer, err = syncer.New(pool, sc, logger); err != nil {
		w.t.Fatalf("build syncer: %v", err)
	}
	tc := taskrunner.FromConfig(cfg)
	tc.Owner = "lookout@" + name
	tc.Tick = 20 * time.Millisecond
	tc.Grace = 50 * time.Millisecond
	if w.now != nil {
		tc.Now = w.now
	}
	if tweak != nil {
		tweak(&tc)
	}
	if rep.runner, err = taskrunner.New(pool, tc, rep.syncer, logger); err != nil {
		w.t.Fatalf("build task runner: %v", err)
	}
	if err := rep.syncer.Register(context.Background()); err != nil {
		w.t.Fatalf("register: %v", err)
	}
	w.t.Cleanup(rep.runner.Wait)
	return rep
}

// start runs the replica's syncer and task runner as daemons until the
// test ends.
func (w *world) start(rep *replica) {
	w.t.Helper()
	ctx := context.Background()
	if err := rep.runner.Start(ctx); err != nil {
		w.t.Fatal(err)
	}
	if err := rep.syncer.Start(ctx); err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() {
		_ = rep.syncer.Stop()
		_ = rep.runner.Stop()
	})
}

// sync makes the source due, runs it on rep, then its pass, and waits
// for the task runs the pass started (the way `syncer once` does).
func (w *world) sync(rep *replica) {
	w.t.Helper()
	w.mirror(rep)
	ctx, cancel := context.WithTimeout(context.Background(), testsignal.Timeout())
	defer cancel()
	rep.runner.Once(ctx)
}

// mirror makes the source due and runs it on rep; its pass is due then,
// and runs at the next rep.runner.Once.
func (w *world) mirror(rep *replica) {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testsignal.Timeout())
	defer cancel()
	if _, err := w.pool.Exec(ctx, `UPDATE sources SET next_run_at = now() - interval '1 second', run_requested_at = now()`); err != nil {
		w.t.Fatal(err)
	}
	if n, err := rep.syncer.RunDue(ctx); err != nil || n != 1 {
		w.t.Fatalf("run due: %d runs, %v", n, err)
	}
}

// runs returns the task runs, oldest first.
func (w *world) runs() []*tasks.Run {
	w.t.Helper()
	runs, err := tasks.List(context.Background(), w.pool, "", "", 1000)
	if err != nil {
		w.t.Fatal(err)
	}
	for i, j := 0, len(runs)-1; i < j; i, j = i+1, j-1 {
		runs[i], runs[j] = runs[j], runs[i]
	}
	return runs
}

// run returns the run of record id.
func (w *world) run(id string) *tasks.Run {
	w.t.Helper()
	runs, err := tasks.List(context.Background(), w.pool, "tasks", id, 10)
	if err != nil {
		w.t.Fatal(err)
	}
	if len(runs) != 1 {
		w.t.Fatalf("record %s has %d task runs, want 1", id, len(runs))
	}
	return runs[0]
}

// status is the page's Status in the fake.
func (w *world) status(id string) any { return w.fake.Value(id, "Status") }

// agent is an executor script that logs every task it receives.
type agent struct {
	dir, script, log string
}

// Modes of the agent script.
const (
	modeOK       = "ok"        // prints {"done": true, "id": <record id>}
	modeFail     = "fail"      // stderr "boom", exit 3
	modeNoResult = "noresult"  // exit 0, prints nothing
	modeGarbage  = "garbage"   // exit 0, prints a line that is not JSON
	modeHang     = "hang"      // sleeps past any timeout
	modeHangOnce = "hang-once" // the first call sleeps (its pid in a file), later ones succeed
	modeFailOnce = "fail-once" // the first call exits 3, later ones succeed
	modeNoRetry  = "no-retry"  // exit 2 with {"error": "...", "retry": false}
	modeHangTree = "hang-tree" // starts a child that outlives it (its pid in a file), then hangs
	modeDrafts   = "drafts"    // prints {"done": true, "summary": "draft <n>"}, n counting its calls
)

func newAgent(t testing.TB, mode string) *agent {
	t.Helper()
	dir := t.TempDir()
	a := &agent{dir: dir, script: filepath.Join(dir, "agent.sh"), log: filepath.Join(dir, "calls.jsonl")}
	body := map[string]string{
		modeOK:       `echo "working" >&2; echo '{"done": true}'`,
		"":           `echo '{"done": true}'`,
		modeFail:     `echo "boom: the agent broke" >&2; exit 3`,
		modeNoResult: `exit 0`,
		modeGarbage:  `echo 'all done, boss'`,
		modeHang:     `exec sleep 60`,
		modeHangOnce: `if [ ! -e "$D/first" ]; then : > "$D/first"; echo $$ > "$D/pid"; exec sleep 60; fi; echo '{"done": true}'`,
		modeFailOnce: `if [ ! -e "$D/first" ]; then : > "$D/first"; echo "first attempt fails" >&2; exit 3; fi; echo '{"done": true}'`,
		modeNoRetry:  `echo '{"error": "the task asks for something impossible", "retry": false}'; exit 2`,
		modeHangTree: `sleep 120 & echo $! > "$D/child.tmp" && mv "$D/child.tmp" "$D/child"; wait`,
		modeDrafts:   `n=$(($(cat "$D/n" 2>/dev/null || echo 0) + 1)); echo $n > "$D/n"; echo "{\"done\": true, \"summary\": \"draft $n\"}"`,
	}[mode]
	script := fmt.Sprintf("#!/bin/sh\nD=%q\nin=$(cat)\nprintf '%%s\\n' \"$in\" >> \"$D/calls.jsonl\"\n%s\n", dir, body)
	if err := os.WriteFile(a.script, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return a
}

// calls returns the payloads the agent received, in order.
func (a *agent) calls(t testing.TB) []taskrunner.Payload {
	t.Helper()
	f, err := os.Open(a.log)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []taskrunner.Payload
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var p taskrunner.Payload
		if err := json.Unmarshal(sc.Bytes(), &p); err != nil {
			t.Fatalf("agent input %q: %v", sc.Text(), err)
		}
		out = append(out, p)
	}
	return out
}

// syncBuffer is a bytes.Buffer safe for concurrent writers.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func itoa(n int64) string { return fmt.Sprint(n) }

// clock is a clock a test controls: it runs with time.Now, moved by the
// offsets Advance adds.
type clock struct {
	mu     sync.Mutex
	offset time.Duration
}

// Now returns the clock's time.
func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.offset)
}

// Advance moves the clock d ahead.
func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.offset += d
}
