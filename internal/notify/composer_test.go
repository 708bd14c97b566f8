package notify

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/pgtest"
)

// loadConfig writes a configuration directory and loads it.
func loadConfig(t *testing.T, global, source string) (*config.Config, error) {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "sources"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "lookout.yaml"), []byte(global), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "sources", "tasks.yaml"), []byte(source), 0o644); err != nil {
		t.Fatal(err)
	}
	return config.Load(dir)
}

const composerGlobal = `sinks:
  hook:
    type: webhook
    url: http://127.0.0.1:1/hook
    title: "{{upper .Verdict.Urgency}}: {{.Record.Title}}"
  log:
    type: log
`

const composerSource = `name: tasks
connector: file
file:
  paths: [x.json]
watches:
  - name: urgent
    notify: [hook, log]
    body: |
      {{.Record.Title}} is {{.Record.Status}} ({{join .Record.Labels ", "}})
      {{- with .Record.URL}} {{.}}{{end}}
  - name: daily
    notify: [log]
    title: "first label {{index .Record.Labels 0}}"
    digest:
      cron: "0 8 * * *"
      timezone: Europe/Paris
      title: "{{.Count}} tasks for {{.Sink}}"
`

func composeMatch(cfg *config.Config, watch, sink string, labels []string) *Match {
	var w *config.Watch
	for _, x := range cfg.Sources[0].Watches {
		if x.Name == watch {
			w = x
		}
	}
	return &Match{Source: "tasks", Watch: w, Sink: sink, DedupeKey: "tasks/1/" + watch + "/v1-abc",
		Record:  PayloadRecord{ID: "1", Title: "Fix <the> build", Status: "open", Labels: labels, URL: "https://x/1"},
		Change:  PayloadChange{ID: 3, Kind: "created", Version: 1},
		Verdict: Verdict{Urgency: "high", Reason: `when "true" is true`},
		Now:     time.Date(2026, 3, 10, 9, 30, 0, 0, time.UTC)}
}

func TestComposerRendersTemplatesByPrecedence(t *testing.T) {
	t.Parallel()
	cfg, err := loadConfig(t, composerGlobal, composerSource)
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewComposer(cfg.Global.Sinks, cfg.Sources)
	if err != nil {
		t.Fatal(err)
	}
	// Sink title, watch body.
	out := c.Compose(composeMatch(cfg, "urgent", "hook", []string{"urgent", "ci"}))
	if out.Err != nil || out.Title != "HIGH: Fix <the> build" || out.Body != "Fix <the> build is open (urgent, ci) https://x/1" || out.DigestDueAt != nil {
		t.Errorf("hook: %+v", out)
	}
	var p Payload
	if err := json.Unmarshal(out.Payload, &p); err != nil {
		t.Fatal(err)
	}
	if p.Title != out.Title || p.Body != out.Body || p.Kind != KindSingle || p.DedupeKey != "tasks/1/urgent/v1-abc" ||
		p.Record.URL != "https://x/1" || p.Change.ChangedFields == nil || p.Urgency != "high" {
		t.Errorf("payload = %+v", p)
	}
	// The log sink has no templates: defaults.
	out = c.Compose(composeMatch(cfg, "urgent", "log", nil))
	if out.Title != "[urgent] Fix <the> build" || !strings.HasPrefix(out.Body, `Fix <the> build is open ()`) {
		t.Errorf("log: %+v", out)
	}
	// A digest watch waits for the next 08:00 in Paris (07:00 UTC in March).
	out = c.Compose(composeMatch(cfg, "daily", "log", []string{"a"}))
	if want := time.Date(2026, 3, 11, 7, 0, 0, 0, time.UTC); out.DigestDueAt == nil || !out.DigestDueAt.Equal(want) {
		t.Errorf("digest due at %v, want %v", out.DigestDueAt, want)
	}
	if out.Title != "first label a" {
		t.Errorf("title = %q", out.Title)
	}
	// A template that fails on this record falls back to the default.
	out = c.Compose(composeMatch(cfg, "daily", "log", nil))
	if out.Err == nil || out.Title != "[daily] Fix <the> build" {
		t.Errorf("failing template: title %q, err %v; want the default and an error", out.Title, out.Err)
	}
	title, body, err := c.ComposeDigest(&DigestData{Watch: WatchData{Name: "daily"}, Source: "tasks", Sink: "log", Count: 2,
		Items: []DigestItem{{Record: PayloadRecord{ID: "1", Title: "One", URL: "https://x/1"}}, {Record: PayloadRecord{ID: "2"}}}})
	if err != nil || title != "2 tasks for log" || body != "- One https://x/1\n- 2" {
		t.Errorf("digest: %q, %q, %v", title, body, err)
	}
}

