package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/lookout-dev/lookout/internal/clitest"
	"github.com/lookout-dev/lookout/internal/connectors/notion/notiontest"
	"github.com/lookout-dev/lookout/internal/secrets"
	"github.com/lookout-dev/lookout/internal/testsignal"
	"github.com/lookout-dev/lookout/internal/tokens"
)

// End to end with the real binaries: a Notion database whose id is all
// digits (32 of them: a YAML float, and 1.2345678901234568e+31 through
// float64) reaches the Notion API exactly, from a source file written
// without quotes and from a source created over HTTP, through the stored
// definitions the syncer reads. The same id sent as a JSON number is a
// 422 at /notion/database (a number is not a string), never a rounded id.
func TestAllDigitNotionIDSurvives(t *testing.T) {
	t.Parallel()
	const id = "12345678901234567890123456789012"
	f := notiontest.New(t, notiontest.Property{Name: "Name", Type: "title"})
	f.DatabaseID = id[0:8] + "-" + id[8:12] + "-" + id[12:16] + "-" + id[16:20] + "-" + id[20:]
	f.AddPage(map[string]any{"Name": notiontest.Title("first")})

	e := newEnv(t)
	e.write("lookout.yaml", "sinks:\n  log: {type: log}\nsyncer:\n  poll_interval: 200ms\napi:\n  allow_private: true\n")
	e.write("sources/digits.yaml", fmt.Sprintf("name: digits-file\nconnector: notion\nevery: 1h\nnotion:\n  database: %s\n  token: ${LOOKOUT_TEST_NOTION_TOKEN}\n  base_url: %s\n", id, f.URL))
	key, err := secrets.NewKey("k1")
	if err != nil {
		t.Fatal(err)
	}
	env := []string{secrets.KeyEnv + "=" + key, "LOOKOUT_TEST_NOTION_TOKEN=" + f.Token}
	build := func(name string) string { return clitest.BuildBinary(t, "github.com/lookout-dev/lookout/cmd/"+name) }
	syncerd := clitest.StartBinaryEnv(t, build("syncer"), e.dir, e.url, env...)
	apid := clitest.StartBinaryEnv(t, build("api"), e.dir, e.url, env...)
	e.daemons = []*clitest.DaemonTest{syncerd, apid}
	_, tok, err := tokens.Create(context.Background(), e.pool, tokens.NewToken{Owner: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	alice := &client{t: t, base: "http://" + apid.Addr, token: tok}

	source := func(name, database string) string {
		return fmt.Sprintf(`{"name": %q, "connector": "notion", "every": "1h", "notion": {"database": %s, "token": %q, "base_url": %q}}`, name, database, f.Token, f.URL)
	}
	var problem struct {
		Status int
		Errors []struct{ Pointer, Detail string }
	}
	if code := alice.call(http.MethodPost, "/v1/sources", source("digits-number", id), &problem); code != http.StatusUnprocessableEntity ||
		len(problem.Errors) != 1 || problem.Errors[0].Pointer != "/notion/database" || !strings.Contains(problem.Errors[0].Detail, "must be a string, not "+id) {
		t.Errorf("the id as a JSON number: %d %+v, want 422 at /notion/database", code, problem)
	}
	var created struct {
		Definition struct{ Notion struct{ Database any } }
	}
	if code := alice.call(http.MethodPost, "/v1/sources", source("digits-api", `"`+id+`"`), &created); code != http.StatusCreated ||
		created.Definition.Notion.Database != id {
		t.Fatalf("create over HTTP: %d %+v", code, created)
	}

	// A new file source's first run is spread over its interval: due now.
	if _, err := e.pool.Exec(context.Background(), `UPDATE sources SET next_run_at = now() WHERE name = 'digits-file'`); err != nil {
		t.Fatal(err)
	}
	wait := logsOnFailure{t: t, daemons: e.daemons}
	for _, name := range []string{"digits-file", "digits-api"} {
		testsignal.Eventually(wait, name+" ran and succeeded", func() bool {
			return e.count(`SELECT count(*) FROM sync_runs WHERE source = $1 AND status = 'succeeded'`, name) > 0
		})
	}
	var stored string
	if err := e.pool.QueryRow(context.Background(), `SELECT definition->'notion'->>'database' FROM source_definitions WHERE name = 'digits-file'`).Scan(&stored); err != nil || stored != id {
		t.Errorf("stored database of the file's source = %q (%v), want %s", stored, err, id)
	}
	queries := 0
	for _, r := range f.Requests() {
		if !strings.HasPrefix(r.Path, "/v1/databases/") {
			continue
		}
		if !strings.HasPrefix(r.Path, "/v1/databases/"+id) {
			t.Errorf("%s %s: the database id is not %s", r.Method, r.Path, id)
		}
		if r.Path == "/v1/databases/"+id+"/query" {
			queries++
		}
	}
	if queries < 2 {
		t.Errorf("%d queries of database %s, want one per source at least", queries, id)
	}
}
