package me

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lookout-dev/lookout/internal/control"
)

// classify maps an error of control to a status and a message to show.
func classify(err error) (int, string) {
	var (
		nf  *control.NotFoundError
		inv *control.InvalidError
		cf  *control.ConflictError
		lim *control.LimitError
		fb  *control.ForbiddenError
	)
	switch {
	case errors.As(err, &nf):
		return http.StatusNotFound, nf.Error()
	case errors.As(err, &inv):
		return http.StatusBadRequest, inv.Error()
	case errors.As(err, &cf):
		return http.StatusConflict, cf.Error()
	case errors.As(err, &lim):
		return http.StatusBadRequest, lim.Error()
	case errors.As(err, &fb):
		return http.StatusForbidden, fb.Error()
	}
	return http.StatusInternalServerError, ""
}

func (c *caller) page(title, nav string) *page {
	return &page{Title: title, Nav: nav, User: c.p.Owner, CSRF: c.csrf}
}

// watchRow is a watch as the watches page shows it.
type watchRow struct {
	control.WatchView
	// Status is active, paused or orphaned (its source).
	Status string
	When   string
	Ask    string
	Notify []string
	// Last is its newest notification (nil: none yet).
	Last *control.Notification
}

func readWatch(v control.WatchView) watchRow {
	row := watchRow{WatchView: v, Status: "active"}
	switch {
	case v.SourceOrphaned:
		row.Status = "orphaned"
	case v.Paused:
		row.Status = "paused"
	}
	var def struct {
		When   string   `json:"when"`
		Ask    string   `json:"ask"`
		Notify []string `json:"notify"`
	}
	_ = json.Unmarshal(v.Definition, &def)
	row.When, row.Ask, row.Notify = def.When, def.Ask, def.Notify
	return row
}

// allWatches returns every watch of the caller (pages of 200).
func (m *Page) allWatches(ctx context.Context, c *caller) ([]control.WatchView, error) {
	var out []control.WatchView
	cursor := ""
	for {
		pg, err := m.svc.ListWatches(ctx, c.p, "", cursor, 200)
		if err != nil {
			return nil, err
		}
		out = append(out, pg.Items...)
		if pg.NextCursor == "" {
			return out, nil
		}
		cursor = pg.NextCursor
	}
}

// watches lists the caller's watches with their newest notification.
func (m *Page) watches(w http.ResponseWriter, r *http.Request, c *caller) {
	ctx, cancel := pageContext(r)
	defer cancel()
	ws, err := m.allWatches(ctx, c)
	if err != nil {
		m.failErr(w, r, c, err)
		return
	}
	rows := make([]watchRow, 0, len(ws))
	for _, v := range ws {
		row := readWatch(v)
		last, err := m.svc.ListNotifications(ctx, c.p, control.NotificationQuery{Source: v.Source, Watch: v.Name, Limit: 1})
		if err != nil {
			m.failErr(w, r, c, err)
			return
		}
		if len(last.Items) > 0 {
			row.Last = &last.Items[0]
		}
		rows = append(rows, row)
	}
	p := c.page("My watches", "watches")
	p.Data = rows
	m.render(w, r, http.StatusOK, "watches", p)
}

// watchAction pauses, resumes or deletes one of the caller's watches
// through control's one function of each.
func (m *Page) watchAction(w http.ResponseWriter, r *http.Request, c *caller) {
	ctx, cancel := pageContext(r)
	defer cancel()
	source, name := r.PostFormValue("source"), r.PostFormValue("name")
	var err error
	var done string
	switch r.PathValue("action") {
	case "pause":
		_, err = m.svc.PauseWatch(ctx, c.p, source, name, true, "paused on /me")
		done = "Paused " + source + "/" + name + "."
	case "resume":
		_, err = m.svc.PauseWatch(ctx, c.p, source, name, false, "")
		done = "Resumed " + source + "/" + name + "."
	case "delete":
		err = m.svc.DeleteWatch(ctx, c.p, source, name)
		done = "Deleted " + source + "/" + name + "."
	default:
		m.fail(w, r, http.StatusNotFound, "There is no action "+strconv.Quote(r.PathValue("action"))+" on a watch (pause, resume, delete).")
		return
	}
	if err != nil {
		m.failErr(w, r, c, err)
		return
	}
	http.Redirect(w, r, "/me/?done="+url.QueryEscape(done), http.StatusSeeOther)
}