func TestComposerTemplateErrorsAreLocatedConfigErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, global, source, want string
	}{
		{
			name:   "sink title syntax",
			global: strings.Replace(composerGlobal, `"{{upper .Verdict.Urgency}}: {{.Record.Title}}"`, `"{{.Record.Title"`, 1),
			source: composerSource,
			want:   `lookout.yaml:5: sinks.hook.title is not a valid template: template: sinks.hook.title:1: unclosed action`,
		},
		{
			name:   "unknown field in a watch body",
			global: composerGlobal,
			source: strings.Replace(composerSource, "{{.Record.Status}}", "{{.Record.Sttus}}", 1),
			want:   `sources/tasks.yaml:8: watches[0].body does not render for a sample record: template: watches[0].body:1:30: executing "watches[0].body" at <.Record.Sttus>: can't evaluate field Sttus in type notify.PayloadRecord`,
		},
		{
			name:   "unknown function in a digest title",
			global: composerGlobal,
			source: strings.Replace(composerSource, `"{{.Count}} tasks for {{.Sink}}"`, `"{{shout .Count}}"`, 1),
			want:   `sources/tasks.yaml:17: watches[1].digest.title is not a valid template: template: watches[1].digest.title:1: function "shout" not defined`,
		},
		{
			name:   "record data in a digest title",
			global: composerGlobal,
			source: strings.Replace(composerSource, `"{{.Count}} tasks for {{.Sink}}"`, `"{{.Record.Title}}"`, 1),
			want:   `sources/tasks.yaml:17: watches[1].digest.title does not render for a sample record`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := loadConfig(t, tt.global, tt.source)
			if err != nil {
				t.Fatal(err)
			}
			_, err = NewComposer(cfg.Global.Sinks, cfg.Sources)
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Errorf("NewComposer error:\n got %v\nwant %s", err, tt.want)
			}
		})
	}
}

