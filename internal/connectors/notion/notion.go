// Package notion is the notion connector: the pages of one Notion
// database, incrementally on last_edited_time, and the task actions
// (connectors.Actor) on them.
//
//	connector: notion
//	notion:
//	  database: 8e2c7c1a6a4b4f3e9d2c1b0a9f8e7d6c
//	  token: ${NOTION_TOKEN}
//	  task: {}            # the task property names, defaults shown in Task
//
// It implements Notion-Version 2022-06-28 (set explicitly, configurable up
// to the 2025-09-03 split of databases into data sources): POST
// /v1/databases/{id}/query sorted by last_edited_time ascending, page_size
// 100, following next_cursor while has_more, with a filter
// last_edited_time on_or_after the largest value seen minus a lookback
// (Notion rounds it to the minute). With snapshot: true every run is a
// full scan and pages archived or in the trash (which a query does not
// return) are recorded as deleted. On its first run it reads the database
// (GET /v1/databases/{id}) and checks every property the source names.
//
// Requests spend the syncer's budgets: the host budget of api.notion.com
// is declared here as Notion's documented average of three requests per
// second (RateDefault), shared by every source and replica; 429, 529 and
// 5xx answers wait for Retry-After.
package notion

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/connectors"
	"github.com/lookout-dev/lookout/internal/normalize"
)

func init() {
	connectors.Register("notion", Decode, newFromSettings)
	connectors.RegisterHostLimit(Host, RateDefault)
}

// Ref is a property a source names, checked against the database.
type Ref struct {
	// Key is the configuration key that names it (notion.status,
	// fields.title, notion.task.claimed_at).
	Key string
	// Property is the property name.
	Property string
	// Optional refs that the database lacks are skipped, not errors (the
	// task block's defaults).
	Optional bool
	// Kinds are the property types allowed; nil allows any.
	Kinds []string
}

// Options are the typed settings of New.
type Options struct {
	// Database is the database id. Required.
	Database string
	// Token is the integration secret. Required.
	Token string
	// Version is the Notion-Version header. Defaults to VersionDefault.
	Version string
	// BaseURL is the API root. Defaults to BaseURLDefault.
	BaseURL string
	// Lookback is subtracted from the largest last_edited_time seen.
	Lookback time.Duration
	// PageSize is the query's page_size. Defaults to 100.
	PageSize int
	// MaxPages bounds one run. Defaults to 1000.
	MaxPages int
	// Snapshot makes every run a full scan that records deletions.
	Snapshot bool
	// Status names the property emitted as the item's status; "" for none.
	Status string
	// Task holds the task property names; nil: the connector does not act.
	Task *Task
	// Refs are the properties the source names, checked on the first run.
	Refs []Ref
	// Errorf makes the configuration errors of the checks, located in the
	// source file. Defaults to plain errors "key message".
	Errorf func(key, format string, args ...any) error
	// Timeout bounds each request. Defaults to 30s.
	Timeout time.Duration
	// Env supplies the clock and the logger.
	Env connectors.Env
}

// Connector reads a database and acts on its pages.
type Connector struct {
	c client
	o Options

	mu     sync.Mutex
	schema *schema // nil until verified
	// acting lets one task action at a time make its requests.
	acting connectors.ActLock
}

var (
	_ connectors.Connector   = (*Connector)(nil)
	_ connectors.Snapshotter = (*Connector)(nil)
	_ connectors.Verifier    = (*Connector)(nil)
	_ connectors.Actor       = (*Connector)(nil)
	_ connectors.TaskContent = (*Connector)(nil)
)

// fieldRefRE finds property names in field expressions:
// item.properties.Name and item.properties["Due date"].
var fieldRefRE = regexp.MustCompile(`item\.properties(?:\.([A-Za-z_][A-Za-z0-9_]*)|\[\s*"([^"]+)"\s*\]|\[\s*'([^']+)'\s*\])`)

