// Package httpjson is the http connector: GET a JSON API page by page,
// select the items with expressions, and keep an incremental cursor.
//
//	connector: http
//	http:
//	  url: https://api.example.com/tickets?per_page=100
//	  headers: {Authorization: "Bearer ${TICKETS_TOKEN}"}
//	  items: body.data                 # expression over body and headers
//	  pagination: link                 # next, link, cursor, page or none
//	  since: updated_since             # incremental: query parameter
//	  lookback: 1m
//
// Every page is emitted with a cursor that says where the run would go on
// (see State), so a run that stops half-way (a 429, a crash, max_pages)
// resumes from the next page instead of starting over. The package also
// serves as the paging engine of connectors built on JSON APIs (github):
// see the hooks in Options.
package httpjson

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/connectors"
	"github.com/lookout-dev/lookout/internal/normalize"
)

func init() {
	connectors.Register("http", Decode, newFromSettings)
}

// MaxBody bounds one response body.
const MaxBody = connectors.MaxBody

// Pagination modes.
const (
	PageNone   = "none"
	PageNext   = "next"
	PageLink   = "link"
	PageCursor = "cursor"
	PageNumber = "page"
)

// Connector reads a paginated JSON API.
type Connector struct {
	client *http.Client
	o      Options
	base   *url.URL
}

var (
	_ connectors.Connector   = (*Connector)(nil)
	_ connectors.Snapshotter = (*Connector)(nil)
)

// Snapshot reports whether the endpoint returns the full set every run
// (snapshot: true), so that the syncer records deletions.
func (c *Connector) Snapshot() bool { return c.o.Snapshot }

// defaultHeader is the header of every source that sets none (New). It
// is only read: connectors.Get copies it into each request.
var defaultHeader = http.Header{"Accept": {"application/json"}}

// Options are the typed settings of New. The zero value of every optional
// field is a usable default.
type Options struct {
	// URL is the first page. Required.
	URL string
	// Header is sent with every request, with Accept: application/json
	// added when it has none (New does not modify the caller's map).
	// Defaults to that Accept only.
	Header http.Header
	// Items selects the item list from `body` and `headers`; nil means body.
	Items *normalize.Program
	// Pagination is PageNone (default), PageNext, PageLink, PageCursor or PageNumber.
	Pagination string
	// Next returns the next page URL from `body`, `headers`, `url` (PageNext).
	Next *normalize.Program
	// Cursor returns the next cursor from `body`, `headers` (PageCursor),
	// sent as the query parameter CursorParam.
	Cursor      *normalize.Program
	CursorParam string
	// PageParam carries the page number (PageNumber), starting at PageStart.
	PageParam string
	PageStart int
	// MaxPages bounds one run. Defaults to 1000.
	MaxPages int
	// Snapshot: a run that walked every page from the first one is Complete.
	Snapshot bool
	// Since is the query parameter of the incremental cursor; "" disables it.
	Since string
	// SinceFormat is rfc3339 (default), unix or unix_ms.
	SinceFormat string
	// Lookback is subtracted from the largest updated-at seen.
	Lookback time.Duration
	// UpdatedAt reads an item's updated-at from `item`; nil means item.updated_at.
	UpdatedAt *normalize.Program
	// Timeout bounds each request, body included. Defaults to 30s.
	Timeout time.Duration
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time
	// Logger receives warnings (resume restarts, page limits). Defaults to slog.Default().
	Logger *slog.Logger

	// Hooks for connectors built on this one.

	// Shape, when set, turns each selected item into the value emitted and
	// the raw JSON kept for audit (nil raw: the mapper marshals the value).
	// Returning a nil value drops the item.
	Shape func(v any) (any, json.RawMessage, error)
	// Key, when set, names an item; an item whose key was already emitted
	// in this Fetch is skipped, as offset pagination under concurrent
	// updates shows some items twice.
	Key func(v any) string
	// FirstPageShowsChanges says the upstream lists the most recently
	// changed items first, so an unchanged first page (304) means nothing
	// changed: validators are then sent whatever the number of pages.
	// Otherwise they are sent only when the last complete run read a
	// single page and pagination is not link.
	FirstPageShowsChanges bool
	// Inspect sees the headers of every successful response and may raise
	// res.MinInterval (X-Poll-Interval).
	Inspect func(h http.Header, res *connectors.Result)
}

