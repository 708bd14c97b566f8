// Package github is the github connector: the issues and pull requests of
// one repository through the REST API, incrementally.
//
//	connector: github
//	github:
//	  repo: golang/go
//	  token: ${GITHUB_TOKEN}
//
// It lists GET /repos/{owner}/{repo}/issues?state=all&sort=updated
// &direction=desc&since=... (the issues endpoint returns pull requests too),
// follows the Link header, keeps the largest updated_at seen as its since
// cursor (minus a lookback), sends the first page's ETag, and honours
// X-RateLimit-* and X-Poll-Interval. It never guesses deletions.
//
// The list is read most recently updated first: an issue updated while a
// run pages through the list moves to the front, so later pages repeat an
// item (skipped by number) rather than skip one, as ascending order would;
// and any change shows on the first page, so an unchanged first page (304)
// proves that nothing changed.
package github

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/connectors"
	"github.com/lookout-dev/lookout/internal/connectors/httpjson"
	"github.com/lookout-dev/lookout/internal/normalize"
)

func init() {
	connectors.Register("github", Decode, newFromSettings)
}

// APIVersion is the REST API version requested.
const APIVersion = "2022-11-28"

// Defaults of the github: block.
const (
	BaseURLDefault  = "https://api.github.com"
	LookbackDefault = time.Minute
	PerPageDefault  = 100
	MaxPagesDefault = 1000
)

// Settings is the github: block of a source.
type Settings struct {
	// Repo is owner/name. Required.
	Repo string `yaml:"repo"`
	// Token is a GitHub token, written as ${ENV_VAR}. Defaults to none
	// (unauthenticated: 60 requests per hour, public repositories only).
	Token string `yaml:"token"`
	// State is open, closed or all. Defaults to all.
	State string `yaml:"state"`
	// BaseURL is the API root (GitHub Enterprise: https://HOST/api/v3).
	// Defaults to https://api.github.com.
	BaseURL string `yaml:"base_url"`
	// Lookback is subtracted from the since cursor. Defaults to 1m.
	Lookback *time.Duration `yaml:"lookback"`
	// PerPage is the page size, 1 to 100. Defaults to 100.
	PerPage int `yaml:"per_page"`
	// MaxPages bounds one run; the next run continues where it stopped.
	// Defaults to 1000.
	MaxPages int `yaml:"max_pages"`
	// Task sets how the connector acts on issues as tasks
	// (connectors.Actor): labels as the status, an assignee or a comment
	// as the visible claim. Defaults to none: the source does not act.
	Task *Task `yaml:"task"`
}

// Decode reads the github: block of src, applies its defaults and checks it.
func Decode(src *config.Source) (*Settings, error) {
	g := &Settings{}
	if err := src.DecodeBlock(g); err != nil {
		return nil, err
	}
	var errs []error
	bad := func(key, format string, args ...any) { errs = append(errs, src.Errorf(key, format, args...)) }
	owner, name, ok := strings.Cut(g.Repo, "/")
	if g.Repo == "" {
		bad("github.repo", "is required (owner/name)")
	} else if !ok || owner == "" || name == "" || strings.Contains(name, "/") || strings.ContainsAny(g.Repo, " ?#") {
		bad("github.repo", "must be owner/name, not %q", g.Repo)
	}
	g.State = cmp.Or(g.State, "all")
	if !slices.Contains([]string{"open", "closed", "all"}, g.State) {
		bad("github.state", "must be open, closed or all, not %q", g.State)
	}
	g.BaseURL = strings.TrimRight(cmp.Or(g.BaseURL, BaseURLDefault), "/")
	errs = append(errs, connectors.CheckURL(src, "github.base_url", g.BaseURL))
	if g.Lookback == nil {
		d := LookbackDefault
		g.Lookback = &d
	} else if *g.Lookback < 0 {
		bad("github.lookback", "must not be negative")
	}
	g.PerPage = cmp.Or(g.PerPage, PerPageDefault)
	if g.PerPage < 1 || g.PerPage > 100 {
		bad("github.per_page", "must be between 1 and 100, not %d", g.PerPage)
	}
	if g.MaxPages < 0 {
		bad("github.max_pages", "must be positive")
	}
	g.MaxPages = cmp.Or(g.MaxPages, MaxPagesDefault)
	if strings.ContainsAny(g.Token, " \r\n") {
		bad("github.token", "contains white space (is the ${ENV} reference right?)")
	}
	if g.Task != nil {
		errs = append(errs, g.Task.check(src)...)
	}
	return g, errors.Join(errs...)
}

