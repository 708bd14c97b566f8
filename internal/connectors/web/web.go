// Package web is the web connector: an HTML page (or a PDF) read like
// changedetection.io reads it, as records.
//
//	connector: web
//	web:
//	  url: https://example.com/slots
//	  items: "table.slots tr.available"  # one record per match; omit for the whole page
//	  id: "@data-slot-id"
//	  fields:
//	    title: "td.when"
//	    link: "a@href"
//
// With items, each element the selector matches is one record: its id is
// the id field ("selector", "@attr" or "selector@attr", default a hash of
// its text), its body its text, and each of fields is a key of the item
// (title, body and url fill those record fields, any other name goes to
// extra). Without items, the page is one record (id the URL) whose body is
// the page's readable text and whose extra carries the line diff against
// the previous run (diff, added, removed) and the price, currency and
// availability of its structured data (JSON-LD or microdata). Selectors
// are CSS, or XPath after "xpath:". Links are resolved against the page's
// URL (or <base href>); text is white-space collapsed and Unicode NFC;
// remove selectors and ignore rules take volatile parts out before
// anything is hashed. The charset comes from the BOM, the Content-Type
// header or <meta charset>. A run whose items selector matches nothing
// fails (allow_empty: true makes it an empty snapshot, under the deletion
// guard). robots.txt is obeyed unless robots: ignore. render: browser
// reads the DOM a shared headless Chromium built, every request of the
// page sent by the connector's client (browser.go), after login steps
// (fill, click, wait) on a sign-in page when web.login says so
// (login.go). See docs/web.md.
package web

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"
	"golang.org/x/net/html/charset"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/connectors"
)

func init() {
	connectors.Register("web", Decode, newFromSettings)
}

// Defaults and bounds.
const (
	// MaxBytesDefault is the default bound on a page's body.
	MaxBytesDefault = 5 << 20
	// UserAgent is sent unless headers set one, and is the agent robots.txt
	// rules are read for.
	UserAgent = "lookout"
	// Accept is the Accept header sent for pages.
	Accept = "text/html,application/xhtml+xml,application/pdf;q=0.9,*/*;q=0.8"
)

// ErrNoMatch fails a run whose items selector matched nothing (and
// allow_empty is not set): a changed page layout, an error page or a
// consent wall far more often than a page that really lists nothing.
var ErrNoMatch = errors.New("items selector matched nothing")

// ErrRobots fails a run whose page robots.txt disallows.
var ErrRobots = errors.New("disallowed by robots.txt")

// Settings is the web: block of a source.
type Settings struct {
	// URL of the page. Required.
	URL string `yaml:"url"`
	// Items is the selector of the elements that are records. Defaults to
	// none: the whole page is one record.
	Items string `yaml:"items"`
	// ID says where an item's id is: "selector", "@attr" or
	// "selector@attr". Defaults to a hash of the item's text.
	ID string `yaml:"id"`
	// Fields maps item keys to "selector", "@attr" or "selector@attr".
	// Defaults to none.
	Fields map[string]string `yaml:"fields"`
	// Remove lists selectors of elements taken out of the page before
	// anything is read (ads, clocks, counters). Defaults to none.
	Remove []string `yaml:"remove"`
	// IgnoreText lists texts removed (case-insensitively) from every value.
	// Defaults to none.
	IgnoreText []string `yaml:"ignore_text"`
	// IgnoreRegex lists regular expressions (RE2) whose matches are removed
	// from every value. Defaults to none.
	IgnoreRegex []string `yaml:"ignore_regex"`
	// AllowEmpty makes a run whose items selector matches nothing an empty
	// snapshot (its records are deleted, under the deletion guard) instead
	// of a failure. Defaults to false.
	AllowEmpty bool `yaml:"allow_empty"`
	// Robots is obey or ignore. Defaults to obey.
	Robots string `yaml:"robots"`
	// MaxBytes bounds the page's body. Defaults to 5 MiB (MaxBytesDefault);
	// at most 64 MiB.
	MaxBytes int64 `yaml:"max_bytes"`
	// Render is static (the page as served) or browser (the DOM after
	// headless Chromium ran the page's scripts). Defaults to static.
	Render string `yaml:"render"`
	// Wait is what a browser render waits for. Defaults to 500ms of
	// network idle, within 30s.
	Wait *WaitSettings `yaml:"wait"`
	// Headers are sent with every request; values may use ${ENV}.
	// Defaults to none.
	Headers map[string]string `yaml:"headers"`
	// Login signs in before the page is rendered (render: browser only).
	// Defaults to none.
	Login *LoginSettings `yaml:"login"`
}

