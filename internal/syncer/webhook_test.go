package syncer

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/lookout-dev/lookout/internal/config"
	_ "github.com/lookout-dev/lookout/internal/connectors/github" // the github connector and its MapEvent
	"github.com/lookout-dev/lookout/internal/connectors/github/githubtest"
	"github.com/lookout-dev/lookout/internal/definitions"
	"github.com/lookout-dev/lookout/internal/inbound"
	"github.com/lookout-dev/lookout/internal/ingest"
	"github.com/lookout-dev/lookout/internal/metrics"
	"github.com/lookout-dev/lookout/internal/testsignal"
)

const hookSecret = "It's a Secret to Everybody"

// webhookWorld is a github source with a webhook: the fake GitHub API,
// the api's ingest in front of the test's schema, and the syncer with its
// events processor.
type webhookWorld struct {
	*harness
	gh     *githubtest.Server
	ingest *httptest.Server
	s      *Syncer
	events *Events
	m      *metrics.Metrics
	n      int // deliveries sent
}

func newWebhookWorld(t *testing.T, extra string) *webhookWorld {
	t.Helper()
	h := newHarness(t)
	gh := githubtest.New(t)
	gh.Seed(3)
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "sources"), 0o755); err != nil {
		t.Fatal(err)
	}
	src := fmt.Sprintf(`name: gh
connector: github
github: {repo: %s, base_url: %s, token: %s}
webhook: {provider: github, secret: "%s"}
%s`, gh.Repo, gh.Srv.URL, gh.Token, hookSecret, extra)
	if err := os.WriteFile(filepath.Join(dir, "lookout.yaml"), []byte(fastLimits), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "sources", "gh.yaml"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := definitions.Apply(context.Background(), h.pool, cfg, definitions.ApplyOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	m := metrics.New()
	mux := http.NewServeMux()
	mux.Handle(ingest.Pattern, ingest.New(h.pool, ingest.Config{}, slog.New(slog.DiscardHandler)).Handler())
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	s := h.syncer(cfg, Config{Metrics: m})
	return &webhookWorld{harness: h, gh: gh, ingest: srv, s: s, events: s.Events(EventsConfig{}), m: m}
}

// deliver POSTs a signed delivery of event about issue n, as GitHub
// would, and returns the delivery id.
func (w *webhookWorld) deliver(event, action string, n int64) string {
	w.t.Helper()
	w.n++
	id := fmt.Sprintf("delivery-%d", w.n)
	body := w.gh.Payload(event, action, n)
	req, err := http.NewRequest(http.MethodPost, w.ingest.URL+"/ingest/gh", bytes.NewReader(body))
	if err != nil {
		w.t.Fatal(err)
	}
	req.Header = githubtest.Sign(hookSecret, event, id, body)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		w.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusAccepted {
		w.t.Fatalf("delivery %s answered %d: %s", id, resp.StatusCode, data)
	}
	return id
}

// drain processes the stored events and returns how many it finished.
func (w *webhookWorld) drain() int {
	w.t.Helper()
	n, err := w.events.Drain(context.Background())
	if err != nil {
		w.t.Fatalf("drain events: %v", err)
	}
	return n
}

func (w *webhookWorld) event(id string) *inbound.Event {
	w.t.Helper()
	e, err := inbound.Get(context.Background(), w.pool, "gh", id)
	if err != nil || e == nil {
		w.t.Fatalf("event %s: %v, %v", id, e, err)
	}
	return e
}

// changesOf lists the change kinds of record id, oldest first, with
// whether a run wrote them.
func (w *webhookWorld) changesOf(id string) []string {
	w.t.Helper()
	rows, err := w.pool.Query(context.Background(), `SELECT kind, run_id IS NOT NULL FROM changes WHERE source = 'gh' AND record_id = $1 ORDER BY id`, id)
	if err != nil {
		w.t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var kind string
		var byRun bool
		if err := rows.Scan(&kind, &byRun); err != nil {
			w.t.Fatal(err)
		}
		by := "event"
		if byRun {
			by = "poll"
		}
		out = append(out, kind+" by "+by)
	}
	return out
}

func (w *webhookWorld) record(id string) (title string, comments int64) {
	w.t.Helper()
	var c *int64
	if err := w.pool.QueryRow(context.Background(), `SELECT title, (extra->>'comments')::bigint FROM records WHERE source = 'gh' AND record_id = $1`,
		id).Scan(&title, &c); err != nil {
		w.t.Fatalf("record %s: %v", id, err)
	}
	if c != nil {
		comments = *c
	}
	return title, comments
}

func (w *webhookWorld) counter(name string, labels ...string) float64 {
	w.t.Helper()
	families, err := w.m.Registry().Gather()
	if err != nil {
		w.t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	next:
		for _, m := range f.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				if labelOf(m, labels[i]) != labels[i+1] {
					continue next
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

func labelOf(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// edit changes issue n's title on the fake, as a user would.
func (w *webhookWorld) edit(n int64, title string) {
	is := w.gh.Get(n)
	is.Title, is.Updated = title, is.Updated.Add(time.Hour)
	w.gh.Put(is)
}

// A signed delivery is mirrored into the record a poll writes, through
// the same mapping and writer: an event and a poll that see the same
// content write one change, in either order.
func TestWebhookEventAndPollWriteOneChange(t *testing.T) {
	t.Parallel()
	w := newWebhookWorld(t, "")
	if n := w.runAt(w.s, "gh"); n != 1 {
		t.Fatalf("first poll: %d runs", n)
	}
	if got := w.changesOf("1"); strings.Join(got, ",") != "created by poll" {
		t.Fatalf("after the first poll: %v", got)
	}

	// Event first, then the reconciliation poll.
	w.edit(1, "Issue 1, edited")
	id := w.deliver(githubtest.EventIssues, "edited", 1)
	if n := w.drain(); n != 1 {
		t.Fatalf("drained %d events, want 1", n)
	}
	if e := w.event(id); e.Outcome != inbound.OutcomeUpdated || e.ProcessedAt == nil {
		t.Errorf("event after processing: %+v", e)
	}
	if title, _ := w.record("1"); title != "Issue 1, edited" {
		t.Errorf("record 1's title %q", title)
	}
	requests := len(w.gh.Log())
	w.runAt(w.s, "gh")
	if got := w.changesOf("1"); strings.Join(got, ",") != "created by poll,updated by event" {
		t.Errorf("record 1 after event and poll: %v, want the event's change only", got)
	}
	if len(w.gh.Log()) <= requests {
		t.Errorf("the reconciliation poll made no request")
	}

	// Poll first, then the late event: the event finds the same content.
	w.edit(2, "Issue 2, edited")
	w.runAt(w.s, "gh")
	id = w.deliver(githubtest.EventIssues, "edited", 2)
	w.drain()
	if e := w.event(id); e.Outcome != inbound.OutcomeUnchanged {
		t.Errorf("late event: outcome %q, want unchanged", e.Outcome)
	}
	if got := w.changesOf("2"); strings.Join(got, ",") != "created by poll,updated by poll" {
		t.Errorf("record 2 after poll and event: %v", got)
	}
	// The same delivery again stores nothing and changes nothing.
	if n := w.drain(); n != 0 {
		t.Errorf("drained %d more events", n)
	}
}

// What the reconciliation poll finds that no event brought is repaired:
// counted in sync_runs.repaired, the metric and report_webhook_health.
func TestWebhookReconciliationRepairs(t *testing.T) {
	t.Parallel()
	w := newWebhookWorld(t, "")
	w.runAt(w.s, "gh") // the first poll loads what exists: no repair
	var repaired int
	if err := w.pool.QueryRow(context.Background(), `SELECT coalesce(sum(repaired), 0) FROM sync_runs WHERE source = 'gh'`).Scan(&repaired); err != nil || repaired != 0 {
		t.Fatalf("first poll repaired %d (%v), want 0", repaired, err)
	}
	w.edit(3, "Issue 3, edited while the webhook was down") // the delivery is lost
	w.edit(1, "Issue 1, edited")
	w.deliver(githubtest.EventIssues, "edited", 1) // this one arrives
	w.drain()
	w.runAt(w.s, "gh")
	runs := w.runs("gh")
	var last int64
	if err := w.pool.QueryRow(context.Background(), `SELECT repaired FROM sync_runs WHERE id = $1`, runs[len(runs)-1].ID).Scan(&last); err != nil {
		t.Fatal(err)
	}
	if last != 1 || runs[len(runs)-1].Updated != 1 {
		t.Errorf("reconciliation run: repaired %d, updated %d; want 1 and 1 (issue 3 only)", last, runs[len(runs)-1].Updated)
	}
	if got := w.counter("lookout_webhook_repaired_total"); got != 1 {
		t.Errorf("lookout_webhook_repaired_total = %v, want 1", got)
	}
	var received, rep int64
	var provider string
	if err := w.pool.QueryRow(context.Background(), `SELECT provider, received_24h, repaired_24h FROM report_webhook_health WHERE source = 'gh'`).
		Scan(&provider, &received, &rep); err != nil {
		t.Fatal(err)
	}
	if provider != "github" || received != 1 || rep != 1 {
		t.Errorf("report_webhook_health: provider %s, received %d, repaired %d", provider, received, rep)
	}
	if !strings.Contains(w.logs.String(), "reconciliation poll found changes no webhook event brought") {
		t.Errorf("no warning about the repair in the log:\n%s", w.logs.String())
	}
}

// An event that carries only part of the object (issue_comment: the
// comment count may be stale; pull_request: the pulls API's object)
// fetches the issue through the source's client, within its rate limits
// and the host's budget.
func TestWebhookPartialEventFetches(t *testing.T) {
	t.Parallel()
	w := newWebhookWorld(t, "")
	w.runAt(w.s, "gh")
	w.gh.Comment(1, "monalisa", "Me too")
	id := w.deliver(githubtest.EventIssueComment, "created", 1)

	// The host asked us to wait (a 429 with Retry-After an hour away):
	// the fetch is not sent, the event waits for its retry.
	host := strings.TrimPrefix(w.gh.Srv.URL, "http://")
	w.exec(`UPDATE host_limits SET blocked_until = $2, blocked_reason = '429 Too Many Requests (Retry-After: 3600)' WHERE host = $1`,
		host, w.clock.Now().Add(time.Hour))
	before := len(w.gh.Log())
	if n := w.drain(); n != 0 {
		t.Fatalf("drained %d events while the host is blocked, want 0", n)
	}
	if len(w.gh.Log()) != before {
		t.Errorf("a request was sent to a blocked host")
	}
	e := w.event(id)
	if e.ProcessedAt != nil || e.Attempts != 1 || !strings.Contains(e.Detail, "is blocked") {
		t.Errorf("event while blocked: %+v", e)
	}

	// The block ends and the retry falls due.
	w.exec(`UPDATE host_limits SET blocked_until = NULL WHERE host = $1`, host)
	w.exec(`UPDATE inbound_events SET claim_expires_at = now() - interval '1 second' WHERE id = $1`, e.ID)
	if n := w.drain(); n != 1 {
		t.Fatalf("drained %d events, want 1", n)
	}
	got := w.gh.Log()[before:]
	if len(got) != 1 || got[0].URL.Path != "/repos/octo-org/hello-world/issues/1" || got[0].Header.Get("Authorization") != "Bearer ghp_test" {
		t.Fatalf("requests of the event: %v", got)
	}
	if _, comments := w.record("1"); comments != 1 {
		t.Errorf("record 1 has %d comments, want the fetched count 1 (the payload said 0)", comments)
	}
	if e := w.event(id); e.Outcome != inbound.OutcomeUpdated {
		t.Errorf("outcome %q", e.Outcome)
	}

	// A pull request event: the fetched issue is the one the poll lists.
	pr := w.gh.Get(3)
	pr.Title, pr.Updated = "Pull request 3, renamed", pr.Updated.Add(time.Hour)
	w.gh.Put(pr)
	w.deliver(githubtest.EventPullRequest, "edited", 3)
	w.drain()
	w.runAt(w.s, "gh")
	if got := w.changesOf("3"); strings.Join(got, ",") != "created by poll,updated by event" {
		t.Errorf("pull request 3: %v, want one change by the event and none by the poll", got)
	}
	var kind string
	if err := w.pool.QueryRow(context.Background(), `SELECT extra->>'kind' FROM records WHERE source = 'gh' AND record_id = '3'`).Scan(&kind); err != nil || kind != "pr" {
		t.Errorf("record 3 kind %q (%v)", kind, err)
	}
}

// Events of another repository are ignored; deleted issues are recorded
// as deleted; an event older than the stored record is stale.
func TestWebhookEventOutcomes(t *testing.T) {
	t.Parallel()
	w := newWebhookWorld(t, "")
	w.runAt(w.s, "gh")
	old := w.deliver(githubtest.EventIssues, "edited", 2) // content as stored, updated_at as stored
	w.edit(2, "Issue 2, newer")
	w.runAt(w.s, "gh")
	del := w.deliver(githubtest.EventIssues, "deleted", 1)
	w.drain()
	if e := w.event(old); e.Outcome != inbound.OutcomeStale || !strings.Contains(e.Detail, "is newer") {
		t.Errorf("old event: %q %q, want stale", e.Outcome, e.Detail)
	}
	if title, _ := w.record("2"); title != "Issue 2, newer" {
		t.Errorf("a stale event overwrote record 2: %q", title)
	}
	if e := w.event(del); e.Outcome != inbound.OutcomeDeleted {
		t.Errorf("deleted event: %q", e.Outcome)
	}
	if got := w.changesOf("1"); strings.Join(got, ",") != "created by poll,deleted by event" {
		t.Errorf("record 1: %v", got)
	}

	w.gh.Repo = "octo-org/other"
	other := w.deliver(githubtest.EventIssues, "edited", 2)
	w.drain()
	if e := w.event(other); e.Outcome != inbound.OutcomeIgnored || !strings.Contains(e.Detail, "octo-org/other") {
		t.Errorf("event of another repository: %q %q", e.Outcome, e.Detail)
	}
}

// The processor runs as a service: the ingest's NOTIFY wakes it.
func TestWebhookEventsService(t *testing.T) {
	t.Parallel()
	w := newWebhookWorld(t, "")
	w.runAt(w.s, "gh")
	ctx := context.Background()
	if err := w.events.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.events.Stop() })
	w.edit(2, "Issue 2, live")
	id := w.deliver(githubtest.EventIssues, "edited", 2)
	testsignal.Eventually(t, "the event processed", func() bool { return w.event(id).ProcessedAt != nil })
	if title, _ := w.record("2"); title != "Issue 2, live" {
		t.Errorf("record 2: %q", title)
	}
	if err := w.events.Stop(); err != nil {
		t.Fatal(err)
	}
}

// holdFetches makes the fake GitHub hold every GET of issue n until the
// returned release is called (at the latest when the test ends); arrived
// receives one value per held request as it arrives.
func (w *webhookWorld) holdFetches(n int64) (arrived <-chan struct{}, release func()) {
	w.t.Helper()
	ch := make(chan struct{}, 16)
	gate := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(gate) }) }
	w.t.Cleanup(release)
	path := fmt.Sprintf("/repos/%s/issues/%d", w.gh.Repo, n)
	w.gh.Mu.Lock()
	w.gh.Intercept = func(_ http.ResponseWriter, r *http.Request, _ int) bool {
		if r.Method == http.MethodGet && r.URL.Path == path {
			ch <- struct{}{}
			<-gate
		}
		return false
	}
	w.gh.Mu.Unlock()
	return ch, release
}

