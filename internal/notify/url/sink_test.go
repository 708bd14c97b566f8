package url_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/egress"
	"github.com/lookout-dev/lookout/internal/notify"
	urlsink "github.com/lookout-dev/lookout/internal/notify/url"
	"github.com/lookout-dev/lookout/internal/notify/url/urltest"
	"github.com/lookout-dev/lookout/internal/outbox"
	"github.com/lookout-dev/lookout/internal/pgtest"
	"github.com/lookout-dev/lookout/internal/testsignal"
)

var services = []string{"ntfy", "discord", "telegram", "gotify", "generic", "teams", "mattermost", "rocketchat", "googlechat", "zulip", "pushover", "matrix"}

// newSink builds the url sink of fake's notification URL, dialing through
// policy (the zero policy allows the fake's 127.0.0.1, as tests of webhook
// sinks do).
func newSink(t *testing.T, fake *urltest.Server, policy egress.Policy) *urlsink.Sink {
	t.Helper()
	s, err := urlsink.New(urlsink.Options{URL: fake.NotificationURL(), Concurrency: 2, Egress: policy, APIBase: fake.Base()})
	if err != nil {
		t.Fatalf("new %s sink: %v", fake.Service, err)
	}
	return s
}

func notification(title string) *notify.Notification {
	return &notify.Notification{ID: 1, DedupeKey: "src/r1/w/" + title, Source: "src", RecordID: "r1", Watch: "w",
		Kind: notify.KindSingle, Title: title, Body: "The price fell to 12 €.", Urgency: "high", Attempt: 1,
		Payload: notify.Payload{Kind: notify.KindSingle, Record: notify.PayloadRecord{ID: "r1", URL: "https://shop.example/r1"}}}
}

// noSecrets fails t when s holds one of fake's credentials.
func noSecrets(t *testing.T, fake *urltest.Server, what, s string) {
	t.Helper()
	for _, sec := range fake.Secrets() {
		if strings.Contains(s, sec) {
			t.Errorf("%s %s shows the secret %q: %s", fake.Service, what, sec, s)
		}
	}
}

// TestChannelsDeliverThroughTheOutbox: for each channel, notifications
// enqueued in the real outbox reach the service's fake exactly once per
// dedupe key (an enqueued repeat of a key is suppressed); a 5xx is
// retried and then delivered; a 4xx makes the notification dead at once,
// its stored error naming the answer and none of the URL's secrets.
func TestChannelsDeliverThroughTheOutbox(t *testing.T) {
	t.Parallel()
	for _, service := range services {
		t.Run(service, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			pool := pgtest.Pool(t)
			fake := urltest.New(t, service)
			fake.Answer = func(title string, n int) int {
				switch {
				case title == "flaky" && n == 1:
					return http.StatusServiceUnavailable
				case title == "refused":
					return http.StatusBadRequest
				}
				return 0
			}
			sink := newSink(t, fake, egress.Policy{})
			const name = "chat"
			var notes []outbox.Notification
			for _, title := range []string{"ok", "flaky", "refused", "ok"} { // "ok" twice: one key
				p := notify.Payload{DedupeKey: "src/" + title, Kind: notify.KindSingle, Source: "src", Watch: "w", Title: title,
					Record: notify.PayloadRecord{ID: title, URL: "https://shop.example/" + title}, Urgency: "medium", CreatedAt: time.Now().UTC()}
				notes = append(notes, outbox.Notification{DedupeKey: "src/" + title, Sink: name, Source: "src", RecordID: title, Watch: "w",
					Title: title, Body: "body of " + title, Urgency: "medium", Reason: "test", Payload: p.Marshal()})
			}
			for _, n := range notes { // one at a time: a repeat within one statement is an error
				if _, err := outbox.Enqueue(ctx, pool, []outbox.Notification{n}); err != nil {
					t.Fatal(err)
				}
			}
			var logs bytes.Buffer
			// No redacting handler: the sink's own errors must hold no secret.
			logger := slog.New(slog.NewTextHandler(&syncWriter{b: &logs}, nil))
			d := notify.NewDeliverer(pool, map[string]notify.Sink{name: sink},
				notify.DelivererConfig{Sinks: map[string]*config.Sink{name: {Type: "url", Timeout: 10 * time.Second, MaxAttempts: 5, Concurrency: 2}},
					Owner: t.Name(), Lease: time.Minute, BatchSize: 10, PollInterval: 20 * time.Millisecond,
					RetryMin: 10 * time.Millisecond, RetryMax: 50 * time.Millisecond}, logger)
			if err := d.Start(ctx); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = d.Stop() })
			var rows []outbox.Row
			testsignal.Eventually(t, "every notification delivered or dead", func() bool {
				var err error
				if rows, err = outbox.List(ctx, pool, outbox.Filter{Sink: name}); err != nil {
					t.Fatal(err)
				}
				for _, r := range rows {
					if r.Status != "delivered" && r.Status != "dead" {
						return false
					}
				}
				return len(rows) == 3
			})
			perMessage := 1
			if service == "telegram" || service == "matrix" {
				perMessage = 2 // two chats, two rooms in the URL
			}
			for _, r := range rows {
				title := r.Title
				switch title {
				case "ok", "flaky":
					if r.Status != "delivered" || fake.Accepted(title) != perMessage {
						t.Errorf("%s: status %s, accepted %d times; want delivered, %d", title, r.Status, fake.Accepted(title), perMessage)
					}
				case "refused":
					if r.Status != "dead" || r.Attempts != 1 || fake.Accepted(title) != 0 || fake.Requests(title) != 1 {
						t.Errorf("refused: status %s after %d attempts, %d requests, %d accepted; want dead after 1, 1 request",
							r.Status, r.Attempts, fake.Requests(title), fake.Accepted(title))
					}
					if r.LastError == nil || !strings.Contains(*r.LastError, "400 Bad Request") {
						t.Errorf("refused: last error %v, want the 400 answer", r.LastError)
					} else {
						noSecrets(t, fake, "stored error", *r.LastError)
					}
				}
			}
			if r := fake.Requests("flaky"); r != perMessage+1 {
				t.Errorf("flaky: %d requests, want %d (a 503, then the retry)", r, perMessage+1)
			}
			if p := fake.Problems(); len(p) > 0 {
				t.Errorf("requests the real API refuses: %q", p)
			}
			_ = d.Stop()
			noSecrets(t, fake, "log", logs.String())
		})
	}
}

