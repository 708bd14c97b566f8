package e2e

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lookout-dev/lookout/internal/clitest"
	"github.com/lookout-dev/lookout/internal/connectors/github/githubtest"
)

// End to end with the real binaries: a signed GitHub delivery to the
// api's /ingest is mirrored by the syncer and evaluated and notified by
// an evaluator that has neither the webhook secret nor the GitHub token
// in its environment (only the api verifies signatures, only the syncer
// calls GitHub). The evaluator used to refuse such a source, or, reading
// it from the definitions, mark its changes evaluated without an
// evaluation.
func TestWebhookEvaluatedByAnEvaluatorWithoutItsSecret(t *testing.T) {
	t.Parallel()
	const secret = "It's a Secret to Everybody"
	e := newEnv(t)
	gh := githubtest.New(t)
	e.write("lookout.yaml", `sinks:
  log: {type: log}
syncer:
  poll_interval: 100ms
evaluator:
  catch_up_interval: 1s
delivery:
  poll_interval: 100ms
`)
	e.write("sources/gh.yaml", fmt.Sprintf(`name: gh
connector: github
rate_limit: {per_second: 1000, burst: 1000}
github:
  repo: %s
  base_url: %s
  token: ${LOOKOUT_E2E_GITHUB_TOKEN}
webhook:
  provider: github
  secret: ${LOOKOUT_E2E_GITHUB_WEBHOOK_SECRET}
watches:
  - name: fires
    when: 'record.title contains "fire"'
    notify: [log]
`, gh.Repo, gh.Srv.URL))
	token := "LOOKOUT_E2E_GITHUB_TOKEN=" + gh.Token
	hook := "LOOKOUT_E2E_GITHUB_WEBHOOK_SECRET=" + secret
	build := func(name string) string { return clitest.BuildBinary(t, "github.com/lookout-dev/lookout/cmd/"+name) }
	syncerd := clitest.StartBinaryEnv(t, build("syncer"), e.dir, e.url, token, hook)
	apid := clitest.StartBinaryEnv(t, build("api"), e.dir, e.url, token, hook) // the api validates the whole directory
	evaluatord := clitest.StartBinaryEnv(t, build("evaluator"), e.dir, e.url)  // neither
	e.daemons = []*clitest.DaemonTest{syncerd, apid, evaluatord}

	gh.Put(githubtest.Issue{Number: 2, Title: "The printer is on fire", User: "octocat", State: "open",
		Created: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC), Updated: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)})
	body := gh.Payload("issues", "opened", 2)
	req, err := http.NewRequest(http.MethodPost, "http://"+apid.Addr+"/ingest/gh", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = githubtest.Sign(secret, "issues", "d-e2e-1", body)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted && resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /ingest/gh: %d", resp.StatusCode)
	}
	e.wait("the notification of issue 2, delivered", 1,
		`SELECT count(*) FROM notifications WHERE source = 'gh' AND record_id = '2' AND watch = 'fires' AND status = 'delivered'`)
	if n := e.count(`SELECT count(*) FROM evaluations WHERE source = 'gh' AND record_id = '2' AND watch = 'fires' AND decision = 'notify'`); n != 1 {
		t.Errorf("%d notify evaluations of issue 2, want 1", n)
	}
	if n := e.count(`SELECT count(*) FROM changes WHERE source = 'gh' AND eval_status = 'done' AND NOT EXISTS (SELECT 1 FROM evaluations v WHERE v.source = changes.source AND v.change_id = changes.id)`); n != 0 {
		t.Errorf("%d changes of gh done without an evaluation", n)
	}
	if logs := evaluatord.Logs(); strings.Contains(logs, "cannot be built") || strings.Contains(logs, "refused") {
		t.Errorf("the evaluator refused the source:\n%s", logs)
	}
}