func TestDigesterFoldsDueMatchesOnceAcrossReplicas(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	cfg, err := loadConfig(t, composerGlobal, composerSource)
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewComposer(cfg.Global.Sinks, cfg.Sources)
	if err != nil {
		t.Fatal(err)
	}
	// 30 matches of tasks/daily for two sinks whose period ended, 5 whose
	// period has not.
	due := time.Now().Add(-time.Minute).UTC().Truncate(time.Second)
	insertNotificationsOf(t, pool, "tasks", "log", "a", 30)
	insertNotificationsOf(t, pool, "tasks", "hook", "b", 30)
	insertNotificationsOf(t, pool, "tasks", "log", "later", 5)
	// The times are arguments: Citus takes no now() in an UPDATE's CASE.
	if _, err := pool.Exec(ctx, `
		UPDATE notifications SET status = 'held', watch = 'daily',
		       digest_due_at = CASE WHEN dedupe_key LIKE 'later/%' THEN $2::timestamptz ELSE $1::timestamptz END,
		       urgency = CASE WHEN dedupe_key = 'a/r7' THEN 'high' ELSE 'low' END`, due, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}

	// Four digesters race; each match lands in exactly one summary.
	var wg sync.WaitGroup
	var mu sync.Mutex
	created := 0
	for range 4 {
		wg.Go(func() {
			g := NewDigester(pool, c, DigesterConfig{PollInterval: time.Second, BatchSize: 7}, testLogger(t))
			n, err := g.RunDue(ctx)
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			created += n
			mu.Unlock()
		})
	}
	wg.Wait()

	var members, summaries, held, orphans int
	if err := pool.QueryRow(ctx, `
		SELECT count(*) FILTER (WHERE status = 'digested'),
		       count(*) FILTER (WHERE kind = 'digest'),
		       count(*) FILTER (WHERE status = 'held'),
		       count(*) FILTER (WHERE status = 'digested' AND digest_id IS NULL)
		FROM notifications`).Scan(&members, &summaries, &held, &orphans); err != nil {
		t.Fatal(err)
	}
	if members != 60 || held != 5 || orphans != 0 || summaries != created {
		t.Fatalf("digested %d, held %d, without summary %d, summaries %d (created %d); want 60, 5, 0, =", members, held, orphans, summaries, created)
	}
	var covered int
	if err := pool.QueryRow(ctx, `
		SELECT coalesce(sum(d.digest_count), 0) FROM notifications d
		WHERE d.kind = 'digest' AND d.digest_count = (SELECT count(*) FROM notifications m WHERE m.digest_id = d.id AND m.source = d.source)`).Scan(&covered); err != nil {
		t.Fatal(err)
	}
	if covered != 60 {
		t.Errorf("summaries account for %d matches, want 60", covered)
	}

	// One replica folds a whole period into one summary per sink.
	pool2 := pgtest.Pool(t)
	insertNotificationsOf(t, pool2, "tasks", "log", "a", 12)
	insertNotificationsOf(t, pool2, "tasks", "hook", "b", 3)
	if _, err := pool2.Exec(ctx, `UPDATE notifications SET status = 'held', watch = 'daily', digest_due_at = $1`, due); err != nil {
		t.Fatal(err)
	}
	g := NewDigester(pool2, c, DigesterConfigFrom(&cfg.Global), testLogger(t))
	if n, err := g.RunDue(ctx); n != 2 || err != nil {
		t.Fatalf("RunDue = %d, %v; want 2 summaries", n, err)
	}
	var title, body, key, status string
	var count int
	var raw []byte
	if err := pool2.QueryRow(ctx, `
		SELECT title, body, dedupe_key, status, digest_count, payload FROM notifications
		WHERE kind = 'digest' AND sink = 'log'`).Scan(&title, &body, &key, &status, &count, &raw); err != nil {
		t.Fatal(err)
	}
	if title != "12 tasks for log" || count != 12 || status != "pending" || !strings.HasPrefix(key, "digest/tasks/daily/log/") ||
		strings.Count(body, "\n- ") != 11 || !strings.Contains(body, "- Record 0 https://example.com/r0") {
		t.Errorf("summary: %q, %d items, %s, %q\n%s", title, count, status, key, body)
	}
	var p Payload
	if err := json.Unmarshal(raw, &p); err != nil {
		t.Fatal(err)
	}
	if p.Kind != KindDigest || p.Digest == nil || p.Digest.Count != 12 || len(p.Digest.Items) != 12 ||
		p.Digest.Items[0].Record.ID != "r0" || !p.Digest.DueAt.Equal(due) {
		t.Errorf("digest payload = %+v", p.Digest)
	}
	// Delivered like any notification.
	rc := newReceiver(t, "s3cret")
	d := newDeliverer(t, pool2, map[string]Sink{"log": rc.sink(t), "hook": rc.sink(t)},
		map[string]*config.Sink{"log": sinkConf("webhook", 5*time.Second, 3, 2), "hook": sinkConf("webhook", 5*time.Second, 3, 2)},
		DelivererConfig{})
	if n, err := d.DeliverDue(ctx); n != 2 || err != nil {
		t.Fatalf("DeliverDue = %d, %v; want the 2 summaries", n, err)
	}
	rc.check()
}

