// Package githubtest is a fake GitHub REST API (httptest) for tests: the
// issues list with the real parameters, Link paging, weak ETags and 304s,
// X-RateLimit-* headers and 403s when the budget is spent, one issue's
// calls (get, labels, assignees, comments), and signed webhook deliveries
// (issues, pull_request, issue_comment, ping) carrying the same objects.
package githubtest

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

	"github.com/lookout-dev/lookout/internal/signature"
)

// Issue is one issue or pull request of the fake repository.
type Issue struct {
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

// Server answers GET /repos/{owner}/{repo}/issues like api.github.com:
// the same parameters and defaults (state=open, sort=created,
// direction=desc, per_page=30), Link headers that point at
// /repositories/{id}/issues, weak ETags with 304s that cost no rate limit,
// the X-RateLimit-* headers with a 403 when the budget is spent, and the
// error bodies of the real API.
type Server struct {
	t    *testing.T
	Srv  *httptest.Server
	Repo string // owner/name
	ID   int64  // repository id

	Mu        sync.Mutex
	Issues    []Issue
	Token     string // required bearer token; "" accepts anonymous requests
	Remaining int
	Reset     time.Time
	Poll      int // X-Poll-Interval seconds, 0 for none
	Requests  []*http.Request
	// Served is called after a page was served (n counts requests from 1).
	Served    func(n int)
	Intercept func(w http.ResponseWriter, r *http.Request, n int) bool
	// Intercept, when it returns true, has answered the request itself.
	// Notes are the comments of each issue, oldest first.
	Notes  map[int64][]Note
	NoteID int64
	Now    func() time.Time
}

// Note is one issue comment.
type Note struct {
	ID      int64
	Body    string
	User    string
	Created time.Time
}

// New starts a fake of repository octo-org/hello-world that wants the
// token ghp_test; it stops with the test.
func New(t *testing.T) *Server {
	f := &Server{t: t, Repo: "octo-org/hello-world", ID: 1296269, Token: "ghp_test", Remaining: 5000,
		Reset: time.Now().Add(time.Hour).Truncate(time.Second), Notes: map[int64][]Note{}, Now: time.Now}
	f.Srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.Srv.Close)
	return f
}

// Seed adds n issues, #1..#n, created and updated one minute apart; every
// third one is a pull request.
func (f *Server) Seed(n int) {
	base := time.Date(2026, 2, 1, 12, 0, 0, 0, time.UTC)
	for i := 1; i <= n; i++ {
		at := base.Add(time.Duration(i) * time.Minute)
		is := Issue{Number: int64(i), Title: fmt.Sprintf("Issue %d", i), Body: fmt.Sprintf("Body of %d", i), User: "octocat",
			State: "open", Labels: []string{"bug"}, Created: at, Updated: at}
		if i%3 == 0 {
			is.PR, is.Title = true, fmt.Sprintf("Pull request %d", i)
		}
		f.Put(is)
	}
}

// Put adds is, or replaces the issue of its number.
func (f *Server) Put(is Issue) {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	for i := range f.Issues {
		if f.Issues[i].Number == is.Number {
			f.Issues[i] = is
			return
		}
	}
	f.Issues = append(f.Issues, is)
}

// Get returns issue n; the test fails without it.
func (f *Server) Get(n int64) Issue {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	for _, is := range f.Issues {
		if is.Number == n {
			return is
		}
	}
	f.t.Fatalf("no Issue #%d", n)
	return Issue{}
}

// Log returns the requests served so far.
func (f *Server) Log() []*http.Request {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	return slices.Clone(f.Requests)
}

func (f *Server) rateHeaders(w http.ResponseWriter) {
	w.Header().Set("X-RateLimit-Limit", "5000")
	w.Header().Set("X-RateLimit-Remaining", strconv.Itoa(f.Remaining))
	w.Header().Set("X-RateLimit-Reset", strconv.FormatInt(f.Reset.Unix(), 10))
	w.Header().Set("X-RateLimit-Used", strconv.Itoa(5000-f.Remaining))
	w.Header().Set("X-RateLimit-Resource", "core")
}

