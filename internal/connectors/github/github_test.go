package github_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/connectors"
	"github.com/lookout-dev/lookout/internal/connectors/conntest"
	"github.com/lookout-dev/lookout/internal/connectors/github/githubtest"
	"github.com/lookout-dev/lookout/internal/connectors/httpjson"
)

func build(t *testing.T, f *githubtest.Server, extra string) connectors.Connector {
	t.Helper()
	return buildFor(t, f.Repo, f.Srv.URL, f.Token, extra)
}

func buildFor(t *testing.T, repo, baseURL, token, extra string) connectors.Connector {
	t.Helper()
	src := fmt.Sprintf("name: gh\nconnector: github\ntimeout: 2s\ngithub:\n  repo: %s\n  base_url: %s\n  token: %s\n%s", repo, baseURL, token, extra)
	dir := conntest.WriteConfig(t, map[string]string{"sources/gh.yaml": src})
	cfg, err := config.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := connectors.New(cfg.Sources[0], connectors.Env{Dir: dir, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return conn
}

func byID(items []map[string]any) map[string]map[string]any {
	out := map[string]map[string]any{}
	for _, it := range items {
		out[it["id"].(string)] = it
	}
	return out
}

func TestIssuesAndPullRequests(t *testing.T) {
	t.Parallel()
	f := githubtest.New(t)
	closed := time.Date(2026, 2, 3, 8, 0, 0, 0, time.UTC)
	merged := time.Date(2026, 2, 4, 9, 30, 0, 0, time.UTC)
	f.Put(githubtest.Issue{Number: 1347, Title: "Found a bug", Body: "I'm having a problem with this.", User: "octocat", State: "open",
		Labels: []string{"bug", "good first issue"}, Assignees: []string{"hubot", "monalisa"}, Milestone: "v1.0", Comments: 4,
		Created: time.Date(2026, 1, 22, 19, 33, 8, 0, time.UTC), Updated: time.Date(2026, 2, 2, 10, 0, 0, 0, time.UTC)})
	f.Put(githubtest.Issue{Number: 1350, Title: "Crash on start", User: "monalisa", State: "closed", StateReason: "completed",
		Created: time.Date(2026, 1, 25, 9, 0, 0, 0, time.UTC), Updated: closed, Closed: &closed})
	f.Put(githubtest.Issue{Number: 1352, Title: "Fix the crash on start", Body: "Fixes #1350", User: "hubot", State: "closed", PR: true,
		Created: time.Date(2026, 1, 26, 9, 0, 0, 0, time.UTC), Updated: merged, Closed: &merged, Merged: &merged})
	f.Put(githubtest.Issue{Number: 1353, Title: "WIP: new scheduler", User: "hubot", State: "open", PR: true, Draft: true,
		Created: time.Date(2026, 1, 27, 9, 0, 0, 0, time.UTC), Updated: time.Date(2026, 1, 27, 9, 0, 0, 0, time.UTC)})

	r := conntest.Fetch(t, build(t, f, ""), nil)
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	req := f.Log()[0]
	if req.URL.Path != "/repos/octo-org/hello-world/issues" {
		t.Errorf("path = %s", req.URL.Path)
	}
	q := req.URL.Query()
	for k, v := range map[string]string{"state": "all", "sort": "updated", "direction": "desc", "per_page": "100"} {
		if q.Get(k) != v {
			t.Errorf("query %s = %q, want %q", k, q.Get(k), v)
		}
	}
	if q.Has("since") {
		t.Error("first run sent since")
	}
	for k, v := range map[string]string{"Authorization": "Bearer ghp_test", "Accept": "application/vnd.github+json", "X-GitHub-Api-Version": "2022-11-28", "User-Agent": "lookout"} {
		if req.Header.Get(k) != v {
			t.Errorf("header %s = %q, want %q", k, req.Header.Get(k), v)
		}
	}
	if got := r.IDs(); !slices.Equal(got, []string{"1352", "1350", "1347", "1353"}) {
		t.Errorf("ids = %v, want most recently updated first", got)
	}
	items := byID(r.Items())
	bug := items["1347"]
	want := map[string]any{"title": "Found a bug", "body": "I'm having a problem with this.", "url": "https://github.com/octo-org/hello-world/issues/1347",
		"author": "octocat", "status": "open", "kind": "issue", "milestone": "v1.0", "comments": int64(4),
		"created_at": "2026-01-22T19:33:08Z", "updated_at": "2026-02-02T10:00:00Z"}
	for k, v := range want {
		if bug[k] != v {
			t.Errorf("issue %s = %#v, want %#v", k, bug[k], v)
		}
	}
	if fmt.Sprint(bug["labels"]) != "[bug good first issue]" || fmt.Sprint(bug["assignees"]) != "[hubot monalisa]" {
		t.Errorf("labels %v assignees %v", bug["labels"], bug["assignees"])
	}
	if _, ok := bug["closed_at"]; ok {
		t.Error("an open issue has no closed_at")
	}
	crash := items["1350"]
	if crash["status"] != "closed" || crash["closed_at"] != "2026-02-03T08:00:00Z" || crash["state_reason"] != "completed" || crash["body"] != nil {
		t.Errorf("closed issue = %v", crash)
	}
	pr := items["1352"]
	if pr["kind"] != "pr" || pr["merged_at"] != "2026-02-04T09:30:00Z" || pr["draft"] != false || pr["url"] != "https://github.com/octo-org/hello-world/pull/1352" {
		t.Errorf("pull request = %v", pr)
	}
	if d := items["1353"]; d["kind"] != "pr" || d["draft"] != true {
		t.Errorf("draft pull request = %v", d)
	}
	// The raw JSON kept for audit is the issue as GitHub sent it.
	if raw := string(r.Pages[0].Items[0].Raw); !strings.Contains(raw, `"pull_request":{`) || !strings.Contains(raw, `"node_id"`) {
		t.Errorf("raw = %s", raw)
	}
	if r.Result.Complete {
		t.Error("github is incremental: Complete must be false")
	}
}

func TestLinkPaginationAndSinceCursor(t *testing.T) {
	t.Parallel()
	f := githubtest.New(t)
	f.Seed(7)
	conn := build(t, f, "  per_page: 3\n  lookback: 90s\n")
	r1 := conntest.Fetch(t, conn, nil)
	if r1.Err != nil {
		t.Fatal(r1.Err)
	}
	if got := strings.Join(r1.IDs(), ","); got != "7,6,5,4,3,2,1" {
		t.Errorf("ids = %s", got)
	}
	reqs := f.Log()
	if len(reqs) != 3 || reqs[1].URL.Path != "/repositories/1296269/issues" || reqs[2].URL.Query().Get("page") != "3" {
		t.Fatalf("requests: %v", reqs)
	}
	cur := r1.Cursor(nil)
	var st httpjson.State
	mustJSON(t, cur, &st)
	max := f.Get(7).Updated
	if st.MaxUpdatedAt != max.Format(time.RFC3339Nano) || st.Resume != nil {
		t.Errorf("cursor = %s, want max_updated_at %s", cur, max.Format(time.RFC3339))
	}

	// Issue 2 gets a comment; the next run asks only for what changed since
	// the largest updated_at minus the lookback.
	is := f.Get(2)
	is.Comments, is.Updated = 1, max.Add(5*time.Minute)
	f.Put(is)
	r2 := conntest.Fetch(t, conn, cur)
	if r2.Err != nil {
		t.Fatal(r2.Err)
	}
	if got, want := f.Log()[3].URL.Query().Get("since"), max.Add(-90*time.Second).Format(time.RFC3339); got != want {
		t.Errorf("since = %s, want %s", got, want)
	}
	if got := strings.Join(r2.IDs(), ","); got != "2,7,6" {
		t.Errorf("second run ids = %s, want the updated issue and those inside the lookback", got)
	}
}

func TestETagNotModifiedCostsNothing(t *testing.T) {
	t.Parallel()
	f := githubtest.New(t)
	f.Seed(4)
	conn := build(t, f, "")
	r1 := conntest.Fetch(t, conn, nil)
	r2 := conntest.Fetch(t, conn, r1.Cursor(nil)) // first run with since: a new URL, no validators
	if r1.Err != nil || r2.Err != nil {
		t.Fatal(r1.Err, r2.Err)
	}
	before := f.Remaining
	cur := r2.Cursor(r1.Cursor(nil))
	r3 := conntest.Fetch(t, conn, cur)
	reqs := f.Log()
	if inm := reqs[2].Header.Get("If-None-Match"); inm == "" || !strings.HasPrefix(inm, `W/"`) {
		t.Errorf("If-None-Match = %q, want the stored weak ETag", inm)
	}
	if !errors.Is(r3.Err, connectors.ErrNotModified) || len(r3.Pages) != 0 {
		t.Fatalf("err %v pages %d, want ErrNotModified and nothing emitted", r3.Err, len(r3.Pages))
	}
	if f.Remaining != before {
		t.Errorf("rate limit went from %d to %d on a 304", before, f.Remaining)
	}
	// Any change shows on the first page (most recently updated first).
	is := f.Get(1)
	is.State, is.Updated = "closed", is.Updated.Add(time.Hour)
	f.Put(is)
	r4 := conntest.Fetch(t, conn, cur)
	if r4.Err != nil || r4.IDs()[0] != "1" {
		t.Fatalf("after a change: err %v ids %v", r4.Err, r4.IDs())
	}
}

func TestRateLimitRemainingZeroPausesUntilReset(t *testing.T) {
	t.Parallel()
	f := githubtest.New(t)
	f.Seed(7)
	f.Remaining = 1 // the first page spends the budget
	conn := build(t, f, "  per_page: 3\n")
	r1 := conntest.Fetch(t, conn, nil)
	var retry *connectors.RetryLaterError
	if !errors.As(r1.Err, &retry) || !retry.RetryAt.Equal(f.Reset) {
		t.Fatalf("err = %v, want RetryLaterError at the X-RateLimit-Reset %s", r1.Err, f.Reset)
	}
	if len(f.Log()) != 1 || len(r1.IDs()) != 3 {
		t.Fatalf("requests %d, items %d: want one page and no request that would be refused", len(f.Log()), len(r1.IDs()))
	}
	// After the reset the run resumes at page 2 of the same walk.
	f.Mu.Lock()
	f.Remaining = 5000
	f.Mu.Unlock()
	r2 := conntest.Fetch(t, conn, r1.Cursor(nil))
	if r2.Err != nil {
		t.Fatal(r2.Err)
	}
	if got := f.Log()[1].URL; got.Path != "/repositories/1296269/issues" || got.Query().Get("page") != "2" {
		t.Errorf("resumed at %s, want page 2 of the Link walk", got)
	}
	if got := strings.Join(r2.IDs(), ","); got != "4,3,2,1" {
		t.Errorf("resumed ids = %s", got)
	}
}

func TestRateLimitAnswers(t *testing.T) {
	t.Parallel()
	t.Run("403 primary rate limit", func(t *testing.T) {
		t.Parallel()
		f := githubtest.New(t)
		f.Seed(2)
		f.Remaining = 0
		r := conntest.Fetch(t, build(t, f, ""), nil)
		var retry *connectors.RetryLaterError
		if !errors.As(r.Err, &retry) || !retry.RetryAt.Equal(f.Reset) {
			t.Fatalf("err = %v, want RetryLaterError at %s (not ErrUnauthorized)", r.Err, f.Reset)
		}
		if errors.Is(r.Err, connectors.ErrUnauthorized) {
			t.Error("a rate-limit 403 must not disable the source")
		}
	})
	t.Run("403 secondary rate limit with Retry-After", func(t *testing.T) {
		t.Parallel()
		f := githubtest.New(t)
		f.Intercept = func(w http.ResponseWriter, r *http.Request, n int) bool {
			w.Header().Set("Retry-After", "60")
			githubtest.WriteJSON(w, 403, map[string]any{"message": "You have exceeded a secondary rate limit. Please wait a few minutes before you try again.", "documentation_url": "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api#about-secondary-rate-limits", "status": "403"})
			return true
		}
		before := time.Now()
		r := conntest.Fetch(t, build(t, f, ""), nil)
		var retry *connectors.RetryLaterError
		if !errors.As(r.Err, &retry) || retry.RetryAt.Before(before.Add(59*time.Second)) || retry.RetryAt.After(time.Now().Add(61*time.Second)) {
			t.Fatalf("err = %v, want RetryLaterError in 60s", r.Err)
		}
	})
	t.Run("429 with Retry-After", func(t *testing.T) {
		t.Parallel()
		f := githubtest.New(t)
		f.Intercept = func(w http.ResponseWriter, r *http.Request, n int) bool {
			w.Header().Set("Retry-After", "30")
			githubtest.WriteJSON(w, 429, map[string]any{"message": "Too Many Requests"})
			return true
		}
		r := conntest.Fetch(t, build(t, f, ""), nil)
		var retry *connectors.RetryLaterError
		if !errors.As(r.Err, &retry) {
			t.Fatalf("err = %v, want RetryLaterError", r.Err)
		}
	})
}

func TestUnauthorizedAndNotFound(t *testing.T) {
	t.Parallel()
	f := githubtest.New(t)
	f.Seed(1)
	r := conntest.Fetch(t, buildFor(t, f.Repo, f.Srv.URL, "ghp_revoked", ""), nil)
	if !errors.Is(r.Err, connectors.ErrUnauthorized) || !strings.Contains(r.Err.Error(), "Bad credentials") {
		t.Errorf("err = %v, want ErrUnauthorized with GitHub's message", r.Err)
	}
	if strings.Contains(r.Err.Error(), "ghp_revoked") {
		t.Errorf("error leaks the token: %v", r.Err)
	}
	r = conntest.Fetch(t, buildFor(t, "octo-org/private-thing", f.Srv.URL, f.Token, ""), nil)
	if r.Err == nil || !strings.Contains(r.Err.Error(), "repository octo-org/private-thing not found, or the token cannot see it") || !strings.Contains(r.Err.Error(), "404") {
		t.Errorf("err = %v, want a not-found error naming the repository", r.Err)
	}
}

func TestPollIntervalIsHonoured(t *testing.T) {
	t.Parallel()
	f := githubtest.New(t)
	f.Seed(1)
	f.Poll = 300
	r := conntest.Fetch(t, build(t, f, ""), nil)
	if r.Err != nil || r.Result.MinInterval != 5*time.Minute {
		t.Errorf("err %v MinInterval %s, want 5m from X-Poll-Interval", r.Err, r.Result.MinInterval)
	}
}

// An issue updated while a run pages through the list moves to the front:
// later pages then repeat an item, which is skipped, and the moved issue is
// read by the next run, since its updated_at is past the cursor. Nothing
// is lost and the run does not fail on a duplicate id.
func TestUpdateDuringWalkLosesNothing(t *testing.T) {
	t.Parallel()
	f := githubtest.New(t)
	f.Seed(9)
	f.Served = func(n int) {
		if n != 1 {
			return
		}
		for i := range f.Issues { // f.Mu is held by serve
			if f.Issues[i].Number == 2 {
				f.Issues[i].Updated = f.Issues[i].Updated.Add(time.Hour)
				f.Issues[i].Comments++
			}
		}
	}
	conn := build(t, f, "  per_page: 3\n")
	r1 := conntest.Fetch(t, conn, nil)
	if r1.Err != nil {
		t.Fatal(r1.Err)
	}
	ids := r1.IDs()
	seen := map[string]bool{}
	for _, id := range ids {
		if seen[id] {
			t.Errorf("id %s emitted twice in one run: %v", id, ids)
		}
		seen[id] = true
	}
	f.Served = nil
	r2 := conntest.Fetch(t, conn, r1.Cursor(nil))
	if r2.Err != nil {
		t.Fatal(r2.Err)
	}
	for _, id := range r2.IDs() {
		seen[id] = true
	}
	for i := 1; i <= 9; i++ {
		if !seen[fmt.Sprint(i)] {
			t.Errorf("issue %d was never read (run 1: %v, run 2: %v)", i, ids, r2.IDs())
		}
	}
	if got := byID(r2.Items())["2"]; got == nil || got["comments"] != int64(1) {
		t.Errorf("run 2 did not read the new version of issue 2: %v", r2.IDs())
	}
}

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	cases := []struct{ block, want string }{
		{"  repo: octo-org\n", `sources/gh.yaml:4: github.repo must be owner/name, not "octo-org"`},
		{"  repo: a/b\n  state: merged\n", `sources/gh.yaml:5: github.state must be open, closed or all, not "merged"`},
		{"  repo: a/b\n  per_page: 500\n", "sources/gh.yaml:5: github.per_page must be between 1 and 100, not 500"},
		{"  repo: a/b\n  base_url: api.github.com\n", `sources/gh.yaml:5: github.base_url must start with http:// or https://`},
		{"  repo: a/b\n  lookback: -1m\n", "sources/gh.yaml:5: github.lookback must not be negative"},
		{"  state: open\n", "sources/gh.yaml:3: github.repo is required (owner/name)"},
	}
	for _, tc := range cases {
		src := "name: gh\nconnector: github\ngithub:\n" + tc.block
		dir := conntest.WriteConfig(t, map[string]string{"sources/gh.yaml": src})
		_, err := config.Load(dir)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("config\n%s\nerror = %v\nwant it to contain %q", src, err, tc.want)
		}
	}
}

func mustJSON(t *testing.T, raw []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(raw, v); err != nil {
		t.Fatalf("decode %s: %v", raw, err)
	}
}
