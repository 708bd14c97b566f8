package e2e

import (
	"errors"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/lookout-dev/lookout/internal/config"
	_ "github.com/lookout-dev/lookout/internal/connectors/all"
	"github.com/lookout-dev/lookout/internal/connectors/conntest"
	"github.com/lookout-dev/lookout/internal/syncer"
	"github.com/lookout-dev/lookout/internal/watchspec"
)

var yamlBlock = regexp.MustCompile("(?s)```yaml\n(.*?)```")

// The source examples of docs/connectors.md load and build as written:
// connector blocks, mappings and watches.
func TestConnectorDocExamplesBuild(t *testing.T) {
	doc, err := os.ReadFile("../../docs/connectors.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, env := range []string{"TICKETS_TOKEN", "SHOP_KEY", "GITHUB_TOKEN", "IMAP_PASSWORD", "NOTION_TOKEN"} {
		t.Setenv(env, "x")
	}
	t.Setenv("AGENT_TASKS_DSN", "postgres://lookout_reader@db.example.com:5432/agents")
	n := 0
	for _, m := range yamlBlock.FindAllStringSubmatch(string(doc), -1) {
		src := m[1]
		if !strings.HasPrefix(src, "name:") && !strings.Contains(src, "\nname:") {
			continue
		}
		n++
		dir := conntest.WriteConfig(t, map[string]string{"sources/example.yaml": src})
		cfg, err := config.Load(dir)
		if err == nil {
			err = errors.Join(syncer.Build(cfg), watchspec.Check(cfg))
		}
		if err != nil {
			t.Errorf("docs example does not build:\n%s\n%v", src, err)
		}
	}
	if n < 5 {
		t.Errorf("found %d source examples in docs/connectors.md, want at least 5", n)
	}
}