type syncWriter struct {
	mu sync.Mutex
	b  *bytes.Buffer
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// TestRateLimitAnswers: a 429 is retried no sooner than the service asks:
// Discord's Retry-After header, Telegram's parameters.retry_after (its
// only way), Matrix's retry_after_ms, a generic webhook's and Zulip's
// Retry-After header; ntfy,
// Gotify, Teams, Mattermost, Rocket.Chat, Google Chat and Pushover's plain
// 429 with the deliverer's backoff.
func TestRateLimitAnswers(t *testing.T) {
	t.Parallel()
	for _, service := range services {
		t.Run(service, func(t *testing.T) {
			t.Parallel()
			fake := urltest.New(t, service)
			fake.RetryAfter = 7
			fake.Answer = func(string, int) int { return http.StatusTooManyRequests }
			now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
			s, err := urlsink.New(urlsink.Options{URL: fake.NotificationURL(), APIBase: fake.Base(), Now: func() time.Time { return now }})
			if err != nil {
				t.Fatal(err)
			}
			err = s.Deliver(context.Background(), notification("busy"))
			var ra *notify.RetryAfterError
			var perm *notify.PermanentError
			switch {
			case err == nil || errors.As(err, &perm):
				t.Fatalf("429: %v, want a retried error", err)
			case service == "discord" || service == "telegram" || service == "generic" || service == "zulip" || service == "matrix":
				if !errors.As(err, &ra) || !ra.At.Equal(now.Add(7*time.Second)) {
					t.Fatalf("429: %v, want a retry at %s", err, now.Add(7*time.Second))
				}
			case errors.As(err, &ra):
				t.Fatalf("429 without retry_after: retry at %s, want the deliverer's backoff", ra.At)
			}
			if !strings.Contains(err.Error(), "429") {
				t.Errorf("error %q does not name the 429", err)
			}
			noSecrets(t, fake, "error", err.Error())
		})
	}
}

// TestEgressPolicyOnEveryDial: under deny_private the fakes on 127.0.0.1
// are refused when dialed (Discord and Telegram, whose host is not in the
// URL, too), nothing reaches them, and the failure is permanent.
func TestEgressPolicyOnEveryDial(t *testing.T) {
	t.Parallel()
	for _, service := range services {
		t.Run(service, func(t *testing.T) {
			t.Parallel()
			fake := urltest.New(t, service)
			err := newSink(t, fake, egress.Policy{DenyPrivate: true}).Deliver(context.Background(), notification("x"))
			var de *egress.DeniedError
			var perm *notify.PermanentError
			if !errors.As(err, &de) || !errors.As(err, &perm) {
				t.Fatalf("deny_private: %v, want a permanent *egress.DeniedError", err)
			}
			if n := fake.Requests("x"); n != 0 {
				t.Fatalf("%d requests reached the fake", n)
			}
			ok := newSink(t, fake, egress.Policy{DenyPrivate: true, Allow: []netipPrefix{mustPrefix("127.0.0.1/32")}})
			if err := ok.Deliver(context.Background(), notification("y")); err != nil || fake.Accepted("y") == 0 {
				t.Fatalf("egress.allow 127.0.0.1: %v, %d accepted", err, fake.Accepted("y"))
			}
		})
	}
}

// TestCheckNamesFileLineAndKey: lookout.yaml's url sinks are checked
// offline at load (what `check` runs): an unknown scheme or a missing
// token is an error at the url key's line, without the URL's secrets.
func TestCheckNamesFileLineAndKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ url, want string }{
		{"pager://s3cret-token-1@x", `lookout.yaml:4: sinks.chat.url has scheme "pager", which is not a channel of the url sink`},
		{"discord://@98765432101", "lookout.yaml:4: sinks.chat.url is not a valid discord URL (discord://@[REDACTED]): setting config URL: token missing"},
		{"", "lookout.yaml:2: sinks.chat.url is required for a url sink"},
	} {
		dir := t.TempDir()
		if err := os.MkdirAll(filepath.Join(dir, config.SourcesDir), 0o755); err != nil {
			t.Fatal(err)
		}
		yaml := fmt.Sprintf("sinks:\n  chat:\n    type: url\n    url: %q\n", tc.url)
		if tc.url == "" {
			yaml = "sinks:\n  chat:\n    type: url\n"
		}
		if err := os.WriteFile(filepath.Join(dir, config.GlobalFile), []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := config.Load(dir)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("url %q: %v, want %q", tc.url, err, tc.want)
		}
		if err != nil && (strings.Contains(err.Error(), "s3cret") || strings.Contains(err.Error(), "98765432101")) {
			t.Errorf("url %q: the error shows a secret: %v", tc.url, err)
		}
	}
}

