package github_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// issue is one issue or pull request of the fake repository.
type issue struct {
	Number      int64
	Title       string
	Body        string
	User        string
	State       string // open, closed
	StateReason string // completed, not_planned, reopened, ""
	Labels      []string
	Assignees   []string
	Milestone   string
	Comments    int64
	Created     time.Time
	Updated     time.Time
	Closed      *time.Time
	PR          bool
	Draft       bool
	Merged      *time.Time
}

// fakeGitHub answers GET /repos/{owner}/{repo}/issues like api.github.com:
// the same parameters and defaults (state=open, sort=created,
// direction=desc, per_page=30), Link headers that point at
// /repositories/{id}/issues, weak ETags with 304s that cost no rate limit,
// the X-RateLimit-* headers with a 403 when the budget is spent, and the
// error bodies of the real API.
type fakeGitHub struct {
	t    *testing.T
	srv  *httptest.Server
	repo string // owner/name
	id   int64  // repository id

	mu        sync.Mutex
	issues    []issue
	token     string // required bearer token; "" accepts anonymous requests
	remaining int
	reset     time.Time
	poll      int // X-Poll-Interval seconds, 0 for none
	requests  []*http.Request
	// served is called after a page was served (n counts requests from 1).
	served    func(n int)
	intercept func(w http.ResponseWriter, r *http.Request, n int) bool
	// notes are the comments of each issue, oldest first.
	notes  map[int64][]note
	noteID int64
	now    func() time.Time
}

// note is one issue comment.
type note struct {
	ID      int64
	Body    string
	User    string
	Created time.Time
}

func newFakeGitHub(t *testing.T) *fakeGitHub {
	f := &fakeGitHub{t: t, repo: "octo-org/hello-world", id: 1296269, token: "ghp_test", remaining: 5000,
		reset: time.Now().Add(time.Hour).Truncate(time.Second), notes: map[int64][]note{}, now: time.Now}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

// seed adds n issues, #1..#n, created and updated one minute apart; every
// third one is a pull request.
func (f *fakeGitHub) seed(n int) {
	base := time.Date(2026, 2, 1, 12, 0, 0, 0, time.UTC)
	for i := 1; i <= n; i++ {
		at := base.Add(time.Duration(i) * time.Minute)
		is := issue{Number: int64(i), Title: fmt.Sprintf("Issue %d", i), Body: fmt.Sprintf("Body of %d", i), User: "octocat",
			State: "open", Labels: []string{"bug"}, Created: at, Updated: at}
		if i%3 == 0 {
			is.PR, is.Title = true, fmt.Sprintf("Pull request %d", i)
		}
		f.put(is)
	}
}

func (f *fakeGitHub) put(is issue) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range f.issues {
		if f.issues[i].Number == is.Number {
			f.issues[i] = is
			return
		}
	}
	f.issues = append(f.issues, is)
}

func (f *fakeGitHub) get(n int64) issue {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, is := range f.issues {
		if is.Number == n {
			return is
		}
	}
	f.t.Fatalf("no issue #%d", n)
	return issue{}
}

func (f *fakeGitHub) log() []*http.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.requests)
}

