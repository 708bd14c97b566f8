package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	ollama "github.com/ollama/ollama/api"

	"github.com/lookout-dev/lookout/internal/clitest"
	"github.com/lookout-dev/lookout/internal/db"
	"github.com/lookout-dev/lookout/internal/pgtest"
	"github.com/lookout-dev/lookout/internal/semantic/ollamatest"
	"github.com/lookout-dev/lookout/internal/testsignal"
	"github.com/lookout-dev/lookout/internal/tokens"
)

// CitusWorkerDirsEnv names the data directories of the Citus cluster's
// workers (a list, separated as PATH is: "a:b"), which the fault tests on
// Citus stop and start with pg_ctl. scripts/test_citus.sh sets it; without
// it, or when TEST_DATABASE_URL's database has no citus extension, those
// tests are skipped.
const CitusWorkerDirsEnv = "LOOKOUT_CITUS_WORKER_DIRS"

// citusOutage is how long a fault test keeps a worker stopped: the fault
// itself, not a wait for a state.
const citusOutage = 30 * time.Second

// citusRecovery bounds each wait for the pipeline to catch up once the
// worker is back (the leases are 10 s in these tests; the machine is
// shared).
const citusRecovery = 3 * time.Minute

// citusWorker is one worker node of the test cluster: its data directory
// and the address its postmaster listened on when the test began.
type citusWorker struct {
	dir, host, sockets string
	port               int
	stopped            bool
}

// citusWorkers returns the workers of CitusWorkerDirsEnv, or skips the
// test when it is unset or the test database is not a Citus coordinator.
func citusWorkers(t *testing.T) []*citusWorker {
	t.Helper()
	dirs := filepath.SplitList(os.Getenv(CitusWorkerDirsEnv))
	if len(dirs) == 0 {
		t.Skipf("not on a Citus cluster: %s names no worker data directories (scripts/test_citus.sh sets it; docs/development.md)", CitusWorkerDirsEnv)
	}
	pool := pgtest.PoolFor(t, pgtest.URL(t))
	if !pgtest.OnCitus(t, pool) {
		t.Skipf("not on a Citus cluster: TEST_DATABASE_URL's database has no citus extension (%s is set: %q)", CitusWorkerDirsEnv, os.Getenv(CitusWorkerDirsEnv))
	}
	var ws []*citusWorker
	for _, d := range dirs {
		// postmaster.pid: pid, data directory, start time, port, socket
		// directory, listen address, ... (PostgreSQL's layout).
		b, err := os.ReadFile(filepath.Join(d, "postmaster.pid"))
		if err != nil {
			t.Fatalf("%s: worker %s is not running: %v", CitusWorkerDirsEnv, d, err)
		}
		lines := strings.Split(string(b), "\n")
		if len(lines) < 6 {
			t.Fatalf("%s: %s/postmaster.pid has %d lines, want at least 6", CitusWorkerDirsEnv, d, len(lines))
		}
		port, err := strconv.Atoi(strings.TrimSpace(lines[3]))
		if err != nil {
			t.Fatalf("%s: %s/postmaster.pid:4: port %q: %v", CitusWorkerDirsEnv, d, lines[3], err)
		}
		ws = append(ws, &citusWorker{dir: d, port: port, sockets: strings.TrimSpace(lines[4]), host: strings.TrimSpace(lines[5])})
	}
	// A failed test must not leave the cluster without a worker.
	t.Cleanup(func() {
		for _, w := range ws {
			if w.stopped {
				w.start(t)
			}
		}
	})
	return ws
}

// addr is the worker's host:port as Citus names it in its errors.
func (w *citusWorker) addr() string { return fmt.Sprintf("%s:%d", w.host, w.port) }

