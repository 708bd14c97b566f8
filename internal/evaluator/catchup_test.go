package evaluator

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lookout-dev/lookout/internal/testsignal"
)

// syncBuffer is a goroutine-safe log buffer.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestCatchUpTimerSurvivesFailedDrain: a drain that fails on the catch-up
// timer must not leave the timer stopped, or a change committed without a
// NOTIFY would wait for the next one forever.
func TestCatchUpTimerSurvivesFailedDrain(t *testing.T) {
	t.Parallel()
	h := newHarness(t, baseGlobal, map[string]string{"tasks.yaml": `name: tasks
connector: file
file: {paths: [x.jsonl]}
watches:
  - name: any
    when: "true"
`})
	logs := &syncBuffer{}
	ev, err := New(h.pool, testConfig(h.cfg, Config{Owner: "catch-up", CatchUpInterval: 20 * time.Millisecond}),
		slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if err := ev.Start(h.ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ev.Stop() })
	testsignal.Eventually(t, "listener connected", ev.Listening)

	// Break evaluation, then commit a change without NOTIFY (as if the
	// notification were lost): only the timer can find it.
	h.exec(`ALTER TABLE evaluations RENAME TO evaluations_away`)
	h.exec(`INSERT INTO changes (source, record_id, kind, version, new_hash, record) VALUES ('tasks', 'r1', 'created', 1, 'h', '{"id": "r1"}')`)
	testsignal.Eventually(t, "a failed drain", func() bool { return strings.Contains(logs.String(), "evaluate changes") })
	h.exec(`ALTER TABLE evaluations_away RENAME TO evaluations`)
	testsignal.Eventually(t, "the change evaluated by the timer after the failure", func() bool {
		return h.count(`SELECT count(*) FROM changes WHERE eval_status = 'done'`) == 1
	})
}
