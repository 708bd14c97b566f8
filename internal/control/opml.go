package control

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"unicode"
)

// OPMLMaxBytes bounds an OPML document or a list of URLs to import.
const OPMLMaxBytes = 1 << 20

// OPMLMaxFeeds bounds the feeds of one OPML import or URL list.
const OPMLMaxFeeds = 500

// OPMLCategory is the category outline an OPML export puts lookout's
// feeds in (lookout's sources have no categories).
const OPMLCategory = "lookout"

// Feed is one feed of an OPML document or a URL list.
type Feed struct {
	Title    string
	XMLURL   string
	HTMLURL  string
	Category string
	// Line is where the feed is in the document (1-based).
	Line int
}

type opmlDoc struct {
	XMLName xml.Name     `xml:"opml"`
	Version string       `xml:"version,attr"`
	Title   string       `xml:"head>title"`
	Body    opmlOutlines `xml:"body"`
}

type opmlOutlines struct {
	Outlines []opmlOutline `xml:"outline"`
}

type opmlOutline struct {
	Type     string        `xml:"type,attr,omitempty"`
	Text     string        `xml:"text,attr"`
	Title    string        `xml:"title,attr,omitempty"`
	XMLURL   string        `xml:"xmlUrl,attr,omitempty"`
	HTMLURL  string        `xml:"htmlUrl,attr,omitempty"`
	Outlines []opmlOutline `xml:"outline"`
}

// ParseOPML reads the feeds of an OPML document (OPML 1.0 or 2.0, as
// Miniflux and most readers export it): every outline with an xmlUrl,
// under the category of the outline that holds it. It reads at most
// OPMLMaxBytes and OPMLMaxFeeds feeds; errors name the line.
func ParseOPML(r io.Reader) ([]Feed, error) {
	lr := &io.LimitedReader{R: r, N: OPMLMaxBytes + 1}
	data, err := io.ReadAll(lr)
	if err != nil {
		return nil, fmt.Errorf("read OPML: %w", err)
	}
	if len(data) > OPMLMaxBytes {
		return nil, Invalid("", "the OPML document is larger than %d bytes", OPMLMaxBytes)
	}
	dec := xml.NewDecoder(bytes.NewReader(data))
	dec.Strict = true
	dec.CharsetReader = func(charset string, input io.Reader) (io.Reader, error) {
		if strings.EqualFold(charset, "utf-8") || strings.EqualFold(charset, "us-ascii") {
			return input, nil
		}
		return nil, fmt.Errorf("encoding %q is not supported (write the OPML in UTF-8)", charset)
	}
	var feeds []Feed
	var stack []string // categories of the open outlines
	depth := 0
	sawOPML := false
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		line, _ := dec.InputPos()
		if err != nil {
			var se *xml.SyntaxError
			if errors.As(err, &se) {
				line = se.Line
			}
			return nil, Invalid("", "OPML line %d: %s", line, strings.TrimPrefix(err.Error(), "XML syntax error on line "+strconv.Itoa(line)+": "))
		}
		switch t := tok.(type) {
		case xml.StartElement:
			depth++
			if depth == 1 {
				if t.Name.Local != "opml" {
					return nil, Invalid("", "OPML line %d: the document's root is <%s>, not <opml>", line, t.Name.Local)
				}
				sawOPML = true
			}
			if depth > 64 {
				return nil, Invalid("", "OPML line %d: outlines nested deeper than 64", line)
			}
			if t.Name.Local != "outline" {
				continue
			}
			var o opmlOutline
			for _, a := range t.Attr {
				switch a.Name.Local {
				case "type":
					o.Type = a.Value
				case "text":
					o.Text = a.Value
				case "title":
					o.Title = a.Value
				case "xmlUrl":
					o.XMLURL = a.Value
				case "htmlUrl":
					o.HTMLURL = a.Value
				}
			}
			title := strings.TrimSpace(cmpOr(o.Title, o.Text))
			if o.XMLURL == "" {
				stack = append(stack, title)
				continue
			}
			stack = append(stack, "") // a feed's children have no category
			if len(feeds) == OPMLMaxFeeds {
				return nil, Invalid("", "OPML line %d: more than %d feeds in one import", line, OPMLMaxFeeds)
			}
			cat := ""
			for i := len(stack) - 2; i >= 0; i-- {
				if stack[i] != "" {
					cat = stack[i]
					break
				}
			}
			feeds = append(feeds, Feed{Title: title, XMLURL: strings.TrimSpace(o.XMLURL), HTMLURL: strings.TrimSpace(o.HTMLURL), Category: cat, Line: line})
		case xml.EndElement:
			depth--
			if t.Name.Local == "outline" && len(stack) > 0 {
				stack = stack[:len(stack)-1]
			}
		}
	}
	if !sawOPML {
		return nil, Invalid("", "the document is empty: an OPML document (<opml><body><outline xmlUrl=\"...\"/></body></opml>) is expected")
	}
	return feeds, nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// ParseURLList reads a list of URLs, one per line; blank lines and lines
