package notify

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"text/template"
	"time"
	"unicode/utf8"

	"github.com/robfig/cron/v3"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/intern"
)

// TemplateData is what the title and body templates of one match see
// (sinks.*.title/body, watches[].title/body).
type TemplateData struct {
	// Record is the record after the change: .Record.Title, .Record.URL,
	// .Record.Status, .Record.Labels, .Record.Extra.key, ...
	Record PayloadRecord
	// Change is .Change.Kind (created, updated, deleted), .Change.Version,
	// .Change.ChangedFields, .Change.ID.
	Change PayloadChange
	// Verdict is the decision: .Verdict.Urgency, .Verdict.Reason,
	// .Verdict.Confidence (0 when no model decided).
	Verdict Verdict
	// Watch is .Watch.Name, .Watch.When, .Watch.Ask.
	Watch WatchData
	// Source and Sink are names.
	Source string
	Sink   string
}

// Verdict is the decision part of the template data.
type Verdict struct {
	Urgency    string
	Reason     string
	Confidence float64
}

// WatchData describes the watch to templates.
type WatchData struct {
	Name string
	When string
	Ask  string
}

// DigestData is what digest.title and digest.body templates see.
type DigestData struct {
	Watch  WatchData
	Source string
	Sink   string
	// Count is the number of matches in the period; Items lists at most
	// MaxDigestItems of them (oldest first) and More is the rest.
	Count int
	More  int
	// DueAt is the schedule tick that closed the period.
	DueAt time.Time
	Items []DigestItem
	// Briefing is the model's briefing of the period (digest.summarize);
	// nil without one.
	Briefing *BriefingData
	// Uncited are the listed items the briefing does not cite (set only
	// with a briefing): nothing is dropped.
	Uncited []DigestItem
	// SummaryMissing says in one line why a summarized digest has no
	// briefing (model down, invalid answer, budget exhausted, ...).
	SummaryMissing string
}

// BriefingData is a briefing as digest templates see it.
type BriefingData struct {
	// Headline is the model's one-sentence gist; empty when the model's
	// headline cited no item and was dropped.
	Headline string
	// Items are the cited items, most important first: the digest item
	// (.Record, .Title, ...) and why it matters.
	Items []BriefingItemData
	// Dropped says in one line how many of the model's sentences were
	// left out because they cite no item (never what they said); empty
	// when none was.
	Dropped string
}

// BriefingItemData is one cited item of a briefing.
type BriefingItemData struct {
	DigestItem
	// WhyItMatters is the model's sentence about the item.
	WhyItMatters string
}

// DigestItem is one match in a digest.
type DigestItem struct {
	NotificationID int64
	// Title is the match's own rendered title.
	Title     string
	Record    PayloadRecord
	Change    PayloadChange
	Verdict   Verdict
	CreatedAt time.Time
}

// Default templates.
const (
	DefaultTitle = `[{{.Watch.Name}}] {{or .Record.Title .Record.ID}}`
	DefaultBody  = `{{.Verdict.Reason}}
{{- with .Record.URL}}
{{.}}{{end}}

{{.Source}}: {{.Change.Kind}} v{{.Change.Version}}{{with .Change.ChangedFields}} ({{join . ", "}}){{end}}, urgency {{.Verdict.Urgency}}`
	DefaultDigestTitle = `[{{.Watch.Name}}] {{.Count}} {{if eq .Count 1}}match{{else}}matches{{end}}`
	DefaultDigestBody  = `{{with .SummaryMissing}}summary missing: {{.}}

{{end}}{{with .Briefing}}{{with .Headline}}{{.}}

{{end}}{{range .Items}}- {{or .Record.Title .Record.ID}}: {{.WhyItMatters}}{{with .Record.URL}} {{.}}{{end}}
{{end}}{{with .Dropped}}
{{.}}.
{{end}}{{with $.Uncited}}
Also in this digest:
{{range .}}- {{or .Record.Title .Record.ID}}{{with .Record.URL}} {{.}}{{end}}
{{end}}{{end}}{{else}}{{range .Items}}- {{or .Record.Title .Record.ID}}{{with .Record.URL}} {{.}}{{end}}
{{end}}{{end}}{{if .More}}… and {{.More}} more
{{end}}`
)

// templateFuncs are the functions templates may call besides text/template's.
var templateFuncs = template.FuncMap{
	"join":  func(s []string, sep string) string { return strings.Join(s, sep) },
	"lower": strings.ToLower,
	"upper": strings.ToUpper,
	"trim":  strings.TrimSpace,
	"truncate": func(n int, s string) string {
		if utf8.RuneCountInString(s) <= n {
			return s
		}
		r := []rune(s)
		return string(r[:max(n-1, 0)]) + "…"
	},
	"json": func(v any) (string, error) {
		b, err := json.Marshal(v)
		return string(b), err
	},
	"date": func(layout string, v any) (string, error) {
		switch t := v.(type) {
		case time.Time:
			return t.Format(layout), nil
		case string:
			if t == "" {
				return "", nil
			}
			p, err := time.Parse(time.RFC3339Nano, t)
			if err != nil {
				return "", err
			}
			return p.Format(layout), nil
		}
		return "", fmt.Errorf("date: %T is not a time", v)
	},
}