// LoginSettings is the web.login: block: a sign-in form the browser
// fills before it loads the page, in the same render.
type LoginSettings struct {
	// URL of the sign-in page. Required.
	URL string `yaml:"url"`
	// Steps are done in order on it. At least one is required.
	Steps []LoginStepSettings `yaml:"steps"`
}

// LoginStepSettings is one step of web.login.steps: exactly one of Fill,
// Click or Wait.
type LoginStepSettings struct {
	// Fill types Value into the input this selector finds. Defaults to none.
	Fill string `yaml:"fill"`
	// Value is what Fill types; a secret is written as ${ENV_VAR}.
	// Required with Fill.
	Value string `yaml:"value"`
	// Click clicks the element this selector finds. Defaults to none.
	Click string `yaml:"click"`
	// Wait waits until this selector finds a visible element. Defaults
	// to none.
	Wait string `yaml:"wait"`
}

// WaitSettings is the web.wait: block.
type WaitSettings struct {
	// Selector must match the rendered page (CSS, or XPath after xpath:).
	// Defaults to none.
	Selector string `yaml:"selector"`
	// Idle is how long no request of the page may be in flight. Defaults
	// to 500ms.
	Idle time.Duration `yaml:"idle"`
	// Timeout bounds the render. Defaults to 30s.
	Timeout time.Duration `yaml:"timeout"`
}

var fieldName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Decode reads and validates the web: block of src: every selector and
// regular expression is compiled, so that a bad one is an error at its
// key's line. Its steps (blockDecoder's methods) check the keys in the
// block's order: what the records are (records), which fields (fields),
// what is left out of the text (filters), how the page is read (reading),
// how a browser renders it (render), and the keys that need another
// (requirements).
func Decode(src *config.Source) (*Options, error) {
	var s Settings
	if err := src.DecodeBlock(&s); err != nil {
		return nil, err
	}
	d := &blockDecoder{src: src, s: &s,
		o:    &Options{URL: s.URL, AllowEmpty: s.AllowEmpty, Header: connectors.Header(s.Headers), Timeout: src.Timeout},
		errs: []error{connectors.CheckURL(src, "web.url", s.URL), connectors.CheckHeaders(src, "web.headers", s.Headers)}}
	d.records()
	d.fields()
	d.filters()
	d.reading()
	d.render()
	d.requirements()
	return d.o, errors.Join(d.errs...)
}

// blockDecoder is the state of one Decode: the block, the options built
// from it and the errors found, in key order.
type blockDecoder struct {
	src  *config.Source
	s    *Settings
	o    *Options
	errs []error
}

// bad records the error of key.
func (d *blockDecoder) bad(key string, err error) {
	d.errs = append(d.errs, d.src.Errorf(key, "%v", err))
}

// records decodes web.items and web.id: what one record is.
func (d *blockDecoder) records() {
	s, o := d.s, d.o
	if s.Items != "" {
		sel, err := CompileSelector(s.Items)
		if err != nil {
			d.bad("web.items", fmt.Errorf("%q %w", s.Items, err))
		}
		o.Items = sel
	}
	if s.ID != "" {
		if s.Items == "" {
			d.bad("web.id", errors.New("needs web.items: without it the page is one record, whose id is its URL"))
		}
		f, err := ParseField(s.ID)
		if err != nil {
			d.bad("web.id", fmt.Errorf("%q %w", s.ID, err))
		}
		o.ID = &f
	}
}

