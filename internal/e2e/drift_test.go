package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/lookout-dev/lookout/internal/clitest"
	"github.com/lookout-dev/lookout/internal/semantic/ollamatest"
	"github.com/lookout-dev/lookout/internal/testsignal"
)

// TestDriftWithRealOllama runs the real evaluator binary (`evaluator
// once`) against a real Ollama server with the tiny random-weight test
// model, both as the watch's model and as ollama.drift's embedding model:
// the reasons of the model's decisions are queued, embedded through the
// real /api/embed (the model's own vector size), and the model's digest
// is recorded in model_versions. The vectors are noise (random weights);
// the drift computed on a seeded shift is internal/drift's test, with
// the fake's vectors.
func TestDriftWithRealOllama(t *testing.T) {
	t.Parallel()
	base := ollamatest.Real(t)
	e := newEnv(t)
	// A model call's bound: 2 minutes on a quiet machine, more on one known
	// to be slow (testsignal.Scaled: 12 min on the Citus cluster, where no
	// answer came within 2 minutes at load 54 to 90); the lease outlasts
	// it. A server that hangs still fails: no reason to embed.
	modelTimeout := testsignal.Scaled(2 * time.Minute)
	e.write("lookout.yaml", fmt.Sprintf(`ollama:
  host: %s
  model: tiny
  timeout: %s
  concurrency: 1
  reason_max_chars: 40
  options: {num_predict: 96}
  drift: {embed_model: tiny, min_samples: 1, threshold: 0.5, batch: 2, notify: [log]}
evaluator:
  lease: %s
sinks:
  log: {type: log}
defaults:
  jitter: 0s
`, base, modelTimeout, 3*modelTimeout))
	e.write("sources/tasks.yaml", `name: tasks
connector: file
every: 1h
file:
  paths: [data/tasks.jsonl]
fields:
  status: item.state
watches:
  - name: urgent
    ask: Is this task urgent?
    notify: [log]
`)
	e.write("data/tasks.jsonl", tasks(3, nil))
	e.sync()

	cmd := exec.Command(clitest.BuildBinary(t, "github.com/lookout-dev/lookout/cmd/evaluator"), "--config", e.dir, "once")
	cmd.Env = append(os.Environ(), "DATABASE_URL="+e.url)
	out, err := cmd.CombinedOutput()
	t.Logf("evaluator once (%v):\n%s", err, out)
	if !strings.Contains(string(out), "drift: queued ") {
		t.Fatalf("evaluator once printed no drift pass (exit %v):\n%s", err, out)
	}
	reasons := e.count(`SELECT count(*) FROM model_calls WHERE outcome = 'ok' AND coalesce(reason, '') <> ''`)
	if reasons == 0 {
		t.Fatalf("the tiny model wrote no reason to embed (model_calls outcomes: %d ok of %d)",
			e.count(`SELECT count(*) FROM model_calls WHERE outcome = 'ok'`), e.count(`SELECT count(*) FROM model_calls`))
	}
	if n := e.count(`SELECT count(*) FROM drift_embeddings WHERE state = 'embedded' AND embed_model = 'tiny' AND embed_digest <> ''
	                 AND cardinality(embedding) > 0`); n != reasons {
		t.Errorf("embedded decisions %d, want every one of the %d reasons", n, reasons)
	}
	if n := e.count(`SELECT count(DISTINCT cardinality(embedding)) FROM drift_embeddings`); n != 1 {
		t.Errorf("%d vector sizes, want the model's one", n)
	}
	if n := e.count(`SELECT count(*) FROM model_versions WHERE model = 'tiny' AND digest LIKE '%' || (SELECT model_digest FROM model_calls LIMIT 1)`); n != 1 {
		t.Errorf("model_versions rows of tiny's digest: %d, want 1", n)
	}
}
