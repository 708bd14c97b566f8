package admin_test

import (
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
)

// ownedWorld is the world of the story with its definitions given to two
// users: inventory is alice's, tickets and its watches bob's (the rows the
// watches wrote carry bob as the evaluator writes a watch's owner).
func ownedWorld(t *testing.T) (*world, *client) {
	t.Helper()
	w := newWorld(t)
	w.populate()
	w.serve()
	w.exec(`UPDATE source_definitions SET owner = CASE name WHEN 'inventory' THEN 'alice' ELSE 'bob' END`)
	w.exec(`UPDATE watches SET owner = 'bob' WHERE source = 'tickets'`)
	for _, table := range []string{"evaluations", "notifications", "model_calls"} {
		w.exec(`UPDATE ` + table + ` SET owner = 'bob' WHERE source = 'tickets'`)
	}
	c := newClient(w)
	if resp, _ := c.login(w.adminTok); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign-in: %d", resp.StatusCode)
	}
	return w, c
}

var (
	tbody     = regexp.MustCompile(`(?s)<tbody>(.*?)</tbody>`)
	sourceRef = regexp.MustCompile(`href="/admin/sources/([^"#?/]+)`)
)

// tableRows returns the rows of the page's first table and the sources
// its rows link to.
func tableRows(page string) (int, map[string]bool) {
	m := tbody.FindStringSubmatch(page)
	if m == nil {
		return 0, nil
	}
	sources := map[string]bool{}
	for _, s := range sourceRef.FindAllStringSubmatch(m[1], -1) {
		sources[s[1]] = true
	}
	return strings.Count(m[1], "<tr>"), sources
}

// TestOwnerFilterOnTheReportPages: with ?owner= the pages of stuck work,
// recent failures, high retry, disabled sources and task runs list the
// owner's rows only (as many as their report view holds for the owner,
// each of the owner's source), and each says it is filtered.
func TestOwnerFilterOnTheReportPages(t *testing.T) {
	t.Parallel()
	w, c := ownedWorld(t)
	owned := map[string]string{"alice": "inventory", "bob": "tickets"}
	for _, p := range []struct {
		path, view, ownerCol string
		// setup makes rows of both owners for the page.
		setup string
	}{
		{"/admin/stuck", "report_stuck", "definition_owner",
			`UPDATE sources SET next_run_at = now() - interval '3 hours', stuck_after_seconds = 60`},
		{"/admin/failures", "report_recent_failures", "owner",
			`INSERT INTO sync_runs (source, owner, reason, status, started_at, finished_at, error)
			 VALUES ('inventory', 'syncer-1', 'schedule', 'failed', now(), now(), 'upstream answered 500')`},
		{"/admin/retry", "report_high_retry", "owner",
			`UPDATE sources SET failure_count = 2, last_error = 'upstream answered 500'`},
		{"/admin/disabled", "report_disabled_sources", "owner",
			`UPDATE sources SET status = 'paused', status_reason = 'maintenance', status_changed_at = now()`},
		{"/admin/tasks", "report_task_runs", "owner",
			`INSERT INTO task_runs (source, task, record_id, record_version, content_version, idempotency_key, run_id, status,
			                       claimed_by, claimed_at, claim_expires_at, executor)
			 SELECT s, 'triage', '1', 1, 'v1', s || ':1:vv1:triage', 'run-' || s, 'claimed', 'syncer-1', now(),
			        now() + interval '1 hour', 'command'
			 FROM unnest(ARRAY['inventory', 'tickets']) s`},
	} {
		w.exec(p.setup)
		for owner, source := range owned {
			want := w.count(fmt.Sprintf(`SELECT count(*) FROM %s WHERE %s = $1`, p.view, p.ownerCol), owner)
			if want == 0 {
				t.Fatalf("%s: the story left no row of %s's in %s", p.path, owner, p.view)
			}
			resp, page := c.do("GET", p.path+"?owner="+owner, nil, nil)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("%s?owner=%s: %d %.500s", p.path, owner, resp.StatusCode, page)
			}
			n, sources := tableRows(page)
			if int64(n) != want {
				t.Errorf("%s?owner=%s lists %d rows, %s holds %d of %s's", p.path, owner, n, p.view, want, owner)
			}
			for s := range sources {
				if s != source {
					t.Errorf("%s?owner=%s lists a row of %s, which is not %s's", p.path, owner, s, owner)
				}
			}
			if !strings.Contains(page, `<span class="chip on">owner = `+owner+`</span>`) {
				t.Errorf("%s?owner=%s does not say it is filtered on the owner", p.path, owner)
			}
			if !strings.Contains(page, `<option value="`+owner+`" selected>`) {
				t.Errorf("%s?owner=%s: the owner filter does not show %s", p.path, owner, owner)
			}
		}
	}
}

var card = regexp.MustCompile(`<a class="card[^"]*" href="([^"]*)"><span class="v">([^<]*)</span><span class="l">([^<]*)</span></a>`)

