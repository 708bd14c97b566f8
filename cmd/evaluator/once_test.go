package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lookout-dev/lookout/internal/cli"
	"github.com/lookout-dev/lookout/internal/connectors/conntest"
	// The syncer fills the changes table here, so this test binary links
	// the connectors, and config.Load then checks connector names and
	// blocks: link them all, as the syncer binary does (the evaluator
	// binary links none and never reads connector blocks).
	_ "github.com/lookout-dev/lookout/internal/connectors/all"
	"github.com/lookout-dev/lookout/internal/pgtest"
	"github.com/lookout-dev/lookout/internal/syncer/syncertest"
)

// once exits 0 when everything it did succeeded, 1 when an evaluation
// errored or a delivery attempt failed, 2 when it cannot run.
func TestOnceExitCodes(t *testing.T) {
	_, url := pgtest.Schema(t)
	t.Setenv("DATABASE_URL", url)
	pool := pgtest.PoolFor(t, url)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "receiver down", http.StatusInternalServerError)
	}))
	t.Cleanup(hook.Close)
	dir := conntest.WriteConfig(t, map[string]string{
		// The failed delivery is retried an hour later: not in this test.
		"lookout.yaml": "sinks:\n  hook: {type: webhook, url: " + hook.URL + "}\n  log: {type: log}\ndelivery: {retry_min: 1h, retry_max: 2h}\n",
		"sources/tasks.yaml": `name: tasks
connector: file
file: {paths: [tasks.jsonl]}
watches:
  - name: fine
    notify: [log]
  - name: broken
    when: int(record.title) > 0
    notify: [log]
  - name: hooked
    notify: [hook]
`,
		"tasks.jsonl": `{"id": "1", "title": "not a number"}` + "\n",
	})
	once := func() (int, string) {
		t.Helper()
		var out, errb bytes.Buffer
		code := cli.Run(context.Background(), "evaluator", "test", []cli.Command{{Name: "once", Run: runOnce}},
			[]string{"--config", dir, "--log-format", "json", "once"}, &out, &errb)
		return code, out.String() + errb.String()
	}

	if code, out := once(); code != 0 {
		t.Fatalf("nothing to do: exit %d\n%s", code, out)
	}
	syncertest.SyncNow(t, pool, syncertest.New(t, pool, dir))
	code, out := once()
	if code != 1 || !strings.Contains(out, "evaluator once: 1 evaluation(s) errored or were held for the model, 1 delivery attempt(s) failed") {
		t.Errorf("a watch errored and a delivery failed: exit %d, want 1\n%s", code, out)
	}
	if code, out := once(); code != 0 {
		t.Errorf("nothing new is due: exit %d, want 0\n%s", code, out)
	}
	if err := os.WriteFile(filepath.Join(dir, "lookout.yaml"), []byte("sinks: {log: {type: lgo}}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out := once(); code != 2 {
		t.Errorf("a configuration error: exit %d, want 2\n%s", code, out)
	}
}