func newFromSettings(src *config.Source, n *Settings, env connectors.Env) (connectors.Connector, error) {
	o := Options{Database: n.Database, Token: n.Token, Version: n.Version, BaseURL: n.BaseURL, Lookback: *n.Lookback,
		PageSize: n.PageSize, MaxPages: n.MaxPages, Snapshot: n.Snapshot, Status: n.Status, Task: n.Task,
		Errorf: src.Errorf, Timeout: src.Timeout, Env: env}
	if n.Status != "" && (n.Task == nil || n.Status != n.Task.Status) {
		// The task's status property is checked with the task block's.
		o.Refs = append(o.Refs, Ref{Key: "notion.status", Property: n.Status})
	}
	if n.Task != nil {
		for _, f := range taskFields(n.Task) {
			if f.kinds == nil {
				continue // a status value, checked with the status property
			}
			o.Refs = append(o.Refs, Ref{Key: "notion.task." + f.key, Property: *f.value, Optional: !n.explicit[f.key] && f.key != "status", Kinds: f.kinds})
		}
	}
	f := src.Fields
	exprs := map[string]string{"fields.id": f.ID, "fields.title": f.Title, "fields.body": f.Body, "fields.url": f.URL,
		"fields.author": f.Author, "fields.status": f.Status, "fields.labels": f.Labels, "fields.created_at": f.CreatedAt,
		"fields.updated_at": f.UpdatedAt}
	for k, v := range f.Extra {
		exprs["fields.extra."+k] = v
	}
	keys := make([]string, 0, len(exprs))
	for k := range exprs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		for _, m := range fieldRefRE.FindAllStringSubmatch(exprs[k], -1) {
			o.Refs = append(o.Refs, Ref{Key: k, Property: m[1] + m[2] + m[3]})
		}
	}
	return New(env.HTTP, o)
}

// New returns the connector.
func New(hc *http.Client, o Options) (*Connector, error) {
	if !idRE.MatchString(o.Database) {
		return nil, fmt.Errorf("database must be a database id (32 hex digits), not %q", o.Database)
	}
	if hc == nil {
		hc = &http.Client{}
	}
	if o.Version == "" {
		o.Version = VersionDefault
	}
	if o.BaseURL == "" {
		o.BaseURL = BaseURLDefault
	}
	if o.PageSize <= 0 {
		o.PageSize = PageSizeDefault
	}
	if o.MaxPages <= 0 {
		o.MaxPages = MaxPagesDefault
	}
	if o.Timeout <= 0 {
		o.Timeout = config.TimeoutDefault
	}
	if o.Env.Now == nil {
		o.Env.Now = time.Now
	}
	if o.Env.Logger == nil {
		o.Env.Logger = slog.Default()
	}
	if o.Errorf == nil {
		o.Errorf = func(key, format string, args ...any) error {
			return fmt.Errorf("%s %s", key, fmt.Sprintf(format, args...))
		}
	}
	return &Connector{o: o, c: client{http: hc, base: strings.TrimRight(o.BaseURL, "/"), token: o.Token,
		version: o.Version, timeout: o.Timeout, now: o.Env.Now}}, nil
}

// Snapshot reports whether every run is a full scan (snapshot: true).
func (c *Connector) Snapshot() bool { return c.o.Snapshot }

// State is the cursor stored between runs.
type State struct {
	// MaxEdited is the largest last_edited_time seen (RFC 3339); the next
	// run asks for pages edited on or after it minus the lookback.
	MaxEdited string `json:"max_edited,omitempty"`
	// Resume is set while a run is under way: where it goes on.
	Resume *Resume `json:"resume,omitempty"`
}

// Resume is where an interrupted run goes on.
type Resume struct {
	// StartCursor is the next page's start_cursor; Since the filter value
	// the run sends ("" in snapshot mode).
	StartCursor string `json:"start_cursor"`
	Since       string `json:"since,omitempty"`
	// MaxEdited is the largest last_edited_time the run has seen so far.
	MaxEdited string `json:"max_edited,omitempty"`
	// Page is the number of pages the run has read.
	Page int `json:"page"`
}

