// Package notiontest is a fake Notion API for tests: an httptest server
// that answers the endpoints lookout uses the way Notion's public API
// reference (version 2022-06-28) describes them:
//
//	GET   /v1/databases/{id}        the database object with its property schema
//	POST  /v1/databases/{id}/query  pages, filtered and sorted, paginated
//	GET   /v1/pages/{id}            one page
//	PATCH /v1/pages/{id}            update properties, archive
//
// Responses have Notion's shapes (page objects, property values by type,
// lists with object "list", results, next_cursor, has_more), timestamps
// are rounded to the minute as Notion's are, and errors are Notion's error
// objects ({"object":"error","status":400,"code":"validation_error",...}):
// a missing or wrong token (401 unauthorized), a missing Notion-Version
// (400 missing_version), an unknown database or page (404
// object_not_found), a property the database lacks or a value of the
// wrong type or a status option that does not exist (400
// validation_error), a bad start_cursor. A test can inject 429
// rate_limited and 529 service_overload answers with Retry-After
// (FailNext, Storm), change a page behind the client's back (Edit: a person
// moving the card), and tie both to the client's requests of one page (On:
// a person's edit just before or just after lookout's read or write, a 429
// or 503 on a chosen call). Requests are recorded with the time they
// arrived by the fake's clock (SetNow) and the status they were answered.
package notiontest

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Version is the Notion-Version the fake implements.
const Version = "2022-06-28"

// HumanID is the user id of edits made with Edit; BotID that of requests.
const (
	HumanID = "5e9b2a1c-0d1e-4f60-8a7b-1c2d3e4f5a6b"
	BotID   = "b07b07b0-7b07-4b07-8b07-b07b07b07b07"
)

// Property is one property of the database schema.
type Property struct {
	// Name is the property name; Type its Notion type (title, rich_text,
	// number, select, multi_select, status, date, people, files,
	// checkbox, url, email, phone_number, formula, relation, rollup,
	// created_time, created_by, last_edited_time, last_edited_by,
	// unique_id).
	Name, Type string
	// Options are the option names of select, multi_select and status.
	Options []string
	// Compute gives the value of a formula or rollup property of a page
	// from its other property values (response shapes), as Notion's typed
	// value: {"type": "number", "number": 3}.
	Compute func(props map[string]any) map[string]any
}

// Server is the fake API. Its methods are safe for concurrent use.
type Server struct {
	// URL is the base URL to configure as base_url.
	URL string
	// Token is the integration token the server accepts.
	Token string
	// DatabaseID is the id of the one database.
	DatabaseID string

	srv *httptest.Server
	t   testing.TB

	mu       sync.Mutex
	now      func() time.Time
	schema   []*schemaProp
	pages    []*page
	seq      int
	users    map[string]string
	fails    []failure
	storm    *storm
	requests []Request
	// rules are what happens at chosen requests of a page (On), in the
	// order they were armed.
	rules []*Rule
}

// Rule is what happens at the next request of one page: the request
// fails, and/or a person edits the page just before it is served or just
// after it was answered. A rule fires once; Then is armed when it fired.
type Rule struct {
	// Method is GET or PATCH; "" matches both.
	Method string
	// Page is the page id (with or without dashes).
	Page string
	// Before is a person's edit (request shapes) applied when the request
	// arrives, before it is served or failed: a card moved just before
	// lookout's read or write.
	Before map[string]any
	// Fail, when set, answers the request with this status (429, 503,
	// 529, ...) and RetryAfter seconds (none when negative) instead of
	// serving it.
	Fail       int
	RetryAfter int
	// After is a person's edit applied right after the request was
	// answered, before any other request is served: a card moved between
	// lookout's read and its write, or between its write and its read.
	After map[string]any
	// Archive, with After, moves the page to the trash too.
	Archive bool
	// Then is armed once this rule fired.
	Then *Rule
}

// storm fails every n-th request with statuses in turn.
type storm struct {
	every, retryAfter, seen int
	statuses                []int
}

type schemaProp struct {
	Property
	id      string
	options []option
}

type option struct{ id, name, color string }

type page struct {
	id                    string
	created, edited       time.Time
	createdBy, lastEditBy string
	archived, inTrash     bool
	props                 map[string]any // name -> value object (response shape)
	createdSeq            int
}

type failure struct {
	status     int
	retryAfter int
}

// Request is one request the server received.
type Request struct {
	Method, Path string
	Header       http.Header
	Body         []byte
	// At is when it arrived, by the fake's clock (SetNow).
	At time.Time
	// Status is the status it was answered with.
	Status int
}

// New starts a fake with one database of the given properties (one must
// have type title) and the token "secret_test". It is closed when the test
// ends.
func New(t testing.TB, props ...Property) *Server {
	s := &Server{Token: "secret_test", DatabaseID: "8e2c7c1a-6a4b-4f3e-9d2c-1b0a9f8e7d6c", t: t,
		now:   func() time.Time { return time.Now().UTC() },
		users: map[string]string{HumanID: "Ada Lovelace", BotID: "lookout"}}
	for i, p := range props {
		sp := &schemaProp{Property: p, id: propID(i)}
		if p.Type == "title" {
			sp.id = "title"
		}
		colors := []string{"default", "gray", "brown", "orange", "yellow", "green", "blue", "purple", "pink", "red"}
		for j, o := range p.Options {
			sp.options = append(sp.options, option{id: fmt.Sprintf("%s-opt%d", sp.id, j), name: o, color: colors[j%len(colors)]})
		}
		s.schema = append(s.schema, sp)
	}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	s.URL = s.srv.URL
	t.Cleanup(s.srv.Close)
	return s
}