// State is the cursor stored in sources.cursor between runs.
type State struct {
	// URL, ETag and LastModified identify the first page of the last
	// complete run and its validators.
	URL          string `json:"url,omitempty"`
	ETag         string `json:"etag,omitempty"`
	LastModified string `json:"last_modified,omitempty"`
	// Pages is the number of pages the last complete run requested.
	Pages int `json:"pages,omitempty"`
	// MaxUpdatedAt is the largest updated-at seen (RFC 3339); the next run
	// sends it minus the lookback as the since parameter.
	MaxUpdatedAt string `json:"max_updated_at,omitempty"`
	// Resume is set while a run is under way: the next page to read.
	Resume *Resume `json:"resume,omitempty"`
}

// Resume is where an interrupted run goes on.
type Resume struct {
	// URL is the next page to request; Page its number (pagination page).
	URL  string `json:"url"`
	Page int    `json:"page,omitempty"`
	// Since is the since value the run sends (pagination page, cursor).
	Since string `json:"since,omitempty"`
	// Run is the state the run will store when it completes, so far.
	Run State `json:"run"`
}

func newFromSettings(src *config.Source, c *Settings, env connectors.Env) (connectors.Connector, error) {
	o := Options{
		URL: c.URL, Header: connectors.Header(c.Headers), Pagination: c.Pagination, CursorParam: c.CursorParam,
		PageParam: c.PageParam, PageStart: *c.PageStart, MaxPages: c.MaxPages, Snapshot: c.Snapshot, Since: c.Since,
		SinceFormat: c.SinceFormat, Lookback: *c.Lookback, Timeout: src.Timeout, Now: env.Now, Logger: env.Logger,
	}
	var err error
	if c.Items != "" {
		if o.Items, err = normalize.Compile(c.Items, "body", "headers"); err != nil {
			return nil, src.Errorf("http.items", "%v", err)
		}
	}
	if c.Next != "" {
		if o.Next, err = normalize.Compile(c.Next, "body", "headers", "url"); err != nil {
			return nil, src.Errorf("http.next", "%v", err)
		}
	}
	if c.Cursor != "" {
		if o.Cursor, err = normalize.Compile(c.Cursor, "body", "headers"); err != nil {
			return nil, src.Errorf("http.cursor", "%v", err)
		}
	}
	if c.Since != "" {
		key, expr := "http.updated_at", c.UpdatedAt
		if expr == "" && src.Fields.UpdatedAt != "" {
			key, expr = "fields.updated_at", src.Fields.UpdatedAt
		}
		if expr != "" {
			if o.UpdatedAt, err = normalize.Compile(expr, "item"); err != nil {
				return nil, src.Errorf(key, "%v", err)
			}
		}
	}
	conn, err := New(env.HTTP, o)
	if err != nil {
		return nil, src.Errorf("http", "%v", err)
	}
	return conn, nil
}