// TestDigestPeriodsAtCalendarEdges composes a match of digest watches at
// the dates every calendar rule is tested at (docs/development.md#tests)
// and checks the end of its digest period: local midnight in Paris and New
// York, a weekly digest across the new year, and a daily digest inside the
// hour a DST change skips or repeats. A match made at a period's end
// belongs to the next period, which ends one local day (or week) later.
func TestDigestPeriodsAtCalendarEdges(t *testing.T) {
	t.Parallel()
	cfg, err := loadConfig(t, composerGlobal, `name: tasks
connector: file
file:
  paths: [x.json]
watches:
  - {name: paris-midnight, notify: [log], digest: {cron: "0 0 * * *", timezone: Europe/Paris}}
  - {name: ny-midnight, notify: [log], digest: {cron: "@daily", timezone: America/New_York}}
  - {name: paris-monday, notify: [log], digest: {cron: "0 8 * * 1", timezone: Europe/Paris}}
  - {name: paris-0230, notify: [log], digest: {cron: "30 2 * * *", timezone: Europe/Paris}}
  - {name: ny-0130, notify: [log], digest: {cron: "30 1 * * *", timezone: America/New_York}}
  - {name: ny-0230, notify: [log], digest: {cron: "30 2 * * *", timezone: America/New_York}}
  - {name: utc-monday, notify: [log], digest: {cron: "0 0 * * 1", timezone: UTC}}
`)
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewComposer(cfg.Global.Sinks, cfg.Sources)
	if err != nil {
		t.Fatal(err)
	}
	utc := func(y int, m time.Month, d, h, min int) time.Time { return time.Date(y, m, d, h, min, 0, 0, time.UTC) }
	for _, tc := range []struct {
		date  string
		now   time.Time
		watch string
		// due is the end of the period of a match made at now, next the
		// end of the period after it.
		due, next time.Time
	}{
		{"2026-12-01 09:30 UTC, a month's first day", utc(2026, 12, 1, 9, 30), "paris-midnight", utc(2026, 12, 1, 23, 0), utc(2026, 12, 2, 23, 0)},
		{"2026-12-01 09:30 UTC, a month's first day", utc(2026, 12, 1, 9, 30), "ny-midnight", utc(2026, 12, 2, 5, 0), utc(2026, 12, 3, 5, 0)},
		{"2027-01-01, ISO week 53 of 2026", utc(2027, 1, 1, 0, 0), "paris-monday", utc(2027, 1, 4, 7, 0), utc(2027, 1, 11, 7, 0)},
		{"2027-01-04, ISO week 1 of 2027", utc(2027, 1, 4, 7, 0), "paris-monday", utc(2027, 1, 11, 7, 0), utc(2027, 1, 18, 7, 0)},
		{"2027-03-28 01:30 UTC, Paris springs forward", utc(2027, 3, 28, 1, 30), "paris-midnight", utc(2027, 3, 28, 22, 0), utc(2027, 3, 29, 22, 0)},
		{"2027-03-28 00:30 UTC, Paris springs forward (before the gap)", utc(2027, 3, 28, 0, 30), "paris-0230", utc(2027, 3, 28, 1, 0), utc(2027, 3, 29, 0, 30)},
		{"2027-10-31, Paris falls back", utc(2027, 10, 30, 23, 0), "paris-0230", utc(2027, 10, 31, 0, 30), utc(2027, 11, 1, 1, 30)},
		{"2027-10-31, Paris falls back", utc(2027, 10, 30, 23, 0), "paris-midnight", utc(2027, 10, 30, 23, 0).Add(24 * time.Hour), utc(2027, 11, 1, 23, 0)},
		{"2027-03-14, New York springs forward", utc(2027, 3, 14, 5, 0), "ny-0230", utc(2027, 3, 14, 7, 0), utc(2027, 3, 15, 6, 30)},
		{"2027-03-14, New York springs forward", utc(2027, 3, 14, 5, 0), "ny-midnight", utc(2027, 3, 15, 4, 0), utc(2027, 3, 16, 4, 0)},
		{"2027-11-07, New York falls back", utc(2027, 11, 7, 4, 0), "ny-0130", utc(2027, 11, 7, 5, 30), utc(2027, 11, 8, 6, 30)},
		{"2027-11-07, New York falls back", utc(2027, 11, 7, 4, 0), "ny-midnight", utc(2027, 11, 8, 5, 0), utc(2027, 11, 9, 5, 0)},
		{"2028-02-29, a leap day", utc(2028, 2, 29, 12, 0), "paris-midnight", utc(2028, 2, 29, 23, 0), utc(2028, 3, 1, 23, 0)},
		{"2028-02-29, a leap day", utc(2028, 2, 29, 12, 0), "ny-midnight", utc(2028, 3, 1, 5, 0), utc(2028, 3, 2, 5, 0)},
		{"Monday 2027-01-11 00:05 UTC, a week boundary", utc(2027, 1, 11, 0, 5), "utc-monday", utc(2027, 1, 18, 0, 0), utc(2027, 1, 25, 0, 0)},
	} {
		t.Run(tc.date+": "+tc.watch, func(t *testing.T) {
			m := composeMatch(cfg, tc.watch, "log", []string{"a"})
			m.Now = tc.now
			due := c.Compose(m).DigestDueAt
			if due == nil || !due.Equal(tc.due) {
				t.Fatalf("a match at %s is due at %v, want %s", tc.now.Format(time.RFC3339), due, tc.due.Format(time.RFC3339))
			}
			m.Now = *due
			if next := c.Compose(m).DigestDueAt; next == nil || !next.Equal(tc.next) {
				t.Errorf("a match at %s (the period's end) is due at %v, want %s", due.Format(time.RFC3339), next, tc.next.Format(time.RFC3339))
			}
		})
	}
}