// starting with # are skipped. A line that is not an http(s) URL is an
// error naming the line.
func ParseURLList(text string) ([]Feed, error) {
	if len(text) > OPMLMaxBytes {
		return nil, Invalid("/urls", "is larger than %d bytes", OPMLMaxBytes)
	}
	var feeds []Feed
	var errs []FieldError
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 0, 64*1024), OPMLMaxBytes)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		u, err := url.Parse(line)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, FieldError{Pointer: "/urls", Value: line, Detail: fmt.Sprintf("line %d: %q is not an http(s) URL", n, line)})
			continue
		}
		if len(feeds) == OPMLMaxFeeds {
			errs = append(errs, FieldError{Pointer: "/urls", Detail: fmt.Sprintf("line %d: more than %d URLs in one import", n, OPMLMaxFeeds)})
			break
		}
		feeds = append(feeds, Feed{XMLURL: line, Line: n})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read URL list: %w", err)
	}
	if len(errs) > 0 {
		return nil, &InvalidError{Errors: errs}
	}
	return feeds, nil
}

// FeedImport says how feeds become sources.
type FeedImport struct {
	// Kind is the connector of the sources: rss (the default) or web.
	Kind string
	// Every is the sources' schedule. Defaults to 1h.
	Every string
	// DryRun checks and answers what would be created, saving nothing.
	DryRun bool
	// Where names a feed in errors: "OPML line %d" or "line %d".
	Where string
}

// ImportFeeds creates a source for each feed p has no source of yet (of
// kind, with the feed's URL): named after the feed's title (or its
// host), through Import (its checks, limits, audit, dry run). A feed p
// has a source of already is unchanged. An error about a feed names its
// line.
func (s *Service) ImportFeeds(ctx context.Context, p Principal, feeds []Feed, opt FeedImport) (*ImportResult, error) {
	kind := cmpOr(opt.Kind, "rss")
	if kind != "rss" && kind != "web" {
		return nil, InvalidParameter("kind", kind, "must be rss or web")
	}
	every := cmpOr(opt.Every, "1h")
	have, err := s.Export(ctx, p)
	if err != nil {
		return nil, err
	}
	byURL := map[string]string{}
	taken := map[string]bool{}
	for _, raw := range have.Sources {
		var src struct {
			Name      string `json:"name"`
			Connector string `json:"connector"`
		}
		_ = json.Unmarshal(raw, &src)
		taken[src.Name] = true
		var m map[string]json.RawMessage
		_ = json.Unmarshal(raw, &m)
		var block struct {
			URL string `json:"url"`
		}
		_ = json.Unmarshal(m[src.Connector], &block)
		if src.Connector == kind && block.URL != "" {
			byURL[block.URL] = src.Name
		}
	}
	out := &ImportResult{DryRun: opt.DryRun, Items: []ImportItem{}}
	var req ImportRequest
	var lines []int
	for _, f := range feeds {
		if name, ok := byURL[f.XMLURL]; ok {
			out.Items = append(out.Items, ImportItem{Kind: "source", Name: name, Action: "unchanged"})
			out.Unchanged++
			continue
		}
		name := feedName(f)
		for i := 2; taken[name] || s.sourceExists(ctx, p, name); i++ {
			name = fmt.Sprintf("%s-%d", strings.TrimSuffix(feedName(f), "-"), i)
		}
		taken[name] = true
		byURL[f.XMLURL] = name
		def, _ := json.Marshal(map[string]any{"name": name, "connector": kind, "every": every, kind: map[string]string{"url": f.XMLURL}})
		req.Sources = append(req.Sources, def)
		lines = append(lines, f.Line)
	}
	req.DryRun = opt.DryRun
	res, err := s.Import(ctx, p, req)
	if err != nil {
		return nil, atLine(err, lines, cmpOr(opt.Where, "line %d"))
	}
	out.Created += res.Created
	out.Unchanged += res.Unchanged
	out.Items = append(out.Items, res.Items...)
	return out, nil
}

