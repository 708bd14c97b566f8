// Package rss is the rss connector: an RSS 2.0, Atom or JSON Feed document
// parsed with github.com/mmcdole/gofeed.
//
//	connector: rss
//	rss:
//	  url: https://go.dev/blog/feed.atom
//
// Each entry becomes an item with id (guid, else link, else a content
// hash), title, body (content, else description), url, author, labels
// (categories), created_at (published) and updated_at. Requests are
// conditional on the stored ETag/Last-Modified (a 304 costs no parse), and
// an RSS <ttl> is a lower bound on the next run. A feed lists only recent
// entries, so it is incremental: entries that drop out of it are not
// deleted.
package rss

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/mmcdole/gofeed"
	gorss "github.com/mmcdole/gofeed/rss"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/connectors"
	"github.com/lookout-dev/lookout/internal/normalize"
)

func init() {
	connectors.Register("rss", Decode, newFromSettings)
}

// Settings is the rss: block of a source.
type Settings struct {
	// URL of the feed. Required.
	URL string `yaml:"url"`
	// Headers are sent with every request; values may use ${ENV}.
	// Defaults to none.
	Headers map[string]string `yaml:"headers"`
}

// Decode reads and validates the rss: block of src.
func Decode(src *config.Source) (*Settings, error) {
	var s Settings
	if err := src.DecodeBlock(&s); err != nil {
		return nil, err
	}
	return &s, errors.Join(connectors.CheckURL(src, "rss.url", s.URL), connectors.CheckHeaders(src, "rss.headers", s.Headers))
}

// Accept is the Accept header sent for feeds.
const Accept = "application/rss+xml, application/atom+xml, application/feed+json, application/json;q=0.9, application/xml;q=0.8, text/xml;q=0.8, */*;q=0.5"

// defaultHeader is the header of every feed that sets none (New). It is
// only read: connectors.Get copies it into each request.
var defaultHeader = http.Header{"Accept": {Accept}}

// Options are the typed settings of New.
type Options struct {
	// URL of the feed. Required.
	URL string
	// Header is sent with every request, with Accept added when it has
	// none (New does not modify the caller's map). Defaults to Accept
	// only.
	Header http.Header
	// Timeout bounds the request. Defaults to 30s.
	Timeout time.Duration
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time
	// Logger receives warnings. Defaults to slog.Default().
	Logger *slog.Logger
}

// Connector reads one feed.
type Connector struct {
	client *http.Client
	o      Options
}

var _ connectors.Connector = (*Connector)(nil)

// State is the cursor stored in sources.cursor: the validators of the
// last response and the URL they belong to.
type State struct {
	URL          string `json:"url,omitempty"`
	ETag         string `json:"etag,omitempty"`
	LastModified string `json:"last_modified,omitempty"`
}

func newFromSettings(src *config.Source, s *Settings, env connectors.Env) (connectors.Connector, error) {
	c, err := New(env.HTTP, Options{URL: s.URL, Header: connectors.Header(s.Headers), Timeout: src.Timeout, Now: env.Now, Logger: env.Logger})
	if err != nil {
		return nil, src.Errorf("rss.url", "%v", err)
	}
	return c, nil
}