// An event that carries its item (issues) does not wait behind the
// fetches of the other events of its batch: it is written, and marked
// processed, before a pull_request event's fetch is answered.
func TestWebhookCarriedEventsDoNotWaitForFetches(t *testing.T) {
	t.Parallel()
	w := newWebhookWorld(t, "")
	w.runAt(w.s, "gh")
	pr := w.gh.Get(3)
	pr.Title, pr.Updated = "Pull request 3, renamed", pr.Updated.Add(time.Hour)
	w.gh.Put(pr)
	prEvent := w.deliver(githubtest.EventPullRequest, "edited", 3) // first in the batch: its fetch is held
	w.edit(1, "Issue 1, edited")
	issueEvent := w.deliver(githubtest.EventIssues, "edited", 1)

	arrived, release := w.holdFetches(3)
	done := make(chan int, 1)
	go func() {
		n, err := w.events.Drain(context.Background())
		if err != nil {
			t.Errorf("drain events: %v", err)
		}
		done <- n
	}()
	testsignal.Receive(t, arrived, "the pull request's fetch")
	// The fetch is held: the issues event must already be written.
	if e := w.event(issueEvent); e.ProcessedAt == nil || e.Outcome != inbound.OutcomeUpdated {
		t.Errorf("issues event while the pull request's fetch is held: processed_at %v, outcome %q; want written (updated) already",
			e.ProcessedAt, e.Outcome)
	}
	if title, _ := w.record("1"); title != "Issue 1, edited" {
		t.Errorf("record 1 while the pull request's fetch is held: %q, want the event's title", title)
	}
	if e := w.event(prEvent); e.ProcessedAt != nil {
		t.Errorf("pull_request event processed before its fetch was answered: %+v", e)
	}
	release()
	if n := testsignal.Receive(t, done, "the drain"); n != 2 {
		t.Errorf("drained %d events, want 2", n)
	}
	if e := w.event(prEvent); e.Outcome != inbound.OutcomeUpdated {
		t.Errorf("pull_request event after its fetch: %q %q", e.Outcome, e.Detail)
	}
	if title, _ := w.record("3"); title != "Pull request 3, renamed" {
		t.Errorf("record 3: %q", title)
	}
}

