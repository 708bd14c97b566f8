package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/lookout-dev/lookout/internal/clitest"
	"github.com/lookout-dev/lookout/internal/definitions"
)

// binaries builds the syncer and evaluator executables (once per test
// binary) and starts both against e's directory and database.
func (e *env) binaries() (syncerd, evaluatord *clitest.DaemonTest) {
	e.t.Helper()
	sb := clitest.BuildBinary(e.t, "github.com/lookout-dev/lookout/cmd/syncer")
	eb := clitest.BuildBinary(e.t, "github.com/lookout-dev/lookout/cmd/evaluator")
	return clitest.StartBinary(e.t, sb, e.dir, e.url), clitest.StartBinary(e.t, eb, e.dir, e.url)
}

// wait polls a count query until it reaches want, failing with the logs
// of the daemons.
func (e *env) wait(what string, want int, sql string, args ...any) {
	e.t.Helper()
	d := e.daemons[0]
	d.WaitFor(what, func() bool {
		if e.count(sql, args...) >= want {
			return true
		}
		return false
	})
}

const reloadSource = `name: tasks
connector: file
every: 1h
jitter: 0s
file:
  paths: [data/*.jsonl]
fields:
  status: item.state
watches:
  - name: flagged
    when: record.status == "urgent"
`

func taskJSON(id, state string) string {
	return fmt.Sprintf(`{"id": %q, "title": "task %s", "state": %q}`+"\n", id, id, state)
}

// Editing a file while `syncer run` and `evaluator run` are up changes a
// schedule and a watch without a restart; an invalid edit is refused and
// reported (log, metric, /readyz) while work goes on with the last valid
// configuration.
func TestReloadWhileRunning(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.write("lookout.yaml", "sinks:\n  log: {type: log}\nsyncer:\n  poll_interval: 100ms\nevaluator:\n  catch_up_interval: 1s\n")
	e.write("sources/tasks.yaml", reloadSource)
	e.write("data/a.jsonl", taskJSON("t1", "urgent"))
	s, ev := e.binaries()
	e.daemons = []*clitest.DaemonTest{s, ev}

	e.wait("the first notification", 1, `SELECT count(*) FROM notifications WHERE watch = 'flagged' AND record_id = 't1'`)
	var schedule string
	if err := e.pool.QueryRow(context.Background(), `SELECT schedule FROM sources WHERE name = 'tasks'`).Scan(&schedule); err != nil || schedule != "every 1h0m0s" {
		t.Fatalf("schedule = %q (%v)", schedule, err)
	}

	// A valid edit: a new schedule and a new condition for the watch.
	edited := strings.NewReplacer("every: 1h", "every: 2s", `record.status == "urgent"`, `record.status == "blocked"`).Replace(reloadSource)
	e.write("sources/tasks.yaml", edited)
	e.wait("the new schedule in the sources table", 1, `SELECT count(*) FROM sources WHERE name = 'tasks' AND schedule = 'every 2s'`)
	e.write("data/a.jsonl", taskJSON("t1", "urgent")+taskJSON("t2", "blocked")+taskJSON("t3", "urgent"))
	e.wait("the changed watch's notification", 1, `SELECT count(*) FROM notifications WHERE watch = 'flagged' AND record_id = 't2'`)
	e.wait("the decision on t3", 1, `SELECT count(*) FROM evaluations WHERE record_id = 't3'`)
	if n := e.count(`SELECT count(*) FROM notifications WHERE record_id = 't3'`); n != 0 {
		t.Errorf("t3 (urgent) notified %d time(s) after the watch changed to blocked", n)
	}
	// Both reload; the first to take the lock applies the diff, the
	// other finds nothing left to do.
	if !strings.Contains(s.Logs()+ev.Logs(), `"msg":"configuration reloaded"`) {
		t.Errorf("no reload logged:\n%s\n%s", s.Logs(), ev.Logs())
	}
	version := e.count(`SELECT last_value FROM config_version_seq`)

	// An invalid edit: refused by both daemons, reported, nothing applied.
	e.write("sources/tasks.yaml", strings.Replace(edited, "jitter: 0s", "jitter: 0s\nrate_limit: {per_second: -1}", 1))
	for _, d := range e.daemons {
		d.WaitFor("the refusal in /readyz", func() bool {
			code, body := d.Get("/readyz")
			var r struct {
				Checks []struct{ Name, Warning string }
			}
			if err := json.Unmarshal([]byte(body), &r); err != nil || code != 200 {
				return false
			}
			for _, c := range r.Checks {
				if c.Name == "config" && strings.HasPrefix(c.Warning, "configuration reload refused") &&
					strings.Contains(c.Warning, "sources/tasks.yaml:5: rate_limit.per_second must be > 0") {
					return true
				}
			}
			return false
		})
		_, m := d.Get("/metrics")
		if v := clitest.Value(m, `lookout_config_reloads_total{outcome="refused"}`); v < 1 {
			t.Errorf("refused reloads = %v", v)
		}
		if !strings.Contains(d.Logs(), `"level":"ERROR","msg":"configuration reload refused; the running configuration stays"`) ||
			!strings.Contains(d.Logs(), `sources/tasks.yaml:5: rate_limit.per_second must be > 0`) {
			t.Errorf("no ERROR naming file:line: key:\n%s", d.Logs())
		}
	}
	if v := e.count(`SELECT last_value FROM config_version_seq`); v != version {
		t.Errorf("config version moved from %d to %d on an invalid edit", version, v)
	}
	// Work goes on with the last valid configuration.
	e.write("data/a.jsonl", taskJSON("t1", "urgent")+taskJSON("t2", "blocked")+taskJSON("t3", "urgent")+taskJSON("t4", "blocked"))
	e.wait("a notification after the refused edit", 1, `SELECT count(*) FROM notifications WHERE watch = 'flagged' AND record_id = 't4'`)

	// Fixing the file clears the warning.
	e.write("sources/tasks.yaml", edited+"    urgency: high\n")
	for _, d := range e.daemons {
		d.WaitFor("a clean /readyz", func() bool {
			_, body := d.Get("/readyz")
			return !strings.Contains(body, "warning")
		})
	}
}