// New returns a connector with the given options, or an error naming the
// option that is wrong.
func New(client *http.Client, o Options) (*Connector, error) {
	if client == nil {
		client = &http.Client{}
	}
	if o.MaxPages <= 0 {
		o.MaxPages = MaxPagesDefault
	}
	if o.Timeout <= 0 {
		o.Timeout = config.TimeoutDefault
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.SinceFormat == "" {
		o.SinceFormat = SinceFormatDefault
	}
	if o.Pagination == "" {
		o.Pagination = PageNone
	}
	switch {
	case len(o.Header) == 0:
		// Most sources set no header: they share one, never written.
		o.Header = defaultHeader
	case o.Header.Get("Accept") == "":
		o.Header = o.Header.Clone()
		o.Header.Set("Accept", "application/json")
	}
	base, err := url.Parse(o.URL)
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return nil, fmt.Errorf("url %q is not an absolute http(s) URL", connectors.Redact(o.URL))
	}
	switch o.Pagination {
	case PageNone, PageLink:
	case PageNext:
		if o.Next == nil {
			return nil, errors.New("pagination next needs a next expression")
		}
	case PageCursor:
		if o.Cursor == nil || o.CursorParam == "" {
			return nil, errors.New("pagination cursor needs a cursor expression and cursor_param")
		}
	case PageNumber:
		if o.PageParam == "" {
			return nil, errors.New("pagination page needs page_param")
		}
	default:
		return nil, fmt.Errorf("pagination %q is not supported (cursor, link, next, none, page)", o.Pagination)
	}
	switch o.SinceFormat {
	case "rfc3339", "unix", "unix_ms":
	default:
		return nil, fmt.Errorf("since_format %q is not supported (rfc3339, unix, unix_ms)", o.SinceFormat)
	}
	if o.Since != "" && o.Snapshot {
		return nil, errors.New("since and snapshot are exclusive")
	}
	return &Connector{client: client, o: o, base: base}, nil
}

// walk is the position and progress of one run.
type walk struct {
	url     string // next page to request
	page    int    // its number (pagination page)
	cur     string // cursor value it carries (pagination cursor)
	since   string // since value sent
	run     State  // state to store at completion
	resumed bool
	fetched int       // pages requested by this Fetch
	maxSeen time.Time // largest updated-at seen, including the stored one
}

// Fetch walks the pages from the stored cursor: a resume point when the
// last run stopped half-way, else the first page (with the since parameter
// and, where they prove nothing changed, the stored validators).
func (c *Connector) Fetch(ctx context.Context, raw json.RawMessage, emit connectors.EmitFunc) (connectors.Result, error) {
	var st State
	if len(raw) > 0 && string(raw) != "null" {
		if err := json.Unmarshal(raw, &st); err != nil {
			return connectors.Result{}, fmt.Errorf("stored cursor is not a cursor of this connector (reset it: set the cursor of its row in the sources table to '{}'): %w", err)
		}
	}
	res := connectors.Result{}
	w, err := c.start(st)
	if err != nil {
		return res, err
	}
	seen := map[string]bool{}
	for {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		if w.fetched >= c.o.MaxPages {
			return c.stopAtLimit(res, st, w), nil
		}
		pageNo := w.run.Pages + 1
		req := connectors.Request{URL: w.url, Header: c.o.Header, Timeout: c.o.Timeout, Now: c.o.Now}
		if w.run.Pages == 0 && !w.resumed && c.conditional(st, w.url) {
			req.ETag, req.LastModified = st.ETag, st.LastModified
		}
		resp, err := connectors.Get(ctx, c.client, req)
		res.Requests++
		if err != nil {
			var se *connectors.StatusError
			if w.resumed && w.fetched == 0 && errors.As(err, &se) && staleResume(se.Code) {
				// The resume point (a cursor token, a page URL) no longer
				// exists upstream: start the run over rather than fail forever.
				c.o.Logger.Warn("resume point refused; starting over from the first page",
					"url", connectors.Redact(w.url), "status", se.Status)
				st.Resume = nil
				if w, err = c.start(st); err != nil {
					return res, err
				}
				continue
			}
			if errors.Is(err, connectors.ErrNotModified) {
				return res, err
			}
			return res, fmt.Errorf("page %d: %w", pageNo, err)
		}
		if c.o.Inspect != nil {
			c.o.Inspect(resp.Header, &res)
		}
		if w.run.Pages == 0 {
			w.run.URL, w.run.ETag, w.run.LastModified = w.url, resp.Header.Get("ETag"), resp.Header.Get("Last-Modified")
		}
		w.run.Pages++
		w.fetched++
		shown := connectors.Redact(w.url)
		doc, err := normalize.Decode(resp.Body)
		if err != nil {
			return res, fmt.Errorf("page %d (%s): malformed JSON body: %w", pageNo, shown, err)
		}
		hdr := headerMap(resp.Header)
		items, listed, err := c.items(doc, hdr, shown, seen, &w)
		if err != nil {
			return res, fmt.Errorf("page %d (%s): %w", pageNo, shown, err)
		}
		if !w.maxSeen.IsZero() {
			w.run.MaxUpdatedAt = w.maxSeen.UTC().Format(time.RFC3339Nano)
		}
		more, err := c.advance(&w, doc, hdr, resp.Header, listed)
		if err != nil {
			return res, fmt.Errorf("page %d (%s): %w", pageNo, shown, err)
		}
		var next State
		if more {
			next = st
			next.Resume = &Resume{URL: w.url, Page: w.page, Since: w.since, Run: w.run}
		} else {
			next = w.run
		}
		cursor, err := json.Marshal(next)
		if err != nil {
			return res, fmt.Errorf("encode cursor: %w", err)
		}
		if err := emit(ctx, connectors.Page{Items: items, Cursor: cursor}); err != nil {
			return res, err
		}
		now := c.o.Now()
		reset, exhausted := connectors.RateLimitReset(resp.Header, now)
		if !more {
			if exhausted && reset.Sub(now) > res.MinInterval {
				res.MinInterval = reset.Sub(now)
			}
			res.Cursor = cursor
			res.Complete = c.o.Snapshot && !w.resumed
			return res, nil
		}
		if exhausted && reset.After(now) {
			return res, &connectors.RetryLaterError{RetryAt: reset,
				Reason: fmt.Sprintf("X-RateLimit-Remaining is 0 after page %d (%s); the run resumes at the next page", pageNo, shown)}
		}
	}
}

