package config

import (
	"cmp"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"
)

// Connector block defaults.
const (
	HTTPMaxPagesDefault   = 1000
	HTTPLookbackDefault   = time.Second
	HTTPSinceFormat       = "rfc3339"
	GitHubBaseURLDefault  = "https://api.github.com"
	GitHubLookbackDefault = time.Minute
	GitHubPerPageDefault  = 100
	GitHubMaxPagesDefault = 1000
)

// Paginations lists the values of http.pagination.
var Paginations = []string{"cursor", "link", "next", "none", "page"}

// SinceFormats lists the values of http.since_format.
var SinceFormats = []string{"rfc3339", "unix", "unix_ms"}

// validateConnector applies the defaults of the source's connector block
// and checks it. Expressions are compiled by the connector packages, which
// report their errors at the same keys.
func (s *Source) validateConnector() []error {
	var errs []error
	at := func(lineKey, key, format string, args ...any) {
		errs = append(errs, &Error{File: s.Path, Line: s.Line(lineKey), Key: key, Msg: fmt.Sprintf(format, args...)})
	}
	bad := func(key, format string, args ...any) { at(key, key, format, args...) }
	switch s.Connector {
	case "file":
		if len(s.File.Paths) == 0 {
			bad("file.paths", "is required (a list of glob patterns)")
		}
		for i, p := range s.File.Paths {
			if strings.TrimSpace(p) == "" {
				bad(fmt.Sprintf("file.paths[%d]", i), "is empty")
			}
		}
	case "http":
		s.validateHTTP(at)
	case "rss":
		checkURL(bad, "rss.url", s.RSS.URL)
		checkHeaders(bad, "rss.headers", s.RSS.Headers)
	case "github":
		s.validateGitHub(bad)
	}
	return errs
}

// validateHTTP checks the http block. at reports an error about key at the
// line of lineKey: a missing key is reported where the key that needs it is.
func (s *Source) validateHTTP(at func(lineKey, key, format string, args ...any)) {
	h := s.HTTP
	bad := func(key, format string, args ...any) { at(key, key, format, args...) }
	checkURL(bad, "http.url", h.URL)
	checkHeaders(bad, "http.headers", h.Headers)
	modeKey := "http.pagination" // where the mode was chosen
	if h.Pagination == "" {
		switch {
		case h.Next != "":
			h.Pagination, modeKey = "next", "http.next"
		case h.Cursor != "":
			h.Pagination, modeKey = "cursor", "http.cursor"
		case h.PageParam != "":
			h.Pagination, modeKey = "page", "http.page_param"
		default:
			h.Pagination = "none"
		}
	}
	switch h.Pagination {
	case "next":
		if h.Next == "" {
			at(modeKey, "http.next", "is required with pagination next (an expression returning the next page URL)")
		}
	case "cursor":
		if h.Cursor == "" {
			at(modeKey, "http.cursor", "is required with pagination cursor (an expression over body returning the next cursor)")
		}
		if h.CursorParam == "" {
			at(modeKey, "http.cursor_param", "is required with pagination cursor (the query parameter that carries the cursor)")
		}
	case "page":
		if h.PageParam == "" {
			at(modeKey, "http.page_param", "is required with pagination page (the query parameter that carries the page number)")
		}
	case "link", "none":
	default:
		bad("http.pagination", "%q is not supported (one of %s)", h.Pagination, strings.Join(Paginations, ", "))
	}
	unused := func(key, val, mode string) {
		if val != "" && h.Pagination != mode && slices.Contains(Paginations, h.Pagination) {
			bad(key, "is set but pagination is %s (it is used by pagination %s)", h.Pagination, mode)
		}
	}
	unused("http.next", h.Next, "next")
	unused("http.cursor", h.Cursor, "cursor")
	unused("http.cursor_param", h.CursorParam, "cursor")
	unused("http.page_param", h.PageParam, "page")
	if h.PageStart != nil && h.Pagination != "page" {
		bad("http.page_start", "is set but pagination is %s (it is used by pagination page)", h.Pagination)
	}
	if h.PageStart == nil {
		one := 1
		h.PageStart = &one
	} else if *h.PageStart < 0 {
		bad("http.page_start", "must not be negative")
	}
	if h.MaxPages < 0 {
		bad("http.max_pages", "must be positive")
	}
	h.MaxPages = cmp.Or(h.MaxPages, HTTPMaxPagesDefault)
	if h.Lookback == nil {
		d := HTTPLookbackDefault
		h.Lookback = &d
	} else if *h.Lookback < 0 {
		bad("http.lookback", "must not be negative")
	}
	h.SinceFormat = cmp.Or(h.SinceFormat, HTTPSinceFormat)
	if !slices.Contains(SinceFormats, h.SinceFormat) {
		bad("http.since_format", "%q is not supported (one of %s)", h.SinceFormat, strings.Join(SinceFormats, ", "))
	}
	if h.Since == "" {
		if h.UpdatedAt != "" {
			bad("http.updated_at", "is set but http.since is not (updated_at feeds the since cursor)")
		}
	} else if h.Snapshot {
		bad("http.since", "and http.snapshot are exclusive: an incremental source does not return the full set, so its missing records cannot be deleted")
	}
}

func (s *Source) validateGitHub(bad func(key, format string, args ...any)) {
	g := s.GitHub
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
	g.BaseURL = strings.TrimRight(cmp.Or(g.BaseURL, GitHubBaseURLDefault), "/")
	checkURL(bad, "github.base_url", g.BaseURL)
	if g.Lookback == nil {
		d := GitHubLookbackDefault
		g.Lookback = &d
	} else if *g.Lookback < 0 {
		bad("github.lookback", "must not be negative")
	}
	g.PerPage = cmp.Or(g.PerPage, GitHubPerPageDefault)
	if g.PerPage < 1 || g.PerPage > 100 {
		bad("github.per_page", "must be between 1 and 100, not %d", g.PerPage)
	}
	if g.MaxPages < 0 {
		bad("github.max_pages", "must be positive")
	}
	g.MaxPages = cmp.Or(g.MaxPages, GitHubMaxPagesDefault)
	if strings.ContainsAny(g.Token, " \r\n") {
		bad("github.token", "contains white space (is the ${ENV} reference right?)")
	}
}

func checkURL(bad func(key, format string, args ...any), key, raw string) {
	if raw == "" {
		bad(key, "is required")
		return
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		bad(key, "is not a valid URL: %v", err)
	case u.Scheme != "http" && u.Scheme != "https":
		bad(key, "must start with http:// or https://, not %q", raw)
	case u.Host == "":
		bad(key, "has no host: %q", raw)
	}
}

func checkHeaders(bad func(key, format string, args ...any), key string, h map[string]string) {
	for k, v := range h {
		if k == "" || strings.ContainsAny(k, " :\r\n\t") {
			bad(key+"."+k, "is not a valid header name")
		}
		if strings.ContainsAny(v, "\r\n") {
			bad(key+"."+k, "value contains a line break")
		}
	}
}
