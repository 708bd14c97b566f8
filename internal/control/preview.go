package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lookout-dev/lookout/internal/connectors"
	"github.com/lookout-dev/lookout/internal/egress"
	"github.com/lookout-dev/lookout/internal/normalize"
)

// Bounds of a preview.
const (
	// PreviewTimeout bounds a whole preview: robots.txt and the page.
	PreviewTimeout = 45 * time.Second
	// PreviewRecords is how many records a preview returns at most.
	PreviewRecords = 50
	// PreviewText is how many characters of a record's string a preview
	// returns at most (longer ones are cut, with "…").
	PreviewText = 2000
	// PreviewConcurrency is how many previews run at once in one process;
	// more wait for a turn.
	PreviewConcurrency = 4
)

// PreviewRequest is a web page and the web: block to read it with: what
// a web source would be, without a name or a schedule.
type PreviewRequest struct {
	// URL of the page; fills web.url when the block has none. Defaults
	// to web.url.
	URL string
	// Web is the web: block of a source (docs/web.md): items, id,
	// fields, remove, ignore_text, ignore_regex, headers, robots,
	// max_bytes. Required (at least its url, or URL).
	Web json.RawMessage
	// Fields is the source's fields: mapping (item keys to record
	// fields). Defaults to none: title, body and url fill those record
	// fields, any other key goes to extra.
	Fields json.RawMessage
}

// PreviewRecord is one record a preview found.
type PreviewRecord struct {
	ID string `json:"id" doc:"The record id (web.id, else a hash of the item's text)."`
	// Record is what a watch's expression sees as record.
	Record map[string]any `json:"record" doc:"The record as a watch's when expression sees it: id, title, body, url, author, status, labels, created_at, updated_at, extra. Strings longer than 2,000 characters are cut (…)."`
	Origin string         `json:"origin" doc:"Where on the page the item is: the URL and the item's index, e.g. https://…/slots [3]."`
}

// PreviewReport is what a preview found on the page.
type PreviewReport struct {
	URL      string          `json:"url"`
	Matched  int             `json:"matched" doc:"How many records the page gives (web.items matches; 1 without items)."`
	Records  []PreviewRecord `json:"records" doc:"The records a run would produce now, in page order (at most 50)."`
	Missing  []string        `json:"missing_fields,omitempty" doc:"Keys of web.fields whose selector matched in none of the records: check them."`
	Requests int             `json:"requests" doc:"HTTP requests made (robots.txt included)."`
	Summary  string          `json:"summary" doc:"One sentence for the user; says so when web.items matched nothing."`
}

