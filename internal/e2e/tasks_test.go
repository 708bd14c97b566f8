package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lookout-dev/lookout/internal/clitest"
	"github.com/lookout-dev/lookout/internal/connectors/notion/notiontest"
	"github.com/lookout-dev/lookout/internal/taskrunner"
	"github.com/lookout-dev/lookout/internal/testsignal"
)

// taskAgent is the executor of the task watch: a shell script that
// appends the payload it reads on stdin to calls.jsonl and
// $LOOKOUT_IDEMPOTENCY_KEY to keys, then answers {"done": true} — except
// the first time it is given the task titled "fragile": then it writes
// its pid and hangs (until it is killed).
const taskAgent = `#!/bin/sh
D=%q
in=$(cat)
printf '%%s\n' "$in" >> "$D/calls.jsonl"
printf '%%s\n' "$LOOKOUT_IDEMPOTENCY_KEY" >> "$D/keys"
case "$in" in
*'"title":"fragile"'*)
	if [ ! -e "$D/hung" ]; then
		: > "$D/hung"
		echo $$ > "$D/pid.tmp" && mv "$D/pid.tmp" "$D/pid"
		exec sleep 120
	fi ;;
esac
echo '{"done": true}'
`

// taskProps is the seed's task database, with one more status option a
// person may move a card to.
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

// logsOnFailure is a testsignal.TB that adds the daemons' logs to a
// failure.
type logsOnFailure struct {
	t       *testing.T
	daemons []*clitest.DaemonTest
}

func (l logsOnFailure) Helper() { l.t.Helper() }

func (l logsOnFailure) Fatalf(format string, args ...any) {
	l.t.Helper()
	for i, d := range l.daemons {
		l.t.Logf("daemon %d logs:\n%s", i, d.Logs())
	}
	l.t.Fatalf(format, args...)
}

// lines returns the lines of a file the agent appends to.
func lines(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out
}

