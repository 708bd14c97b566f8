package notify

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lookout-dev/lookout/internal/outbox"
	"github.com/lookout-dev/lookout/internal/pgtest"
	"github.com/lookout-dev/lookout/internal/testsignal"
)

// TestDeliveriesLeaveAttemptRows: every attempt the deliverer makes is a
// delivery_attempts row written with its outcome: a receiver's 503 (its
// body echoing the sink's token, redacted in the error and in the
// excerpt), then its 200; a 410 that makes the row dead; a connection
// the egress policy refuses, with no HTTP status.
func TestDeliveriesLeaveAttemptRows(t *testing.T) {
	t.Parallel()
	const token = "hook-token-9f8e7d6c5b"
	env := "LOOKOUT_TEST_ATTEMPTS_TOKEN"
	os.Setenv(env, token)
	t.Cleanup(func() { os.Unsetenv(env) })
	var flaky atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/flaky":
			if flaky.Add(1) == 1 {
				http.Error(w, fmt.Sprintf("busy; no slot for %q", r.Header.Get("Authorization")), http.StatusServiceUnavailable)
				return
			}
			fmt.Fprint(w, "ok")
		default:
			http.Error(w, "this hook is gone", http.StatusGone)
		}
	}))
	t.Cleanup(srv.Close)
	// Loopback is allowed (the receiver); 10.255.255.1, a private address, is not.
	cfg := loadGlobal(t, fmt.Sprintf(`egress: {deny_private: true, allow: [127.0.0.1]}
sinks:
  flaky: {type: webhook, url: %q, headers: {Authorization: 'Bearer ${%s}'}, max_attempts: 5}
  gone: {type: webhook, url: %q}
  blocked: {type: webhook, url: "http://10.255.255.1/hook", max_attempts: 1}
`, srv.URL+"/flaky", env, srv.URL+"/gone"))
	sinks, err := BuildSinks(&cfg.Global, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	pool := pgtest.Pool(t)
	for _, s := range []string{"flaky", "gone", "blocked"} {
		insertNotifications(t, pool, s, s, 1)
	}
	conf := DelivererConfigFrom(&cfg.Global)
	conf.Owner, conf.RetryMin, conf.RetryMax = "test", time.Millisecond, time.Millisecond
	d := NewDeliverer(pool, sinks, conf, testLogger(t))
	ctx := context.Background()
	testsignal.Eventually(t, "flaky delivered, the others dead", func() bool {
		if _, err := d.DeliverDue(ctx); err != nil {
			t.Fatal(err)
		}
		return countStatus(t, pool, "flaky", "delivered") == 1 && countStatus(t, pool, "gone", "dead") == 1 &&
			countStatus(t, pool, "blocked", "dead") == 1
	})
	var got []string
	for _, sink := range []string{"flaky", "gone", "blocked"} {
		var id int64
		if err := pool.QueryRow(ctx, `SELECT id FROM notifications WHERE sink = $1`, sink).Scan(&id); err != nil {
			t.Fatal(err)
		}
		as, err := outbox.Attempts(ctx, pool, "src", id)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range as {
			st, e, r := "-", "-", "-"
			if a.HTTPStatus != nil {
				st = fmt.Sprint(*a.HTTPStatus)
			}
			if a.Error != nil {
				e = *a.Error
			}
			if a.Response != nil {
				r = *a.Response
			}
			if a.Duration < 0 || a.StartedAt.IsZero() {
				t.Errorf("%s attempt %d: started %v, took %v", sink, a.Attempt, a.StartedAt, a.Duration)
			}
			got = append(got, fmt.Sprintf("%s #%d %s %s | %s | %s", a.Sink, a.Attempt, a.Outcome, st, e, r))
		}
	}
	want := []string{
		`flaky #1 retry 503 | webhook answered 503 Service Unavailable: busy; no slot for "Bearer [REDACTED]" | busy; no slot for "Bearer [REDACTED]"`,
		`flaky #2 delivered 200 | - | ok`,
		`gone #1 dead 410 | permanent: webhook answered 410 Gone: this hook is gone | this hook is gone`,
	}
	if len(got) != 4 || strings.Join(got[:3], "\n") != strings.Join(want, "\n") ||
		!strings.HasPrefix(got[3], "blocked #1 refused - | ") || !strings.Contains(got[3], "egress policy refuses connections to 10.255.255.1:80") ||
		!strings.HasSuffix(got[3], " | -") {
		t.Errorf("attempts:\n%s\nwant\n%s\nblocked #1 refused - | ...egress policy refuses connections to 10.255.255.1:80... | -",
			strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, g := range got {
		if strings.Contains(g, token) {
			t.Errorf("an attempt row holds the sink's token: %s", g)
		}
	}
}