func propID(i int) string {
	const chars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
	return "%3A" + string(chars[i%len(chars)]) + string(chars[(i*7+3)%len(chars)]) + "Pp"
}

// SetNow sets the clock that stamps created and edited times (rounded
// down to the minute, as Notion does).
func (s *Server) SetNow(now func() time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.now = now
}

// AddUser names a user id for people values.
func (s *Server) AddUser(id, name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.users[id] = name
}

// AddPage creates a page with property values in the request shapes of
// the API (Title("x"), Status("Todo"), Number(3), ...) and returns its id.
// The page is created by HumanID at the current minute.
func (s *Server) AddPage(props map[string]any) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	now := s.minute()
	p := &page{id: fmt.Sprintf("%08x-1111-4222-8333-%012x", s.seq, s.seq), created: now, edited: now,
		createdBy: HumanID, lastEditBy: HumanID, props: map[string]any{}, createdSeq: s.seq}
	for _, sp := range s.schema {
		p.props[sp.Name] = s.emptyValue(sp)
	}
	if err := s.apply(p, props); err != nil {
		s.t.Fatalf("notiontest: AddPage: %s", err.message)
	}
	s.pages = append(s.pages, p)
	return p.id
}

// Edit changes a page's properties as a person in Notion would (behind the
// client's back): the values are in request shapes, last_edited_time and
// last_edited_by move.
func (s *Server) Edit(id string, props map[string]any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.page(id)
	if p == nil {
		s.t.Fatalf("notiontest: Edit: no page %s", id)
	}
	if err := s.apply(p, props); err != nil {
		s.t.Fatalf("notiontest: Edit: %s", err.message)
	}
	p.edited, p.lastEditBy = s.minute(), HumanID
}

// EditAfterPatch makes a person edit page id with props right after the
// next PATCH of the page was applied and answered, before any other
// request is served: the card moved between lookout's claim and its
// confirmation. The PATCH's answer shows the page as the PATCH left it.
func (s *Server) EditAfterPatch(id string, props map[string]any) {
	s.On(Rule{Method: http.MethodPatch, Page: id, After: props})
}

// On arms r: at the next request of r.Page by r.Method, the page is
// edited and/or the request failed as r says. Rules of one page fire in
// the order they were armed.
func (s *Server) On(r Rule) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.page(r.Page) == nil {
		s.t.Fatalf("notiontest: On: no page %s", r.Page)
	}
	s.rules = append(s.rules, &r)
}

// rule removes and returns the first armed rule for a request of method
// on the page of path, arming its Then; nil when none matches.
func (s *Server) rule(method, path string) *Rule {
	m := pagePath.FindStringSubmatch(path)
	if m == nil {
		return nil
	}
	id := normID(m[1])
	for i, r := range s.rules {
		if normID(r.Page) == id && (r.Method == "" || r.Method == method) {
			s.rules = append(s.rules[:i:i], s.rules[i+1:]...)
			if r.Then != nil {
				s.rules = append(s.rules, r.Then)
			}
			return r
		}
	}
	return nil
}

// personEdit applies a person's edit of page id; s.mu is held.
func (s *Server) personEdit(id string, props map[string]any) {
	p := s.page(id)
	if p == nil {
		return
	}
	if e := s.apply(p, props); e != nil {
		s.t.Errorf("notiontest: a person's edit of %s: %s", id, e.message)
		return
	}
	p.edited, p.lastEditBy = s.minute(), HumanID
}

// Archive moves a page to the trash, as a person would.
func (s *Server) Archive(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.page(id)
	if p == nil {
		s.t.Fatalf("notiontest: Archive: no page %s", id)
	}
	p.archived, p.inTrash, p.edited, p.lastEditBy = true, true, s.minute(), HumanID
}

// Page returns the page object as GET /v1/pages/{id} would.
func (s *Server) Page(id string) map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.page(id)
	if p == nil {
		s.t.Fatalf("notiontest: no page %s", id)
	}
	return roundTrip(s.pageJSON(p))
}

// Value returns the plain value of a page's property for assertions: text
// for title and rich_text, the option name for select and status, the
// date's start, the number, the checkbox; nil when empty.
func (s *Server) Value(id, prop string) any {
	v, _ := s.Page(id)["properties"].(map[string]any)[prop].(map[string]any)
	if v == nil {
		s.t.Fatalf("notiontest: page %s has no property %q", id, prop)
	}
	x := v[v["type"].(string)]
	switch t := v["type"]; t {
	case "title", "rich_text":
		var b strings.Builder
		for _, rt := range x.([]any) {
			b.WriteString(rt.(map[string]any)["plain_text"].(string))
		}
		return b.String()
	case "select", "status":
		if x == nil {
			return nil
		}
		return x.(map[string]any)["name"]
	case "date":
		if x == nil {
			return nil
		}
		return x.(map[string]any)["start"]
	}
	return x
}