// The task queue with the real binaries, as deployed: three `syncer run`
// processes (the task runner lives in the syncer deployment) and an
// `evaluator run` against a fake Notion API served by the test, with a
// task watch whose command appends its idempotency key to a file.
//
//   - take: 1 takes one task per run of the source, in priority order;
//     each eligible task is executed exactly once and is Complete in the
//     tool;
//   - a card a person moves between the claim and its confirmation is not
//     executed (the run is recorded lost) and stays where the person put it;
//   - the syncer holding a claim is killed (SIGKILL) with its executor: the
//     claim expires, another syncer releases it in the tool (Todo,
//     RetryCount 1, LastError), and the task is retried exactly once, the
//     same idempotency key reaching the executor;
//   - the evaluator tells of each completion once.
func TestTaskQueueWithRealBinaries(t *testing.T) {
	t.Parallel()
	// The binaries inherit the environment; the fake's token.
	os.Setenv("LOOKOUT_TEST_NOTION_TOKEN", "secret_test")
	e := newEnv(t)
	ctx := context.Background()
	fake := notiontest.New(t, taskProps()...)
	agentDir := t.TempDir()
	agent := filepath.Join(agentDir, "agent.sh")
	if err := os.WriteFile(agent, []byte(fmt.Sprintf(taskAgent, agentDir)), 0o755); err != nil {
		t.Fatal(err)
	}
	e.write("lookout.yaml", `sinks:
  log: {type: log}
defaults:
  jitter: 0s
  host_rate_limit: {per_second: 1000, burst: 1000}
syncer:
  lease: 3s
  poll_interval: 100ms
  tasks_interval: 1s
  tasks_grace: 1s
evaluator:
  catch_up_interval: 1s
`)
	e.write("sources/tasks.yaml", fmt.Sprintf(`name: tasks
connector: notion
every: 1s
rate_limit: {per_second: 1000, burst: 1000}
notion:
  database: %s
  token: ${LOOKOUT_TEST_NOTION_TOKEN}
  base_url: %s
  task: {}
fields:
  extra:
    priority: item.properties.Priority
tasks:
  - name: execute
    when: record.status == "Todo"
    order: [extra.priority desc, created_at asc]
    take: 1
    lease: 12s
    timeout: 7s
    backoff: {min: 1s, max: 1s}
    command: [%s]
watches:
  - name: completed
    when: changed("status") && record.status == "Complete"
    notify: [log]
`, strings.ReplaceAll(fake.DatabaseID, "-", ""), fake.URL, agent))

	status := func(id string) any { return fake.Value(id, "Status") }
	first := fake.AddPage(map[string]any{"Name": notiontest.Title("first"), "Status": notiontest.Status("Todo"), "Priority": notiontest.Number(3)})
	moved := fake.AddPage(map[string]any{"Name": notiontest.Title("moved"), "Status": notiontest.Status("Todo"), "Priority": notiontest.Number(2)})
	third := fake.AddPage(map[string]any{"Name": notiontest.Title("third"), "Status": notiontest.Status("Todo"), "Priority": notiontest.Number(1)})
	// A person moves "moved" right after lookout's claim is written, before
	// lookout reads it back.
	fake.EditAfterPatch(moved, map[string]any{"Status": notiontest.Status("Blocked")})

	sb := clitest.BuildBinary(t, "github.com/lookout-dev/lookout/cmd/syncer")
	eb := clitest.BuildBinary(t, "github.com/lookout-dev/lookout/cmd/evaluator")
	var syncers []*clitest.DaemonTest
	for range 3 {
		syncers = append(syncers, clitest.StartBinary(t, sb, e.dir, e.url))
	}
	ev := clitest.StartBinary(t, eb, e.dir, e.url)
	tb := logsOnFailure{t: t, daemons: append(slices.Clone(syncers), ev)}

	type taskRun struct {
		title, key, status, claimedBy, lastError, history string
		attempt, executions, failures                     int
		syncRun                                           int64
	}
	runs := func() map[string]taskRun {
		t.Helper()
		rows, err := e.pool.Query(ctx, `SELECT title, idempotency_key, status, claimed_by, coalesce(last_error, ''), history::text,
			attempt, executions, failures, sync_run_id FROM task_runs ORDER BY id`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		out := map[string]taskRun{}
		for rows.Next() {
			var r taskRun
			if err := rows.Scan(&r.title, &r.key, &r.status, &r.claimedBy, &r.lastError, &r.history, &r.attempt, &r.executions,
				&r.failures, &r.syncRun); err != nil {
				t.Fatal(err)
			}
			out[r.title] = r
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}

	// One task per run, in priority order; each executed once; the moved
	// card is not executed.
	testsignal.Eventually(tb, "first and third Complete in the tool, moved recorded lost", func() bool {
		return status(first) == "Complete" && status(third) == "Complete" && runs()["moved"].status == "lost"
	})
	got := runs()
	keys := lines(t, filepath.Join(agentDir, "keys"))
	if want := []string{got["first"].key, got["third"].key}; !slices.Equal(keys, want) {
		t.Errorf("keys the executor received = %q, want %q (first and third, once each)", keys, want)
	}
	for _, title := range []string{"first", "third"} {
		if r := got[title]; r.status != "completed" || r.attempt != 1 || r.executions != 1 {
			t.Errorf("%s: status %s, attempt %d, executions %d; want completed once", title, r.status, r.attempt, r.executions)
		}
	}
	if r := got["moved"]; r.executions != 0 {
		t.Errorf("moved: executed %d times after a person moved it", r.executions)
	}
	if s := status(moved); s != "Blocked" {
		t.Errorf("moved: Status %v in the tool, want Blocked (where the person put it)", s)
	}
	if c := fake.Value(first, "CompletedAt"); c == nil {
		t.Errorf("first: no CompletedAt in the tool")
	}
	var order []string
	syncRuns := map[int64]bool{}
	rows, err := e.pool.Query(ctx, `SELECT title, sync_run_id FROM task_runs ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var title string
		var run int64
		if err := rows.Scan(&title, &run); err != nil {
			t.Fatal(err)
		}
		order, syncRuns[run] = append(order, title), true
	}
	rows.Close()
	if want := []string{"first", "moved", "third"}; !slices.Equal(order, want) || len(syncRuns) != 3 {
		t.Errorf("claims in order %v by %d runs of the source; want %v, one per run (take: 1)", order, len(syncRuns), want)
	}

	// The syncer holding a claim is killed, with its executor.
	fragile := fake.AddPage(map[string]any{"Name": notiontest.Title("fragile"), "Status": notiontest.Status("Todo"), "Priority": notiontest.Number(5)})
	pidFile := filepath.Join(agentDir, "pid")
	testsignal.Eventually(tb, "the executor of fragile to start", func() bool {
		_, err := os.Stat(pidFile)
		return err == nil
	})
	raw, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	agentPid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil {
		t.Fatal(err)
	}
	holder := runs()["fragile"].claimedBy
	var killed *clitest.DaemonTest
	for _, s := range syncers {
		if strings.HasSuffix(holder, ":"+strconv.Itoa(s.Pid())) {
			killed = s
		}
	}
	if killed == nil {
		t.Fatalf("no syncer process holds the claim of fragile (claimed by %s)", holder)
	}
	killed.Kill()
	// Its executor, in a process group of its own, outlived it: a crashed
	// host takes both.
	if err := syscall.Kill(-agentPid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill the executor's process group: %v", err)
	}
	if r := runs()["fragile"]; r.status != "running" {
		t.Fatalf("fragile: %s after its syncer was killed, want running (nobody recorded its end)", r.status)
	}

	// The claim expires (lease 12s), another syncer recovers it, the task is
	// retried once. The bound covers the lease, the grace and two runs.
	testsignal.EventuallyWithin(tb, 60*time.Second, "fragile retried and Complete in the tool", func() bool {
		return status(fragile) == "Complete"
	})
	r := runs()["fragile"]
	var history []struct {
		Status    string `json:"status"`
		LastError string `json:"last_error"`
	}
	if err := json.Unmarshal([]byte(r.history), &history); err != nil {
		t.Fatalf("fragile's history %s: %v", r.history, err)
	}
	// On a busy machine an attempt can also be released before its
	// execution (its claim's confirmation in the tool timed out): such an
	// attempt ran nothing and is no retry; it only moves the attempt count.
	var executed []string
	unexecuted := 0
	for _, h := range history {
		if h.Status == "released" && strings.Contains(h.LastError, "not executed") {
			unexecuted++
			continue
		}
		executed = append(executed, h.Status+": "+h.LastError)
	}
	if r.status != "completed" || r.attempt != 2+unexecuted || r.executions != 2 || r.failures != 1 || r.claimedBy == holder {
		t.Errorf("fragile: status %s, attempt %d (%d released unexecuted), executions %d, failures %d, claimed by %s (the killed one: %s)",
			r.status, r.attempt, unexecuted, r.executions, r.failures, r.claimedBy, holder)
	}
	if len(executed) != 1 || !strings.HasPrefix(executed[0], "expired: ") || !strings.Contains(executed[0], "the claim expired at") {
		t.Errorf("fragile's executed attempts in history: %s, want one expired with the reason", r.history)
	}
	if rc := fake.Value(fragile, "RetryCount"); rc != float64(1) {
		t.Errorf("fragile: RetryCount %v in the tool, want 1", rc)
	}
	// The tool showed the release: Todo, RetryCount 1, LastError.
	released := false
	for _, req := range fake.Requests() {
		if req.Method != "PATCH" || !strings.HasSuffix(req.Path, strings.ReplaceAll(fragile, "-", "")) && !strings.HasSuffix(req.Path, fragile) {
			continue
		}
		var body struct {
			Properties struct {
				Status struct {
					Status struct{ Name string } `json:"status"`
				}
				RetryCount struct{ Number *float64 } `json:"RetryCount"`
				LastError  struct {
					RichText []struct{ Text struct{ Content string } } `json:"rich_text"`
				} `json:"LastError"`
			} `json:"properties"`
		}
		if json.Unmarshal(req.Body, &body) == nil && body.Properties.Status.Status.Name == "Todo" &&
			body.Properties.RetryCount.Number != nil && *body.Properties.RetryCount.Number == 1 &&
			len(body.Properties.LastError.RichText) > 0 && strings.Contains(body.Properties.LastError.RichText[0].Text.Content, "the claim expired at") {
			released = true
		}
	}
	if !released {
		t.Errorf("no PATCH of fragile set Status Todo, RetryCount 1 and LastError with the expired claim")
	}
	var fragileCalls []taskrunner.Payload
	for _, l := range lines(t, filepath.Join(agentDir, "calls.jsonl")) {
		var p taskrunner.Payload
		if err := json.Unmarshal([]byte(l), &p); err != nil {
			t.Fatalf("payload %q: %v", l, err)
		}
		if p.Record["title"] == "fragile" {
			fragileCalls = append(fragileCalls, p)
		}
	}
	if len(fragileCalls) != 2 || fragileCalls[0].IdempotencyKey != r.key || fragileCalls[1].IdempotencyKey != r.key ||
		fragileCalls[1].Attempt != r.attempt || fragileCalls[1].RetryCount != 1 {
		t.Errorf("fragile's executions: %+v; want two with key %s, the second attempt %d with retry_count 1", fragileCalls, r.key, r.attempt)
	}
	keys = lines(t, filepath.Join(agentDir, "keys"))
	if want := []string{got["first"].key, got["third"].key, r.key, r.key}; !slices.Equal(keys, want) {
		t.Errorf("keys the executor received = %q, want %q", keys, want)
	}

	// The evaluator told of each completion once.
	ev.WaitFor("three completions notified", func() bool {
		return e.count(`SELECT count(*) FROM notifications WHERE watch = 'completed'`) >= 3
	})
	var notified []string
	rows, err = e.pool.Query(ctx, `SELECT record_id FROM notifications WHERE watch = 'completed' ORDER BY record_id`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		notified = append(notified, id)
	}
	rows.Close()
	want := []string{first, third, fragile}
	slices.Sort(want)
	if !slices.Equal(notified, want) {
		t.Errorf("completions notified for records %q, want %q (first, third, fragile once each)", notified, want)
	}
	if n := e.count(`SELECT count(*) FROM report_task_runs WHERE executed_more_than_once AND title <> 'fragile'`); n != 0 {
		t.Errorf("report_task_runs: %d tasks other than fragile executed more than once", n)
	}
}

// A person moves a card to Blocked right after lookout's claim landed, and
// lookout's read back is refused (429) with a Retry-After past the time
// the claim has left before its execution must start, against the real
// `syncer run`: the attempt is given up without executing, its release is
// not written over the person's Blocked (the card no longer shows
// lookout's claim), and later runs of the source leave the card alone.
func TestRefusedConfirmLeavesThePersonsMoveWithRealBinaries(t *testing.T) {
	t.Parallel()
	os.Setenv("LOOKOUT_TEST_NOTION_TOKEN", "secret_test")
	e := newEnv(t)
	ctx := context.Background()
	fake := notiontest.New(t, taskProps()...)
	agentDir := t.TempDir()
	agent := filepath.Join(agentDir, "agent.sh")
	if err := os.WriteFile(agent, []byte(fmt.Sprintf(taskAgent, agentDir)), 0o755); err != nil {
		t.Fatal(err)
	}
	e.write("lookout.yaml", `defaults:
  jitter: 0s
  host_rate_limit: {per_second: 1000, burst: 1000}
syncer:
  lease: 3s
  poll_interval: 100ms
  tasks_interval: 1s
  tasks_grace: 1s
`)
	// lease 20s, timeout 16s: the claim and its read back must be done
	// within 2s (the other 2s are the end's margin); Retry-After: 4 is
	// past that.
	e.write("sources/tasks.yaml", fmt.Sprintf(`name: tasks
connector: notion
every: 1s
rate_limit: {per_second: 1000, burst: 1000}
notion:
  database: %s
  token: ${LOOKOUT_TEST_NOTION_TOKEN}
  base_url: %s
  task: {}
tasks:
  - name: execute
    when: record.status == "Todo"
    lease: 20s
    timeout: 16s
    backoff: {min: 1s, max: 1s}
    command: [%s]
`, strings.ReplaceAll(fake.DatabaseID, "-", ""), fake.URL, agent))
	id := fake.AddPage(map[string]any{"Name": notiontest.Title("contested"), "Status": notiontest.Status("Todo")})
	fake.On(notiontest.Rule{Method: "PATCH", Page: id, After: map[string]any{"Status": notiontest.Status("Blocked")},
		Then: &notiontest.Rule{Method: "GET", Page: id, Fail: 429, RetryAfter: 4}})

	sb := clitest.BuildBinary(t, "github.com/lookout-dev/lookout/cmd/syncer")
	d := clitest.StartBinary(t, sb, e.dir, e.url)
	tb := logsOnFailure{t: t, daemons: []*clitest.DaemonTest{d}}

	type taskRun struct {
		status, toolAction, lastError string
		executions                    int
	}
	run := func() (r taskRun, ok bool) {
		err := e.pool.QueryRow(ctx, `SELECT status, coalesce(tool_action, ''), coalesce(last_error, ''), executions FROM task_runs`).
			Scan(&r.status, &r.toolAction, &r.lastError, &r.executions)
		return r, err == nil
	}
	lastSuccess := func() (at time.Time) {
		if err := e.pool.QueryRow(ctx, `SELECT coalesce(last_success_at, '-infinity') FROM sources WHERE name = 'tasks'`).Scan(&at); err != nil {
			t.Fatal(err)
		}
		return at
	}
	// The attempt ends, its tool write settled (written or given up).
	testsignal.EventuallyWithin(tb, 60*time.Second, "the attempt given up, its write to the tool settled", func() bool {
		r, ok := run()
		return ok && !slices.Contains([]string{"claimed", "confirming", "running"}, r.status) && r.toolAction == ""
	})
	// Two more runs of the source, each followed by a pass, after the
	// mirror shows what the card shows.
	var mirrored string
	testsignal.EventuallyWithin(tb, 60*time.Second, "the mirror to show the card's status", func() bool {
		err := e.pool.QueryRow(ctx, `SELECT status FROM records WHERE source = 'tasks'`).Scan(&mirrored)
		return err == nil && mirrored == fake.Value(id, "Status")
	})
	for range 2 {
		last := lastSuccess()
		testsignal.EventuallyWithin(tb, 60*time.Second, "another run of the source", func() bool { return lastSuccess().After(last) })
	}

	if s := fake.Value(id, "Status"); s != "Blocked" {
		t.Errorf("the card shows %v; lookout wrote over the person's Blocked", s)
	}
	if calls := lines(t, filepath.Join(agentDir, "keys")); len(calls) != 0 {
		t.Errorf("the agent ran %d times on a card a person moved to Blocked", len(calls))
	}
	if r, _ := run(); r.executions != 0 || !strings.Contains(r.lastError, "not executed") {
		t.Errorf("task run: status %s, executions %d, last error %q", r.status, r.executions, r.lastError)
	}
}

// failingAgent answers the task titled "doomed" with a failure that no
// retry can help ({"error": "x", "retry": false}, exit 2) and every other
// task with {"done": true}.
const failingAgent = `#!/bin/sh
in=$(cat)
case "$in" in
*'"title":"doomed"'*)
	echo '{"error": "x", "retry": false}'
	exit 2 ;;
esac
echo '{"done": true}'
`

// A task whose executor reports a failed outcome ends failed, and the
// syncer binary (logging through its redaction handler: the configuration
// has a secret) keeps running: it takes the next task and completes it,
// and it exits 0 on SIGTERM. The failed end's nil retry_at once panicked
// in the log handler and ended `syncer run` with exit 2.
//
// The lease is long next to the timeout: the claim and its confirmation in
// the tool must be done by the lease less the timeout and the end's margin
// (docs/tasks.md "The lease and the timeout"). With lease 8s and timeout
// 7s that left 0.5 s, which a busy machine (the Citus cluster at load 12
// to 36: a host token's statement alone took longer) missed on every
// attempt, each given back ("take a token for host …: context deadline
// exceeded"). With 10m the window is minutes, longer than the test's own
// waits, which alone bound it (testsignal.Timeout).
func TestFailedTaskOutcomeKeepsTheSyncerRunning(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	fake := notiontest.New(t, taskProps()...)
	agent := filepath.Join(t.TempDir(), "agent.sh")
	if err := os.WriteFile(agent, []byte(failingAgent), 0o755); err != nil {
		t.Fatal(err)
	}
	e.write("lookout.yaml", `sinks:
  log: {type: log}
defaults:
  jitter: 0s
  host_rate_limit: {per_second: 1000, burst: 1000}
syncer:
  lease: 3s
  poll_interval: 100ms
  tasks_interval: 1s
  tasks_grace: 1s
`)
	e.write("sources/tasks.yaml", fmt.Sprintf(`name: tasks
connector: notion
every: 1s
rate_limit: {per_second: 1000, burst: 1000}
notion:
  database: %s
  token: ${LOOKOUT_TEST_FAILED_TASK_TOKEN}
  base_url: %s
  task: {}
fields:
  extra:
    priority: item.properties.Priority
tasks:
  - name: execute
    when: record.status == "Todo"
    order: [extra.priority desc, created_at asc]
    take: 1
    lease: 10m
    timeout: 7s
    command: [%s]
`, strings.ReplaceAll(fake.DatabaseID, "-", ""), fake.URL, agent))
	doomed := fake.AddPage(map[string]any{"Name": notiontest.Title("doomed"), "Status": notiontest.Status("Todo"), "Priority": notiontest.Number(2)})

	sb := clitest.BuildBinary(t, "github.com/lookout-dev/lookout/cmd/syncer")
	d := clitest.StartBinaryEnv(t, sb, e.dir, e.url, "LOOKOUT_TEST_FAILED_TASK_TOKEN=secret_test")
	tb := logsOnFailure{t: t, daemons: []*clitest.DaemonTest{d}}
	runStatus := func(title string) string {
		var s string
		err := e.pool.QueryRow(context.Background(), `SELECT status FROM task_runs WHERE title = $1`, title).Scan(&s)
		if err != nil && !strings.Contains(err.Error(), "no rows") {
			t.Fatal(err)
		}
		return s
	}
	testsignal.Eventually(tb, "doomed failed, in the database and in the tool", func() bool {
		return runStatus("doomed") == "failed" && fake.Value(doomed, "Status") == "Failed"
	})
	if le := fake.Value(doomed, "LastError"); !strings.Contains(fmt.Sprint(le), "x") {
		t.Errorf("doomed: LastError %q in the tool, want the executor's error", le)
	}
	// The same process goes on: it takes the next task and completes it.
	next := fake.AddPage(map[string]any{"Name": notiontest.Title("next"), "Status": notiontest.Status("Todo"), "Priority": notiontest.Number(1)})
	testsignal.Eventually(tb, "next Complete in the tool", func() bool {
		return runStatus("next") == "completed" && fake.Value(next, "Status") == "Complete"
	})
	logs := d.Logs()
	if strings.Contains(logs, "panic") || strings.Contains(logs, `"retry_at":null`) || !strings.Contains(logs, `"msg":"task failed"`) {
		t.Errorf("the syncer's logs (want one task failed line, no panic, no null retry_at):\n%s", logs)
	}
	// The test's end stops it with SIGTERM and fails on a non-zero exit.
}