// Preview reads a web page with a web: block as a source created through
// the API would — the same checks (the untrusted URL check, render:
// browser refused, no ${...}), the same validation, the untrusted egress
// policy on every connection, robots.txt, max_bytes — and returns the
// records a run would produce now, saving nothing. An items selector that
// matches nothing is a report that says so (a run would fail), not an
// error.
func (s *Service) Preview(ctx context.Context, p Principal, req PreviewRequest) (*PreviewReport, error) {
	var block map[string]any
	if len(req.Web) == 0 || string(req.Web) == "null" {
		block = map[string]any{}
	} else if err := json.Unmarshal(req.Web, &block); err != nil {
		return nil, Invalid("/web", "must be a JSON object: the web block of a source (url, items, id, fields, ...; docs/web.md)")
	}
	if u, _ := block["url"].(string); req.URL != "" && block["url"] != nil && u != req.URL {
		return nil, Invalid("/url", "differs from web.url (%q): give the URL once, in url or in web.url", u)
	}
	if req.URL != "" {
		block["url"] = req.URL
	}
	if block["url"] == nil {
		return nil, Invalid("/url", "is required: the page to read, e.g. https://shop.example.com/p/trail-runner (or give web.url)")
	}
	items, _ := block["items"].(string)
	if items != "" {
		// A run fails on an items selector that matches nothing; a preview
		// reports it instead.
		block["allow_empty"] = true
	}
	def := map[string]any{"name": "preview", "connector": "web", "every": "1h", "web": block}
	if len(req.Fields) > 0 && string(req.Fields) != "null" {
		def["fields"] = req.Fields
	}
	raw, err := json.Marshal(def)
	if err != nil {
		return nil, fmt.Errorf("encode preview source: %w", err)
	}
	if err := s.checkUntrusted(ctx, raw, ""); err != nil {
		return nil, urlPointer(err, req.URL != "")
	}
	if err := noEnvRefs(raw, ""); err != nil {
		return nil, err
	}
	src, err := s.store.Validator().Sent(raw, "")
	if err != nil {
		return nil, urlPointer(fromStore(err, "", "source", "preview"), req.URL != "")
	}
	mapper, err := normalize.NewMapper(src.Fields.Exprs(), src.Volatile)
	if err != nil {
		return nil, fmt.Errorf("preview: %w", err) // the validator compiled it
	}
	client := &http.Client{Transport: egress.Untrusted(s.conf.AllowPrivate).Transport()}
	conn, err := connectors.New(src, connectors.Env{HTTP: client, Logger: slog.New(slog.DiscardHandler), Now: time.Now})
	if err != nil {
		return nil, urlPointer(fromStore(err, "", "source", "preview"), req.URL != "")
	}
	select {
	case s.previews <- struct{}{}:
		defer func() { <-s.previews }()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	ctx, cancel := context.WithTimeout(ctx, PreviewTimeout)
	defer cancel()
	var got []connectors.Item
	res, err := conn.Fetch(ctx, nil, func(_ context.Context, page connectors.Page) error {
		got = append(got, page.Items...)
		return nil
	})
	page := block["url"].(string)
	if err != nil {
		if errors.Is(err, context.Canceled) && ctx.Err() != nil {
			return nil, err
		}
		pointer := "/web/url"
		if req.URL != "" {
			pointer = "/url"
		}
		return nil, &InvalidError{Errors: []FieldError{{Pointer: pointer, Value: connectors.Redact(page),
			Detail: fmt.Sprintf("the page could not be read, nothing was previewed: %v", err)}}}
	}
	s.logger.Debug("preview", "owner", p.Owner, "url", connectors.Redact(page), "items", len(got), "requests", res.Requests)
	out := &PreviewReport{URL: connectors.Redact(page), Matched: len(got), Records: []PreviewRecord{}, Requests: res.Requests}
	seen := map[string]bool{}
	for _, it := range got {
		if m, ok := it.Value.(map[string]any); ok {
			for k := range m {
				seen[k] = true
			}
		}
		if len(out.Records) == PreviewRecords {
			continue
		}
		rec, err := mapper.Map(it.Value, it.Raw)
		if err != nil {
			return nil, Invalid("/fields", "item %s: %v", it.Loc, err)
		}
		out.Records = append(out.Records, PreviewRecord{ID: rec.ID, Record: clipStrings(rec.Fields()).(map[string]any), Origin: it.Loc})
	}
	if f, ok := block["fields"].(map[string]any); ok && len(got) > 0 {
		for k := range f {
			if !seen[k] {
				out.Missing = append(out.Missing, k)
			}
		}
		slices.Sort(out.Missing)
	}
	switch {
	case items != "" && len(got) == 0:
		out.Summary = fmt.Sprintf("web.items %q matched nothing on %s: check the selector against the page's HTML "+
			"(or it is an error or consent page, or the page needs JavaScript); a source with it would fail every run "+
			"unless web.allow_empty is true", items, out.URL)
	case len(out.Missing) > 0:
		out.Summary = fmt.Sprintf("%s gives %d record(s); web.fields %s matched in none of them; nothing was saved", out.URL, len(got), quoteList(out.Missing))
	default:
		out.Summary = fmt.Sprintf("%s gives %d record(s); nothing was saved", out.URL, len(got))
	}
	if len(got) > PreviewRecords {
		out.Summary += fmt.Sprintf(" (the first %d are shown)", PreviewRecords)
	}
	return out, nil
}

// urlPointer moves problems of /web/url to /url when the URL was given
// there.
func urlPointer(err error, topURL bool) error {
	var ie *InvalidError
	if !topURL || !errors.As(err, &ie) {
		return err
	}
	for i := range ie.Errors {
		if ie.Errors[i].Pointer == "/web/url" {
			ie.Errors[i].Pointer = "/url"
		}
	}
	return err
}

// clipStrings cuts the strings of v longer than PreviewText characters.
func clipStrings(v any) any {
	switch x := v.(type) {
	case string:
		if r := []rune(x); len(r) > PreviewText {
			return string(r[:PreviewText]) + "…"
		}
	case map[string]any:
		for k, c := range x {
			x[k] = clipStrings(c)
		}
	case []any:
		for i, c := range x {
			x[i] = clipStrings(c)
		}
	}
	return v
}

func quoteList(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = strconv.Quote(n)
	}
	return strings.Join(q, ", ")
}