// Fetch reads the pages edited since the stored cursor (every page in
// snapshot mode), verifying the source's property names on its first run.
func (c *Connector) Fetch(ctx context.Context, raw json.RawMessage, emit connectors.EmitFunc) (connectors.Result, error) {
	var res connectors.Result
	var st State
	if len(raw) > 0 && string(raw) != "null" {
		if err := json.Unmarshal(raw, &st); err != nil {
			return res, fmt.Errorf("stored cursor is not a cursor of the notion connector (reset it: set the cursor of its row in the sources table to '{}'): %w", err)
		}
	}
	if _, err := c.verify(ctx, &res); err != nil {
		return res, err
	}
	maxSeen, err := parseTime(st.MaxEdited)
	if err != nil {
		return res, fmt.Errorf("stored cursor: max_edited: %w", err)
	}
	var run Resume
	resumed := st.Resume != nil && st.Resume.StartCursor != ""
	if resumed {
		run = *st.Resume
		if t, err := parseTime(run.MaxEdited); err == nil && t.After(maxSeen) {
			maxSeen = t
		}
	} else if !c.o.Snapshot && !maxSeen.IsZero() {
		run.Since = maxSeen.Add(-c.o.Lookback).UTC().Format(time.RFC3339)
	}
	path := "/v1/databases/" + compactID(c.o.Database) + "/query"
	seen := map[string]bool{}
	fetched := 0
	for {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		if fetched >= c.o.MaxPages {
			c.o.Env.Logger.Warn("notion: max_pages reached; the next run goes on from here", "max_pages", c.o.MaxPages)
			res.Cursor = c.cursor(st, &run, maxSeen)
			return res, nil
		}
		body := map[string]any{
			"page_size": c.o.PageSize,
			"sorts":     []any{map[string]any{"timestamp": "last_edited_time", "direction": "ascending"}},
		}
		if run.Since != "" {
			body["filter"] = map[string]any{"timestamp": "last_edited_time", "last_edited_time": map[string]any{"on_or_after": run.Since}}
		}
		if run.StartCursor != "" {
			body["start_cursor"] = run.StartCursor
		}
		v, err := c.c.do(ctx, http.MethodPost, path, body)
		res.Requests++
		if err != nil {
			var ae *APIError
			if resumed && fetched == 0 && errors.As(err, &ae) && ae.Status == http.StatusBadRequest {
				c.o.Env.Logger.Warn("notion: resume cursor refused; starting the run over", "error", ae.Message)
				resumed, run = false, Resume{}
				if !c.o.Snapshot && !maxSeen.IsZero() {
					run.Since = maxSeen.Add(-c.o.Lookback).UTC().Format(time.RFC3339)
				}
				continue
			}
			return res, fmt.Errorf("query %s, page %d: %w", c.o.Database, run.Page+1, err)
		}
		fetched++
		run.Page++
		list, _ := v.(map[string]any)
		if list["object"] != "list" {
			return res, fmt.Errorf("query %s, page %d: the answer is not a list", c.o.Database, run.Page)
		}
		var items []connectors.Item
		for i, r := range list["results"].([]any) {
			pg, ok := r.(map[string]any)
			if !ok || pg["object"] != "page" {
				continue // a wiki database may list databases too
			}
			id, _ := pg["id"].(string)
			loc := fmt.Sprintf("query page %d [%d]", run.Page, i)
			if id == "" {
				return res, &connectors.ItemError{Loc: loc, Err: errors.New("page has no id")}
			}
			if t, err := parseTime(pg["last_edited_time"]); err == nil && t.After(maxSeen) {
				maxSeen = t
			}
			if seen[id] || pg["archived"] == true || pg["in_trash"] == true {
				continue // archived pages count as deleted
			}
			seen[id] = true
			items = append(items, connectors.Item{Value: shape(pg, c.o.Status), Raw: normalize.Canonical(pg), Loc: loc + " " + id})
		}
		next, _ := list["next_cursor"].(string)
		more := list["has_more"] == true && next != ""
		var cursor json.RawMessage
		if more {
			run.StartCursor = next
			run.MaxEdited = stamp(maxSeen)
			cursor = c.cursor(st, &run, maxSeen)
		} else {
			cursor = c.cursor(st, nil, maxSeen)
		}
		if err := emit(ctx, connectors.Page{Items: items, Cursor: cursor}); err != nil {
			return res, err
		}
		if !more {
			res.Cursor = cursor
			res.Complete = c.o.Snapshot && !resumed
			return res, nil
		}
	}
}

