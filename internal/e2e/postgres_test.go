package e2e

import (
	"context"
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

// An incremental postgres source sees deletions: a row deleted_when
// selects, read through the cursor, is recorded as deleted (a soft
// delete), and a row gone from the table is found by the periodic key
// scan (full_scan_every; a hard delete). The evaluator sees each as one
// deleted change, once: later runs (the lookback reads the soft-deleted
// row again, the next scan sees the hard-deleted one missing again) add
// nothing.
func TestPostgresIncrementalDeletions(t *testing.T) {
	url, up := agentTasksUpstream(t)
	e := newEnv(t)
	e.write("sources/tasks.yaml", "name: tasks\nconnector: postgres\nevery: 1h\npostgres:\n  dsn: "+url+
		"\n  table: agent_tasks\n  key: id\n  cursor: updated_at\n  lookback: 1h\n  deleted_when: status = 'cancelled'\n"+
		"  full_scan_every: 24h\n  page_size: 3\nwatches:\n  - name: gone\n    when: change.kind == \"deleted\"\n    notify: [rec]\n")
	upstreamExec(t, up, `INSERT INTO agent_tasks (title) SELECT 'task ' || i FROM generate_series(1, 10) AS i`)
	e.syncAll()
	if n := e.count(`SELECT count(*) FROM records WHERE source = 'tasks' AND deleted_at IS NULL`); n != 10 {
		t.Fatalf("%d live records, want 10", n)
	}
	if got := e.notified(); len(got) != 0 {
		t.Fatalf("notified before any deletion: %v", got)
	}

	// A soft delete (through the cursor) and a hard delete (not due for a
	// key scan yet: the record stays).
	upstreamExec(t, up, `UPDATE agent_tasks SET status = 'cancelled', updated_at = now() WHERE id = 4`)
	upstreamExec(t, up, `DELETE FROM agent_tasks WHERE id = 9`)
	e.syncAll()
	if n := e.count(`SELECT count(*) FROM records WHERE source = 'tasks' AND deleted_at IS NOT NULL`); n != 1 {
		t.Errorf("%d deleted records before the key scan is due, want 1 (task 4)", n)
	}

	// The key scan is due once the last one is 24h old: the stored cursor
	// says when it ran (docs/connectors.md#postgres).
	if _, err := e.pool.Exec(context.Background(), `UPDATE sources SET cursor = cursor || '{"scanned_at": "2026-01-01T00:00:00Z"}' WHERE name = 'tasks'`); err != nil {
		t.Fatal(err)
	}
	e.syncAll()
	// Once more: nothing new (the lookback reads task 4 again, no scan is due).
	upstreamExec(t, up, `UPDATE agent_tasks SET title = 'renamed', updated_at = now() WHERE id = 5`)
	e.syncAll()
	if n := e.count(`SELECT count(*) FROM changes WHERE source = 'tasks' AND kind = 'deleted'`); n != 2 {
		t.Errorf("%d deleted changes, want 2 (tasks 4 and 9, once each)", n)
	}
	if n := e.count(`SELECT count(*) FROM records WHERE source = 'tasks' AND deleted_at IS NOT NULL AND record_id IN ('4', '9')`); n != 2 {
		t.Errorf("%d of tasks 4 and 9 deleted in the mirror, want 2", n)
	}
	got := e.notified()
	if len(got) != 2 || got["gone 4"] != 1 || got["gone 9"] != 1 {
		t.Errorf("notified %v, want gone 4 and gone 9 once each", got)
	}
}