// A source and a watch created through the Go API of the definitions
// (owner alice) while the daemons run: the source's first run happens at
// once (not after its jitter or interval), a watch created afterwards
// judges the next change, and the notification carries the owner.
func TestDefinitionsCreatedAtRuntime(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.write("lookout.yaml", "sinks:\n  log: {type: log}\nsyncer:\n  poll_interval: 1h\nevaluator:\n  catch_up_interval: 1h\n")
	e.write("data/alice.jsonl", taskJSON("a1", "open"))
	s, ev := e.binaries()
	e.daemons = []*clitest.DaemonTest{s, ev}
	cfg := e.config()
	store := definitions.NewStore(e.pool, &definitions.Validator{Global: &cfg.Global})
	alice := definitions.Actor{Owner: "alice"}
	ctx := context.Background()

	// every 1h with the default jitter (6m), and poll and catch-up timers
	// of 1h: only the NOTIFY and a first run due at once make this quick.
	if _, _, err := store.CreateSource(ctx, alice, []byte(`{"name": "alice-tasks", "connector": "file", "every": "1h",
		"file": {"paths": ["data/alice.jsonl"]}, "fields": {"status": "item.state"}}`)); err != nil {
		t.Fatal(err)
	}
	e.wait("the first run of alice's source", 1, `SELECT count(*) FROM records WHERE source = 'alice-tasks'`)

	if _, err := store.CreateWatch(ctx, alice, "alice-tasks", []byte("name: done\nwhen: record.status == \"done\"\n")); err != nil {
		t.Fatal(err)
	}
	e.write("data/alice.jsonl", taskJSON("a1", "done"))
	if err := store.RunNow(ctx, alice, "alice-tasks"); err != nil {
		t.Fatal(err)
	}
	e.wait("alice's notification", 1, `SELECT count(*) FROM notifications WHERE watch = 'done' AND owner = 'alice' AND payload->>'owner' = 'alice'`)
	// (The created change may have been judged before or after the watch
	// existed: the guarantee is for changes committed after it.)
	if n := e.count(`SELECT count(*) FROM evaluations e JOIN changes c ON c.source = e.source AND c.id = e.change_id
		WHERE e.watch = 'done' AND e.owner = 'alice' AND c.kind = 'updated' AND e.decision = 'notify'`); n != 1 {
		t.Errorf("alice's notify decisions on the update = %d, want 1", n)
	}
}