func (f *fakeGitHub) rateHeaders(w http.ResponseWriter) {
	w.Header().Set("X-RateLimit-Limit", "5000")
	w.Header().Set("X-RateLimit-Remaining", strconv.Itoa(f.remaining))
	w.Header().Set("X-RateLimit-Reset", strconv.FormatInt(f.reset.Unix(), 10))
	w.Header().Set("X-RateLimit-Used", strconv.Itoa(5000-f.remaining))
	w.Header().Set("X-RateLimit-Resource", "core")
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (f *fakeGitHub) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.requests = append(f.requests, r.Clone(r.Context()))
	n := len(f.requests)
	intercept := f.intercept
	f.mu.Unlock()
	if intercept != nil && intercept(w, r, n) {
		return
	}
	w.Header().Set("X-GitHub-Api-Version-Selected", "2022-11-28")
	w.Header().Set("X-GitHub-Request-Id", fmt.Sprintf("CAFE:%04X:1B2C3D:1C3D4E:65E4F00%d", n, n%10))
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.token != "" && r.Header.Get("Authorization") != "Bearer "+f.token && r.Header.Get("Authorization") != "token "+f.token {
		writeJSON(w, http.StatusUnauthorized, map[string]any{"message": "Bad credentials", "documentation_url": "https://docs.github.com/rest", "status": "401"})
		return
	}
	if f.remaining <= 0 {
		f.rateHeaders(w)
		writeJSON(w, http.StatusForbidden, map[string]any{
			"message":           "API rate limit exceeded for user ID 583231. If you reach out to GitHub Support for help, please include the request ID.",
			"documentation_url": "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api", "status": "403"})
		return
	}
	if m := issuePath.FindStringSubmatch(r.URL.Path); m != nil && strings.HasPrefix(r.URL.Path, "/repos/"+f.repo+"/") {
		n, _ := strconv.ParseInt(m[1], 10, 64)
		f.remaining--
		f.rateHeaders(w)
		f.serveIssue(w, r, n, m[2])
		return
	}
	path := fmt.Sprintf("/repos/%s/issues", f.repo)
	if r.URL.Path != path && r.URL.Path != fmt.Sprintf("/repositories/%d/issues", f.id) {
		writeJSON(w, http.StatusNotFound, map[string]any{"message": "Not Found", "documentation_url": "https://docs.github.com/rest/issues/issues#list-repository-issues", "status": "404"})
		return
	}
	q := r.URL.Query()
	state := cmpOr(q.Get("state"), "open")
	sortBy := cmpOr(q.Get("sort"), "created")
	dir := cmpOr(q.Get("direction"), "desc")
	perPage, _ := strconv.Atoi(cmpOr(q.Get("per_page"), "30"))
	perPage = min(max(perPage, 1), 100)
	page, _ := strconv.Atoi(cmpOr(q.Get("page"), "1"))
	page = max(page, 1)
	var since time.Time
	if s := q.Get("since"); s != "" {
		var err error
		if since, err = time.Parse(time.RFC3339, s); err != nil {
			writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"message": "Validation Failed",
				"errors": []any{map[string]any{"resource": "Issue", "field": "since", "code": "invalid"}}, "status": "422"})
			return
		}
	}
	list := slices.DeleteFunc(slices.Clone(f.issues), func(is issue) bool {
		return (state != "all" && is.State != state) || is.Updated.Before(since)
	})
	slices.SortStableFunc(list, func(a, b issue) int {
		var c int
		switch sortBy {
		case "updated":
			c = a.Updated.Compare(b.Updated)
		case "comments":
			c = int(a.Comments - b.Comments)
		default:
			c = a.Created.Compare(b.Created)
		}
		if c == 0 {
			c = int(a.Number - b.Number)
		}
		if dir == "desc" {
			c = -c
		}
		return c
	})
	last := max((len(list)+perPage-1)/perPage, 1)
	from := min((page-1)*perPage, len(list))
	body := make([]map[string]any, 0, perPage)
	for _, is := range list[from:min(from+perPage, len(list))] {
		body = append(body, f.json(is))
	}
	data, _ := json.Marshal(body)
	sum := sha256.Sum256(data)
	etag := `W/"` + hex.EncodeToString(sum[:16]) + `"`
	w.Header().Set("ETag", etag)
	w.Header().Set("Cache-Control", "private, max-age=60, s-maxage=60")
	w.Header().Set("Vary", "Accept, Authorization, Cookie, X-GitHub-OTP")
	if f.poll > 0 {
		w.Header().Set("X-Poll-Interval", strconv.Itoa(f.poll))
	}
	if inm := r.Header.Get("If-None-Match"); inm != "" && inm == etag {
		f.rateHeaders(w) // a 304 does not count against the rate limit
		w.WriteHeader(http.StatusNotModified)
		return
	}
	f.remaining--
	f.rateHeaders(w)
	link := func(p int) string {
		qq := url.Values{}
		for k, v := range q {
			qq[k] = v
		}
		qq.Set("page", strconv.Itoa(p))
		return fmt.Sprintf("<%s/repositories/%d/issues?%s>", f.srv.URL, f.id, qq.Encode())
	}
	var links []string
	if page > 1 {
		links = append(links, link(page-1)+`; rel="prev"`)
	}
	if page < last {
		links = append(links, link(page+1)+`; rel="next"`, link(last)+`; rel="last"`)
	}
	if page > 1 {
		links = append(links, link(1)+`; rel="first"`)
	}
	if len(links) > 0 {
		w.Header().Set("Link", strings.Join(links, ", "))
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(data)
	if f.served != nil {
		f.served(n)
	}
}

var issuePath = regexp.MustCompile(`^/repos/[^/]+/[^/]+/issues/(\d+)(/labels|/assignees|/comments)?$`)