// fields decodes web.fields, in name order.
func (d *blockDecoder) fields() {
	s := d.s
	for _, k := range slices.Sorted(maps.Keys(s.Fields)) {
		key := "web.fields." + k
		switch {
		case !fieldName.MatchString(k):
			d.bad(key, errors.New("is not a valid field name (letters, digits and _)"))
			continue
		case k == "id":
			d.bad(key, errors.New("is the record id: set web.id instead"))
			continue
		}
		f, err := ParseField(s.Fields[k])
		if err != nil {
			d.bad(key, fmt.Errorf("%q %w", s.Fields[k], err))
			continue
		}
		d.o.Fields = append(d.o.Fields, NamedField{Name: k, Field: f})
	}
}

// filters decodes web.remove, web.ignore_text and web.ignore_regex: what
// is left out of the page's text.
func (d *blockDecoder) filters() {
	s, o := d.s, d.o
	for i, r := range s.Remove {
		sel, err := CompileSelector(r)
		if err != nil {
			d.bad(fmt.Sprintf("web.remove[%d]", i), fmt.Errorf("%q %w", r, err))
			continue
		}
		o.Remove = append(o.Remove, sel)
	}
	for i, t := range s.IgnoreText {
		if strings.TrimSpace(t) == "" {
			d.bad(fmt.Sprintf("web.ignore_text[%d]", i), errors.New("is empty"))
			continue
		}
		o.Ignore = append(o.Ignore, regexp.MustCompile("(?i)"+regexp.QuoteMeta(t)))
	}
	for i, r := range s.IgnoreRegex {
		re, err := regexp.Compile(r)
		switch {
		case err != nil:
			d.bad(fmt.Sprintf("web.ignore_regex[%d]", i), fmt.Errorf("%q is not a valid regular expression: %v", r, err))
		case re.MatchString(""):
			d.bad(fmt.Sprintf("web.ignore_regex[%d]", i), fmt.Errorf("%q matches the empty string, so it removes nothing useful", r))
		default:
			o.Ignore = append(o.Ignore, re)
		}
	}
}

// reading decodes web.robots and web.max_bytes.
func (d *blockDecoder) reading() {
	s, o := d.s, d.o
	switch s.Robots {
	case "", "obey":
		o.Robots = true
	case "ignore":
	default:
		d.bad("web.robots", fmt.Errorf("must be obey or ignore, not %q", s.Robots))
	}
	switch {
	case s.MaxBytes == 0:
		o.MaxBytes = MaxBytesDefault
	case s.MaxBytes < 1024 || s.MaxBytes > connectors.MaxBody:
		d.bad("web.max_bytes", fmt.Errorf("must be between 1024 and %d, not %d", connectors.MaxBody, s.MaxBytes))
	default:
		o.MaxBytes = s.MaxBytes
	}
}

// render decodes web.render and, for a browser, web.wait.
func (d *blockDecoder) render() {
	switch d.s.Render {
	case "", "static":
	case "browser":
		d.o.Browser = &Wait{Idle: WaitIdleDefault, Timeout: WaitTimeoutDefault}
		if w := d.s.Wait; w != nil {
			d.wait(w)
		}
	default:
		d.bad("web.render", fmt.Errorf("must be static or browser, not %q", d.s.Render))
	}
}

// wait decodes web.wait of a browser render.
func (d *blockDecoder) wait(w *WaitSettings) {
	b := d.o.Browser
	if w.Selector != "" {
		sel, err := CompileSelector(w.Selector)
		if err != nil {
			d.bad("web.wait.selector", fmt.Errorf("%q %w", w.Selector, err))
		}
		b.Selector = sel
	}
	switch {
	case w.Idle < 0:
		d.bad("web.wait.idle", fmt.Errorf("must not be negative, not %s", w.Idle))
	case w.Idle > 0:
		b.Idle = w.Idle
	}
	switch {
	case w.Timeout < 0:
		d.bad("web.wait.timeout", fmt.Errorf("must not be negative, not %s", w.Timeout))
	case w.Timeout > 0:
		b.Timeout = w.Timeout
	}
	if b.Idle >= b.Timeout {
		d.bad("web.wait.idle", fmt.Errorf("(%s) must be shorter than web.wait.timeout (%s)", b.Idle, b.Timeout))
	}
}

