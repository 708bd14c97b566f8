package me

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"strconv"
	"time"

	"github.com/lookout-dev/lookout/internal/webui"
)

// page is what every template gets.
type page struct {
	Title string
	// User is who is signed in.
	User string
	// Nav names the navigation entry to highlight.
	Nav  string
	CSRF string
	// Flash and Error are the outcome of the action that led here.
	Flash, Error string
	Data         any
}

var navItems = []struct{ Key, Href, Label string }{
	{"watches", "/me/", "Watches"},
	{"notifications", "/me/notifications", "Notifications"},
	{"new", "/me/new", "New watch"},
	{"channels", "/me/channels", "Channels"},
}

var funcs = template.FuncMap{
	"nav":    func() any { return navItems },
	"when":   when,
	"pretty": pretty,
	"took":   took,
}

// took renders an attempt's duration in milliseconds as "850 ms" or
// "1.2 s".
func took(ms *float64) string {
	switch {
	case ms == nil:
		return ""
	case *ms < 1000:
		return fmt.Sprintf("%.0f ms", *ms)
	case *ms < 60000:
		return fmt.Sprintf("%.1f s", *ms/1000)
	}
	return time.Duration(*ms * float64(time.Millisecond)).Round(time.Second).String()
}

func (m *Page) parseTemplates() (err error) {
	m.pages, err = webui.ParseTemplates(templateFS, "templates", funcs)
	if err != nil {
		return fmt.Errorf("me page: %w", err)
	}
	return nil
}

// render writes a page; a template error is logged and answered with a 500.
func (m *Page) render(w http.ResponseWriter, r *http.Request, status int, name string, p *page) {
	if p.Flash == "" {
		p.Flash = r.URL.Query().Get("done")
	}
	if p.Error == "" {
		p.Error = r.URL.Query().Get("error")
	}
	m.pages.Render(w, m.logger, "me", status, name, p)
}

// fail answers with an error page.
func (m *Page) fail(w http.ResponseWriter, r *http.Request, status int, msg string) {
	m.render(w, r, status, "error", &page{Title: http.StatusText(status), Error: msg})
}

// failErr answers an error of control: a 404 for what does not exist for
// the caller, a 400 for a request it refused, else logged and a 500.
func (m *Page) failErr(w http.ResponseWriter, r *http.Request, c *caller, err error) {
	status, msg := classify(err)
	if status == http.StatusInternalServerError {
		rid := webui.RequestID()
		m.logger.Error("me page", "path", r.URL.Path, "owner", c.p.Owner, "error", err, "request_id", rid)
		msg = "The page could not be read from the database; the error is logged with request id " + rid + "."
	}
	m.render(w, r, status, "error", &page{Title: http.StatusText(status), User: c.p.Owner, CSRF: c.csrf, Error: msg})
}

// when renders a time as "2026-12-02 01:02 UTC (5m ago)".
func when(t any) string {
	var tt time.Time
	switch x := t.(type) {
	case time.Time:
		tt = x
	case *time.Time:
		if x == nil {
			return "-"
		}
		tt = *x
	default:
		return "-"
	}
	if tt.IsZero() {
		return "-"
	}
	d := time.Since(tt)
	suffix := " ago"
	if d < 0 {
		d, suffix = -d, " from now"
	}
	var rel string
	switch {
	case d < time.Minute:
		rel = strconv.Itoa(int(d.Seconds())) + "s"
	case d < time.Hour:
		rel = strconv.Itoa(int(d.Minutes())) + "m"
	case d < 48*time.Hour:
		rel = fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	default:
		rel = strconv.Itoa(int(d.Hours()/24)) + "d"
	}
	return tt.UTC().Format("2006-01-02 15:04 UTC") + " (" + rel + suffix + ")"
}

// pretty indents JSON for reading.
func pretty(raw json.RawMessage) string {
	var buf bytes.Buffer
	if err := json.Indent(&buf, raw, "", "  "); err != nil {
		return string(raw)
	}
	return buf.String()
}