// notifications lists the caller's notifications, newest first.
func (m *Page) notifications(w http.ResponseWriter, r *http.Request, c *caller) {
	ctx, cancel := pageContext(r)
	defer cancel()
	pg, err := m.svc.ListNotifications(ctx, c.p, control.NotificationQuery{Cursor: r.URL.Query().Get("cursor"), Limit: 50})
	if err != nil {
		m.failErr(w, r, c, err)
		return
	}
	p := c.page("My notifications", "notifications")
	p.Data = pg
	m.render(w, r, http.StatusOK, "notifications", p)
}

// notificationData is what the notification page shows.
type notificationData struct {
	N *control.NotificationDelivery
	// Attempts is its delivery attempts, oldest first.
	Attempts []control.DeliveryAttemptRow
	// Trail is why it fired (nil when it has no change: a digest).
	Trail *control.TrailView
}

// notification shows one of the caller's notifications: its body and
// payload, its delivery and each attempt of it, and the decision trail of
// its change.
func (m *Page) notification(w http.ResponseWriter, r *http.Request, c *caller) {
	ctx, cancel := pageContext(r)
	defer cancel()
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		m.fail(w, r, http.StatusNotFound, "There is no notification "+strconv.Quote(r.PathValue("id"))+".")
		return
	}
	n, err := m.svc.GetNotification(ctx, c.p, id)
	if err != nil {
		m.failErr(w, r, c, err)
		return
	}
	d := notificationData{N: n}
	if d.Attempts, err = m.svc.DeliveryAttempts(ctx, c.p, id); err != nil {
		m.failErr(w, r, c, err)
		return
	}
	if n.ChangeID != nil {
		t, err := m.svc.Explain(ctx, c.p, *n.ChangeID)
		var nf *control.NotFoundError
		if err != nil && !errors.As(err, &nf) {
			m.failErr(w, r, c, err)
			return
		}
		d.Trail = t
	}
	p := c.page(n.Title, "notifications")
	if p.Title == "" {
		p.Title = "Notification " + strconv.FormatInt(id, 10)
	}
	p.Data = d
	m.render(w, r, http.StatusOK, "notification", p)
}

// form is the new-watch form as sent.
type form struct {
	Source, Name, When, Ask, Notify, Channel, Since string
}

func readForm(r *http.Request) form {
	v := func(k string) string { return strings.TrimSpace(r.PostFormValue(k)) }
	return form{Source: v("source"), Name: v("name"), When: v("when"), Ask: v("ask"), Notify: v("notify"), Channel: v("channel"), Since: v("since")}
}

// watch returns the form's watch as a source file's watches item.
func (f form) watch() json.RawMessage {
	w := map[string]any{"name": f.Name}
	if f.When != "" {
		w["when"] = f.When
	}
	if f.Ask != "" {
		w["ask"] = f.Ask
	}
	var sinks []string
	for _, s := range strings.Split(f.Notify, ",") {
		if s = strings.TrimSpace(s); s != "" {
			sinks = append(sinks, s)
		}
	}
	if len(sinks) > 0 {
		w["notify"] = sinks
	}
	if f.Channel != "" {
		w["channel"] = map[string]string{"url": f.Channel}
	}
	b, _ := json.Marshal(w)
	return b
}

// newData is what the new-watch page shows.
type newData struct {
	Form    form
	Sources []control.SourceView
	Preview *control.DryRunReport
	// Problems are what control refused, by field.
	Problems []string
}

func (m *Page) sources(ctx context.Context, c *caller) ([]control.SourceView, error) {
	var out []control.SourceView
	cursor := ""
	for {
		pg, err := m.svc.ListSources(ctx, c.p, cursor, 200)
		if err != nil {
			return nil, err
		}
		out = append(out, pg.Items...)
		if pg.NextCursor == "" {
			return out, nil
		}
		cursor = pg.NextCursor
	}
}

// newForm shows the form of a new watch.
func (m *Page) newForm(w http.ResponseWriter, r *http.Request, c *caller) {
	ctx, cancel := pageContext(r)
	defer cancel()
	srcs, err := m.sources(ctx, c)
	if err != nil {
		m.failErr(w, r, c, err)
		return
	}
	p := c.page("New watch", "new")
	p.Data = &newData{Form: form{Source: r.URL.Query().Get("source"), Since: "168h"}, Sources: srcs}
	m.render(w, r, http.StatusOK, "new", p)
}