// pgCtl runs pg_ctl as the postgres user when the test runs as root
// (pg_ctl refuses root).
func pgCtl(t *testing.T, args ...string) {
	t.Helper()
	cmd := exec.Command("pg_ctl", args...)
	if os.Geteuid() == 0 {
		cmd = exec.Command("runuser", append([]string{"-u", "postgres", "--", "pg_ctl"}, args...)...)
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("pg_ctl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// stop stops the worker as an operator would (pg_ctl stop -m fast: its
// sessions are ended, the coordinator's connections to it break).
func (w *citusWorker) stop(t *testing.T) {
	t.Helper()
	pgCtl(t, "-D", w.dir, "-m", "fast", "-w", "stop")
	w.stopped = true
}

// start starts the worker again on its port, logging beside its data
// directory as shared/citus/cluster.sh does.
func (w *citusWorker) start(t *testing.T) {
	t.Helper()
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=%s", w.port, w.sockets, w.host)
	pgCtl(t, "-D", w.dir, "-o", opts, "-l", w.dir+".log", "-w", "start")
	w.stopped = false
}

// faultGate holds the next request of a fake upstream, model or receiver
// once armed: the test learns that the step is under way (arrived) and
// lets it finish (release) after it stopped a worker.
type faultGate struct {
	mu      sync.Mutex
	arrived chan struct{}
	release chan struct{}
}

func (g *faultGate) arm() (arrived, release chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.arrived, g.release = make(chan struct{}), make(chan struct{})
	return g.arrived, g.release
}

// pass returns at once when the gate is not armed; otherwise it disarms
// it, reports the arrival and waits for the release (or ctx).
func (g *faultGate) pass(ctx context.Context) {
	g.mu.Lock()
	arrived, release := g.arrived, g.release
	g.arrived, g.release = nil, nil
	g.mu.Unlock()
	if arrived == nil {
		return
	}
	close(arrived)
	select {
	case <-release:
	case <-ctx.Done():
	}
}

// faultUpstream is an HTTP JSON API of tasks whose titles and states the
// test edits.
type faultUpstream struct {
	faultGate
	mu    sync.Mutex
	items map[string][2]string // id -> title, status
}

func (u *faultUpstream) set(id, title, status string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.items[id] = [2]string{title, status}
}

func (u *faultUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.pass(r.Context())
	u.mu.Lock()
	ids := make([]string, 0, len(u.items))
	for id := range u.items {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	items := make([]map[string]string, 0, len(ids))
	for _, id := range ids {
		items = append(items, map[string]string{"id": id, "title": u.items[id][0], "status": u.items[id][1]})
	}
	u.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(items)
}

// hookReceiver is a webhook receiver that remembers every POST: its
// webhook-id (the dedupe key) and what it is about (source, record,
// version, watch).
type hookReceiver struct {
	faultGate
	mu       sync.Mutex
	requests int
	unkeyed  []string            // bodies of POSTs without a webhook-id
	byKey    map[string]int      // webhook-id -> POSTs
	keysOf   map[string][]string // "source/record@version watch" -> distinct webhook-ids
}

func (h *hookReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.pass(r.Context())
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var p struct {
		Source, Watch string
		Record        map[string]any
		Change        struct{ Version int }
	}
	if err := json.Unmarshal(body, &p); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	key := r.Header.Get("webhook-id")
	what := fmt.Sprintf("%s/%v@%d %s", p.Source, p.Record["id"], p.Change.Version, p.Watch)
	h.mu.Lock()
	h.requests++
	if key == "" {
		h.unkeyed = append(h.unkeyed, string(body))
	} else {
		if h.byKey[key] == 0 {
			h.keysOf[what] = append(h.keysOf[what], key)
		}
		h.byKey[key]++
	}
	h.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// received reports whether every key was POSTed at least once.
func (h *hookReceiver) received(keys []string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, k := range keys {
		if h.byKey[k] == 0 {
			return false
		}
	}
	return true
}

// check fails the test on a POST without a key or on one notification
// (the same record version and watch) POSTed under two keys, and returns
// the keyed repeats (the same key POSTed again: at least once,
// recognisably, docs/delivery.md).
func (h *hookReceiver) check(t *testing.T) (repeats int) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, b := range h.unkeyed {
		t.Errorf("a webhook POST without webhook-id: %s", b)
	}
	for what, keys := range h.keysOf {
		if len(keys) > 1 {
			t.Errorf("unkeyed duplicate: %s was POSTed under %d keys %q", what, len(keys), keys)
		}
	}
	for _, n := range h.byKey {
		repeats += n - 1
	}
	return repeats
}

// TestCitusWorkerStoppedDuringSyncEvaluationAndDelivery runs the syncer,
// evaluator and api binaries against a Citus coordinator and stops the
// worker that holds the source's shards for 30 s three times: while the
// syncer fetches a run's items (so that its batch commits into the
// outage), while the model judges a batch the evaluator claimed (so that
// its decisions are written into the outage), and while the webhook
// receiver answers a delivery (so that its outcome is recorded into the
// outage). Each time the daemons log errors naming the worker, keep
// running, and catch up alone once it is back: every upstream version is
// a change, every change is decided once per watch, every notification
// reaches the receiver (0 lost), and no notification reaches it under two
// keys (0 unkeyed duplicates).
func TestCitusWorkerStoppedDuringSyncEvaluationAndDelivery(t *testing.T) {
	workers := citusWorkers(t)
	e := citusEnv(t)
	ctx := context.Background()

	up := &faultUpstream{items: map[string][2]string{}}
	upSrv := httptest.NewServer(up)
	t.Cleanup(upSrv.Close)
	hook := &hookReceiver{byKey: map[string]int{}, keysOf: map[string][]string{}}
	hookSrv := httptest.NewServer(hook)
	t.Cleanup(hookSrv.Close)
	model := ollamatest.New(t, map[string]string{"llama3.2:latest": "sha256:" + strings.Repeat("b", 64)})
	modelGate := &faultGate{}
	model.SetAnswer(func(*ollama.ChatRequest) ollamatest.Answer {
		modelGate.pass(ctx)
		return ollamatest.Answer{Content: ollamatest.Verdict(true, "high", "It needs a look.", 0.9)}
	})

	// Leases of 10 s: what a daemon held when the worker went away is
	// taken over 10 s after it could not finish it.
	e.write("lookout.yaml", fmt.Sprintf(`ollama: {host: %s, model: llama3.2, timeout: 5s}
sinks:
  hook: {type: webhook, url: %q, secret: s3cret, timeout: 5s, concurrency: 4}
defaults: {jitter: 0s}
syncer: {poll_interval: 200ms, lease: 10s, backoff: {min: 1s, max: 2s}}
evaluator: {catch_up_interval: 1s, lease: 10s, batch_size: 50}
delivery: {poll_interval: 200ms, lease: 10s, retry_min: 200ms, retry_max: 2s}
`, model.URL, hookSrv.URL+"/hook"))
	e.write("sources/tasks.yaml", fmt.Sprintf(`name: tasks
connector: http
every: 2s
http:
  url: %s/tasks
fields:
  id: item.id
  title: item.title
  status: item.status
watches:
  - name: all
    when: "true"
    notify: [hook]
  - name: judged
    when: record.status == "judge"
    ask: Does this task need a look?
    notify: [hook]
`, upSrv.URL))
	const n = 20
	for i := range n {
		up.set(fmt.Sprintf("t-%02d", i), fmt.Sprintf("task %d", i), "open")
	}

	syncerd, evaluatord := e.binaries()
	apid := clitest.StartBinary(t, clitest.BuildBinary(t, "github.com/lookout-dev/lookout/cmd/api"), e.dir, e.url)
	e.daemons = []*clitest.DaemonTest{syncerd, evaluatord, apid}
	pids := map[string]int{"syncer": syncerd.Pid(), "evaluator": evaluatord.Pid(), "api": apid.Pid()}
	_, token, err := tokens.Create(ctx, e.pool, tokens.NewToken{Owner: "ops"})
	if err != nil {
		t.Fatal(err)
	}
	ops := &client{t: t, base: "http://" + apid.Addr, token: token}

	// The worker that holds the shard of the source's rows.
	var host string
	var port int
	if err := e.pool.QueryRow(ctx, `
		SELECT nodename, nodeport FROM pg_dist_shard_placement
		WHERE shardid = get_shard_id_for_distribution_column((SELECT current_schema() || '.records')::regclass, 'tasks')`).Scan(&host, &port); err != nil {
		t.Fatalf("the worker of source tasks: %v", err)
	}
	var worker *citusWorker
	for _, w := range workers {
		if w.port == port {
			worker = w
		}
	}
	if worker == nil {
		t.Fatalf("source tasks lives on %s:%d, which is none of %s (%s)", host, port, CitusWorkerDirsEnv, os.Getenv(CitusWorkerDirsEnv))
	}
	t.Logf("source tasks lives on worker %s (%s)", worker.addr(), worker.dir)

	// caughtUp waits until every version the upstream serves is a change,
	// every change is decided, and every notification is delivered and
	// reached the receiver.
	caughtUp := func(what string, versions, judged int) {
		t.Helper()
		var last string
		waitLong(t, e.daemons, what, func() bool {
			var changes, undecided, undelivered int
			var keys []string
			err := e.pool.QueryRow(ctx, `SELECT
				(SELECT count(*) FROM changes WHERE source = 'tasks'),
				(SELECT count(*) FROM changes WHERE source = 'tasks' AND eval_status <> 'done'),
				(SELECT count(*) FROM notifications WHERE source = 'tasks' AND status <> 'delivered'),
				(SELECT coalesce(array_agg(dedupe_key), '{}') FROM notifications WHERE source = 'tasks')`).Scan(&changes, &undecided, &undelivered, &keys)
			if err != nil {
				// The first statements after the worker is back may
				// find the coordinator's connections to it broken.
				last = err.Error()
				return false
			}
			last = fmt.Sprintf("%d changes (want %d), %d undecided, %d notifications (want %d), %d undelivered", changes, versions, undecided, len(keys), versions+judged, undelivered)
			return changes >= versions && undecided == 0 && undelivered == 0 && len(keys) >= versions+judged && hook.received(keys)
		}, func() string { return last })
		// 0 lost, 0 twice: one change per version, one decision per
		// change and watch, one notification per matching decision.
		for _, c := range []struct{ what, sql string }{
			{"changes of one record version", `SELECT count(*) FROM (SELECT 1 FROM changes WHERE source = 'tasks' GROUP BY record_id, version HAVING count(*) > 1) x`},
			{"missing record versions", `SELECT count(*) FROM (SELECT record_id FROM changes WHERE source = 'tasks' GROUP BY record_id HAVING count(*) <> max(version)) x`},
			{"changes decided twice by a watch", `SELECT count(*) FROM (SELECT 1 FROM evaluations WHERE source = 'tasks' GROUP BY change_id, watch HAVING count(*) > 1) x`},
			{"changes without the decision of watch all", `SELECT count(*) FROM changes c WHERE source = 'tasks' AND NOT EXISTS (SELECT 1 FROM evaluations ev WHERE ev.source = c.source AND ev.change_id = c.id AND ev.watch = 'all')`},
		} {
			if got := e.count(c.sql); got != 0 {
				t.Errorf("%s: %d %s", what, got, c.what)
			}
		}
		if got := e.count(`SELECT count(*) FROM changes WHERE source = 'tasks'`); got != versions {
			t.Errorf("%s: %d changes, want %d (one per version the upstream served)", what, got, versions)
		}
		if got := e.count(`SELECT count(*) FROM notifications WHERE source = 'tasks'`); got != versions+judged {
			t.Errorf("%s: %d notifications, want %d (every change, and the judged ones once more)", what, got, versions+judged)
		}
	}

	// outage stops the worker once the step is under way (arrived), lets
	// the step go on into the outage, waits until every daemon in loud
	// logged an error naming the worker, keeps it stopped for 30 s and
	// starts it again.
	outage := func(step string, arrived, release chan struct{}, loud ...*clitest.DaemonTest) {
		t.Helper()
		testsignal.Receive(t, arrived, step+" under way")
		before := make([]int, len(loud))
		for i, d := range loud {
			before[i] = d.Count(worker.addr())
		}
		worker.stop(t)
		stopped := time.Now()
		close(release)
		for i, d := range loud {
			d.WaitFor(fmt.Sprintf("an error naming the stopped worker %s in the log (%s)", worker.addr(), step), func() bool {
				return d.Count(worker.addr()) > before[i]
			})
		}
		if code := ops.call(http.MethodGet, "/v1/notifications", "", nil); code == http.StatusOK {
			t.Logf("%s: the api listed notifications while the worker was stopped", step)
		} else {
			t.Logf("%s: the api answered %d while the worker was stopped", step, code)
		}
		time.Sleep(time.Until(stopped.Add(citusOutage))) // the outage itself
		worker.start(t)
		t.Logf("%s: worker %s stopped for %s", step, worker.addr(), time.Since(stopped).Round(time.Second))
	}

	caughtUp("before the faults", n, 0)

	// 1. During sync: the run has claimed the source and fetches; its
	// batch (records, changes, the run) is written into the outage.
	arrived, release := up.arm()
	for i := range n {
		up.set(fmt.Sprintf("t-%02d", i), fmt.Sprintf("task %d, edited", i), "open")
	}
	outage("sync", arrived, release, syncerd, evaluatord)
	caughtUp("after the worker stopped during sync", 2*n, 0)

	// 2. During evaluation: the evaluator claimed the judged changes and
	// asks the model; its decisions are written into the outage.
	arrived, release = modelGate.arm()
	for i := range n {
		up.set(fmt.Sprintf("t-%02d", i), fmt.Sprintf("task %d, edited", i), "judge")
	}
	outage("evaluation", arrived, release, syncerd, evaluatord)
	caughtUp("after the worker stopped during evaluation", 3*n, n)

	// 3. During delivery: the receiver answers a POST; its outcome is
	// recorded into the outage.
	arrived, release = hook.arm()
	for i := range n {
		up.set(fmt.Sprintf("t-%02d", i), fmt.Sprintf("task %d, closed", i), "done")
	}
	outage("delivery", arrived, release, syncerd, evaluatord)
	caughtUp("after the worker stopped during delivery", 4*n, n)

	repeats := hook.check(t)
	hook.mu.Lock()
	posts := hook.requests
	hook.mu.Unlock()
	t.Logf("the receiver got %d POSTs for %d notifications: %d keyed repeats (the same webhook-id again)", posts, 5*n, repeats)
	if code := ops.call(http.MethodGet, "/v1/notifications", "", nil); code != http.StatusOK {
		t.Errorf("the api answers %d to a list of notifications after the outages, want 200", code)
	}
	// No daemon exited or was restarted: the same processes serve.
	for name, d := range map[string]*clitest.DaemonTest{"syncer": syncerd, "evaluator": evaluatord, "api": apid} {
		if d.Pid() != pids[name] {
			t.Errorf("%s: pid %d, was %d", name, d.Pid(), pids[name])
		}
		if code, _ := d.Get("/healthz"); code != http.StatusOK {
			t.Errorf("%s: /healthz %d after the outages", name, code)
		}
	}
	logErrors(t, map[string]*clitest.DaemonTest{"syncer": syncerd, "evaluator": evaluatord, "api": apid}, worker.addr())
}

// citusEnv is newEnv on a schema laid out for Citus by db.Distribute,
// with one step before it: at the commit these tests were written on,
// Distribute failed on the latest schema ("cannot drop constraint
// task_runs_pkey on table task_runs because other objects depend on it":
// task_reviews' foreign key to the run by id alone, migration 37, which
// branch citus-green replaces by a key of (id, source), migration 42).
// The foreign key is dropped when it names the run by id alone; these
// tests write no review.
func citusEnv(t *testing.T) *env {
	t.Helper()
	latest, err := db.LatestVersion()
	if err != nil {
		t.Fatal(err)
	}
	_, url := pgtest.SchemaAt(t, latest) // migrated, not yet distributed
	ctx := context.Background()
	pool := pgtest.PoolFor(t, url)
	var byIDAlone bool
	if err := pool.QueryRow(ctx, `
		SELECT EXISTS (SELECT 1 FROM pg_constraint
		               WHERE conname = 'task_reviews_task_run_id_fkey' AND conrelid = 'task_reviews'::regclass
		                 AND cardinality(conkey) = 1)`).Scan(&byIDAlone); err != nil {
		t.Fatal(err)
	}
	if byIDAlone {
		t.Logf("workaround: task_reviews' foreign key to task_runs by id alone dropped before Distribute (migration 42 of branch citus-green keys it by (id, source))")
		if _, err := pool.Exec(ctx, `ALTER TABLE task_reviews DROP CONSTRAINT task_reviews_task_run_id_fkey`); err != nil {
			t.Fatal(err)
		}
	}
	if ok, err := db.Distribute(ctx, pool); err != nil || !ok {
		t.Fatalf("distribute the test's schema: %v (on citus: %v)", err, ok)
	}
	e := &env{t: t, dir: t.TempDir(), url: url, log: slog.New(slog.DiscardHandler), pool: pool}
	if err := os.MkdirAll(filepath.Join(e.dir, "sources"), 0o755); err != nil {
		t.Fatal(err)
	}
	return e
}

// waitLong polls cond until it holds, for at most citusRecovery, failing
// with state() and the daemons' logs.
func waitLong(t *testing.T, daemons []*clitest.DaemonTest, what string, cond func() bool, state func() string) {
	t.Helper()
	testsignal.EventuallyWithin(withDaemonLogs{t, daemons, state}, citusRecovery, what, func() bool {
		ok := cond()
		if !ok {
			time.Sleep(100 * time.Millisecond) // a poll interval: each check is several statements on the cluster
		}
		return ok
	})
}

// withDaemonLogs adds a state and the daemons' logs to a failure.
type withDaemonLogs struct {
	t       *testing.T
	daemons []*clitest.DaemonTest
	state   func() string
}

func (w withDaemonLogs) Helper() { w.t.Helper() }

func (w withDaemonLogs) Fatalf(format string, args ...any) {
	w.t.Helper()
	var b strings.Builder
	for i, d := range w.daemons {
		fmt.Fprintf(&b, "\n--- daemon %d:\n%s", i, d.Logs())
	}
	w.t.Fatalf(format+" (last: %s)%s", append(args, w.state(), b.String())...)
}

// logErrors logs each daemon's error lines that name addr (the stopped
// worker), once per distinct message, for the record of what an operator
// sees.
func logErrors(t *testing.T, daemons map[string]*clitest.DaemonTest, addr string) {
	t.Helper()
	for name, d := range daemons {
		seen := map[string]int{}
		var order []string
		sc := bufio.NewScanner(strings.NewReader(d.Logs()))
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if !strings.Contains(line, addr) {
				continue
			}
			var l struct{ Msg, Error string }
			_ = json.Unmarshal([]byte(line), &l)
			k := l.Msg + ": " + l.Error
			if seen[k] == 0 {
				order = append(order, k)
			}
			seen[k]++
		}
		for _, k := range order {
			t.Logf("%s logged %d× %s", name, seen[k], k)
		}
	}
}