// requirements decodes web.login and checks the keys that need another:
// login and wait a browser, allow_empty items.
func (d *blockDecoder) requirements() {
	s := d.s
	if s.Login != nil {
		if s.Render != "browser" {
			d.bad("web.login", errors.New("needs web.render: browser (the steps fill and click in the browser)"))
		}
		d.o.Login, d.errs = decodeLogin(d.src, s.Login, d.errs)
	}
	if s.Wait != nil && s.Render != "browser" {
		d.bad("web.wait", errors.New("needs web.render: browser (a static page is read as served)"))
	}
	if s.AllowEmpty && s.Items == "" {
		d.bad("web.allow_empty", errors.New("needs web.items: the whole page is never empty"))
	}
}

// NamedField is one of the fields of the web: block.
type NamedField struct {
	Name string
	Field
}

// Options are the typed settings of New.
type Options struct {
	// URL of the page. Required.
	URL string
	// Items selects the records; nil makes the page one record.
	Items *Selector
	// ID locates an item's id; nil hashes its text.
	ID *Field
	// Fields are the item keys read from each item (or the page).
	Fields []NamedField
	// Remove are taken out of the page first.
	Remove []*Selector
	// Ignore are removed from every text.
	Ignore []*regexp.Regexp
	// AllowEmpty: an items selector matching nothing is an empty snapshot.
	AllowEmpty bool
	// Robots: obey robots.txt.
	Robots bool
	// Browser renders the page in the shared headless Chromium, waiting
	// for what it says; nil reads the page as served.
	Browser *Wait
	// Login signs in, in the same render, before the page is loaded;
	// nil does not. Needs Browser.
	Login *Login
	// MaxBytes bounds the body. Defaults to MaxBytesDefault.
	MaxBytes int64
	// Header is sent with every request.
	Header http.Header
	// Timeout bounds each request. Defaults to config.TimeoutDefault.
	Timeout time.Duration
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time
	// Logger receives warnings. Defaults to slog.Default().
	Logger *slog.Logger
}

// Connector reads one page.
type Connector struct {
	client *http.Client
	o      Options
	z      Normalizer
	page   *url.URL
	conf   string // hash of the settings, kept in the cursor
	robots *robotsCache
}

var (
	_ connectors.Connector   = (*Connector)(nil)
	_ connectors.Snapshotter = (*Connector)(nil)
)

// State is the cursor: the validators of the last response, the settings
// they were read with, and (whole-page mode) the text and diff of the
// last version.
type State struct {
	URL          string `json:"url,omitempty"`
	Config       string `json:"config,omitempty"`
	ETag         string `json:"etag,omitempty"`
	LastModified string `json:"last_modified,omitempty"`
	// TextHash identifies the page text the record holds.
	TextHash string `json:"text_hash,omitempty"`
	// Text is that text, gzipped (base64 in JSON: the cursor is stored
	// with every recorded run and logged), when shorter than MaxKeptText.
	Text []byte `json:"text_gz,omitempty"`
	// Diff is the diff the record carries (against the version before).
	Diff *Diff `json:"diff,omitempty"`
}

func newFromSettings(src *config.Source, o *Options, env connectors.Env) (connectors.Connector, error) {
	o.Now, o.Logger = env.Now, env.Logger
	c, err := New(env.HTTP, *o)
	if err != nil {
		return nil, src.Errorf("web.url", "%v", err)
	}
	c.conf = src.Hash
	return c, nil
}

// defaultHeader is the header of every page that sets none (New). It is
// only read: requests copy it.
var defaultHeader = http.Header{"Accept": {Accept}, "User-Agent": {UserAgent}}