type netipPrefix = netip.Prefix

func mustPrefix(s string) netip.Prefix { return netip.MustParsePrefix(s) }

// TestBuildSinksHidesTheURLsSecrets: a url sink's credentials written in
// lookout.yaml as they are (not as ${ENV}) join the configuration's
// redactor when the sink is built, so the daemon's logs and stored errors
// hide them as they hide ${ENV} values.
func TestBuildSinksHidesTheURLsSecrets(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, config.SourcesDir), 0o755); err != nil {
		t.Fatal(err)
	}
	yaml := "sinks:\n  chat: {type: url, url: \"telegram://123456789:AAF-inline_tok3n@telegram?chats=@ch\"}\n"
	if err := os.WriteFile(filepath.Join(dir, config.GlobalFile), []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := notify.BuildSinks(&cfg.Global, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	got := cfg.Global.Redactor().String("POST https://api.telegram.org/bot123456789:AAF-inline_tok3n/sendMessage failed")
	if strings.Contains(got, "AAF-inline_tok3n") {
		t.Fatalf("redactor after BuildSinks: %q still shows the token", got)
	}
}

// TestRedactedHidesEachChannelsSecrets: the parsed URL of every channel
// lists its credentials (what the configuration's redactor learns) and
// its Redacted form shows none of them, while what is not a credential
// stays readable (a generic webhook's /api/webhook, Mattermost's
// username and channel, Teams' host).
func TestRedactedHidesEachChannelsSecrets(t *testing.T) {
	t.Parallel()
	readable := map[string][]string{"generic": {"/api/webhook/", "template=json"}, "mattermost": {"lookout-bot@", "/alerts"},
		"teams": {"host=example.webhook.office.com"}, "rocketchat": {"lookout-bot@", "/alerts"}, "googlechat": {"/v1/spaces/"}, "zulip": {"stream=alerts"}, "pushover": {"devices=phone"}, "matrix": {"rooms="}}
	for _, service := range services {
		fake := urltest.New(t, service)
		s := newSink(t, fake, egress.Policy{})
		secrets := s.Channel().Secrets()
		for _, sec := range fake.Secrets() {
			if !slices.Contains(secrets, sec) {
				t.Errorf("%s: Secrets() = %q, missing %q", service, secrets, sec)
			}
		}
		red := s.Channel().Redacted()
		noSecrets(t, fake, "redacted URL", red)
		for _, want := range readable[service] {
			if !strings.Contains(red, want) {
				t.Errorf("%s: redacted URL %q hides %q, which is no credential", service, red, want)
			}
		}
	}
}

// TestMatrixRetryIsNotASecondMessage: a Matrix delivery to two rooms whose
// second room fails is retried to both, under the same transaction ids
// (from the dedupe key): the first room's server answers its stored event
// again, and each room shows the message once.
func TestMatrixRetryIsNotASecondMessage(t *testing.T) {
	t.Parallel()
	fake := urltest.New(t, "matrix")
	fake.Answer = func(title string, n int) int {
		if n == 2 { // the second room, first attempt
			return http.StatusBadGateway
		}
		return 0
	}
	s := newSink(t, fake, egress.Policy{})
	n := notification("split")
	if err := s.Deliver(context.Background(), n); err == nil || !strings.Contains(err.Error(), "502") {
		t.Fatalf("first attempt: %v, want the 502", err)
	}
	n.Attempt = 2
	if err := s.Deliver(context.Background(), n); err != nil {
		t.Fatalf("retry: %v", err)
	}
	if got, reqs := fake.Accepted("split"), fake.Requests("split"); got != 2 || reqs != 4 {
		t.Fatalf("%d messages stored from %d requests, want 2 (one per room) from 4", got, reqs)
	}
	if p := fake.Problems(); len(p) > 0 {
		t.Errorf("requests the real API refuses: %q", p)
	}
}