// serveIssue answers the calls on one issue that the task actions make,
// as the REST API does: GET the issue, PUT its labels (replacing them),
// POST and DELETE assignees, GET comments (since, oldest first) and POST
// a comment. Every change moves updated_at. Called with f.mu held.
func (f *fakeGitHub) serveIssue(w http.ResponseWriter, r *http.Request, n int64, sub string) {
	i := slices.IndexFunc(f.issues, func(is issue) bool { return is.Number == n })
	if i < 0 {
		writeJSON(w, http.StatusNotFound, map[string]any{"message": "Not Found", "documentation_url": "https://docs.github.com/rest/issues/issues#get-an-issue", "status": "404"})
		return
	}
	is := &f.issues[i]
	var body map[string]any
	if r.Body != nil {
		_ = json.NewDecoder(r.Body).Decode(&body)
	}
	strs := func(key string) ([]string, bool) {
		list, ok := body[key].([]any)
		if !ok {
			writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"message": "Invalid request.\n\nFor '" + key + "', nil is not an array.",
				"documentation_url": "https://docs.github.com/rest/issues", "status": "422"})
			return nil, false
		}
		var out []string
		for _, x := range list {
			s, _ := x.(string)
			out = append(out, s)
		}
		return out, true
	}
	switch {
	case sub == "" && r.Method == http.MethodGet:
		writeJSON(w, http.StatusOK, f.json(*is))
	case sub == "/labels" && r.Method == http.MethodPut:
		labels, ok := strs("labels")
		if !ok {
			return
		}
		is.Labels, is.Updated = labels, f.now().UTC().Truncate(time.Second)
		writeJSON(w, http.StatusOK, f.json(*is)["labels"])
	case sub == "/assignees" && (r.Method == http.MethodPost || r.Method == http.MethodDelete):
		logins, ok := strs("assignees")
		if !ok {
			return
		}
		for _, l := range logins {
			if r.Method == http.MethodPost && !slices.Contains(is.Assignees, l) {
				is.Assignees = append(is.Assignees, l)
			}
			if r.Method == http.MethodDelete {
				is.Assignees = slices.DeleteFunc(is.Assignees, func(a string) bool { return a == l })
			}
		}
		is.Updated = f.now().UTC().Truncate(time.Second)
		status := http.StatusOK
		if r.Method == http.MethodPost {
			status = http.StatusCreated
		}
		writeJSON(w, status, f.json(*is))
	case sub == "/comments" && r.Method == http.MethodGet:
		var since time.Time
		if s := r.URL.Query().Get("since"); s != "" {
			since, _ = time.Parse(time.RFC3339, s)
		}
		out := []any{}
		for _, c := range f.notes[n] {
			if !c.Created.Before(since) {
				out = append(out, f.noteJSON(n, c))
			}
		}
		writeJSON(w, http.StatusOK, out)
	case sub == "/comments" && r.Method == http.MethodPost:
		text, _ := body["body"].(string)
		if text == "" {
			writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"message": "Validation Failed",
				"errors": []any{map[string]any{"resource": "IssueComment", "code": "missing_field", "field": "body"}}, "status": "422"})
			return
		}
		f.noteID++
		c := note{ID: f.noteID, Body: text, User: "lookout-bot", Created: f.now().UTC().Truncate(time.Second)}
		f.notes[n] = append(f.notes[n], c)
		is.Comments++
		is.Updated = c.Created
		writeJSON(w, http.StatusCreated, f.noteJSON(n, c))
	default:
		writeJSON(w, http.StatusNotFound, map[string]any{"message": "Not Found", "documentation_url": "https://docs.github.com/rest", "status": "404"})
	}
}

func (f *fakeGitHub) noteJSON(n int64, c note) map[string]any {
	return map[string]any{"id": c.ID, "node_id": "IC_kwDOABCD" + strconv.FormatInt(c.ID, 10),
		"url":      fmt.Sprintf("https://api.github.com/repos/%s/issues/comments/%d", f.repo, c.ID),
		"html_url": fmt.Sprintf("https://github.com/%s/issues/%d#issuecomment-%d", f.repo, n, c.ID),
		"body":     c.Body, "user": user(c.User, 7), "created_at": ts(&c.Created), "updated_at": ts(&c.Created),
		"issue_url": fmt.Sprintf("https://api.github.com/repos/%s/issues/%d", f.repo, n), "author_association": "NONE"}
}