// New returns a connector for the page at o.URL.
func New(client *http.Client, o Options) (*Connector, error) {
	u, err := url.Parse(o.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%q is not an absolute http(s) URL", connectors.Redact(o.URL))
	}
	if client == nil {
		client = &http.Client{}
	}
	if len(o.Header) == 0 {
		// Most pages set no header: they share one, never written.
		o.Header = defaultHeader
	} else {
		o.Header = o.Header.Clone()
		if o.Header.Get("Accept") == "" {
			o.Header.Set("Accept", Accept)
		}
		if o.Header.Get("User-Agent") == "" {
			o.Header.Set("User-Agent", UserAgent)
		}
	}
	if o.Timeout <= 0 {
		o.Timeout = config.TimeoutDefault
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = MaxBytesDefault
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return &Connector{client: client, o: o, z: Normalizer{Ignore: o.Ignore}, page: u, robots: &robotsCache{}}, nil
}

// Snapshot reports true: every complete run reads the whole page.
func (c *Connector) Snapshot() bool { return true }

// Fetch gets the page (conditionally, after robots.txt) and emits its
// records as one page.
func (c *Connector) Fetch(ctx context.Context, raw json.RawMessage, emit connectors.EmitFunc) (connectors.Result, error) {
	var st State
	if len(raw) > 0 && string(raw) != "null" && string(raw) != "{}" {
		if err := json.Unmarshal(raw, &st); err != nil {
			return connectors.Result{}, fmt.Errorf("stored cursor is not a cursor of this connector (reset it: set the cursor of its row in the sources table to '{}'): %w", err)
		}
	}
	var res connectors.Result
	var err error
	shown := connectors.Redact(c.o.URL)
	if c.o.Robots {
		n, err := c.robots.allowed(ctx, c, c.page)
		res.Requests += n
		if err != nil {
			return res, err
		}
	}
	req := connectors.Request{URL: c.o.URL, Header: c.o.Header, Timeout: c.o.Timeout, MaxBody: c.o.MaxBytes, Now: c.o.Now}
	if st.URL == c.o.URL && st.Config == c.conf {
		req.ETag, req.LastModified = st.ETag, st.LastModified
	}
	var resp *connectors.Response
	if c.o.Browser != nil {
		var n int
		resp, n, err = c.render(ctx, *c.o.Browser)
		res.Requests += n
	} else {
		res.Requests++
		resp, err = connectors.Get(ctx, c.client, req)
	}
	if err != nil {
		return res, err
	}
	next := State{URL: c.o.URL, Config: c.conf, ETag: resp.Header.Get("ETag"), LastModified: resp.Header.Get("Last-Modified")}
	var items []connectors.Item
	if isPDF(resp) {
		if c.o.Items != nil {
			return res, fmt.Errorf("page %s: is a PDF, which has no elements for web.items to select: remove items to watch its text", shown)
		}
		lines, err := PDFText(resp.Body)
		if err != nil {
			return res, fmt.Errorf("page %s: %w", shown, err)
		}
		item := c.pageItem(&st, &next, "", c.z.Lines(lines))
		item["content_type"] = "pdf"
		items = []connectors.Item{{Value: item, Loc: shown}}
	} else {
		doc, err := parseHTML(resp)
		if err != nil {
			return res, fmt.Errorf("page %s: %w", shown, err)
		}
		if items, err = c.extract(doc, &st, &next); err != nil {
			return res, err
		}
	}
	cursor, err := json.Marshal(next)
	if err != nil {
		return res, fmt.Errorf("encode cursor: %w", err)
	}
	if err := emit(ctx, connectors.Page{Items: items, Cursor: cursor}); err != nil {
		return res, err
	}
	res.Cursor, res.Complete = cursor, true
	return res, nil
}

func isPDF(resp *connectors.Response) bool {
	ct := strings.ToLower(resp.Header.Get("Content-Type"))
	return strings.HasPrefix(ct, "application/pdf") || bytes.HasPrefix(resp.Body, []byte("%PDF-"))
}

// parseHTML decodes the body from its charset (BOM, Content-Type, <meta>,
// else UTF-8 when valid, else windows-1252) and parses it. The parser
// tolerates malformed HTML the way browsers do.
func parseHTML(resp *connectors.Response) (*html.Node, error) {
	enc, _, _ := charset.DetermineEncoding(resp.Body, resp.Header.Get("Content-Type"))
	body, err := enc.NewDecoder().Bytes(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("decode charset: %w", err)
	}
	// The UTF-8 decoder keeps a byte order mark, which would be the
	// first character of the page's text.
	body = bytes.TrimPrefix(body, []byte("\uFEFF"))
	doc, err := html.Parse(bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("parse HTML: %w", err)
	}
	return doc, nil
}

// extract turns the parsed page into items.
func (c *Connector) extract(doc *html.Node, prev, next *State) ([]connectors.Item, error) {
	shown := connectors.Redact(c.o.URL)
	for _, sel := range c.o.Remove {
		for _, n := range sel.All(doc) {
			if n.Parent != nil {
				n.Parent.RemoveChild(n)
			}
		}
	}
	base := c.base(doc)
	if c.o.Items == nil {
		body := findAll(doc, func(n *html.Node) bool { return n.DataAtom == atom.Body })
		root := doc
		if len(body) > 0 {
			root = body[0]
		}
		item := c.pageItem(prev, next, c.z.Line(title(doc)), c.z.Lines(Text(root)))
		item["content_type"] = "html"
		if err := c.setFields(item, doc, base); err != nil {
			return nil, &connectors.ItemError{Loc: shown, Err: err}
		}
		StructuredOffer(doc, doc).set(item)
		return []connectors.Item{{Value: item, Loc: shown}}, nil
	}
	nodes := c.o.Items.All(doc)
	if len(nodes) == 0 && !c.o.AllowEmpty {
		return nil, fmt.Errorf("page %s: web.items %q: %w (the page's layout changed, or it is an error or consent page; nothing was deleted. "+
			"If the page can really list nothing, set web.allow_empty: true)", shown, c.o.Items, ErrNoMatch)
	}
	items := make([]connectors.Item, 0, len(nodes))
	seen := make(map[string]int, len(nodes))
	for i, n := range nodes {
		loc := fmt.Sprintf("%s [%d]", shown, i)
		text := c.z.Line(strings.Join(Text(n), "\n"))
		item := map[string]any{"body": text, "url": c.o.URL}
		if err := c.setFields(item, n, base); err != nil {
			return nil, &connectors.ItemError{Loc: loc, Err: err}
		}
		StructuredOffer(nil, n).set(item)
		var id string
		if c.o.ID != nil {
			v, ok := c.value(*c.o.ID, n, base)
			if !ok || v == "" {
				return nil, &connectors.ItemError{Loc: loc, Err: fmt.Errorf("web.id %q found no id in the item %q", c.idSpec(), clip(text, 80))}
			}
			id = v
		} else {
			sum := sha256.Sum256([]byte(text))
			id = "sha256:" + hex.EncodeToString(sum[:12])
		}
		if first, dup := seen[id]; dup {
			c.o.Logger.Warn("page repeats an item id; keeping the first", "id", id, "item", i, "first_item", first, "url", shown)
			continue
		}
		seen[id] = i
		item["id"] = id
		items = append(items, connectors.Item{Value: item, Loc: loc})
	}
	return items, nil
}

func (c *Connector) idSpec() string {
	if c.o.ID.Sel == nil {
		return "@" + c.o.ID.Attr
	}
	if c.o.ID.Attr == "" {
		return c.o.ID.Sel.String()
	}
	return c.o.ID.Sel.String() + "@" + c.o.ID.Attr
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + "…"
}

// pageItem is the whole-page record: the text's lines and the diff
// against the previous run's text (kept in the cursor).
func (c *Connector) pageItem(prev, next *State, title string, lines []string) map[string]any {
	text := strings.Join(lines, "\n")
	sum := sha256.Sum256([]byte(text))
	next.TextHash = hex.EncodeToString(sum[:16])
	switch {
	case prev.TextHash == next.TextHash && len(prev.Text) > 0:
		next.Text = prev.Text // a quiet check compresses nothing
	case len(text) <= MaxKeptText:
		next.Text = gzipText(text)
	}
	switch {
	case prev.TextHash == next.TextHash:
		next.Diff = prev.Diff // the same version: the same record
	case prev.TextHash != "" && next.Text != nil:
		if prevText, ok := gunzipText(prev.Text); ok {
			d := LineDiff(strings.Split(prevText, "\n"), lines)
			next.Diff = &d
			break
		}
		fallthrough
	case prev.TextHash != "":
		next.Diff = &Diff{Unified: fmt.Sprintf("(the page's text is longer than %d bytes: no diff)\n", MaxKeptText)}
	}
	item := map[string]any{"id": c.o.URL, "url": c.o.URL, "body": text}
	if title != "" {
		item["title"] = title
	}
	if d := next.Diff; d != nil {
		item["diff"] = d.Unified
		item["added"] = strs(d.Added)
		item["removed"] = strs(d.Removed)
	} else {
		item["diff"], item["added"], item["removed"] = "", []any{}, []any{}
	}
	return item
}

// gzipWriters are reused: a gzip.Writer allocates over 1 MB of state.
var gzipWriters = sync.Pool{New: func() any {
	zw, _ := gzip.NewWriterLevel(io.Discard, gzip.BestSpeed)
	return zw
}}

func gzipText(s string) []byte {
	var b bytes.Buffer
	zw := gzipWriters.Get().(*gzip.Writer)
	defer gzipWriters.Put(zw)
	zw.Reset(&b)
	_, _ = zw.Write([]byte(s))
	_ = zw.Close()
	return b.Bytes()
}

func gunzipText(b []byte) (string, bool) {
	if len(b) == 0 {
		return "", false
	}
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return "", false
	}
	out, err := io.ReadAll(io.LimitReader(zr, MaxKeptText+1))
	if err != nil || len(out) > MaxKeptText {
		return "", false
	}
	return string(out), true
}