type templatePair struct {
	title, body *template.Template
}

type watchTemplates struct {
	msg    templatePair
	digest templatePair
	sched  cron.Schedule
	loc    *time.Location
	cfg    *config.Watch
}

// Composer renders notifications: titles and bodies from the templates of
// the configuration, the payload, and, for digest watches, the end of the
// digest period the match waits for.
type Composer struct {
	sinks       map[string]templatePair
	mu          sync.RWMutex // guards watches
	watches     map[string]*watchTemplates
	def, digest templatePair
}

func watchKey(source, watch string) string { return source + "\x00" + watch }

// NewComposer parses every template and digest schedule of sinks and of
// the watches of sources, and renders each template against a sample
// record, so that a template error is a configuration error naming file,
// line and key, found by the check command rather than at the first
// notification.
func NewComposer(sinks map[string]*config.Sink, sources []*config.Source) (*Composer, error) {
	c := &Composer{sinks: map[string]templatePair{}, watches: map[string]*watchTemplates{}}
	c.def, c.digest = defaultTemplates()
	var errs []error
	for name, sc := range sinks {
		var p templatePair
		var err error
		key := "sinks." + name
		if p.title, err = parseChecked(key+".title", sc.Title, sampleData()); err != nil {
			errs = append(errs, sc.Errorf("title", "%v", err))
		}
		if p.body, err = parseChecked(key+".body", sc.Body, sampleData()); err != nil {
			errs = append(errs, sc.Errorf("body", "%v", err))
		}
		c.sinks[name] = p
	}
	for _, src := range sources {
		for i, w := range src.Watches {
			wt, err := compileWatch(src, i, w)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			c.watches[watchKey(src.Name, w.Name)] = wt
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return c, nil
}

// compileWatch parses the templates and digest schedule of watch i of src.
func compileWatch(src *config.Source, i int, w *config.Watch) (*watchTemplates, error) {
	var errs []error
	wt := &watchTemplates{cfg: w}
	key := fmt.Sprintf("watches[%d]", i)
	var err error
	if wt.msg.title, err = parseShared(key, "title", w.Title, messageSamples); err != nil {
		errs = append(errs, src.Errorf(key+".title", "%v", err))
	}
	if wt.msg.body, err = parseShared(key, "body", w.Body, messageSamples); err != nil {
		errs = append(errs, src.Errorf(key+".body", "%v", err))
	}
	if dg := w.Digest; dg != nil {
		if wt.digest.title, err = parseShared(key, "digest.title", dg.Title, digestSamples); err != nil {
			errs = append(errs, src.Errorf(key+".digest.title", "%v", err))
		}
		if wt.digest.body, err = parseShared(key, "digest.body", dg.Body, digestSamples); err != nil {
			errs = append(errs, src.Errorf(key+".digest.body", "%v", err))
		}
		if wt.sched, err = config.ParseCron(dg.Cron); err != nil {
			errs = append(errs, src.Errorf(key+".digest.cron", "%v", err))
		}
		if wt.loc, err = time.LoadLocation(dg.Timezone); err != nil {
			errs = append(errs, src.Errorf(key+".digest.timezone", "%q is not a known time zone", dg.Timezone))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return wt, nil
}

// SetWatch parses the templates of watch i of src and uses them from now
// on (a watch added or changed while the evaluator runs). On an error the
// templates the watch had stay.
func (c *Composer) SetWatch(src *config.Source, i int, w *config.Watch) error {
	wt, err := compileWatch(src, i, w)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.watches[watchKey(src.Name, w.Name)] = wt
	return nil
}

// RemoveWatch forgets the templates of a watch no longer defined.
func (c *Composer) RemoveWatch(source, watch string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.watches, watchKey(source, watch))
}

// RemoveSource forgets the templates of every watch of source.
func (c *Composer) RemoveSource(source string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k := range c.watches {
		if s, _, _ := strings.Cut(k, "\x00"); s == source {
			delete(c.watches, k)
		}
	}
}

func (c *Composer) watch(source, watch string) *watchTemplates {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.watches[watchKey(source, watch)]
}

func mustParse(name, text string) *template.Template {
	return template.Must(template.New(name).Funcs(templateFuncs).Parse(text))
}

// defaultTemplates are the default message and digest templates, parsed
// once per process and shared by every Composer (text/template's are safe
// to execute at once): the api builds a Composer to validate each watch
// it creates (watchspec.Check), and parsing the four was a third of that.
var defaultTemplates = sync.OnceValues(func() (def, digest templatePair) {
	return templatePair{mustParse("title", DefaultTitle), mustParse("body", DefaultBody)},
		templatePair{mustParse("digest.title", DefaultDigestTitle), mustParse("digest.body", DefaultDigestBody)}
})

// watchTemplateCache interns the templates of watches (parseShared).
var watchTemplateCache intern.Cache[template.Template]

// parseShared is parseChecked of a watch's template (kind title, body,
// digest.title or digest.body of watch key, "watches[3]"), interned by
// kind and text: watches copying a template share one parsed template
// (text/template's are safe to execute at once), named after its kind,
// so that a failure to render at run time names the kind, not the first
// watch that used it. A template that does not parse or render gets
// parseChecked's error under the watch's key.
func parseShared(key, kind, text string, samples func() []any) (*template.Template, error) {
	if strings.TrimSpace(text) == "" {
		return nil, nil
	}
	t, err := watchTemplateCache.Get(kind+"\x00"+text, func() (*template.Template, error) {
		return parseChecked(kind, text, samples()...)
	})
	if err != nil {
		return parseChecked(key+"."+kind, text, samples()...)
	}
	return t, nil
}

// parseChecked parses text (nil when empty) and executes it against each
// sample.
func parseChecked(name, text string, samples ...any) (*template.Template, error) {
	if strings.TrimSpace(text) == "" {
		return nil, nil
	}
	t, err := template.New(name).Funcs(templateFuncs).Parse(text)
	if err != nil {
		return nil, fmt.Errorf("is not a valid template: %w", err)
	}
	for _, sample := range samples {
		if err := t.Execute(new(bytes.Buffer), sample); err != nil {
			return nil, fmt.Errorf("does not render for a sample record: %w", err)
		}
	}
	return t, nil
}

// messageSamples and digestSamples are the samples a watch's message and
// digest templates must render, made only when a template is parsed (not
// for each watch sharing a parsed one: 100,000 watches at a start).
func messageSamples() []any { return []any{sampleData()} }
func digestSamples() []any  { return []any{sampleDigest(), sampleDigestMissing()} }

func sampleData() *TemplateData {
	return &TemplateData{
		Record: PayloadRecord{ID: "42", Title: "Sample record", URL: "https://example.com/42", Author: "someone",
			Status: "open", Labels: []string{"urgent"}, Body: "Body text.", CreatedAt: "2026-01-02T03:04:05Z",
			UpdatedAt: "2026-01-02T03:04:05Z", Extra: map[string]any{"priority": int64(1)}, ContentHash: "abc"},
		Change:  PayloadChange{ID: 1, Kind: "updated", Version: 2, ChangedFields: []string{"status"}},
		Verdict: Verdict{Urgency: "high", Reason: "sample reason", Confidence: 0.9},
		Watch:   WatchData{Name: "sample", When: "true"},
		Source:  "sample", Sink: "sample",
	}
}

// sampleDigest is a summarized digest with a briefing: one cited item,
// one uncited.
func sampleDigest() *DigestData {
	d := sampleData()
	item := DigestItem{NotificationID: 1, Title: "[sample] Sample record", Record: d.Record, Change: d.Change,
		Verdict: d.Verdict, CreatedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	other := item
	other.NotificationID, other.Record.ID = 2, "43"
	return &DigestData{Watch: d.Watch, Source: d.Source, Sink: d.Sink, Count: 3, More: 1,
		DueAt: time.Date(2026, 1, 2, 8, 0, 0, 0, time.UTC), Items: []DigestItem{item, other},
		Briefing: &BriefingData{Headline: "One thing needs you today.",
			Items: []BriefingItemData{{DigestItem: item, WhyItMatters: "It is urgent."}}},
		Uncited: []DigestItem{other}}
}

// sampleDigestMissing is a digest without a briefing (not summarized, or
// the summary is missing).
func sampleDigestMissing() *DigestData {
	d := sampleDigest()
	d.Briefing, d.Uncited, d.SummaryMissing = nil, nil, "model server unavailable"
	return d
}

// render executes t (or def when t is nil); a failing custom template
// falls back to def and reports the error.
func render(t, def *template.Template, data any) (string, error) {
	var b bytes.Buffer
	if t != nil {
		err := t.Execute(&b, data)
		if err == nil {
			return b.String(), nil
		}
		b.Reset()
		_ = def.Execute(&b, data)
		return b.String(), fmt.Errorf("template %s: %w (used the default)", t.Name(), err)
	}
	err := def.Execute(&b, data)
	return b.String(), err
}

// defaultTitle is what DefaultTitle renders for d.
func defaultTitle(d *TemplateData) string {
	return "[" + d.Watch.Name + "] " + cmp.Or(d.Record.Title, d.Record.ID)
}

// defaultBody is what DefaultBody renders for d.
func defaultBody(d *TemplateData) string {
	var b strings.Builder
	b.Grow(len(d.Verdict.Reason) + len(d.Record.URL) + len(d.Source) + len(d.Change.Kind) + len(d.Verdict.Urgency) + 40)
	b.WriteString(d.Verdict.Reason)
	if d.Record.URL != "" {
		b.WriteString("\n")
		b.WriteString(d.Record.URL)
	}
	b.WriteString("\n\n")
	b.WriteString(d.Source)
	b.WriteString(": ")
	b.WriteString(d.Change.Kind)
	b.WriteString(" v")
	b.WriteString(strconv.Itoa(d.Change.Version))
	if len(d.Change.ChangedFields) > 0 {
		b.WriteString(" (")
		for i, f := range d.Change.ChangedFields {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(f)
		}
		b.WriteString(")")
	}
	b.WriteString(", urgency ")
	b.WriteString(d.Verdict.Urgency)
	return b.String()
}

// cleanTitle makes a one-line title of at most 300 characters.
func cleanTitle(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) > 300 {
		s = string([]rune(s)[:299]) + "…"
	}
	return s
}

// Match is one decision to notify one sink of.
type Match struct {
	Source string
	Watch  *config.Watch
	// Owner is the user the watch belongs to ("" for the operator's).
	Owner     string
	Sink      string
	DedupeKey string
	Record    PayloadRecord
	Change    PayloadChange
	Verdict   Verdict
	// Confidence is the model's confidence, nil without a model.
	Confidence *float64
	Now        time.Time
}

// Composed is a rendered notification row.
type Composed struct {
	Title, Body string
	Payload     []byte
	// DigestDueAt is set for a digest watch: the row is held until then.
	DigestDueAt *time.Time
	// Err reports a template that failed to render (the default was used).
	Err error
}

// Compose renders m: the watch's templates win over the sink's, which win
// over the defaults.
func (c *Composer) Compose(m *Match) Composed {
	wt := c.watch(m.Source, m.Watch.Name)
	st := c.sinks[m.Sink]
	tt, bt := st.title, st.body
	if wt != nil && wt.msg.title != nil {
		tt = wt.msg.title
	}
	if wt != nil && wt.msg.body != nil {
		bt = wt.msg.body
	}
	data := &TemplateData{Record: m.Record, Change: m.Change, Verdict: m.Verdict, Source: m.Source, Sink: m.Sink,
		Watch: WatchData{Name: m.Watch.Name, When: m.Watch.When, Ask: m.Watch.Ask}}
	// The defaults are written directly: executing them through
	// text/template was about two thirds of a notification's rendering in
	// a drain (docs/benchmarks.md, (4) on branch eval-go).
	var title, body string
	var terr, berr error
	if tt == nil {
		title = defaultTitle(data)
	} else {
		title, terr = render(tt, c.def.title, data)
	}
	if bt == nil {
		body = defaultBody(data)
	} else {
		body, berr = render(bt, c.def.body, data)
	}
	out := Composed{Title: cleanTitle(title), Body: strings.TrimSpace(body), Err: errors.Join(terr, berr)}
	p := Payload{DedupeKey: m.DedupeKey, Kind: KindSingle, Watch: m.Watch.Name, Source: m.Source, Owner: m.Owner,
		Title: out.Title, Body: out.Body, Record: m.Record, Change: m.Change,
		Urgency: m.Verdict.Urgency, Reason: m.Verdict.Reason, Confidence: m.Confidence, CreatedAt: m.Now}
	if p.Change.ChangedFields == nil {
		p.Change.ChangedFields = []string{}
	}
	out.Payload = p.Marshal()
	if wt != nil && wt.sched != nil {
		due := wt.sched.Next(m.Now.In(wt.loc)).UTC()
		out.DigestDueAt = &due
	}
	return out
}

// ComposeDigest renders the summary of a digest period of source/watch
// for sink. A watch no longer in the configuration gets the defaults.
func (c *Composer) ComposeDigest(d *DigestData) (title, body string, err error) {
	t := c.digest
	if wt := c.watch(d.Source, d.Watch.Name); wt != nil {
		d.Watch = WatchData{Name: wt.cfg.Name, When: wt.cfg.When, Ask: wt.cfg.Ask}
		if wt.digest.title != nil {
			t.title = wt.digest.title
		}
		if wt.digest.body != nil {
			t.body = wt.digest.body
		}
	}
	title, terr := render(t.title, c.digest.title, d)
	body, berr := render(t.body, c.digest.body, d)
	return cleanTitle(title), strings.TrimSpace(body), errors.Join(terr, berr)
}
