package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/lookout-dev/lookout/internal/clitest"
	"github.com/lookout-dev/lookout/internal/testsignal"
	"github.com/lookout-dev/lookout/internal/tokens"
)

// End to end with the real binaries: a source its owner paused through the
// API, resumed by an admin on the admin page, runs again. The admin's
// Resume goes through the one resume path: it resumes the definition (the
// pause the syncer obeys), so the source is never `active` in the sources
// table while no syncer claims it (issue 21: it answered success and the
// source never ran again).
func TestAdminResumeOfAnAPIPausedSourceRuns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	up := &upstream{tickets: map[string]string{"1": "open"}}
	srv := httptest.NewServer(up)
	t.Cleanup(srv.Close)

	e := newEnv(t)
	e.write("lookout.yaml", "sinks:\n  log: {type: log}\nsyncer:\n  poll_interval: 200ms\napi:\n  allow_private: true\n")
	build := func(name string) string { return clitest.BuildBinary(t, "github.com/lookout-dev/lookout/cmd/"+name) }
	syncerd := clitest.StartBinary(t, build("syncer"), e.dir, e.url)
	apid := clitest.StartBinary(t, build("api"), e.dir, e.url)
	e.daemons = []*clitest.DaemonTest{syncerd, apid}
	wait := logsOnFailure{t: t, daemons: e.daemons}
	t.Cleanup(func() {
		if t.Failed() {
			var row, runs string
			_ = e.pool.QueryRow(ctx, `SELECT row_to_json(s)::text FROM sources s WHERE name = 'alice-feed'`).Scan(&row)
			_ = e.pool.QueryRow(ctx, `SELECT coalesce(json_agg(r ORDER BY id)::text, '') FROM sync_runs r WHERE source = 'alice-feed'`).Scan(&runs)
			t.Logf("alice-feed: %s\nits runs: %s", row, runs)
		}
	})
	_, aliceTok, err := tokens.Create(ctx, e.pool, tokens.NewToken{Owner: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	_, rootTok, err := tokens.Create(ctx, e.pool, tokens.NewToken{Owner: "root", Scope: "admin"})
	if err != nil {
		t.Fatal(err)
	}
	alice := &client{t: t, base: "http://" + apid.Addr, token: aliceTok}

	body := fmt.Sprintf(`{"name": "alice-feed", "connector": "http", "every": "1h", "http": {"url": %q}}`, srv.URL+"/tickets")
	if code := alice.call(http.MethodPost, "/v1/sources", body, nil); code != http.StatusCreated {
		t.Fatalf("create alice-feed: %d", code)
	}
	runs := func() int {
		return e.count(`SELECT count(*) FROM sync_runs WHERE source = 'alice-feed' AND status = 'succeeded'`)
	}
	testsignal.Eventually(wait, "alice-feed's first run, its lease released", func() bool {
		return runs() == 1 && e.count(`SELECT count(*) FROM sources WHERE name = 'alice-feed' AND lease_owner IS NULL AND last_success_at IS NOT NULL`) == 1
	})

	var firstRun time.Time
	if err := e.pool.QueryRow(ctx, `SELECT last_run_at FROM sources WHERE name = 'alice-feed'`).Scan(&firstRun); err != nil {
		t.Fatal(err)
	}
	if code := alice.call(http.MethodPost, "/v1/sources/alice-feed/pause", `{"reason": "holiday"}`, nil); code != http.StatusOK {
		t.Fatalf("pause alice-feed: %d", code)
	}
	testsignal.Eventually(wait, "the syncer follows the pause", func() bool {
		return e.count(`SELECT count(*) FROM sources WHERE name = 'alice-feed' AND status = 'paused'`) == 1
	})
	// Due long ago: resumed, it runs at the syncer's next poll.
	if _, err := e.pool.Exec(ctx, `UPDATE sources SET next_run_at = now() - interval '1 hour' WHERE name = 'alice-feed'`); err != nil {
		t.Fatal(err)
	}

	req, _ := http.NewRequest(http.MethodPost, "http://"+apid.Addr+"/admin/sources/alice-feed/resume", strings.NewReader(""))
	req.Header.Set("Authorization", "Bearer "+rootTok)
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noFollow.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	loc, _ := url.Parse(resp.Header.Get("Location"))
	if resp.StatusCode != http.StatusSeeOther || loc.Query().Get("error") != "" {
		t.Fatalf("admin resume: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	if got := loc.Query().Get("done"); got != "resumed alice-feed" {
		t.Errorf("admin resume says %q, want %q", got, "resumed alice-feed")
	}

	// A run that changes nothing writes no sync_runs row (it is counted in
	// sync_run_hours): the source's last_run_at says it ran.
	testsignal.Eventually(wait, "alice-feed runs again after the admin's resume", func() bool {
		return e.count(`SELECT count(*) FROM sources WHERE name = 'alice-feed' AND last_run_at > $1`, firstRun) == 1
	})
	if n := e.count(`SELECT count(*) FROM source_definitions WHERE name = 'alice-feed' AND NOT paused`); n != 1 {
		t.Errorf("alice-feed's definition is still paused after the admin's resume")
	}
	if n := e.count(`SELECT count(*) FROM audit_log WHERE action = 'resume' AND target = 'alice-feed' AND actor = 'root'`); n != 1 {
		t.Errorf("%d audit rows of root's resume of alice-feed, want 1", n)
	}
}