// Options are the typed settings of New.
type Options struct {
	// Repo is owner/name. Required.
	Repo string
	// Token authenticates as Bearer; "" makes unauthenticated requests.
	Token string
	// State is open, closed or all. Defaults to all.
	State string
	// BaseURL is the API root. Defaults to https://api.github.com.
	BaseURL string
	// Lookback is subtracted from the since cursor.
	Lookback time.Duration
	// PerPage is the page size. Defaults to 100.
	PerPage int
	// MaxPages bounds one run. Defaults to 1000.
	MaxPages int
	// Task, when set, makes the connector act on issues (Claim, ...).
	Task *Task
	// Timeout bounds each request. Defaults to 30s.
	Timeout time.Duration
	// Env supplies the clock and the logger.
	Env connectors.Env
}

func newFromSettings(src *config.Source, g *Settings, env connectors.Env) (connectors.Connector, error) {
	o := Options{Repo: g.Repo, Token: g.Token, State: g.State, BaseURL: g.BaseURL, PerPage: g.PerPage,
		MaxPages: g.MaxPages, Timeout: src.Timeout, Env: env, Lookback: *g.Lookback, Task: g.Task}
	c, err := New(env.HTTP, o)
	if err != nil {
		return nil, src.Errorf("github", "%v", err)
	}
	return c, nil
}

// New returns the connector: the http connector's paging engine set up for
// the GitHub issues API.
func New(client *http.Client, o Options) (connectors.Connector, error) {
	owner, name, ok := strings.Cut(o.Repo, "/")
	if !ok || owner == "" || name == "" || strings.Contains(name, "/") {
		return nil, fmt.Errorf("repo must be owner/name, not %q", o.Repo)
	}
	if o.State == "" {
		o.State = "all"
	}
	if o.BaseURL == "" {
		o.BaseURL = BaseURLDefault
	}
	if o.PerPage <= 0 {
		o.PerPage = PerPageDefault
	}
	if o.MaxPages <= 0 {
		o.MaxPages = MaxPagesDefault
	}
	q := url.Values{}
	q.Set("state", o.State)
	q.Set("sort", "updated")
	q.Set("direction", "desc")
	q.Set("per_page", strconv.Itoa(o.PerPage))
	u := fmt.Sprintf("%s/repos/%s/%s/issues?%s", strings.TrimRight(o.BaseURL, "/"),
		url.PathEscape(owner), url.PathEscape(name), q.Encode())
	h := http.Header{}
	h.Set("Accept", "application/vnd.github+json")
	h.Set("X-GitHub-Api-Version", APIVersion)
	h.Set("User-Agent", "lookout")
	if o.Token != "" {
		h.Set("Authorization", "Bearer "+o.Token)
	}
	inner, err := httpjson.New(client, httpjson.Options{
		URL:                   u,
		Header:                h,
		Pagination:            httpjson.PageLink,
		MaxPages:              o.MaxPages,
		Since:                 "since",
		SinceFormat:           "rfc3339",
		Lookback:              o.Lookback,
		Timeout:               o.Timeout,
		Now:                   o.Env.Now,
		Logger:                o.Env.Logger,
		Shape:                 Shape,
		Key:                   func(v any) string { return v.(map[string]any)["id"].(string) },
		FirstPageShowsChanges: true,
		Inspect:               pollInterval,
	})
	if err != nil {
		return nil, err
	}
	if o.Timeout <= 0 {
		o.Timeout = config.TimeoutDefault
	}
	if o.Env.Now == nil {
		o.Env.Now = time.Now
	}
	if client == nil {
		client = &http.Client{}
	}
	return &Connector{Connector: inner, repo: o.Repo, client: client, header: h, task: o.Task, timeout: o.Timeout, now: o.Env.Now,
		api: fmt.Sprintf("%s/repos/%s/%s", strings.TrimRight(o.BaseURL, "/"), url.PathEscape(owner), url.PathEscape(name))}, nil
}