// cursor encodes the state to store: mid-run (run set) the stored state
// with the resume point, at the end the largest last_edited_time seen.
func (c *Connector) cursor(st State, run *Resume, maxSeen time.Time) json.RawMessage {
	next := State{MaxEdited: st.MaxEdited}
	if run != nil {
		r := *run
		next.Resume = &r
	} else {
		next.MaxEdited = stamp(maxSeen)
	}
	b, _ := json.Marshal(next)
	return b
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

func parseTime(v any) (time.Time, error) {
	s, _ := v.(string)
	if s == "" {
		return time.Time{}, nil
	}
	return time.Parse(time.RFC3339Nano, s)
}

// schema is what the connector knows of the database.
type schema struct {
	// types maps property name to type; options the options of select,
	// multi_select and status properties.
	types   map[string]string
	options map[string][]string
	// task maps a task key (status, claimed_by, ...) to the property
	// written, for those the database has.
	task map[string]string
}

func (s *schema) names() string {
	names := make([]string, 0, len(s.types))
	for n := range s.types {
		names = append(names, n)
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// Verify reads the database's schema and checks every property the source
// names; see connectors.Verifier. A refused token is a configuration error
// at notion.token, a database the token cannot see one at notion.database
// (each still wraps connectors.ErrUnauthorized or ErrNotFound).
func (c *Connector) Verify(ctx context.Context) error {
	_, err := c.verify(ctx, nil)
	switch {
	case errors.Is(err, connectors.ErrUnauthorized):
		return &locatedError{cfg: c.o.Errorf("notion.token", ": the Notion API refused it: %v", err), err: err}
	case errors.Is(err, connectors.ErrNotFound):
		return &locatedError{cfg: c.o.Errorf("notion.database", ": %v", err), err: err}
	}
	return err
}

// locatedError is an upstream's refusal that a setting of the source
// causes: it reads as the configuration error (file, line, key) and
// unwraps to both it and the upstream's error.
type locatedError struct {
	cfg error
	err error
}

func (e *locatedError) Error() string   { return e.cfg.Error() }
func (e *locatedError) Unwrap() []error { return []error{e.cfg, e.err} }

// verify returns the checked schema, reading it on first use.
func (c *Connector) verify(ctx context.Context, res *connectors.Result) (*schema, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.schema != nil {
		return c.schema, nil
	}
	v, err := c.c.do(ctx, http.MethodGet, "/v1/databases/"+compactID(c.o.Database), nil)
	if res != nil {
		res.Requests++
	}
	if err != nil {
		if errors.Is(err, connectors.ErrNotFound) {
			return nil, fmt.Errorf("database %s not found, or not shared with the integration (Connections in the database's ⋯ menu): %w", c.o.Database, err)
		}
		return nil, fmt.Errorf("read database %s: %w", c.o.Database, err)
	}
	db, _ := v.(map[string]any)
	props, _ := db["properties"].(map[string]any)
	s := &schema{types: map[string]string{}, options: map[string][]string{}, task: map[string]string{}}
	for name, p := range props {
		pm, _ := p.(map[string]any)
		t, _ := pm["type"].(string)
		s.types[name] = t
		if conf, ok := pm[t].(map[string]any); ok {
			for _, o := range list(conf["options"]) {
				if om, ok := o.(map[string]any); ok {
					if n, ok := om["name"].(string); ok {
						s.options[name] = append(s.options[name], n)
					}
				}
			}
		}
	}
	if err := c.check(s); err != nil {
		return nil, err
	}
	c.schema = s
	return s, nil
}

// check checks the source's refs and the task's status values against s
// and fills s.task.
func (c *Connector) check(s *schema) error {
	var errs []error
	for _, r := range c.o.Refs {
		t, ok := s.types[r.Property]
		switch {
		case !ok && r.Optional:
			continue
		case !ok:
			errs = append(errs, c.o.Errorf(r.Key, "names property %q, which database %s does not have (it has: %s)", r.Property, c.o.Database, s.names()))
			continue
		case r.Kinds != nil && !slices.Contains(r.Kinds, t):
			errs = append(errs, c.o.Errorf(r.Key, "names property %q, a %s property; it must be %s", r.Property, t, strings.Join(r.Kinds, " or ")))
			continue
		}
		if strings.HasPrefix(r.Key, "notion.task.") {
			s.task[strings.TrimPrefix(r.Key, "notion.task.")] = r.Property
		}
	}
	if t := c.o.Task; t != nil && s.task["status"] != "" {
		if _, ok := s.types[t.Status]; ok {
			opts := s.options[t.Status]
			for _, f := range taskFields(t)[1:5] {
				if !slices.Contains(opts, *f.value) {
					ve := &connectors.ValidationError{Property: t.Status, Value: *f.value, Allowed: opts}
					errs = append(errs, &optionError{cfg: c.o.Errorf("notion.task."+f.key, "%v", ve), ve: ve})
				}
			}
		}
	}
	return errors.Join(errs...)
}

// optionError is a configuration error that is a value the database
// refuses: it reads as the configuration error and unwraps to both.
type optionError struct {
	cfg error
	ve  *connectors.ValidationError
}

func (e *optionError) Error() string   { return e.cfg.Error() }
func (e *optionError) Unwrap() []error { return []error{e.cfg, e.ve} }