// Watches copying a template share one parsed template; a different text
// or a different kind (a digest's title against a message's) has its own.
func TestComposerSharesOneTemplatePerText(t *testing.T) {
	t.Parallel()
	const title = `shared {{.Source}} {{.Sink}}` // renders for a message and a digest
	src := &config.Source{Name: "s", Watches: []*config.Watch{
		{Name: "a", Title: title},
		{Name: "b", Title: title, Body: title},
		{Name: "c", Title: title + " (c)"},
		{Name: "d", Digest: &config.Digest{Title: title, Cron: "0 8 * * *", Timezone: "UTC"}},
	}}
	other := &config.Source{Name: "t", Watches: []*config.Watch{{Name: "a", Title: title}}}
	c, err := NewComposer(nil, []*config.Source{src, other})
	if err != nil {
		t.Fatal(err)
	}
	a, b, cc, d, ta := c.watch("s", "a"), c.watch("s", "b"), c.watch("s", "c"), c.watch("s", "d"), c.watch("t", "a")
	if a.msg.title != b.msg.title || a.msg.title != ta.msg.title {
		t.Errorf("three watches with one title hold %p, %p, %p, want one template", a.msg.title, b.msg.title, ta.msg.title)
	}
	if b.msg.body == b.msg.title {
		t.Error("a body shares the parsed title of the same text")
	}
	if cc.msg.title == a.msg.title || d.digest.title == a.msg.title {
		t.Error("a different text or a digest's title shares another template")
	}
}