// create previews the form's watch over the source's stored history
// (control.DryRun: nothing saved or delivered), or saves it
// (control.CreateWatch).
func (m *Page) create(w http.ResponseWriter, r *http.Request, c *caller) {
	ctx, cancel := pageContext(r)
	defer cancel()
	f := readForm(r)
	srcs, err := m.sources(ctx, c)
	if err != nil {
		m.failErr(w, r, c, err)
		return
	}
	d := &newData{Form: f, Sources: srcs}
	p := c.page("New watch", "new")
	p.Data = d
	refuse := func(err error) {
		status, msg := classify(err)
		if status == http.StatusInternalServerError || status == http.StatusNotFound && f.Source == "" {
			m.failErr(w, r, c, err)
			return
		}
		var inv *control.InvalidError
		if errors.As(err, &inv) {
			for _, fe := range inv.Errors {
				loc := strings.TrimPrefix(strings.TrimPrefix(fe.Pointer, "/watch"), "/")
				if loc == "" {
					loc = cmp.Or(fe.Parameter, fe.Header, "watch")
				}
				d.Problems = append(d.Problems, loc+": "+fe.Detail)
			}
		} else {
			d.Problems = append(d.Problems, msg)
		}
		m.render(w, r, http.StatusUnprocessableEntity, "new", p)
	}
	if r.PostFormValue("do") == "save" {
		body, _ := json.Marshal(map[string]any{"source": f.Source, "watch": f.watch()})
		_, err := m.svc.Idempotent(ctx, c.p, "", "create_watch", body, func(ctx context.Context, tx pgx.Tx) (*control.Answer, error) {
			out, err := m.svc.CreateWatch(ctx, tx, c.p, control.CreateWatchRequest{Source: f.Source, Watch: f.watch()})
			if err != nil {
				return nil, err
			}
			b, err := json.Marshal(out)
			return &control.Answer{Status: http.StatusCreated, Body: b}, err
		})
		if err != nil {
			refuse(err)
			return
		}
		http.Redirect(w, r, "/me/?done="+url.QueryEscape("Created "+f.Source+"/"+f.Name+"."), http.StatusSeeOther)
		return
	}
	since := time.Duration(0)
	if f.Since != "" {
		if since, err = time.ParseDuration(f.Since); err != nil {
			refuse(control.Invalid("/since", "must be a duration such as 168h (7 days), not %q", f.Since))
			return
		}
	}
	rep, err := m.svc.DryRun(ctx, c.p, control.DryRunRequest{Source: f.Source, Watch: f.watch(), Since: since})
	if err != nil {
		refuse(err)
		return
	}
	d.Preview = rep
	m.render(w, r, http.StatusOK, "new", p)
}

// channelRow is where one watch delivers.
type channelRow struct {
	Source, Watch string
	// Kind is channel (a notification URL), webhook (the watch's own),
	// or sink (one of the operator's sinks, by name).
	Kind   string
	Target string
}

// channels lists where the caller's watches deliver: their own channels
// and webhooks (secrets redacted, as control shows them) and the
// operator's sinks they name.
func (m *Page) channels(w http.ResponseWriter, r *http.Request, c *caller) {
	ctx, cancel := pageContext(r)
	defer cancel()
	ws, err := m.allWatches(ctx, c)
	if err != nil {
		m.failErr(w, r, c, err)
		return
	}
	var rows []channelRow
	for _, v := range ws {
		var def struct {
			Notify  []string `json:"notify"`
			Channel *struct {
				URL string `json:"url"`
			} `json:"channel"`
			Webhook *struct {
				URL string `json:"url"`
			} `json:"webhook"`
		}
		_ = json.Unmarshal(v.Definition, &def)
		if def.Channel != nil {
			rows = append(rows, channelRow{v.Source, v.Name, "channel", def.Channel.URL})
		}
		if def.Webhook != nil {
			rows = append(rows, channelRow{v.Source, v.Name, "webhook", def.Webhook.URL})
		}
		for _, s := range def.Notify {
			rows = append(rows, channelRow{v.Source, v.Name, "sink", s})
		}
	}
	p := c.page("My channels", "channels")
	p.Data = rows
	m.render(w, r, http.StatusOK, "channels", p)
}