// FailNext makes the next n requests fail with status (429 or 529, or any
// 5xx) and a Retry-After of retryAfter seconds (none when negative).
func (s *Server) FailNext(n, status, retryAfter int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range n {
		s.fails = append(s.fails, failure{status: status, retryAfter: retryAfter})
	}
}

// Storm makes every every-th request from now on fail with the statuses
// in turn (429, 529, 503, ...) and a Retry-After of retryAfter seconds.
// Storm(0, 0) ends it.
func (s *Server) Storm(every, retryAfter int, statuses ...int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.storm = nil
	if every > 0 && len(statuses) > 0 {
		s.storm = &storm{every: every, retryAfter: retryAfter, statuses: statuses}
	}
}

// SetToken changes the token the server accepts.
func (s *Server) SetToken(token string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.Token = token
}

// Requests returns the requests received so far, injected failures
// included.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.requests)
}

// Count returns how many requests of method whose path ends with suffix
// were received ("" matches every path).
func (s *Server) Count(method, suffix string) int {
	n := 0
	for _, r := range s.Requests() {
		if (method == "" || r.Method == method) && strings.HasSuffix(r.Path, suffix) {
			n++
		}
	}
	return n
}

func (s *Server) minute() time.Time { return s.now().UTC().Truncate(time.Minute) }

func (s *Server) page(id string) *page {
	id = normID(id)
	for _, p := range s.pages {
		if p.id == id || strings.ReplaceAll(p.id, "-", "") == id {
			return p
		}
	}
	return nil
}

// normID accepts ids with or without dashes.
func normID(id string) string {
	if len(id) == 32 && !strings.Contains(id, "-") {
		return id[0:8] + "-" + id[8:12] + "-" + id[12:16] + "-" + id[16:20] + "-" + id[20:]
	}
	return id
}

// apiError is an error object of the API.
type apiError struct {
	status        int
	code, message string
}

func errorf(status int, code, format string, args ...any) *apiError {
	return &apiError{status: status, code: code, message: fmt.Sprintf(format, args...)}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, e *apiError) {
	writeJSON(w, e.status, map[string]any{"object": "error", "status": e.status, "code": e.code, "message": e.message,
		"request_id": "0f2e4a6c-8b1d-4e3f-a5c7-9d1b3f5e7a9c"})
}