// TestComposersShareTheDefaultTemplates: the default templates are parsed
// once per process, not by every NewComposer (the api validates every
// create through one: docs/benchmarks.md (7)).
func TestComposersShareTheDefaultTemplates(t *testing.T) {
	// Not parallel: testing.AllocsPerRun.
	a, err := NewComposer(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewComposer(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []struct {
		name string
		a, b any
	}{{"title", a.def.title, b.def.title}, {"body", a.def.body, b.def.body},
		{"digest title", a.digest.title, b.digest.title}, {"digest body", a.digest.body, b.digest.body}} {
		if p.a != p.b {
			t.Errorf("the default %s template was parsed again by a second NewComposer", p.name)
		}
	}
	if allocs := testing.AllocsPerRun(100, func() { _, _ = NewComposer(nil, nil) }); allocs > 10 {
		t.Errorf("NewComposer without sinks or watches allocates %.0f times, want at most 10", allocs)
	}
}

// TestComposeWritesTheDefaultsAsTheTemplatesRender composes matches of
// every shape with the defaults, which Compose writes without
// text/template, and with a sink whose templates are the default texts,
// which it executes: title, body and payload must be the same bytes. It
// also bounds the allocations of a default notification's rendering.
func TestComposeWritesTheDefaultsAsTheTemplatesRender(t *testing.T) {
	// Not parallel: AllocsPerRun counts the whole process.
	sinks := map[string]*config.Sink{
		"log":      {Type: "log"},
		"verbatim": {Type: "log", Title: DefaultTitle, Body: DefaultBody},
	}
	c, err := NewComposer(sinks, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	conf := 0.5
	var matches []*Match
	for _, title := range []string{"", "Fix the build", "  spaced\n\ttitle  ", "{{.Watch.Name}} <b>&amp;</b> é 🙂"} {
		for _, url := range []string{"", "https://x/1?a=b&c=<d>"} {
			for _, fields := range [][]string{nil, {}, {"status"}, {"status", "title", "labels"}} {
				for _, reason := range []string{"", `when "record.status == 'open'" is true`, "two\nlines "} {
					matches = append(matches, &Match{Source: "tasks", Watch: &config.Watch{Name: "urgent"}, Owner: "alice",
						DedupeKey: "tasks/1/urgent/v1-abc", Now: now,
						Record:  PayloadRecord{ID: "r-1", Title: title, URL: url, Status: "open", Labels: []string{"ops"}, Extra: map[string]any{"n": int64(1)}},
						Change:  PayloadChange{ID: 7, Kind: "updated", Version: len(fields) - 1, ChangedFields: fields},
						Verdict: Verdict{Urgency: "high", Reason: reason, Confidence: conf}, Confidence: &conf})
				}
			}
		}
	}
	for i, m := range matches {
		direct := c.Compose(&Match{Source: m.Source, Watch: m.Watch, Owner: m.Owner, Sink: "log", DedupeKey: m.DedupeKey,
			Record: m.Record, Change: m.Change, Verdict: m.Verdict, Confidence: m.Confidence, Now: m.Now})
		executed := c.Compose(&Match{Source: m.Source, Watch: m.Watch, Owner: m.Owner, Sink: "verbatim", DedupeKey: m.DedupeKey,
			Record: m.Record, Change: m.Change, Verdict: m.Verdict, Confidence: m.Confidence, Now: m.Now})
		if direct.Err != nil || executed.Err != nil {
			t.Fatalf("match %d: errors %v, %v", i, direct.Err, executed.Err)
		}
		if direct.Title != executed.Title || direct.Body != executed.Body || string(direct.Payload) != string(executed.Payload) {
			t.Errorf("match %d: the defaults written give\n%q\n%q\n%s\nexecuted\n%q\n%q\n%s", i,
				direct.Title, direct.Body, direct.Payload, executed.Title, executed.Body, executed.Payload)
		}
	}
	m := matches[len(matches)-1]
	m.Sink = "log"
	allocs := testing.AllocsPerRun(100, func() { c.Compose(m) })
	t.Logf("%.0f allocations a default notification", allocs)
	if allocs > 15 {
		t.Errorf("composing a default notification allocates %.0f times; want at most 15 (with text/template, 34)", allocs)
	}
}

// BenchmarkComposeDefault composes a notification with the default
// templates (the benchmark's log sink, docs/benchmarks.md (4)).
func BenchmarkComposeDefault(b *testing.B) {
	c, err := NewComposer(map[string]*config.Sink{"log": {Type: "log"}}, nil)
	if err != nil {
		b.Fatal(err)
	}
	m := &Match{Source: "gen", Watch: &config.Watch{Name: "urgent"}, Sink: "log", DedupeKey: "gen/r-10/urgent/v1-abc",
		Record: PayloadRecord{ID: "r-10", Title: "Record 10", Body: "generated by the benchmark", Status: "open",
			Labels: []string{"ops", "urgent"}, Extra: map[string]any{"n": int64(10)}, ContentHash: "abc"},
		Change:  PayloadChange{ID: 10, Kind: "created", Version: 1},
		Verdict: Verdict{Urgency: "medium", Reason: `when "record.status == \"open\" && \"urgent\" in record.labels" is true`},
		Now:     time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)}
	b.ReportAllocs()
	for b.Loop() {
		c.Compose(m)
	}
}