// Events of one batch that need the same object fetch it once: 37
// comments on one issue are one GET of the issue, and the record gets
// the fetched comment count.
func TestWebhookFetchesOfOneObjectAreCoalesced(t *testing.T) {
	t.Parallel()
	w := newWebhookWorld(t, "")
	w.runAt(w.s, "gh")
	var ids []string
	for i := range 37 {
		w.gh.Comment(1, "monalisa", fmt.Sprintf("Me too (%d)", i+1))
		ids = append(ids, w.deliver(githubtest.EventIssueComment, "created", 1))
	}
	w.gh.Comment(2, "hubot", "On another issue")
	other := w.deliver(githubtest.EventIssueComment, "created", 2)
	before := len(w.gh.Log())
	if n := w.drain(); n != 38 {
		t.Fatalf("drained %d events, want 38", n)
	}
	fetches := map[string]int{}
	for _, r := range w.gh.Log()[before:] {
		fetches[r.Method+" "+r.URL.Path]++
	}
	want := map[string]int{"GET /repos/octo-org/hello-world/issues/1": 1, "GET /repos/octo-org/hello-world/issues/2": 1}
	if fmt.Sprint(fetches) != fmt.Sprint(want) {
		t.Errorf("requests of the batch: %v, want one fetch per issue: %v", fetches, want)
	}
	if _, comments := w.record("1"); comments != 37 {
		t.Errorf("record 1 has %d comments, want 37", comments)
	}
	if _, comments := w.record("2"); comments != 1 {
		t.Errorf("record 2 has %d comments, want 1", comments)
	}
	outcomes := map[string]int{}
	for _, id := range ids {
		e := w.event(id)
		if e.ProcessedAt == nil {
			t.Errorf("event %s not processed: %+v", id, e)
		}
		outcomes[e.Outcome]++
	}
	if outcomes[inbound.OutcomeUpdated] != 1 || outcomes[inbound.OutcomeStale] != 36 {
		t.Errorf("outcomes of the 37 comment events: %v, want 1 updated and 36 stale (superseded)", outcomes)
	}
	if e := w.event(other); e.Outcome != inbound.OutcomeUpdated {
		t.Errorf("comment event of issue 2: %q %q", e.Outcome, e.Detail)
	}
	if got := w.changesOf("1"); strings.Join(got, ",") != "created by poll,updated by event" {
		t.Errorf("record 1: %v, want one change for the batch", got)
	}
}