var (
	databasePath = regexp.MustCompile(`^/v1/databases/([0-9a-fA-F-]{32,36})$`)
	queryPath    = regexp.MustCompile(`^/v1/databases/([0-9a-fA-F-]{32,36})/query$`)
	pagePath     = regexp.MustCompile(`^/v1/pages/([0-9a-fA-F-]{32,36})$`)
)

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	i := len(s.requests)
	s.requests = append(s.requests, Request{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: body, At: s.now()})
	rule := s.rule(r.Method, r.URL.Path)
	if rule != nil && rule.Before != nil {
		s.personEdit(pagePath.FindStringSubmatch(r.URL.Path)[1], rule.Before)
	}
	var fail *failure
	switch {
	case rule != nil && rule.Fail != 0:
		fail = &failure{status: rule.Fail, retryAfter: rule.RetryAfter}
	case len(s.fails) > 0:
		fail = &s.fails[0]
		s.fails = s.fails[1:]
	case s.storm != nil:
		st := s.storm
		st.seen++
		if st.seen%st.every == 0 {
			fail = &failure{status: st.statuses[(st.seen/st.every-1)%len(st.statuses)], retryAfter: st.retryAfter}
		}
	}
	token := s.Token
	s.mu.Unlock()
	// after runs once the answer is made, under the lock: a person's edit
	// lands before any other request is served.
	after := func(status int) {
		s.requests[i].Status = status
		if rule != nil && (rule.After != nil || rule.Archive) {
			id := pagePath.FindStringSubmatch(r.URL.Path)[1]
			s.personEdit(id, rule.After)
			if p := s.page(id); p != nil && rule.Archive {
				p.archived, p.inTrash = true, true
			}
		}
	}
	w.Header().Set("X-Notion-Request-Id", "0f2e4a6c-8b1d-4e3f-a5c7-9d1b3f5e7a9c")
	if fail != nil {
		if fail.retryAfter >= 0 {
			w.Header().Set("Retry-After", strconv.Itoa(fail.retryAfter))
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		defer after(fail.status)
		switch fail.status {
		case http.StatusTooManyRequests:
			writeError(w, errorf(429, "rate_limited", "You have been rate limited. Please try again in a few minutes."))
		case 529:
			writeError(w, errorf(529, "service_overload", "Notion is experiencing high load. Please try again later."))
		default:
			writeError(w, errorf(fail.status, "service_unavailable", "Notion is unavailable, please try again later."))
		}
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.Header.Get("Authorization") != "Bearer "+token {
		defer after(401)
		writeError(w, errorf(401, "unauthorized", "API token is invalid."))
		return
	}
	if r.Header.Get("Notion-Version") == "" {
		defer after(400)
		writeError(w, errorf(400, "missing_version", "Notion-Version header failed validation: Notion-Version header should be defined, instead was `undefined`."))
		return
	}
	if v := r.Header.Get("Notion-Version"); v != Version {
		defer after(400)
		writeError(w, errorf(400, "validation_error", "Notion-Version %s is not implemented by this fake (it implements %s).", v, Version))
		return
	}
	var out any
	var err *apiError
	switch {
	case r.Method == http.MethodGet && databasePath.MatchString(r.URL.Path):
		out, err = s.getDatabase(databasePath.FindStringSubmatch(r.URL.Path)[1])
	case r.Method == http.MethodPost && queryPath.MatchString(r.URL.Path):
		out, err = s.query(queryPath.FindStringSubmatch(r.URL.Path)[1], body)
	case r.Method == http.MethodGet && pagePath.MatchString(r.URL.Path):
		out, err = s.getPage(pagePath.FindStringSubmatch(r.URL.Path)[1])
	case r.Method == http.MethodPatch && pagePath.MatchString(r.URL.Path):
		out, err = s.patchPage(pagePath.FindStringSubmatch(r.URL.Path)[1], body)
	default:
		err = errorf(400, "invalid_request_url", "Invalid request URL.")
	}
	if err != nil {
		defer after(err.status)
		writeError(w, err)
		return
	}
	defer after(http.StatusOK)
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) checkDatabase(id string) *apiError {
	if normID(id) != s.DatabaseID {
		return errorf(404, "object_not_found", "Could not find database with ID: %s. Make sure the relevant pages and databases are shared with your integration.", normID(id))
	}
	return nil
}

func stamp(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }

func richText(s string) []any {
	if s == "" {
		return []any{}
	}
	return []any{map[string]any{"type": "text", "text": map[string]any{"content": s, "link": nil},
		"annotations": map[string]any{"bold": false, "italic": false, "strikethrough": false, "underline": false, "code": false, "color": "default"},
		"plain_text":  s, "href": nil}}
}

func (s *Server) getDatabase(id string) (any, *apiError) {
	if err := s.checkDatabase(id); err != nil {
		return nil, err
	}
	props := map[string]any{}
	for _, sp := range s.schema {
		conf := map[string]any{}
		switch sp.Type {
		case "select", "multi_select", "status":
			opts := []any{}
			for _, o := range sp.options {
				opts = append(opts, map[string]any{"id": o.id, "name": o.name, "color": o.color, "description": nil})
			}
			conf["options"] = opts
			if sp.Type == "status" {
				ids := []any{}
				for _, o := range sp.options {
					ids = append(ids, o.id)
				}
				conf["groups"] = []any{map[string]any{"id": sp.id + "-group", "name": "All", "color": "gray", "option_ids": ids}}
			}
		case "number":
			conf["format"] = "number"
		case "formula":
			conf["expression"] = "prop(\"Priority\")"
		case "relation":
			conf = map[string]any{"database_id": s.DatabaseID, "type": "single_property", "single_property": map[string]any{}}
		case "rollup":
			conf = map[string]any{"function": "count", "relation_property_name": "Blocked by", "rollup_property_name": "Name"}
		}
		props[sp.Name] = map[string]any{"id": sp.id, "name": sp.Name, "type": sp.Type, "description": nil, sp.Type: conf}
	}
	return map[string]any{
		"object": "database", "id": s.DatabaseID, "created_time": "2026-01-05T09:00:00.000Z", "last_edited_time": "2026-01-05T09:00:00.000Z",
		"created_by": map[string]any{"object": "user", "id": HumanID}, "last_edited_by": map[string]any{"object": "user", "id": HumanID},
		"title": richText("Tasks"), "description": []any{}, "icon": nil, "cover": nil, "properties": props,
		"parent": map[string]any{"type": "page_id", "page_id": "a1b2c3d4-0000-4000-8000-000000000001"},
		"url":    "https://www.notion.so/" + strings.ReplaceAll(s.DatabaseID, "-", ""), "public_url": nil,
		"archived": false, "in_trash": false, "is_inline": false,
	}, nil
}

func (s *Server) getPage(id string) (any, *apiError) {
	p := s.page(id)
	if p == nil {
		return nil, errorf(404, "object_not_found", "Could not find page with ID: %s. Make sure the relevant pages and databases are shared with your integration.", normID(id))
	}
	return s.pageJSON(p), nil
}

func (s *Server) patchPage(id string, body []byte) (any, *apiError) {
	p := s.page(id)
	if p == nil {
		return nil, errorf(404, "object_not_found", "Could not find page with ID: %s. Make sure the relevant pages and databases are shared with your integration.", normID(id))
	}
	var req struct {
		Properties map[string]any `json:"properties"`
		Archived   *bool          `json:"archived"`
		InTrash    *bool          `json:"in_trash"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, errorf(400, "invalid_json", "Error parsing JSON body.")
	}
	if p.archived && (req.Archived == nil || *req.Archived) && (req.InTrash == nil || *req.InTrash) {
		return nil, errorf(400, "validation_error", "Can't edit block that is archived. You must unarchive the block before editing.")
	}
	// Validate everything before changing anything, as the API does.
	trial := &page{props: map[string]any{}}
	for k, v := range p.props {
		trial.props[k] = v
	}
	if err := s.apply(trial, req.Properties); err != nil {
		return nil, err
	}
	p.props = trial.props
	if req.Archived != nil {
		p.archived = *req.Archived
	}
	if req.InTrash != nil {
		p.inTrash = *req.InTrash
	}
	p.edited, p.lastEditBy = s.minute(), BotID
	return s.pageJSON(p), nil
}

func (s *Server) prop(nameOrID string) *schemaProp {
	for _, sp := range s.schema {
		if sp.Name == nameOrID || sp.id == nameOrID {
			return sp
		}
	}
	return nil
}

func (s *Server) emptyValue(sp *schemaProp) map[string]any {
	v := map[string]any{"id": sp.id, "type": sp.Type}
	switch sp.Type {
	case "title", "rich_text", "multi_select", "people", "relation", "files":
		v[sp.Type] = []any{}
	case "checkbox":
		v[sp.Type] = false
	case "relation_has_more":
	default:
		v[sp.Type] = nil
	}
	if sp.Type == "relation" {
		v["has_more"] = false
	}
	return v
}

// apply validates request-shaped values and stores them in response shape.
func (s *Server) apply(p *page, props map[string]any) *apiError {
	for name, raw := range props {
		sp := s.prop(name)
		if sp == nil {
			return errorf(400, "validation_error", "%s is not a property that exists.", name)
		}
		val, ok := raw.(map[string]any)
		if !ok {
			return errorf(400, "validation_error", "body failed validation: body.properties.%s should be an object, instead was `%s`.", sp.Name, compact(raw))
		}
		x, ok := val[sp.Type]
		if !ok {
			return errorf(400, "validation_error", "body failed validation. Fix one:\nbody.properties.%s.%s should be defined, instead was `undefined`.", sp.Name, sp.Type)
		}
		v, aerr := s.propValue(sp, x)
		if aerr != nil {
			return aerr
		}
		out := map[string]any{"id": sp.id, "type": sp.Type, sp.Type: v}
		if sp.Type == "relation" {
			out["has_more"] = false
		}
		p.props[sp.Name] = out
	}
	return nil
}

// propValue validates x, the request's value of a property of sp's type,
// and returns it in response shape, or the error Notion answers.
func (s *Server) propValue(sp *schemaProp, x any) (any, *apiError) {
	switch sp.Type {
	case "title", "rich_text":
		return richTextValue(sp, x)
	case "number":
		if _, ok := x.(float64); x != nil && !ok {
			return nil, errorf(400, "validation_error", "body failed validation: body.properties.%s.number should be a number or `null`, instead was `%s`.", sp.Name, compact(x))
		}
		return x, nil
	case "checkbox":
		if _, ok := x.(bool); !ok {
			return nil, errorf(400, "validation_error", "body failed validation: body.properties.%s.checkbox should be a boolean, instead was `%s`.", sp.Name, compact(x))
		}
		return x, nil
	case "url", "email", "phone_number":
		if _, ok := x.(string); x != nil && !ok {
			return nil, errorf(400, "validation_error", "body failed validation: body.properties.%s.%s should be a string or `null`, instead was `%s`.", sp.Name, sp.Type, compact(x))
		}
		return x, nil
	case "select", "status":
		return selectValue(sp, x)
	case "multi_select":
		return multiSelectValue(sp, x)
	case "date":
		return dateValue(sp, x)
	case "people":
		return s.peopleValue(sp, x)
	case "relation":
		list, ok := x.([]any)
		if !ok {
			return nil, errorf(400, "validation_error", "body failed validation: body.properties.%s.relation should be an array, instead was `%s`.", sp.Name, compact(x))
		}
		vals := []any{}
		for _, it := range list {
			m, _ := it.(map[string]any)
			vals = append(vals, map[string]any{"id": m["id"]})
		}
		return vals, nil
	default:
		return nil, errorf(400, "validation_error", "%s is a %s property, which cannot be updated.", sp.Name, sp.Type)
	}
}

// richTextValue joins a title or rich_text array's contents, each at most
// 2,000 characters as Notion allows.
func richTextValue(sp *schemaProp, x any) (any, *apiError) {
	rts, ok := x.([]any)
	if !ok {
		return nil, errorf(400, "validation_error", "body failed validation: body.properties.%s.%s should be an array, instead was `%s`.", sp.Name, sp.Type, compact(x))
	}
	var text strings.Builder
	for i, rt := range rts {
		m, _ := rt.(map[string]any)
		t, _ := m["text"].(map[string]any)
		c, ok := t["content"].(string)
		if !ok {
			return nil, errorf(400, "validation_error", "body failed validation: body.properties.%s.%s[%d].text should be defined, instead was `undefined`.", sp.Name, sp.Type, i)
		}
		if n := len([]rune(c)); n > 2000 {
			return nil, errorf(400, "validation_error", "body failed validation: body.properties.%s.%s[%d].text.content.length should be ≤ `2000`, instead was `%d`.", sp.Name, sp.Type, i, n)
		}
		text.WriteString(c)
	}
	return richText(text.String()), nil
}

// selectValue finds a select or status option by name; a select creates a
// missing one, as Notion does for an integration that can edit the
// schema, a status refuses it.
func selectValue(sp *schemaProp, x any) (any, *apiError) {
	if x == nil {
		return nil, nil
	}
	m, _ := x.(map[string]any)
	n, ok := m["name"].(string)
	if !ok {
		return nil, errorf(400, "validation_error", "body failed validation: body.properties.%s.%s.name should be defined, instead was `undefined`.", sp.Name, sp.Type)
	}
	o, found := sp.option(n)
	if !found {
		if sp.Type == "status" {
			return nil, errorf(400, "validation_error", "Invalid status option. Status option \"%s\" does not exist\".", n)
		}
		o = sp.addOption(n)
	}
	return map[string]any{"id": o.id, "name": o.name, "color": o.color}, nil
}

// multiSelectValue finds or creates each named option.
func multiSelectValue(sp *schemaProp, x any) (any, *apiError) {
	list, ok := x.([]any)
	if !ok {
		return nil, errorf(400, "validation_error", "body failed validation: body.properties.%s.multi_select should be an array, instead was `%s`.", sp.Name, compact(x))
	}
	vals := []any{}
	for _, it := range list {
		m, _ := it.(map[string]any)
		n, _ := m["name"].(string)
		o, found := sp.option(n)
		if !found {
			o = sp.addOption(n)
		}
		vals = append(vals, map[string]any{"id": o.id, "name": o.name, "color": o.color})
	}
	return vals, nil
}

// dateValue checks a date's start and optional end as ISO 8601.
func dateValue(sp *schemaProp, x any) (any, *apiError) {
	if x == nil {
		return nil, nil
	}
	m, _ := x.(map[string]any)
	start, _ := m["start"].(string)
	if !validDate(start) {
		return nil, errorf(400, "validation_error", "body failed validation: body.properties.%s.date.start should be a valid ISO 8601 date string, instead was `%s`.", sp.Name, compact(m["start"]))
	}
	end := m["end"]
	if e, ok := end.(string); ok && !validDate(e) {
		return nil, errorf(400, "validation_error", "body failed validation: body.properties.%s.date.end should be a valid ISO 8601 date string, instead was `%s`.", sp.Name, e)
	}
	return map[string]any{"start": start, "end": end, "time_zone": nil}, nil
}

// peopleValue resolves each person by id among the workspace's users.
func (s *Server) peopleValue(sp *schemaProp, x any) (any, *apiError) {
	list, ok := x.([]any)
	if !ok {
		return nil, errorf(400, "validation_error", "body failed validation: body.properties.%s.people should be an array, instead was `%s`.", sp.Name, compact(x))
	}
	vals := []any{}
	for _, it := range list {
		m, _ := it.(map[string]any)
		id, _ := m["id"].(string)
		name, known := s.users[id]
		if !known {
			return nil, errorf(400, "validation_error", "body failed validation: body.properties.%s.people[].id %q is not a user of this workspace.", sp.Name, id)
		}
		vals = append(vals, map[string]any{"object": "user", "id": id, "name": name, "avatar_url": nil, "type": "person",
			"person": map[string]any{"email": strings.ToLower(strings.ReplaceAll(name, " ", ".")) + "@example.com"}})
	}
	return vals, nil
}

// addOption appends a new option named name in the default color.
func (sp *schemaProp) addOption(name string) option {
	o := option{id: fmt.Sprintf("%s-opt%d", sp.id, len(sp.options)), name: name, color: "default"}
	sp.options = append(sp.options, o)
	return o
}

func (sp *schemaProp) option(name string) (option, bool) {
	for _, o := range sp.options {
		if o.name == name {
			return o, true
		}
	}
	return option{}, false
}

var dateRE = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}(T\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:\d{2})?)?$`)

func validDate(s string) bool { return dateRE.MatchString(s) }

func compact(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func roundTrip(v any) map[string]any {
	b, _ := json.Marshal(v)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	return m
}

func (s *Server) user(id string) map[string]any { return map[string]any{"object": "user", "id": id} }

func (s *Server) pageJSON(p *page) map[string]any {
	props := map[string]any{}
	title := ""
	for _, sp := range s.schema {
		v := p.props[sp.Name].(map[string]any)
		switch sp.Type {
		case "created_time":
			v = map[string]any{"id": sp.id, "type": sp.Type, sp.Type: stamp(p.created)}
		case "last_edited_time":
			v = map[string]any{"id": sp.id, "type": sp.Type, sp.Type: stamp(p.edited)}
		case "created_by":
			v = map[string]any{"id": sp.id, "type": sp.Type, sp.Type: s.user(p.createdBy)}
		case "last_edited_by":
			v = map[string]any{"id": sp.id, "type": sp.Type, sp.Type: s.user(p.lastEditBy)}
		case "unique_id":
			v = map[string]any{"id": sp.id, "type": sp.Type, sp.Type: map[string]any{"prefix": "TASK", "number": p.createdSeq}}
		case "formula", "rollup":
			var x map[string]any
			if sp.Compute != nil {
				x = sp.Compute(p.props)
			}
			v = map[string]any{"id": sp.id, "type": sp.Type, sp.Type: x}
			if sp.Type == "rollup" && x != nil {
				x["function"] = "count"
			}
		case "title":
			for _, rt := range v["title"].([]any) {
				title += rt.(map[string]any)["plain_text"].(string)
			}
		}
		props[sp.Name] = v
	}
	slug := strings.Trim(regexp.MustCompile(`[^A-Za-z0-9]+`).ReplaceAllString(title, "-"), "-")
	if slug != "" {
		slug += "-"
	}
	return map[string]any{
		"object": "page", "id": p.id, "created_time": stamp(p.created), "last_edited_time": stamp(p.edited),
		"created_by": s.user(p.createdBy), "last_edited_by": s.user(p.lastEditBy), "cover": nil, "icon": nil,
		"parent":   map[string]any{"type": "database_id", "database_id": s.DatabaseID},
		"archived": p.archived, "in_trash": p.inTrash, "properties": props,
		"url": "https://www.notion.so/" + slug + strings.ReplaceAll(p.id, "-", ""), "public_url": nil,
	}
}

func (s *Server) query(id string, body []byte) (any, *apiError) {
	if err := s.checkDatabase(id); err != nil {
		return nil, err
	}
	var req struct {
		Filter      map[string]any   `json:"filter"`
		Sorts       []map[string]any `json:"sorts"`
		StartCursor *string          `json:"start_cursor"`
		PageSize    *int             `json:"page_size"`
	}
	if len(bytes.TrimSpace(body)) > 0 {
		if err := json.Unmarshal(body, &req); err != nil {
			return nil, errorf(400, "invalid_json", "Error parsing JSON body.")
		}
	}
	size := 100
	if req.PageSize != nil {
		size = *req.PageSize
		if size < 1 || size > 100 {
			return nil, errorf(400, "validation_error", "body failed validation: body.page_size should be ≤ `100`, instead was `%d`.", size)
		}
	}
	var list []*page
	for _, p := range s.pages {
		if p.archived || p.inTrash {
			continue // a query returns no archived pages
		}
		if req.Filter != nil {
			ok, err := s.match(p, req.Filter)
			if err != nil {
				return nil, err
			}
			if !ok {
				continue
			}
		}
		list = append(list, p)
	}
	sorts := req.Sorts
	if len(sorts) == 0 {
		sorts = []map[string]any{{"timestamp": "created_time", "direction": "descending"}}
	}
	for _, so := range sorts {
		if so["timestamp"] == nil && s.prop(fmt.Sprint(so["property"])) == nil {
			return nil, errorf(400, "validation_error", "Could not find sort property with name or id: %v", so["property"])
		}
	}
	slices.SortStableFunc(list, func(a, b *page) int {
		for _, so := range sorts {
			c := s.compare(a, b, so)
			if so["direction"] == "descending" {
				c = -c
			}
			if c != 0 {
				return c
			}
		}
		return cmp.Compare(a.createdSeq, b.createdSeq)
	})
	from := 0
	if req.StartCursor != nil {
		from = -1
		for i, p := range list {
			if p.id == normID(*req.StartCursor) {
				from = i
			}
		}
		if from < 0 {
			return nil, errorf(400, "validation_error", "The start_cursor provided is invalid: %s", *req.StartCursor)
		}
	}
	to := min(from+size, len(list))
	results := []any{}
	for _, p := range list[from:to] {
		results = append(results, s.pageJSON(p))
	}
	var next any
	if to < len(list) {
		next = list[to].id
	}
	return map[string]any{"object": "list", "results": results, "next_cursor": next, "has_more": to < len(list),
		"type": "page_or_database", "page_or_database": map[string]any{}, "request_id": "0f2e4a6c-8b1d-4e3f-a5c7-9d1b3f5e7a9c"}, nil
}

func (s *Server) compare(a, b *page, so map[string]any) int {
	switch so["timestamp"] {
	case "created_time":
		return a.created.Compare(b.created)
	case "last_edited_time":
		return a.edited.Compare(b.edited)
	}
	sp := s.prop(fmt.Sprint(so["property"]))
	va, vb := a.props[sp.Name].(map[string]any)[sp.Type], b.props[sp.Name].(map[string]any)[sp.Type]
	switch sp.Type {
	case "number":
		fa, oka := va.(float64)
		fb, okb := vb.(float64)
		if oka != okb {
			if oka {
				return -1 // empty values sort last
			}
			return 1
		}
		return cmp.Compare(fa, fb)
	case "select", "status":
		rank := func(v any) int {
			m, _ := v.(map[string]any)
			for i, o := range sp.options {
				if m != nil && o.name == m["name"] {
					return i
				}
			}
			return len(sp.options)
		}
		return cmp.Compare(rank(va), rank(vb))
	}
	return strings.Compare(compact(va), compact(vb))
}

// match evaluates a filter object: and/or compounds, timestamp filters on
// created_time and last_edited_time, and property filters on status,
// select, checkbox, number, title and rich_text.
func (s *Server) match(p *page, f map[string]any) (bool, *apiError) {
	if list, ok := f["and"].([]any); ok {
		for _, x := range list {
			m, _ := x.(map[string]any)
			ok, err := s.match(p, m)
			if err != nil || !ok {
				return false, err
			}
		}
		return true, nil
	}
	if list, ok := f["or"].([]any); ok {
		for _, x := range list {
			m, _ := x.(map[string]any)
			ok, err := s.match(p, m)
			if err != nil || ok {
				return ok, err
			}
		}
		return false, nil
	}
	if ts, ok := f["timestamp"].(string); ok {
		var at time.Time
		switch ts {
		case "created_time":
			at = p.created
		case "last_edited_time":
			at = p.edited
		default:
			return false, errorf(400, "validation_error", "body failed validation: body.filter.timestamp should be `\"created_time\"` or `\"last_edited_time\"`, instead was `%q`.", ts)
		}
		cond, _ := f[ts].(map[string]any)
		for op, v := range cond {
			ref, err := time.Parse(time.RFC3339, fmt.Sprint(v))
			if err != nil {
				return false, errorf(400, "validation_error", "body failed validation: body.filter.%s.%s should be a valid ISO 8601 date string, instead was `%v`.", ts, op, v)
			}
			// Notion compares timestamps at the minute.
			ref = ref.Truncate(time.Minute)
			switch op {
			case "on_or_after":
				return !at.Before(ref), nil
			case "after":
				return at.After(ref), nil
			case "on_or_before":
				return !at.After(ref), nil
			case "before":
				return at.Before(ref), nil
			case "equals":
				return at.Equal(ref), nil
			}
			return false, errorf(400, "validation_error", "body failed validation: body.filter.%s.%s is not a supported condition.", ts, op)
		}
		return false, errorf(400, "validation_error", "body failed validation: body.filter.%s should be defined, instead was `undefined`.", ts)
	}
	name, _ := f["property"].(string)
	sp := s.prop(name)
	if sp == nil {
		return false, errorf(400, "validation_error", "Could not find property with name or id: %s", name)
	}
	cond, ok := f[sp.Type].(map[string]any)
	if !ok {
		return false, errorf(400, "validation_error", "body failed validation: body.filter.%s should be defined, instead was `undefined`.", sp.Type)
	}
	v := p.props[sp.Name].(map[string]any)[sp.Type]
	for op, want := range cond {
		switch sp.Type {
		case "status", "select":
			got := ""
			if m, ok := v.(map[string]any); ok {
				got, _ = m["name"].(string)
			}
			switch op {
			case "equals":
				return got == want, nil
			case "does_not_equal":
				return got != want, nil
			case "is_empty":
				return got == "", nil
			case "is_not_empty":
				return got != "", nil
			}
		case "checkbox":
			switch op {
			case "equals":
				return v == want, nil
			case "does_not_equal":
				return v != want, nil
			}
		case "number":
			n, isNum := v.(float64)
			w, _ := want.(float64)
			switch op {
			case "equals":
				return isNum && n == w, nil
			case "greater_than":
				return isNum && n > w, nil
			case "less_than":
				return isNum && n < w, nil
			case "is_empty":
				return !isNum, nil
			}
		case "title", "rich_text":
			var b strings.Builder
			for _, rt := range v.([]any) {
				b.WriteString(rt.(map[string]any)["plain_text"].(string))
			}
			switch op {
			case "equals":
				return b.String() == want, nil
			case "contains":
				return strings.Contains(b.String(), fmt.Sprint(want)), nil
			case "is_empty":
				return b.Len() == 0, nil
			}
		}
		return false, errorf(400, "validation_error", "body failed validation: body.filter.%s.%s is not supported by this fake.", sp.Type, op)
	}
	return false, errorf(400, "validation_error", "body failed validation: body.filter.%s should not be empty.", sp.Type)
}

// Request-shaped property values, for AddPage and Edit.

// Title is a title value.
func Title(s string) map[string]any { return map[string]any{"title": textReq(s)} }

// Text is a rich_text value.
func Text(s string) map[string]any { return map[string]any{"rich_text": textReq(s)} }

func textReq(s string) []any {
	if s == "" {
		return []any{}
	}
	return []any{map[string]any{"type": "text", "text": map[string]any{"content": s}}}
}

// Select is a select value; "" clears it.
func Select(name string) map[string]any { return map[string]any{"select": named(name)} }

// Status is a status value.
func Status(name string) map[string]any { return map[string]any{"status": named(name)} }

func named(name string) any {
	if name == "" {
		return nil
	}
	return map[string]any{"name": name}
}

// MultiSelect is a multi_select value.
func MultiSelect(names ...string) map[string]any {
	list := []any{}
	for _, n := range names {
		list = append(list, map[string]any{"name": n})
	}
	return map[string]any{"multi_select": list}
}

// Date is a date value; end may be "" (no range); start "" clears it.
func Date(start, end string) map[string]any {
	if start == "" {
		return map[string]any{"date": nil}
	}
	d := map[string]any{"start": start, "end": nil}
	if end != "" {
		d["end"] = end
	}
	return map[string]any{"date": d}
}

// Number is a number value.
func Number(n float64) map[string]any { return map[string]any{"number": n} }

// Checkbox is a checkbox value.
func Checkbox(b bool) map[string]any { return map[string]any{"checkbox": b} }

// URL, Email and Phone are url, email and phone_number values.
func URL(s string) map[string]any { return map[string]any{"url": s} }

// Email is an email value.
func Email(s string) map[string]any { return map[string]any{"email": s} }

// Phone is a phone_number value.
func Phone(s string) map[string]any { return map[string]any{"phone_number": s} }

// People is a people value of user ids (known to the server: HumanID,
// BotID, or AddUser).
func People(ids ...string) map[string]any {
	list := []any{}
	for _, id := range ids {
		list = append(list, map[string]any{"object": "user", "id": id})
	}
	return map[string]any{"people": list}
}

// Relation is a relation value of page ids.
func Relation(ids ...string) map[string]any {
	list := []any{}
	for _, id := range ids {
		list = append(list, map[string]any{"id": id})
	}
	return map[string]any{"relation": list}
}