// TestOwnerFilterOnTheOverview: with ?owner= the overview's numbers are
// the owner's (report_owner_overview), each linking to the owner's rows;
// without it they are the whole system's (report_overview).
func TestOwnerFilterOnTheOverview(t *testing.T) {
	t.Parallel()
	w, c := ownedWorld(t)
	// tickets (bob's) overdue: stuck; inventory (alice's) paused.
	w.exec(`UPDATE sources SET next_run_at = now() - interval '3 hours', stuck_after_seconds = 60 WHERE name = 'tickets'`)
	w.exec(`UPDATE sources SET status = 'paused', status_reason = 'maintenance', status_changed_at = now() WHERE name = 'inventory'`)
	cards := func(owner string) map[string][2]string {
		t.Helper()
		path := "/admin/"
		if owner != "" {
			path += "?owner=" + owner
		}
		resp, page := c.do("GET", path, nil, nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d %.500s", path, resp.StatusCode, page)
		}
		out := map[string][2]string{}
		for _, m := range card.FindAllStringSubmatch(page, -1) {
			out[m[3]] = [2]string{m[2], m[1]}
		}
		return out
	}
	type want struct{ label, sql string }
	checks := []want{
		{"active sources", `SELECT count(*) FROM report_sources WHERE status = 'active' AND owner = $1`},
		{"not active", `SELECT count(*) FROM report_disabled_sources WHERE owner = $1`},
		{"failed runs (24h)", `SELECT count(*) FROM report_recent_failures WHERE kind = 'sync_run' AND owner = $1`},
		{"dead letters", `SELECT count(*) FROM report_dead_letters WHERE owner = $1`},
		{"stuck", `SELECT count(*) FROM report_stuck WHERE definition_owner = $1`},
	}
	seen := map[string]string{}
	for _, owner := range []string{"alice", "bob"} {
		got := cards(owner)
		for _, ck := range checks {
			n := w.count(ck.sql, owner)
			if got[ck.label][0] != fmt.Sprint(n) {
				t.Errorf("overview of %s: %s shows %q, SQL %d", owner, ck.label, got[ck.label][0], n)
			}
			seen[ck.label] += fmt.Sprint(n) + "/"
		}
		for label, v := range got {
			if !strings.Contains(v[1], "owner="+owner) {
				t.Errorf("overview of %s: the %s card links to %s, not to %s's rows", owner, label, v[1], owner)
			}
		}
	}
	// The two owners' numbers differ, so the page cannot pass by showing
	// the whole system's.
	for _, label := range []string{"active sources", "not active", "failed runs (24h)", "dead letters", "stuck"} {
		if v := strings.Split(seen[label], "/"); v[0] == v[1] {
			t.Errorf("alice's and bob's %s are both %s: the story does not tell them apart", label, v[0])
		}
	}
	all := cards("")
	if n := w.count(`SELECT dead_notifications FROM report_overview`); all["dead letters"][0] != fmt.Sprint(n) || strings.Contains(all["dead letters"][1], "owner=") {
		t.Errorf("overview of everyone: dead letters %v, SQL %d", all["dead letters"], n)
	}
	if resp, _ := c.do("GET", "/admin/?owner=nobody", nil, nil); resp.StatusCode != http.StatusNotFound {
		t.Errorf("overview of an owner of nothing: %d, want 404", resp.StatusCode)
	}
}

// TestOwnerFilterOnTheRowLists: the lists behind the overview's numbers
// and bars take the owner too: this hour's runs and changes of the
// owner's sources only.
func TestOwnerFilterOnTheRowLists(t *testing.T) {
	t.Parallel()
	w, c := ownedWorld(t)
	owned := map[string]string{"alice": "inventory", "bob": "tickets"}
	for _, l := range []struct{ what, sql string }{
		{"runs", `SELECT count(*) FROM sync_runs WHERE source = $1 AND started_at >= date_trunc('hour', now())`},
		{"changes", `SELECT count(*) FROM changes WHERE source = $1 AND created_at >= date_trunc('hour', now())`},
		{"pending_changes", `SELECT count(*) FROM changes WHERE source = $1 AND eval_status = 'pending'`},
	} {
		for owner, source := range owned {
			// "This hour" is the database's (the page's SQL reads now()):
			// when the hour changed between the SQL and the page, they
			// counted different hours; read both again.
			const thisHour = `SELECT extract(epoch FROM date_trunc('hour', now()))::bigint`
			var want int64
			var page string
			path := "/admin/rows/" + l.what + "?owner=" + owner
			for {
				hour := w.count(thisHour)
				want = w.count(l.sql, source)
				var resp *http.Response
				resp, page = c.do("GET", path, nil, nil)
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("%s: %d %.500s", path, resp.StatusCode, page)
				}
				if w.count(thisHour) == hour {
					break
				}
			}
			n, sources := tableRows(page)
			if int64(n) != want {
				t.Errorf("%s lists %d rows, SQL %d of %s", path, n, want, source)
			}
			for s := range sources {
				if s != source {
					t.Errorf("%s lists a row of %s, which is not %s's", path, s, owner)
				}
			}
		}
	}
}