// WriteJSON answers status with v as JSON, as the REST API does.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (f *Server) serve(w http.ResponseWriter, r *http.Request) {
	f.Mu.Lock()
	f.Requests = append(f.Requests, r.Clone(r.Context()))
	n := len(f.Requests)
	intercept := f.Intercept
	f.Mu.Unlock()
	if intercept != nil && intercept(w, r, n) {
		return
	}
	w.Header().Set("X-GitHub-Api-Version-Selected", "2022-11-28")
	w.Header().Set("X-GitHub-Request-Id", fmt.Sprintf("CAFE:%04X:1B2C3D:1C3D4E:65E4F00%d", n, n%10))
	f.Mu.Lock()
	defer f.Mu.Unlock()
	if f.Token != "" && r.Header.Get("Authorization") != "Bearer "+f.Token && r.Header.Get("Authorization") != "token "+f.Token {
		WriteJSON(w, http.StatusUnauthorized, map[string]any{"message": "Bad credentials", "documentation_url": "https://docs.github.com/rest", "status": "401"})
		return
	}
	if f.Remaining <= 0 {
		f.rateHeaders(w)
		WriteJSON(w, http.StatusForbidden, map[string]any{
			"message":           "API rate limit exceeded for user ID 583231. If you reach out to GitHub Support for help, please include the request ID.",
			"documentation_url": "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api", "status": "403"})
		return
	}
	if m := issuePath.FindStringSubmatch(r.URL.Path); m != nil && strings.HasPrefix(r.URL.Path, "/repos/"+f.Repo+"/") {
		n, _ := strconv.ParseInt(m[1], 10, 64)
		f.Remaining--
		f.rateHeaders(w)
		f.serveIssue(w, r, n, m[2])
		return
	}
	path := fmt.Sprintf("/repos/%s/issues", f.Repo)
	if r.URL.Path != path && r.URL.Path != fmt.Sprintf("/repositories/%d/issues", f.ID) {
		WriteJSON(w, http.StatusNotFound, map[string]any{"message": "Not Found", "documentation_url": "https://docs.github.com/rest/issues/issues#list-repository-issues", "status": "404"})
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
			WriteJSON(w, http.StatusUnprocessableEntity, map[string]any{"message": "Validation Failed",
				"errors": []any{map[string]any{"resource": "Issue", "field": "since", "code": "invalid"}}, "status": "422"})
			return
		}
	}
	list := slices.DeleteFunc(slices.Clone(f.Issues), func(is Issue) bool {
		return (state != "all" && is.State != state) || is.Updated.Before(since)
	})
	slices.SortStableFunc(list, func(a, b Issue) int {
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
		body = append(body, f.JSON(is))
	}
	data, _ := json.Marshal(body)
	sum := sha256.Sum256(data)
	etag := `W/"` + hex.EncodeToString(sum[:16]) + `"`
	w.Header().Set("ETag", etag)
	w.Header().Set("Cache-Control", "private, max-age=60, s-maxage=60")
	w.Header().Set("Vary", "Accept, Authorization, Cookie, X-GitHub-OTP")
	if f.Poll > 0 {
		w.Header().Set("X-Poll-Interval", strconv.Itoa(f.Poll))
	}
	if inm := r.Header.Get("If-None-Match"); inm != "" && inm == etag {
		f.rateHeaders(w) // a 304 does not count against the rate limit
		w.WriteHeader(http.StatusNotModified)
		return
	}
	f.Remaining--
	f.rateHeaders(w)
	link := func(p int) string {
		qq := url.Values{}
		for k, v := range q {
			qq[k] = v
		}
		qq.Set("page", strconv.Itoa(p))
		return fmt.Sprintf("<%s/repositories/%d/issues?%s>", f.Srv.URL, f.ID, qq.Encode())
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
	if f.Served != nil {
		f.Served(n)
	}
}

var issuePath = regexp.MustCompile(`^/repos/[^/]+/[^/]+/issues/(\d+)(/labels|/assignees|/comments)?$`)

// serveIssue answers the calls on one issue that the task actions make,
// as the REST API does: GET the issue, PUT its labels (replacing them),
// POST and DELETE assignees, GET comments (since, oldest first) and POST
// a comment. Every change moves updated_at. Called with f.Mu held.
func (f *Server) serveIssue(w http.ResponseWriter, r *http.Request, n int64, sub string) {
	i := slices.IndexFunc(f.Issues, func(is Issue) bool { return is.Number == n })
	if i < 0 {
		WriteJSON(w, http.StatusNotFound, map[string]any{"message": "Not Found", "documentation_url": "https://docs.github.com/rest/issues/issues#get-an-issue", "status": "404"})
		return
	}
	is := &f.Issues[i]
	var body map[string]any
	if r.Body != nil {
		_ = json.NewDecoder(r.Body).Decode(&body)
	}
	strs := func(key string) ([]string, bool) {
		list, ok := body[key].([]any)
		if !ok {
			WriteJSON(w, http.StatusUnprocessableEntity, map[string]any{"message": "Invalid request.\n\nFor '" + key + "', nil is not an array.",
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
		WriteJSON(w, http.StatusOK, f.JSON(*is))
	case sub == "/labels" && r.Method == http.MethodPut:
		labels, ok := strs("labels")
		if !ok {
			return
		}
		is.Labels, is.Updated = labels, f.Now().UTC().Truncate(time.Second)
		WriteJSON(w, http.StatusOK, f.JSON(*is)["labels"])
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
		is.Updated = f.Now().UTC().Truncate(time.Second)
		status := http.StatusOK
		if r.Method == http.MethodPost {
			status = http.StatusCreated
		}
		WriteJSON(w, status, f.JSON(*is))
	case sub == "/comments" && r.Method == http.MethodGet:
		var since time.Time
		if s := r.URL.Query().Get("since"); s != "" {
			since, _ = time.Parse(time.RFC3339, s)
		}
		out := []any{}
		for _, c := range f.Notes[n] {
			if !c.Created.Before(since) {
				out = append(out, f.noteJSON(n, c))
			}
		}
		WriteJSON(w, http.StatusOK, out)
	case sub == "/comments" && r.Method == http.MethodPost:
		text, _ := body["body"].(string)
		if text == "" {
			WriteJSON(w, http.StatusUnprocessableEntity, map[string]any{"message": "Validation Failed",
				"errors": []any{map[string]any{"resource": "IssueComment", "code": "missing_field", "field": "body"}}, "status": "422"})
			return
		}
		f.NoteID++
		c := Note{ID: f.NoteID, Body: text, User: "lookout-bot", Created: f.Now().UTC().Truncate(time.Second)}
		f.Notes[n] = append(f.Notes[n], c)
		is.Comments++
		is.Updated = c.Created
		WriteJSON(w, http.StatusCreated, f.noteJSON(n, c))
	default:
		WriteJSON(w, http.StatusNotFound, map[string]any{"message": "Not Found", "documentation_url": "https://docs.github.com/rest", "status": "404"})
	}
}

func (f *Server) noteJSON(n int64, c Note) map[string]any {
	return map[string]any{"id": c.ID, "node_id": "IC_kwDOABCD" + strconv.FormatInt(c.ID, 10),
		"url":      fmt.Sprintf("https://api.github.com/repos/%s/issues/comments/%d", f.Repo, c.ID),
		"html_url": fmt.Sprintf("https://github.com/%s/issues/%d#issuecomment-%d", f.Repo, n, c.ID),
		"body":     c.Body, "user": user(c.User, 7), "created_at": ts(&c.Created), "updated_at": ts(&c.Created),
		"issue_url": fmt.Sprintf("https://api.github.com/repos/%s/issues/%d", f.Repo, n), "author_association": "NONE"}
}

// Comments returns the bodies of issue n's comments.
func (f *Server) Comments(n int64) []string {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	var out []string
	for _, c := range f.Notes[n] {
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

// JSON renders an issue as the REST API does (a subset of the keys of
// GET /repos/{owner}/{repo}/issues, in their real shapes).
func (f *Server) JSON(is Issue) map[string]any {
	api := "https://api.github.com/repos/" + f.Repo
	html := "https://github.com/" + f.Repo
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

// Comment adds a comment to issue n as a user would on github.com: the
// issue's comment count and updated_at move. It returns the comment.
func (f *Server) Comment(n int64, login, body string) Note {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	i := slices.IndexFunc(f.Issues, func(is Issue) bool { return is.Number == n })
	if i < 0 {
		f.t.Fatalf("no issue #%d", n)
	}
	f.NoteID++
	c := Note{ID: f.NoteID, Body: body, User: login, Created: f.Now().UTC().Truncate(time.Second)}
	f.Notes[n] = append(f.Notes[n], c)
	f.Issues[i].Comments++
	f.Issues[i].Updated = c.Created
	return c
}

// Webhook event types GitHub sends.
const (
	EventIssues       = "issues"
	EventPullRequest  = "pull_request"
	EventIssueComment = "issue_comment"
	EventPing         = "ping"
)

// Payload returns the body GitHub POSTs for event (issues, pull_request,
// issue_comment, ping) with action about issue n, with the repository and
// the sender: issues carries the issue as the REST API renders it;
// pull_request the pulls API's object (not the issue the poll lists);
// issue_comment the issue with the comment count from before the comment
// (as a delivery can) and the issue's last comment.
func (f *Server) Payload(event, action string, n int64) []byte {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	repo := map[string]any{"id": f.ID, "node_id": "R_kgDOABCD", "name": f.Repo[strings.Index(f.Repo, "/")+1:], "full_name": f.Repo,
		"private": false, "owner": user(f.Repo[:strings.Index(f.Repo, "/")], 9919), "html_url": "https://github.com/" + f.Repo,
		"url": "https://api.github.com/repos/" + f.Repo, "default_branch": "main"}
	body := map[string]any{"repository": repo, "sender": user("octocat", 1)}
	if event == EventPing {
		body["zen"] = "Design for failure."
		body["hook_id"] = 42
		body["hook"] = map[string]any{"type": "Repository", "id": 42, "name": "web", "active": true,
			"events": []any{"issues", "pull_request", "issue_comment"}, "config": map[string]any{"content_type": "json", "insecure_ssl": "0", "url": "https://example.com/ingest/gh"}}
		return mustJSON(body)
	}
	body["action"] = action
	i := slices.IndexFunc(f.Issues, func(is Issue) bool { return is.Number == n })
	if i < 0 {
		f.t.Fatalf("no issue #%d", n)
	}
	is := f.Issues[i]
	switch event {
	case EventPullRequest:
		body["number"] = is.Number
		body["pull_request"] = f.pullJSON(is)
	case EventIssueComment:
		notes := f.Notes[n]
		stale := is
		if stale.Comments > 0 {
			stale.Comments--
		}
		body["issue"] = f.JSON(stale)
		if len(notes) > 0 {
			body["comment"] = f.noteJSON(n, notes[len(notes)-1])
		}
	default:
		body["issue"] = f.JSON(is)
	}
	return mustJSON(body)
}

// pullJSON renders a pull request as the pulls API and pull_request
// deliveries do: no pull_request key, no state_reason, head and base.
func (f *Server) pullJSON(is Issue) map[string]any {
	api := "https://api.github.com/repos/" + f.Repo
	html := "https://github.com/" + f.Repo
	j := f.JSON(is)
	out := map[string]any{
		"url": fmt.Sprintf("%s/pulls/%d", api, is.Number), "id": 2000000 + is.Number, "node_id": "PR_kwDOABCD" + strconv.FormatInt(is.Number, 10),
		"html_url": fmt.Sprintf("%s/pull/%d", html, is.Number), "diff_url": fmt.Sprintf("%s/pull/%d.diff", html, is.Number),
		"number": is.Number, "state": is.State, "locked": false, "title": is.Title, "user": j["user"], "body": j["body"],
		"labels": j["labels"], "milestone": j["milestone"], "assignees": j["assignees"], "created_at": j["created_at"],
		"updated_at": j["updated_at"], "closed_at": j["closed_at"], "merged_at": ts(is.Merged), "draft": is.Draft,
		"merged": is.Merged != nil, "comments": is.Comments, "review_comments": 0, "commits": 1, "additions": 10, "deletions": 2,
		"head": map[string]any{"label": "octocat:feature", "ref": "feature", "sha": "6dcb09b5b57875f334f61aebed695e2e4193db5e"},
		"base": map[string]any{"label": "octo-org:main", "ref": "main", "sha": "9049f1265b7d61be4a8904a9a27120d2064dab3b"},
	}
	return out
}

// Sign returns the headers GitHub sends with a delivery of body:
// X-GitHub-Delivery, X-GitHub-Event, X-Hub-Signature-256 (the hex
// HMAC-SHA256 of body keyed with secret), User-Agent and Content-Type.
func Sign(secret, event, delivery string, body []byte) http.Header {
	h := http.Header{}
	h.Set("X-GitHub-Delivery", delivery)
	h.Set("X-GitHub-Event", event)
	h.Set("X-GitHub-Hook-ID", "42")
	h.Set("X-Hub-Signature-256", signature.SignHex([]byte(secret), body))
	h.Set("User-Agent", "GitHub-Hookshot/044aadd")
	h.Set("Content-Type", "application/json")
	return h
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}
