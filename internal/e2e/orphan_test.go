package e2e

import (
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lookout-dev/lookout/internal/clitest"
	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/definitions"
	"github.com/lookout-dev/lookout/internal/tokens"
)

// configWarning returns the warning of /readyz's config check.
func configWarning(d *clitest.DaemonTest) string {
	_, body := d.Get("/readyz")
	var r struct {
		Checks []struct{ Name, Warning string }
	}
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		return ""
	}
	for _, c := range r.Checks {
		if c.Name == "config" {
			return c.Warning
		}
	}
	return ""
}

// End to end with the real binaries: alice's token watches a file source
// of the operator's. A second syncer started with another configuration
// directory (a wrong ConfigMap, a laptop) does not apply it: her watch
// survives and that syncer's /readyz names both hashes. `apply` of that
// directory is refused; `apply --force` applies it, and the source she
// watches is orphaned, not deleted: her watch stays, the API says its
// source is orphaned, the audit says so. The first directory applied
// again adopts the source, and her watch fires a notification.
func TestAnotherDirectoryNeverDeletesUsersWatches(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	global := "sinks:\n  log: {type: log}\nsyncer:\n  poll_interval: 100ms\nevaluator:\n  catch_up_interval: 1s\n"
	e.write("lookout.yaml", global)
	e.write("sources/tasks.yaml", reloadSource)
	e.write("data/a.jsonl", taskJSON("t1", "open"))
	other := t.TempDir()
	for name, content := range map[string]string{"lookout.yaml": global, "sources/other.yaml": strings.ReplaceAll(reloadSource, "name: tasks", "name: other")} {
		if err := os.MkdirAll(filepath.Join(other, filepath.Dir(name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(other, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	hashOf := func(dir string) string {
		cfg, err := config.Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		h, err := definitions.DirectoryHash(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return definitions.Short(h)
	}
	first, second := hashOf(e.dir), hashOf(other)

	s1, ev := e.binaries()
	sb := clitest.BuildBinary(t, "github.com/lookout-dev/lookout/cmd/syncer")
	apid := clitest.StartBinary(t, clitest.BuildBinary(t, "github.com/lookout-dev/lookout/cmd/api"), e.dir, e.url)
	e.daemons = []*clitest.DaemonTest{s1, ev, apid}
	_, secret, err := tokens.Create(t.Context(), e.pool, tokens.NewToken{Owner: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	alice := &client{t: t, base: "http://" + apid.Addr, token: secret}
	if code := alice.call(http.MethodPost, "/v1/watches", `{"source": "tasks",
		"watch": {"name": "mine", "when": "record.status == \"done\"", "notify": ["log"]}}`, nil); code != http.StatusCreated {
		t.Fatalf("create alice's watch: %d", code)
	}
	e.wait("the first run of tasks", 1, `SELECT count(*) FROM records WHERE source = 'tasks'`)
	var watch struct {
		SourceOrphaned bool `json:"source_orphaned"`
	}

	// A second syncer with another directory: not applied, reported.
	s2 := clitest.StartBinary(t, sb, other, e.url)
	e.daemons = append(e.daemons, s2)
	s2.WaitFor("the divergence in /readyz", func() bool {
		w := configWarning(s2)
		return strings.Contains(w, "not applied: its hash "+second+" differs from the applied generation 1 (hash "+first) &&
			strings.Contains(w, "apply --force") && strings.Contains(w, "it would added other")
	})
	if !strings.Contains(s2.Logs(), `"level":"ERROR","msg":"configuration directory not applied: it differs from the applied generation`) {
		t.Errorf("no ERROR logged by the second syncer:\n%s", s2.Logs())
	}
	if code := alice.call(http.MethodGet, "/v1/watches/tasks/mine", "", &watch); code != 200 || watch.SourceOrphaned {
		t.Fatalf("alice's watch after the second syncer started: %d %+v", code, watch)
	}
	if n := e.count(`SELECT count(*) FROM source_definitions WHERE name = 'other'`); n != 0 {
		t.Errorf("the second syncer's directory was applied")
	}
	if w := configWarning(s1); w != "" {
		t.Errorf("the first syncer warns: %s", w)
	}

	// `apply` of that directory: refused; with --force: applied, tasks
	// orphaned, alice's watch kept.
	apply := func(dir string, args ...string) (string, error) {
		cmd := exec.Command(sb, append([]string{"--config", dir, "apply"}, args...)...)
		cmd.Env = append(os.Environ(), "DATABASE_URL="+e.url)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := apply(other); err == nil || !strings.Contains(out, "differs from the applied generation 1") || !strings.Contains(out, "apply --force") {
		t.Errorf("apply of another directory without --force: %v\n%s", err, out)
	}
	if out, err := apply(other, "--force"); err != nil || !strings.Contains(out, "generation 2") || !strings.Contains(out, "orphaned tasks") {
		t.Fatalf("apply --force: %v\n%s", err, out)
	}
	if code := alice.call(http.MethodGet, "/v1/watches/tasks/mine", "", &watch); code != 200 || !watch.SourceOrphaned {
		t.Errorf("alice's watch after the forced apply: %d %+v, want kept, its source orphaned", code, watch)
	}
	if n := e.count(`SELECT count(*) FROM audit_log WHERE via = 'config' AND action = 'orphan' AND kind = 'watch' AND target = 'tasks/mine' AND owner = 'alice'`); n != 1 {
		t.Errorf("audit rows telling alice: %d, want 1", n)
	}
	s2.WaitFor("a clean /readyz of the second syncer", func() bool { return configWarning(s2) == "" })
	s1.WaitFor("the first syncer's warning", func() bool {
		return strings.Contains(configWarning(s1), "replaced: its hash "+first+" differs from the applied generation 2 (hash "+second)
	})

	// The operator fixes the mistake: the second syncer goes (its
	// directory resolves the file source's data folder against its own,
	// so a run it took would read another folder), and the first
	// directory is applied again: adopted; alice's watch works.
	s2.Stop()
	if out, err := apply(e.dir, "--force"); err != nil || !strings.Contains(out, "adopted tasks") {
		t.Fatalf("apply --force of the first directory: %v\n%s", err, out)
	}
	if code := alice.call(http.MethodGet, "/v1/watches/tasks/mine", "", &watch); code != 200 || watch.SourceOrphaned {
		t.Errorf("alice's watch after the adoption: %d %+v", code, watch)
	}
	e.write("data/a.jsonl", taskJSON("t1", "done"))
	if code := alice.call(http.MethodPost, "/v1/sources/tasks/run", "", nil); code != http.StatusAccepted {
		t.Fatalf("run_now: %d", code)
	}
	e.wait("alice's notification", 1, `SELECT count(*) FROM notifications WHERE watch = 'mine' AND owner = 'alice' AND record_id = 't1'`)
	s1.WaitFor("a clean /readyz of the first syncer", func() bool { return configWarning(s1) == "" })
}