// start positions a run: at the resume point, or at the first page.
func (c *Connector) start(st State) (walk, error) {
	var w walk
	if st.MaxUpdatedAt != "" {
		t, err := time.Parse(time.RFC3339Nano, st.MaxUpdatedAt)
		if err != nil {
			return w, fmt.Errorf("stored cursor: max_updated_at %q: %w", st.MaxUpdatedAt, err)
		}
		w.maxSeen = t
	}
	if r := st.Resume; r != nil && r.URL != "" {
		w.url, w.page, w.since, w.run, w.resumed = r.URL, r.Page, r.Since, r.Run, true
		if r.Run.MaxUpdatedAt != "" {
			if t, err := time.Parse(time.RFC3339Nano, r.Run.MaxUpdatedAt); err == nil && t.After(w.maxSeen) {
				w.maxSeen = t
			}
		}
		if c.o.Pagination == PageCursor {
			if u, err := url.Parse(r.URL); err == nil {
				w.cur = u.Query().Get(c.o.CursorParam)
			}
		}
		return w, nil
	}
	if c.o.Since != "" && !w.maxSeen.IsZero() {
		w.since = c.formatSince(w.maxSeen.Add(-c.o.Lookback))
	}
	w.run.MaxUpdatedAt = st.MaxUpdatedAt
	w.page = c.o.PageStart
	w.url = c.pageURL(w.since, w.page, "")
	return w, nil
}

// staleResume reports statuses that mean the stored resume point is gone.
func staleResume(code int) bool {
	switch code {
	case http.StatusBadRequest, http.StatusNotFound, http.StatusGone, http.StatusUnprocessableEntity:
		return true
	}
	return false
}

// conditional reports whether a 304 for the first page would prove that
// nothing changed, so that sending the stored validators is sound.
func (c *Connector) conditional(st State, first string) bool {
	if st.URL != first || (st.ETag == "" && st.LastModified == "") {
		return false
	}
	if c.o.FirstPageShowsChanges {
		return true
	}
	// One page and nothing else: a 304 covers the whole set. With the Link
	// header the next page is outside the validated body, so never then.
	return st.Pages == 1 && c.o.Pagination != PageLink
}

