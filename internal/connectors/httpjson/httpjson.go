// Package httpjson is the http connector: GET a JSON API, select the items
// and the next page with expressions.
//
//	connector: http
//	http:
//	  url: https://api.example.com/tickets?per_page=100
//	  headers: {Authorization: "Bearer ${TICKETS_TOKEN}"}
//	  items: body.data            # expression over body and headers
//	  next: body.links.next       # expression: next page URL, or nil
package httpjson

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/connectors"
	"github.com/lookout-dev/lookout/internal/normalize"
)

func init() {
	connectors.Register("http", func(src *config.Source, env connectors.Env) (connectors.Connector, error) {
		return newFromConfig(src, env)
	})
}

// MaxBody bounds one response body.
const MaxBody = 64 << 20

// Connector reads a paginated JSON API.
type Connector struct {
	client   *http.Client
	url      string
	headers  map[string]string
	items    *normalize.Program
	next     *normalize.Program
	paging   string
	maxPages int
	snapshot bool
}

var _ connectors.Connector = (*Connector)(nil)

// Options are the typed settings of New.
type Options struct {
	URL      string
	Headers  map[string]string
	Items    *normalize.Program // over body, headers; nil means body
	Next     *normalize.Program // over body, headers, url; nil means no next link
	Paging   string             // next, link or none
	MaxPages int
	Snapshot bool
}

func newFromConfig(src *config.Source, env connectors.Env) (*Connector, error) {
	c := src.HTTP
	o := Options{URL: c.URL, Headers: c.Headers, MaxPages: c.MaxPages, Snapshot: c.Snapshot, Paging: c.Pagination}
	if _, err := url.Parse(c.URL); err != nil {
		return nil, src.Errorf("http.url", "%v", err)
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
	switch o.Paging {
	case "":
		o.Paging = "none"
		if o.Next != nil {
			o.Paging = "next"
		}
	case "next":
		if o.Next == nil {
			return nil, src.Errorf("http.pagination", "next needs an http.next expression")
		}
	case "link", "none":
	default:
		return nil, src.Errorf("http.pagination", "%q is not supported (next, link, none)", o.Paging)
	}
	return New(env.HTTP, o), nil
}

// New returns a connector with the given options.
func New(client *http.Client, o Options) *Connector {
	if o.MaxPages <= 0 {
		o.MaxPages = 1000
	}
	return &Connector{client: client, url: o.URL, headers: o.Headers, items: o.Items, next: o.Next, paging: o.Paging, maxPages: o.MaxPages, snapshot: o.Snapshot}
}

// pageEnv is what the items and next expressions see of one page.
type pageEnv struct {
	body    any
	headers map[string]any
	url     string
}

// Snapshot reports whether the endpoint returns the full set every run.
func (c *Connector) Snapshot() bool { return c.snapshot }

// cursor is the stored state: validators of the first page.
type cursor struct {
	ETag         string `json:"etag,omitempty"`
	LastModified string `json:"last_modified,omitempty"`
}

// Fetch walks the pages from the configured URL.
func (c *Connector) Fetch(ctx context.Context, raw json.RawMessage, emit connectors.EmitFunc) (connectors.Result, error) {
	var cur cursor
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &cur); err != nil {
			return connectors.Result{}, fmt.Errorf("stored cursor: %w", err)
		}
	}
	res := connectors.Result{Complete: c.snapshot}
	next := c.url
	var first cursor
	for page := 1; next != ""; page++ {
		if page > c.maxPages {
			res.Complete = false
			break
		}
		var validators *cursor
		if page == 1 {
			validators = &cur
		}
		body, hdr, err := c.get(ctx, next, validators)
		res.Requests++
		if err != nil {
			return res, err
		}
		if page == 1 {
			first = cursor{ETag: hdr.Get("ETag"), LastModified: hdr.Get("Last-Modified")}
		}
		doc, err := normalize.Decode(body)
		if err != nil {
			return res, fmt.Errorf("page %d (%s): malformed JSON body: %w", page, next, err)
		}
		env := pageEnv{body: doc, headers: headerMap(hdr), url: next}
		list := doc
		if c.items != nil {
			if list, err = c.items.Run(env.body, env.headers); err != nil {
				return res, fmt.Errorf("page %d (%s): items expression: %w", page, next, err)
			}
		}
		items, err := toItems(list, next)
		if err != nil {
			return res, fmt.Errorf("page %d (%s): %w", page, next, err)
		}
		if err := emit(ctx, connectors.Page{Items: items}); err != nil {
			return res, err
		}
		if next, err = c.nextURL(next, env, hdr); err != nil {
			return res, fmt.Errorf("page %d (%s): %w", page, env.url, err)
		}
	}
	res.Cursor, _ = json.Marshal(first)
	return res, nil
}