// Connector reads issues and pull requests, and acts on issues as tasks
// when its block has a task: block.
type Connector struct {
	*httpjson.Connector
	repo string

	client  *http.Client
	api     string // https://api.github.com/repos/owner/name
	header  http.Header
	task    *Task
	timeout time.Duration
	now     func() time.Time
	// acting lets one task action at a time make its requests.
	acting connectors.ActLock
}

var (
	_ connectors.Connector   = (*Connector)(nil)
	_ connectors.Actor       = (*Connector)(nil)
	_ connectors.TaskContent = (*Connector)(nil)
)

// Fetch reads the issues updated since the stored cursor; see
// httpjson.Connector.Fetch for the cursor and the pauses.
func (c *Connector) Fetch(ctx context.Context, cursor json.RawMessage, emit connectors.EmitFunc) (connectors.Result, error) {
	res, err := c.Connector.Fetch(ctx, cursor, emit)
	var se *connectors.StatusError
	if errors.As(err, &se) && se.Code == http.StatusNotFound {
		err = fmt.Errorf("repository %s not found, or the token cannot see it: %w", c.repo, err)
	}
	return res, err
}

// pollInterval honours X-Poll-Interval (seconds) as a lower bound on the
// next run.
func pollInterval(h http.Header, res *connectors.Result) {
	if s, err := strconv.Atoi(strings.TrimSpace(h.Get("X-Poll-Interval"))); err == nil && s > 0 {
		if d := time.Duration(s) * time.Second; d > res.MinInterval {
			res.MinInterval = d
		}
	}
}

// Shape turns one issue of the REST API into the item the connector emits:
//
//	id          the issue number, as a string
//	title, body
//	url         html_url
//	author      user.login
//	status      state (open, closed): closing an issue changes status
//	labels      label names
//	created_at, updated_at
//	kind        issue or pr (the issues endpoint lists pull requests too)
//	comments    the comment count
//	assignees   logins
//	milestone   the milestone title
//	closed_at, state_reason, locked
//	draft, merged_at   pull requests only
//
// Absent and null values are left out. The issue as received is kept as the
// record's raw JSON.
func Shape(v any) (any, json.RawMessage, error) {
	is, ok := v.(map[string]any)
	if !ok {
		return nil, nil, fmt.Errorf("want an issue object, got %T", v)
	}
	num, ok := is["number"].(int64)
	if !ok {
		return nil, nil, errors.New("issue has no number")
	}
	out := map[string]any{
		"id":     strconv.FormatInt(num, 10),
		"kind":   "issue",
		"labels": []any{},
	}
	copyKey := func(to, from string) {
		if x, ok := is[from]; ok && x != nil {
			out[to] = x
		}
	}
	copyKey("title", "title")
	copyKey("body", "body")
	copyKey("url", "html_url")
	copyKey("status", "state")
	copyKey("created_at", "created_at")
	copyKey("updated_at", "updated_at")
	copyKey("comments", "comments")
	copyKey("closed_at", "closed_at")
	copyKey("state_reason", "state_reason")
	copyKey("locked", "locked")
	if u, ok := is["user"].(map[string]any); ok {
		if login, ok := u["login"].(string); ok {
			out["author"] = login
		}
	}
	if ls, ok := is["labels"].([]any); ok {
		names := make([]any, 0, len(ls))
		for _, l := range ls {
			switch x := l.(type) {
			case map[string]any:
				if n, ok := x["name"].(string); ok {
					names = append(names, n)
				}
			case string:
				names = append(names, x)
			}
		}
		out["labels"] = names
	}
	if as, ok := is["assignees"].([]any); ok && len(as) > 0 {
		logins := make([]any, 0, len(as))
		for _, a := range as {
			if m, ok := a.(map[string]any); ok {
				if login, ok := m["login"].(string); ok {
					logins = append(logins, login)
				}
			}
		}
		out["assignees"] = logins
	}
	if m, ok := is["milestone"].(map[string]any); ok {
		if t, ok := m["title"].(string); ok {
			out["milestone"] = t
		}
	}
	if pr, ok := is["pull_request"].(map[string]any); ok {
		out["kind"] = "pr"
		if x, ok := pr["merged_at"]; ok && x != nil {
			out["merged_at"] = x
		}
		copyKey("draft", "draft")
	}
	return out, normalize.Canonical(is), nil
}