// stopAtLimit ends a run that reached MaxPages with pages left.
func (c *Connector) stopAtLimit(res connectors.Result, st State, w walk) connectors.Result {
	var next State
	if c.o.Snapshot {
		// A partial snapshot deletes nothing; the next run starts over.
		c.o.Logger.Warn("max_pages reached: the run stops without recording deletions", "max_pages", c.o.MaxPages)
		next = w.run
		next.ETag, next.LastModified = "", "" // the first page is not the whole set
	} else {
		c.o.Logger.Warn("max_pages reached: the next run continues from here", "max_pages", c.o.MaxPages, "next_url", connectors.Redact(w.url))
		next = st
		next.Resume = &Resume{URL: w.url, Page: w.page, Since: w.since, Run: w.run}
	}
	res.Cursor, _ = json.Marshal(next)
	res.Complete = false
	return res
}

// items selects, shapes and deduplicates the page's items, and tracks the
// largest updated-at. listed is the number of items the page listed.
func (c *Connector) items(doc any, hdr map[string]any, shown string, seen map[string]bool, w *walk) (out []connectors.Item, listed int, err error) {
	list := doc
	if c.o.Items != nil {
		if list, err = c.o.Items.Run(doc, hdr); err != nil {
			return nil, 0, fmt.Errorf("items expression: %w", err)
		}
	}
	var vals []any
	switch l := list.(type) {
	case []any:
		vals = l
	case map[string]any:
		vals = []any{l}
	case nil:
	default:
		return nil, 0, fmt.Errorf("items: want a list of objects, got %T", list)
	}
	out = make([]connectors.Item, 0, len(vals))
	horizon := c.o.Now().Add(futureSlack)
	for i, v := range vals {
		loc := shown + " [" + strconv.Itoa(i) + "]"
		var raw json.RawMessage
		if c.o.Shape != nil {
			var err error
			if v, raw, err = c.o.Shape(v); err != nil {
				return nil, 0, &connectors.ItemError{Loc: loc, Err: err}
			}
			if v == nil {
				continue
			}
		}
		if c.o.Key != nil {
			k := c.o.Key(v)
			if seen[k] {
				continue
			}
			seen[k] = true
		}
		if c.o.Since != "" {
			t, err := c.updatedAt(v)
			if err != nil {
				return nil, 0, &connectors.ItemError{Loc: loc, Err: fmt.Errorf("updated_at for the since cursor: %w", err)}
			}
			switch {
			case t == nil:
			case t.After(horizon):
				// A cursor in the future would hide every later change
				// (often a millisecond epoch read as seconds): keep the item,
				// not its time.
				c.o.Logger.Warn("updated_at is in the future; it does not move the since cursor",
					"item", loc, "updated_at", t.Format(time.RFC3339))
			case t.After(w.maxSeen):
				w.maxSeen = *t
			}
		}
		out = append(out, connectors.Item{Value: v, Raw: raw, Loc: loc})
	}
	return out, len(vals), nil
}

// futureSlack is how far past the clock an updated-at may be (clock skew)
// and still move the since cursor.
const futureSlack = 24 * time.Hour

func (c *Connector) updatedAt(item any) (*time.Time, error) {
	var v any
	if c.o.UpdatedAt != nil {
		var err error
		if v, err = c.o.UpdatedAt.Run(item); err != nil {
			return nil, err
		}
	} else if m, ok := item.(map[string]any); ok {
		v = m["updated_at"]
	}
	return normalize.ParseTime(v)
}

