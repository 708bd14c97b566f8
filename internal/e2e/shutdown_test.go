package e2e

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/lookout-dev/lookout/internal/clitest"
	"github.com/lookout-dev/lookout/internal/testsignal"
)

// The three daemons, started from their binaries with JSON logs, run the
// pipeline and are stopped with SIGTERM: each exits 0, logs no ERROR
// (a clean stop once logged 2–9 "service ended before stop" lines), and
// every JSON line has each key once at every level (service was twice).
func TestCleanShutdownLogsNoError(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.write("sources/tasks.yaml", tasksSource)
	e.write("data/a.jsonl", tasks(5, nil))
	var daemons []*clitest.DaemonTest
	for _, bin := range []string{"syncer", "evaluator", "api"} {
		daemons = append(daemons, clitest.StartBinary(t, clitest.BuildBinary(t, "github.com/lookout-dev/lookout/cmd/"+bin), e.dir, e.url))
	}
	tb := logsOnFailure{t: t, daemons: daemons}
	testsignal.Eventually(tb, "the pipeline's notifications", func() bool {
		var n int
		if err := e.pool.QueryRow(t.Context(), `SELECT count(*) FROM notifications`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n > 0
	})
	for i, d := range daemons {
		d.Stop() // SIGTERM; fails the test on a non-zero exit
		logs := d.Logs()
		lines := 0
		for _, line := range strings.Split(strings.TrimSpace(logs), "\n") {
			if !strings.HasPrefix(line, "{") {
				continue
			}
			lines++
			if strings.Contains(line, `"level":"ERROR"`) {
				t.Errorf("daemon %d logged an error during a clean run and stop: %s", i, line)
			}
			if dup := duplicateKey(t, line); dup != "" {
				t.Errorf("daemon %d: key %q twice in %s", i, dup, line)
			}
		}
		if lines == 0 {
			t.Errorf("daemon %d logged no JSON line:\n%s", i, logs)
		}
	}
}

// duplicateKey returns a key that occurs twice in one object of the JSON
// line, or "".
func duplicateKey(t *testing.T, line string) string {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(line))
	var walk func() string
	walk = func() string {
		tok, err := dec.Token()
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		switch tok {
		case json.Delim('{'):
			seen := map[string]bool{}
			for dec.More() {
				k, _ := dec.Token()
				if seen[k.(string)] {
					return k.(string)
				}
				seen[k.(string)] = true
				if d := walk(); d != "" {
					return d
				}
			}
			_, _ = dec.Token()
		case json.Delim('['):
			for dec.More() {
				if d := walk(); d != "" {
					return d
				}
			}
			_, _ = dec.Token()
		}
		return ""
	}
	return walk()
}