// comments returns the bodies of issue n's comments.
func (f *fakeGitHub) comments(n int64) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, c := range f.notes[n] {
		out = append(out, c.Body)
	}
	return out
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func user(login string, id int64) map[string]any {
	return map[string]any{
		"login": login, "id": id, "node_id": "MDQ6VXNlcjE=", "avatar_url": "https://github.com/images/error/" + login + "_happy.gif",
		"gravatar_id": "", "url": "https://api.github.com/users/" + login, "html_url": "https://github.com/" + login,
		"followers_url": "https://api.github.com/users/" + login + "/followers", "type": "User", "site_admin": false,
	}
}

func ts(t *time.Time) any {
	if t == nil {
		return nil
	}
	return t.UTC().Format(time.RFC3339)
}

// json renders an issue as the REST API does (a subset of the keys of
// GET /repos/{owner}/{repo}/issues, in their real shapes).
func (f *fakeGitHub) json(is issue) map[string]any {
	api := "https://api.github.com/repos/" + f.repo
	html := "https://github.com/" + f.repo
	kind := "issues"
	if is.PR {
		kind = "pull"
	}
	labels := []any{}
	for i, l := range is.Labels {
		labels = append(labels, map[string]any{"id": 208045946 + i, "node_id": "MDU6TGFiZWwyMDgwNDU5NDY=",
			"url": api + "/labels/" + l, "name": l, "description": "Something isn't working", "color": "f29513", "default": i == 0})
	}
	assignees := []any{}
	var assignee any
	for i, a := range is.Assignees {
		assignees = append(assignees, user(a, int64(100+i)))
		if i == 0 {
			assignee = user(a, 100)
		}
	}
	var milestone any
	if is.Milestone != "" {
		milestone = map[string]any{"url": api + "/milestones/1", "html_url": html + "/milestones/" + is.Milestone, "id": 1002604,
			"number": 1, "state": "open", "title": is.Milestone, "description": "Tracking milestone", "creator": user("octocat", 1),
			"open_issues": 4, "closed_issues": 8, "created_at": "2025-10-10T20:09:31Z", "updated_at": "2026-01-10T20:09:31Z", "closed_at": nil, "due_on": nil}
	}
	var stateReason any
	if is.StateReason != "" {
		stateReason = is.StateReason
	}
	out := map[string]any{
		"url":                      fmt.Sprintf("%s/issues/%d", api, is.Number),
		"repository_url":           api,
		"labels_url":               fmt.Sprintf("%s/issues/%d/labels{/name}", api, is.Number),
		"comments_url":             fmt.Sprintf("%s/issues/%d/comments", api, is.Number),
		"events_url":               fmt.Sprintf("%s/issues/%d/events", api, is.Number),
		"html_url":                 fmt.Sprintf("%s/%s/%d", html, kind, is.Number),
		"id":                       1000000 + is.Number,
		"node_id":                  "I_kwDOABCD" + strconv.FormatInt(is.Number, 10),
		"number":                   is.Number,
		"title":                    is.Title,
		"user":                     user(is.User, 1),
		"labels":                   labels,
		"state":                    is.State,
		"locked":                   false,
		"assignee":                 assignee,
		"assignees":                assignees,
		"milestone":                milestone,
		"comments":                 is.Comments,
		"created_at":               ts(&is.Created),
		"updated_at":               ts(&is.Updated),
		"closed_at":                ts(is.Closed),
		"author_association":       "COLLABORATOR",
		"active_lock_reason":       nil,
		"body":                     is.Body,
		"reactions":                map[string]any{"url": fmt.Sprintf("%s/issues/%d/reactions", api, is.Number), "total_count": 0, "+1": 0, "-1": 0, "laugh": 0, "hooray": 0, "confused": 0, "heart": 0, "rocket": 0, "eyes": 0},
		"timeline_url":             fmt.Sprintf("%s/issues/%d/timeline", api, is.Number),
		"performed_via_github_app": nil,
		"state_reason":             stateReason,
	}
	if is.Body == "" {
		out["body"] = nil
	}
	if is.PR {
		out["draft"] = is.Draft
		out["pull_request"] = map[string]any{
			"url":       fmt.Sprintf("%s/pulls/%d", api, is.Number),
			"html_url":  fmt.Sprintf("%s/pull/%d", html, is.Number),
			"diff_url":  fmt.Sprintf("%s/pull/%d.diff", html, is.Number),
			"patch_url": fmt.Sprintf("%s/pull/%d.patch", html, is.Number),
			"merged_at": ts(is.Merged),
		}
	}
	return out
}
