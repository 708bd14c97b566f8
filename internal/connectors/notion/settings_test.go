package notion_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/connectors"
	"github.com/lookout-dev/lookout/internal/connectors/conntest"
	"github.com/lookout-dev/lookout/internal/connectors/notion"
)

func TestBlockDefaults(t *testing.T) {
	t.Parallel()
	cfg, err := conntest.LoadSource(t, "name: s\nconnector: notion\nnotion:\n  database: 8e2c7c1a6a4b4f3e9d2c1b0a9f8e7d6c\n  token: secret_x\n  task: {}\n")
	if err != nil {
		t.Fatal(err)
	}
	n, err := notion.Decode(cfg.Sources[0])
	if err != nil {
		t.Fatal(err)
	}
	if n.Version != "2022-06-28" || n.BaseURL != "https://api.notion.com" || *n.Lookback != 2*time.Minute || n.PageSize != 100 ||
		n.MaxPages != 1000 || n.Snapshot || n.Status != "Status" || *n.Task != notion.TaskDefaults {
		t.Errorf("notion defaults: %+v task %+v", n, n.Task)
	}
	// The documented budget of api.notion.com is the host's default,
	// unless lookout.yaml's hosts: says otherwise.
	if rl := cfg.Global.HostLimit("api.notion.com"); rl != notion.RateDefault || rl.PerSecond != 3 {
		t.Errorf("host budget of api.notion.com = %+v, want %+v", rl, notion.RateDefault)
	}
	if rl := cfg.Global.HostLimit("api.notion.com:443"); rl != notion.RateDefault {
		t.Errorf("host budget of api.notion.com:443 = %+v", rl)
	}
	if rl := cfg.Global.HostLimit("example.com"); rl == notion.RateDefault {
		t.Errorf("other hosts got Notion's budget")
	}
}

func TestHostsOverrideTheNotionBudget(t *testing.T) {
	t.Parallel()
	dir := conntest.WriteConfig(t, map[string]string{"lookout.yaml": "hosts:\n  api.notion.com: {per_second: 1.5}\n"})
	cfg, err := config.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if rl := cfg.Global.HostLimit("api.notion.com"); rl != (config.RateLimit{PerSecond: 1.5, Burst: 1}) {
		t.Errorf("host budget = %+v, want hosts:'s 1.5/s", rl)
	}
}

func TestBlockErrors(t *testing.T) {
	t.Parallel()
	const head = "name: s\nconnector: notion\nnotion:\n"
	cases := []struct{ src, want string }{
		{head + "  token: x\n", "sources/s.yaml:3: notion.database is required (the database id from its URL)"},
		{head + "  database: abc\n  token: x\n", `sources/s.yaml:4: notion.database must be a database id (32 hex digits), not "abc"`},
		{head + "  database: 8e2c7c1a6a4b4f3e9d2c1b0a9f8e7d6c\n", "sources/s.yaml:3: notion.token is required (the integration's secret, as ${ENV_VAR})"},
		{head + "  database: 8e2c7c1a6a4b4f3e9d2c1b0a9f8e7d6c\n  token: x\n  version: 2025-09-03\n",
			"sources/s.yaml:6: notion.version 2025-09-03 queries data sources instead of databases, which this connector does not implement; use 2022-06-28"},
		{head + "  database: 8e2c7c1a6a4b4f3e9d2c1b0a9f8e7d6c\n  token: x\n  page_size: 500\n", "sources/s.yaml:6: notion.page_size must be between 1 and 100, not 500"},
		{head + "  database: 8e2c7c1a6a4b4f3e9d2c1b0a9f8e7d6c\n  token: x\n  task:\n    complete: Done\n    failed: Done\n",
			`sources/s.yaml:8: notion.task.failed "Done" is also task.complete: the four states need four values`},
		{head + "  database: 8e2c7c1a6a4b4f3e9d2c1b0a9f8e7d6c\n  token: x\n  task:\n    owner: x\n",
			"sources/s.yaml:7: notion.task.owner is not a known key (known: claim_expires_at, claimed_at, claimed_by, complete, completed_at, failed, in_progress, last_error, retry_count, run_id, status, todo)"},
	}
	for _, tc := range cases {
		_, err := conntest.LoadSource(t, tc.src)
		if err == nil || err.Error() != tc.want {
			t.Errorf("source\n%s\nerror = %v\nwant %q", tc.src, err, tc.want)
		}
	}
}

// The example source file of the docs loads and builds as written.
func TestDocsExampleBuilds(t *testing.T) {
	t.Parallel()
	body, err := os.ReadFile("../../../docs/examples/notion-tasks.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := conntest.LoadSource(t, strings.ReplaceAll(string(body), "${NOTION_TOKEN}", "secret_x"))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := connectors.New(cfg.Sources[0], connectors.Env{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := conn.(connectors.Actor); !ok {
		t.Error("the example's connector does not act")
	}
}