// advance moves w to the next page and reports whether there is one.
func (c *Connector) advance(w *walk, doc any, hdr map[string]any, h http.Header, n int) (bool, error) {
	var ref string
	switch c.o.Pagination {
	case PageNone:
		return false, nil
	case PageNumber:
		if n == 0 {
			return false, nil
		}
		w.page++
		w.url = c.pageURL(w.since, w.page, "")
		return true, nil
	case PageCursor:
		v, err := c.o.Cursor.Run(doc, hdr)
		if err != nil {
			return false, fmt.Errorf("cursor expression: %w", err)
		}
		cur, err := scalar(v)
		if err != nil {
			return false, fmt.Errorf("cursor expression: %w", err)
		}
		if cur == "" {
			return false, nil
		}
		if cur == w.cur {
			return false, fmt.Errorf("cursor expression returned the current cursor %q again", cur)
		}
		w.cur = cur
		w.url = c.pageURL(w.since, 0, cur)
		return true, nil
	case PageNext:
		v, err := c.o.Next.Run(doc, hdr, w.url)
		if err != nil {
			return false, fmt.Errorf("next expression: %w", err)
		}
		switch x := v.(type) {
		case nil:
		case string:
			ref = x
		default:
			return false, fmt.Errorf("next expression returned %T, want a URL string or nil", v)
		}
	case PageLink:
		ref = LinkNext(h.Values("Link"))
	}
	if strings.TrimSpace(ref) == "" {
		return false, nil
	}
	cur, err := url.Parse(w.url)
	if err != nil {
		return false, err
	}
	u, err := cur.Parse(strings.TrimSpace(ref))
	if err != nil {
		return false, fmt.Errorf("next page URL %q: %w", connectors.Redact(ref), err)
	}
	if u.String() == w.url {
		return false, fmt.Errorf("next page URL %q is the current page", connectors.Redact(ref))
	}
	w.url = u.String()
	return true, nil
}

func scalar(v any) (string, error) {
	switch x := v.(type) {
	case nil:
		return "", nil
	case string:
		return x, nil
	case int64:
		return strconv.FormatInt(x, 10), nil
	case int:
		return strconv.Itoa(x), nil
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64), nil
	case bool:
		if !x {
			return "", nil
		}
	}
	return "", fmt.Errorf("returned %T, want a string, a number or nil", v)
}

// pageURL is the configured URL with the since, page and cursor parameters.
func (c *Connector) pageURL(since string, page int, cursor string) string {
	u := *c.base
	q := u.Query()
	if c.o.Since != "" && since != "" {
		q.Set(c.o.Since, since)
	}
	if c.o.Pagination == PageNumber {
		q.Set(c.o.PageParam, strconv.Itoa(page))
	}
	if cursor != "" {
		q.Set(c.o.CursorParam, cursor)
	}
	if len(q) == 0 {
		return u.String()
	}
	u.RawQuery = q.Encode()
	return u.String()
}

func (c *Connector) formatSince(t time.Time) string {
	switch c.o.SinceFormat {
	case "unix":
		return strconv.FormatInt(t.Unix(), 10)
	case "unix_ms":
		return strconv.FormatInt(t.UnixMilli(), 10)
	}
	return t.UTC().Format(time.RFC3339)
}

func headerMap(h http.Header) map[string]any {
	out := make(map[string]any, len(h))
	for k, v := range h {
		out[strings.ToLower(k)] = strings.Join(v, ", ")
	}
	return out
}

// LinkNext returns the rel="next" target of RFC 5988 Link header values.
func LinkNext(values []string) string {
	for _, v := range values {
		for _, part := range splitLinks(v) {
			segs := strings.Split(part, ";")
			target := strings.TrimSpace(segs[0])
			if !strings.HasPrefix(target, "<") || !strings.HasSuffix(target, ">") {
				continue
			}
			for _, p := range segs[1:] {
				k, val, _ := strings.Cut(strings.TrimSpace(p), "=")
				if strings.EqualFold(strings.TrimSpace(k), "rel") {
					for _, rel := range strings.Fields(strings.Trim(strings.TrimSpace(val), `"`)) {
						if strings.EqualFold(rel, "next") {
							return target[1 : len(target)-1]
						}
					}
				}
			}
		}
	}
	return ""
}

// splitLinks splits a Link header value at the commas between links, not
// at commas inside <...> targets or quoted parameters.
func splitLinks(v string) []string {
	var out []string
	depth, quoted, start := 0, false, 0
	for i := 0; i < len(v); i++ {
		switch ch := v[i]; {
		case ch == '"' && depth == 0:
			quoted = !quoted
		case ch == '<' && !quoted:
			depth++
		case ch == '>' && !quoted && depth > 0:
			depth--
		case ch == ',' && depth == 0 && !quoted:
			out = append(out, v[start:i])
			start = i + 1
		}
	}
	return append(out, v[start:])
}