func strs(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

// setFields reads c.o.Fields under n into item. A field whose selector
// matches nothing is left out; a field named price becomes a number when
// it reads as one.
func (c *Connector) setFields(item map[string]any, n *html.Node, base *url.URL) error {
	for _, f := range c.o.Fields {
		v, ok := c.value(f.Field, n, base)
		if !ok {
			delete(item, f.Name)
			continue
		}
		if f.Name == "price" {
			if p, ok := ParsePrice(v); ok {
				item[f.Name] = p
				continue
			}
		}
		if f.Name == "availability" {
			v = Availability(v)
		}
		item[f.Name] = v
	}
	return nil
}

// value reads f under n: the first match's text or attribute.
func (c *Connector) value(f Field, n *html.Node, base *url.URL) (string, bool) {
	target := n
	if f.Sel != nil {
		m := f.Sel.All(n)
		if len(m) == 0 {
			return "", false
		}
		target = m[0]
	}
	if f.Attr == "" {
		if target.Parent == nil && target.Type == html.ElementNode && linkAttrs[target.Data] && target.FirstChild != nil && target.FirstChild == target.LastChild {
			return resolve(base, target.FirstChild.Data), true // an XPath attribute: .//a/@href
		}
		return c.z.Line(strings.Join(Text(target), " ")), true
	}
	if !hasAttr(target, f.Attr) {
		return "", false
	}
	v := attr(target, f.Attr)
	if linkAttrs[f.Attr] {
		return resolve(base, v), true
	}
	return c.z.Line(v), true
}

// base is the URL links resolve against: <base href>, else the page's.
func (c *Connector) base(doc *html.Node) *url.URL {
	for _, b := range findAll(doc, func(n *html.Node) bool { return n.DataAtom == atom.Base && hasAttr(n, "href") }) {
		if u, err := c.page.Parse(strings.TrimSpace(attr(b, "href"))); err == nil {
			return u
		}
		break
	}
	return c.page
}

func resolve(base *url.URL, ref string) string {
	ref = strings.TrimSpace(ref)
	u, err := base.Parse(ref)
	if err != nil {
		return ref
	}
	return u.String()
}
