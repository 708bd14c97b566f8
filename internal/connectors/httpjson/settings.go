package httpjson

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/connectors"
)

// Defaults of the http: block.
const (
	MaxPagesDefault    = 1000
	LookbackDefault    = time.Second
	SinceFormatDefault = "rfc3339"
)

// Paginations lists the values of http.pagination.
var Paginations = []string{PageCursor, PageLink, PageNext, PageNone, PageNumber}

// SinceFormats lists the values of http.since_format.
var SinceFormats = []string{"rfc3339", "unix", "unix_ms"}

// Settings is the http: block of a source. See docs/connectors.md.
type Settings struct {
	// URL is the first page. Required.
	URL string `yaml:"url"`
	// Headers are sent with every request; values may use ${ENV}.
	// Defaults to none.
	Headers map[string]string `yaml:"headers"`
	// Items is an expression over `body` (the decoded response) and
	// `headers` selecting the list of items. Defaults to body.
	Items string `yaml:"items"`
	// Next is an expression over `body`, `headers` and `url` returning the
	// next page URL (absolute or relative to url), or "" / nil at the end.
	// Defaults to none.
	Next string `yaml:"next"`
	// Pagination selects how further pages are found: next (the Next
	// expression), link (the RFC 5988 Link header's rel="next"), cursor
	// (the Cursor expression, sent back in CursorParam), page (PageParam
	// counts up until a page has no items), or none. Defaults to next when
	// Next is set, cursor when Cursor is set, page when PageParam is set,
	// else none.
	Pagination string `yaml:"pagination"`
	// Cursor is an expression over `body` and `headers` returning the next
	// page's cursor value, or "" / nil at the end. Defaults to none.
	Cursor string `yaml:"cursor"`
	// CursorParam is the query parameter that carries the cursor.
	// Required with pagination cursor.
	CursorParam string `yaml:"cursor_param"`
	// PageParam is the query parameter that carries the page number.
	// Required with pagination page.
	PageParam string `yaml:"page_param"`
	// PageStart is the number of the first page. Defaults to 1.
	PageStart *int `yaml:"page_start"`
	// MaxPages bounds one run; the next run continues where it stopped
	// (a snapshot source starts over instead). Defaults to 1000.
	MaxPages int `yaml:"max_pages"`
	// Since enables an incremental cursor: the query parameter that
	// receives the largest updated-at seen so far minus Lookback.
	// Defaults to none (every run reads from the first page).
	Since string `yaml:"since"`
	// SinceFormat is how the since value is written: rfc3339
	// (2026-01-02T15:04:05Z), unix (seconds) or unix_ms. Defaults to rfc3339.
	SinceFormat string `yaml:"since_format"`
	// UpdatedAt is an expression over `item` giving an item's updated-at
	// for the since cursor. Defaults to fields.updated_at, else item.updated_at.
	UpdatedAt string `yaml:"updated_at"`
	// Lookback is subtracted from the largest updated-at seen, so that
	// items sharing the boundary timestamp are read again (the content hash
	// makes them no-ops). Defaults to 1s.
	Lookback *time.Duration `yaml:"lookback"`
	// Snapshot means every run returns the full set, so records missing
	// from a complete run are recorded as deleted. Exclusive with Since.
	// Defaults to false.
	Snapshot bool `yaml:"snapshot"`
}

// Decode reads the http: block of src, applies its defaults and checks it.
// Expressions are compiled when the connector is built, with their errors
// at the same keys.
func Decode(src *config.Source) (*Settings, error) {
	h := &Settings{}
	if err := src.DecodeBlock(h); err != nil {
		return nil, err
	}
	var errs []error
	// at reports an error about key at the line of lineKey: a missing key
	// is reported where the key that needs it is.
	at := func(lineKey, key, format string, args ...any) {
		errs = append(errs, &config.Error{File: src.Path, Line: src.Line(lineKey), Key: key, Msg: fmt.Sprintf(format, args...)})
	}
	bad := func(key, format string, args ...any) { at(key, key, format, args...) }
	errs = append(errs, connectors.CheckURL(src, "http.url", h.URL), connectors.CheckHeaders(src, "http.headers", h.Headers))
	modeKey := "http.pagination" // where the mode was chosen
	if h.Pagination == "" {
		switch {
		case h.Next != "":
			h.Pagination, modeKey = PageNext, "http.next"
		case h.Cursor != "":
			h.Pagination, modeKey = PageCursor, "http.cursor"
		case h.PageParam != "":
			h.Pagination, modeKey = PageNumber, "http.page_param"
		default:
			h.Pagination = PageNone
		}
	}
	switch h.Pagination {
	case PageNext:
		if h.Next == "" {
			at(modeKey, "http.next", "is required with pagination next (an expression returning the next page URL)")
		}
	case PageCursor:
		if h.Cursor == "" {
			at(modeKey, "http.cursor", "is required with pagination cursor (an expression over body returning the next cursor)")
		}
		if h.CursorParam == "" {
			at(modeKey, "http.cursor_param", "is required with pagination cursor (the query parameter that carries the cursor)")
		}
	case PageNumber:
		if h.PageParam == "" {
			at(modeKey, "http.page_param", "is required with pagination page (the query parameter that carries the page number)")
		}
	case PageLink, PageNone:
	default:
		bad("http.pagination", "%q is not supported (one of %s)", h.Pagination, strings.Join(Paginations, ", "))
	}
	unused := func(key, val, mode string) {
		if val != "" && h.Pagination != mode && slices.Contains(Paginations, h.Pagination) {
			bad(key, "is set but pagination is %s (it is used by pagination %s)", h.Pagination, mode)
		}
	}
	unused("http.next", h.Next, PageNext)
	unused("http.cursor", h.Cursor, PageCursor)
	unused("http.cursor_param", h.CursorParam, PageCursor)
	unused("http.page_param", h.PageParam, PageNumber)
	if h.PageStart != nil && h.Pagination != PageNumber {
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
	h.MaxPages = cmp.Or(h.MaxPages, MaxPagesDefault)
	if h.Lookback == nil {
		d := LookbackDefault
		h.Lookback = &d
	} else if *h.Lookback < 0 {
		bad("http.lookback", "must not be negative")
	}
	h.SinceFormat = cmp.Or(h.SinceFormat, SinceFormatDefault)
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
	return h, errors.Join(errs...)
}
