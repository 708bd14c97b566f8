package e2e

import (
	"strings"
	"testing"

	"github.com/lookout-dev/lookout/internal/syncer/syncertest"
)

// A postgres snapshot source through the real syncer: rows deleted_when
// selects and rows that vanished are recorded as deleted, behind the
// deletion guard every snapshot source has: a run that would delete most
// of the live records fails and deletes nothing.
func TestPostgresSnapshotDeletionsAndGuard(t *testing.T) {
	url, up := agentTasksUpstream(t)
	e := newEnv(t)
	e.write("sources/tasks.yaml", "name: tasks\nconnector: postgres\nevery: 1h\npostgres:\n  dsn: "+url+
		"\n  table: agent_tasks\n  key: id\n  snapshot: true\n  deleted_when: status = 'cancelled'\n  page_size: 3\n")
	upstreamExec(t, up, `INSERT INTO agent_tasks (title) SELECT 'task ' || i FROM generate_series(1, 10) AS i`)
	s := syncertest.New(t, e.pool, e.dir)
	syncertest.SyncNow(t, e.pool, s)
	if n := e.count(`SELECT count(*) FROM records WHERE source = 'tasks' AND deleted_at IS NULL`); n != 10 {
		t.Fatalf("%d live records, want 10", n)
	}

	upstreamExec(t, up, `UPDATE agent_tasks SET status = 'cancelled' WHERE id = 4`)
	upstreamExec(t, up, `DELETE FROM agent_tasks WHERE id = 9`)
	syncertest.SyncNow(t, e.pool, s)
	if status, msg := syncertest.LastRun(t, e.pool, "tasks"); status != "succeeded" {
		t.Fatalf("run %s: %s", status, msg)
	}
	if n := e.count(`SELECT count(*) FROM changes WHERE source = 'tasks' AND kind = 'deleted' AND record_id IN ('4', '9')`); n != 2 {
		t.Errorf("%d deleted changes for tasks 4 and 9, want 2", n)
	}

	// Six of the eight left vanish at once: the guard refuses.
	upstreamExec(t, up, `DELETE FROM agent_tasks WHERE id IN (1, 2, 3, 5, 6, 7)`)
	syncertest.SyncNow(t, e.pool, s)
	status, msg := syncertest.LastRun(t, e.pool, "tasks")
	if status != "failed" || !strings.HasPrefix(msg, "deletion guard: source tasks: this complete run would delete 6 of 8 live records (75%), more than max_delete_fraction 0.5 allows; nothing was deleted") {
		t.Errorf("run %s: %s", status, msg)
	}
	if n := e.count(`SELECT count(*) FROM records WHERE source = 'tasks' AND deleted_at IS NULL`); n != 8 {
		t.Errorf("%d live records after the refused run, want 8", n)
	}
}