// New returns a connector for the feed at o.URL.
func New(client *http.Client, o Options) (*Connector, error) {
	u, err := url.Parse(o.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%q is not an absolute http(s) URL", connectors.Redact(o.URL))
	}
	if client == nil {
		client = &http.Client{}
	}
	switch {
	case len(o.Header) == 0:
		// Most feeds set no header: they share one, never written.
		o.Header = defaultHeader
	case o.Header.Get("Accept") == "":
		o.Header = o.Header.Clone()
		o.Header.Set("Accept", Accept)
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
	return &Connector{client: client, o: o}, nil
}

// Fetch gets the feed (conditionally) and emits its entries as one page.
func (c *Connector) Fetch(ctx context.Context, raw json.RawMessage, emit connectors.EmitFunc) (connectors.Result, error) {
	var st State
	if len(raw) > 0 && string(raw) != "null" {
		if err := json.Unmarshal(raw, &st); err != nil {
			return connectors.Result{}, fmt.Errorf("stored cursor is not a cursor of this connector (reset it: set the cursor of its row in the sources table to '{}'): %w", err)
		}
	}
	req := connectors.Request{URL: c.o.URL, Header: c.o.Header, Timeout: c.o.Timeout, Now: c.o.Now}
	if st.URL == c.o.URL {
		req.ETag, req.LastModified = st.ETag, st.LastModified
	}
	res := connectors.Result{Requests: 1}
	resp, err := connectors.Get(ctx, c.client, req)
	if err != nil {
		return res, err
	}
	shown := connectors.Redact(c.o.URL)
	p := gofeed.NewParser()
	p.KeepOriginalFeed = true
	feed, err := p.Parse(bytes.NewReader(resp.Body))
	if err != nil {
		return res, fmt.Errorf("feed %s: malformed feed: %w", shown, err)
	}
	res.MinInterval = ttl(feed)
	items := make([]connectors.Item, 0, len(feed.Items))
	seen := make(map[string]int, len(feed.Items))
	for i, it := range feed.Items {
		if it == nil {
			continue
		}
		v := Shape(it)
		id := v["id"].(string)
		loc := fmt.Sprintf("%s [%d]", shown, i)
		if first, dup := seen[id]; dup {
			c.o.Logger.Warn("feed repeats an entry id; keeping the first", "id", id, "entry", i, "first_entry", first, "url", shown)
			continue
		}
		seen[id] = i
		items = append(items, connectors.Item{Value: v, Loc: loc})
	}
	cursor, err := json.Marshal(State{URL: c.o.URL, ETag: resp.Header.Get("ETag"), LastModified: resp.Header.Get("Last-Modified")})
	if err != nil {
		return res, fmt.Errorf("encode cursor: %w", err)
	}
	if err := emit(ctx, connectors.Page{Items: items, Cursor: cursor}); err != nil {
		return res, err
	}
	res.Cursor = cursor
	return res, nil
}

// ttl reads an RSS <ttl> (minutes).
func ttl(feed *gofeed.Feed) time.Duration {
	orig, ok := feed.OriginalFeed().(*gorss.Feed)
	if !ok || orig == nil {
		return 0
	}
	n, err := strconv.Atoi(strings.TrimSpace(orig.TTL))
	if err != nil || n <= 0 {
		return 0
	}
	return time.Duration(n) * time.Minute
}

// Shape turns one feed entry into the item the connector emits; see the
// package documentation for the keys. Absent values are left out.
func Shape(it *gofeed.Item) map[string]any {
	out := map[string]any{}
	set := func(k, v string) {
		if v = strings.TrimSpace(v); v != "" {
			out[k] = v
		}
	}
	set("title", it.Title)
	body := it.Content
	if strings.TrimSpace(body) == "" {
		body = it.Description
	}
	set("body", body)
	link := strings.TrimSpace(it.Link)
	if link == "" && len(it.Links) > 0 {
		link = strings.TrimSpace(it.Links[0])
	}
	set("url", link)
	if len(it.Authors) > 0 && it.Authors[0] != nil {
		a := it.Authors[0]
		set("author", a.Name)
		if out["author"] == nil {
			set("author", a.Email)
		}
	}
	labels := make([]any, 0, len(it.Categories))
	for _, c := range it.Categories {
		if c = strings.TrimSpace(c); c != "" {
			labels = append(labels, c)
		}
	}
	out["labels"] = labels
	if it.PublishedParsed != nil {
		out["created_at"] = it.PublishedParsed.UTC().Format(time.RFC3339Nano)
	}
	if it.UpdatedParsed != nil {
		out["updated_at"] = it.UpdatedParsed.UTC().Format(time.RFC3339Nano)
	}
	var enc []any
	for _, e := range it.Enclosures {
		if e != nil && e.URL != "" {
			enc = append(enc, e.URL)
		}
	}
	if len(enc) > 0 {
		out["enclosures"] = enc
	}
	switch {
	case strings.TrimSpace(it.GUID) != "":
		out["id"] = strings.TrimSpace(it.GUID)
	case link != "":
		out["id"] = link
	default:
		out["id"] = contentID(it)
	}
	return out
}

// contentID is the id of an entry with neither guid nor link: a hash of
// what it says, so the same entry gets the same id on every run.
func contentID(it *gofeed.Item) string {
	sum := sha256.Sum256(normalize.Canonical(map[string]any{
		"title": it.Title, "description": it.Description, "content": it.Content, "published": it.Published,
	}))
	return "sha256:" + hex.EncodeToString(sum[:16])
}