func (c *Connector) nextURL(current string, env pageEnv, hdr http.Header) (string, error) {
	var ref string
	switch c.paging {
	case "next":
		v, err := c.next.Run(env.body, env.headers, env.url)
		if err != nil {
			return "", fmt.Errorf("next expression: %w", err)
		}
		switch x := v.(type) {
		case nil:
		case string:
			ref = x
		default:
			return "", fmt.Errorf("next expression returned %T, want a URL string or nil", v)
		}
	case "link":
		ref = LinkNext(hdr.Values("Link"))
	}
	if ref == "" {
		return "", nil
	}
	base, err := url.Parse(current)
	if err != nil {
		return "", err
	}
	u, err := base.Parse(ref)
	if err != nil {
		return "", fmt.Errorf("next page URL %q: %w", ref, err)
	}
	if u.String() == current {
		return "", fmt.Errorf("next page URL %q is the current page", ref)
	}
	return u.String(), nil
}

func toItems(list any, page string) ([]connectors.Item, error) {
	switch l := list.(type) {
	case []any:
		out := make([]connectors.Item, len(l))
		for i, v := range l {
			out[i] = connectors.Item{Value: v, Loc: fmt.Sprintf("%s [%d]", page, i)}
		}
		return out, nil
	case map[string]any:
		return []connectors.Item{{Value: l, Loc: page}}, nil
	case nil:
		return nil, nil
	}
	return nil, fmt.Errorf("items: want a list of objects, got %T", list)
}

func (c *Connector) get(ctx context.Context, u string, v *cursor) ([]byte, http.Header, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("build request for %s: %w", u, err)
	}
	req.Header.Set("Accept", "application/json")
	for k, val := range c.headers {
		req.Header.Set(k, val)
	}
	if v != nil {
		if v.ETag != "" {
			req.Header.Set("If-None-Match", v.ETag)
		}
		if v.LastModified != "" {
			req.Header.Set("If-Modified-Since", v.LastModified)
		}
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return nil, nil, fmt.Errorf("GET %s: %w", u, err)
	}
	defer resp.Body.Close()
	if err := connectors.CheckStatus(resp); err != nil {
		return nil, nil, fmt.Errorf("GET %s: %w", u, err)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxBody+1))
	if err != nil {
		return nil, nil, fmt.Errorf("GET %s: read body: %w", u, err)
	}
	if len(body) > MaxBody {
		return nil, nil, fmt.Errorf("GET %s: body larger than %d bytes", u, MaxBody)
	}
	return body, resp.Header, nil
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
		for _, part := range strings.Split(v, ",") {
			segs := strings.Split(part, ";")
			target := strings.TrimSpace(segs[0])
			if !strings.HasPrefix(target, "<") || !strings.HasSuffix(target, ">") {
				continue
			}
			for _, p := range segs[1:] {
				k, val, _ := strings.Cut(strings.TrimSpace(p), "=")
				if strings.EqualFold(k, "rel") {
					for _, rel := range strings.Fields(strings.Trim(val, `"`)) {
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