func (s *Service) sourceExists(ctx context.Context, p Principal, name string) bool {
	_, err := s.store.GetSource(ctx, actor(p), name)
	return err == nil
}

// feedName makes a source name of a feed's title, or of its URL's host.
func feedName(f Feed) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(f.Title) {
		switch {
		case r < unicode.MaxASCII && (unicode.IsLetter(r) || unicode.IsDigit(r)):
			b.WriteRune(r)
			dash = false
		case b.Len() > 0 && !dash:
			b.WriteByte('-')
			dash = true
		}
		if b.Len() >= 60 {
			break
		}
	}
	name := strings.Trim(b.String(), "-")
	if name == "" {
		if u, err := url.Parse(f.XMLURL); err == nil {
			name = strings.ReplaceAll(u.Hostname(), ".", "-")
		}
	}
	if name == "" {
		name = "feed"
	}
	return name
}

// atLine names the feed's line in the errors about /sources/i.
func atLine(err error, lines []int, where string) error {
	var ie *InvalidError
	if errors.As(err, &ie) {
		out := &InvalidError{}
		for _, f := range ie.Errors {
			if i, rest, ok := sourceIndex(f.Pointer); ok && i < len(lines) {
				f.Detail = fmt.Sprintf(where, lines[i]) + ": " + strings.TrimPrefix(rest+": ", "/") + f.Detail
				f.Pointer = ""
			}
			out.Errors = append(out.Errors, f)
		}
		return out
	}
	var ce *ConflictError
	if errors.As(err, &ce) {
		if i, _, ok := sourceIndex(ce.Pointer); ok && i < len(lines) {
			return &ConflictError{Detail: fmt.Sprintf(where, lines[i]) + ": " + ce.Detail}
		}
	}
	var le *LimitError
	if errors.As(err, &le) {
		if i, _, ok := sourceIndex(le.Pointer); ok && i < len(lines) {
			c := *le
			c.Pointer = ""
			c.Detail = fmt.Sprintf(where, lines[i]) + ": " + le.Error()
			return &c
		}
	}
	return err
}

func sourceIndex(pointer string) (int, string, bool) {
	rest, ok := strings.CutPrefix(pointer, "/sources/")
	if !ok {
		return 0, "", false
	}
	num, tail, _ := strings.Cut(rest, "/")
	i, err := strconv.Atoi(num)
	if err != nil {
		return 0, "", false
	}
	if tail != "" {
		tail = "/" + tail
	}
	return i, tail, true
}

// ExportOPML writes p's rss sources made through the API as an OPML 2.0
// document in the shape Miniflux reads: one category outline
// (OPMLCategory) holding an outline type="rss" per feed, with text and
// title the source's name and xmlUrl its URL.
func (s *Service) ExportOPML(ctx context.Context, p Principal) ([]byte, error) {
	exp, err := s.Export(ctx, p)
	if err != nil {
		return nil, err
	}
	cat := opmlOutline{Text: OPMLCategory, Title: OPMLCategory}
	for _, raw := range exp.Sources {
		var src struct {
			Name      string `json:"name"`
			Connector string `json:"connector"`
			RSS       struct {
				URL string `json:"url"`
			} `json:"rss"`
		}
		if json.Unmarshal(raw, &src) != nil || src.Connector != "rss" || src.RSS.URL == "" {
			continue
		}
		cat.Outlines = append(cat.Outlines, opmlOutline{Type: "rss", Text: src.Name, Title: src.Name, XMLURL: src.RSS.URL, HTMLURL: siteOf(src.RSS.URL)})
	}
	doc := opmlDoc{Version: "2.0", Title: "lookout feeds of " + p.Owner}
	if len(cat.Outlines) > 0 {
		doc.Body.Outlines = []opmlOutline{cat}
	}
	b, err := xml.MarshalIndent(doc, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode OPML: %w", err)
	}
	return append([]byte(xml.Header), append(b, '\n')...), nil
}

// siteOf is the site of a feed URL: its scheme and host.
func siteOf(feed string) string {
	u, err := url.Parse(feed)
	if err != nil || u.Host == "" {
		return ""
	}
	return u.Scheme + "://" + u.Host + "/"
}