// Writing the carried events first keeps the latest object per record:
// when a pull_request event's fetch answers an object older than the one
// an issues event of the same batch carried (a lagging read), the fetch
// is stale and does not overwrite it.
func TestWebhookFetchDoesNotOverwriteANewerCarriedEvent(t *testing.T) {
	t.Parallel()
	w := newWebhookWorld(t, "")
	w.runAt(w.s, "gh")
	old := w.gh.Get(3)
	pr := old
	pr.Title, pr.Updated = "Pull request 3, renamed", old.Updated.Add(time.Minute)
	w.gh.Put(pr)
	prEvent := w.deliver(githubtest.EventPullRequest, "edited", 3)
	pr.Title, pr.Updated = "Pull request 3, renamed again", old.Updated.Add(time.Hour)
	w.gh.Put(pr)
	issueEvent := w.deliver(githubtest.EventIssues, "edited", 3) // carries the newest object
	lagging := old
	lagging.Title, lagging.Updated = "Pull request 3, renamed", old.Updated.Add(time.Minute)
	w.gh.Put(lagging) // what the fetch answers
	if n := w.drain(); n != 2 {
		t.Fatalf("drained %d events, want 2", n)
	}
	if title, _ := w.record("3"); title != "Pull request 3, renamed again" {
		t.Errorf("record 3: %q, want the newest object (the issues event's)", title)
	}
	if e := w.event(issueEvent); e.Outcome != inbound.OutcomeUpdated {
		t.Errorf("issues event: %q %q", e.Outcome, e.Detail)
	}
	if e := w.event(prEvent); e.Outcome != inbound.OutcomeStale || !strings.Contains(e.Detail, "is newer") {
		t.Errorf("pull_request event whose fetch is older: %q %q, want stale", e.Outcome, e.Detail)
	}
	if got := w.changesOf("3"); strings.Join(got, ",") != "created by poll,updated by event" {
		t.Errorf("record 3: %v", got)
	}
}
