package notify

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/egress"
	"github.com/lookout-dev/lookout/internal/pgtest"
)

// loadGlobal writes lookout.yaml with an empty sources directory and loads
// it, as the evaluator does.
func loadGlobal(t *testing.T, global string) *config.Config {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, config.SourcesDir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, config.GlobalFile), []byte(global), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestSinkEchoedSecretIsRedacted: a webhook receiver that echoes the
// sink's configured token in its error body (a 400, and a 503 retried)
// leaves no trace of it in notifications.last_error nor in the
// deliverer's logs.
func TestSinkEchoedSecretIsRedacted(t *testing.T) {
	t.Parallel()
	const token = "hook-token-0a1b2c3d4e"
	env := "LOOKOUT_TEST_SINK_ECHO_TOKEN"
	os.Setenv(env, token)
	t.Cleanup(func() { os.Unsetenv(env) })
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		code := http.StatusBadRequest
		if r.URL.Path == "/busy" {
			code = http.StatusServiceUnavailable
		}
		http.Error(w, fmt.Sprintf("no hook for credentials %q", r.Header.Get("Authorization")), code)
	}))
	t.Cleanup(srv.Close)
	cfg := loadGlobal(t, fmt.Sprintf(`sinks:
  hook: {type: webhook, url: %q, headers: {Authorization: 'Bearer ${%s}'}}
  busy: {type: webhook, url: %q, headers: {Authorization: 'Bearer ${%s}'}, max_attempts: 5}
`, srv.URL+"/hook", env, srv.URL+"/busy", env))
	logs := &syncBuffer{}
	logger := slog.New(slog.NewJSONHandler(logs, nil)) // not redacting: the deliverer must
	sinks, err := BuildSinks(&cfg.Global, logger)
	if err != nil {
		t.Fatal(err)
	}
	pool := pgtest.Pool(t)
	insertNotifications(t, pool, "hook", "h", 2)
	insertNotifications(t, pool, "busy", "b", 2)
	conf := DelivererConfigFrom(&cfg.Global)
	conf.Owner = "test"
	d := NewDeliverer(pool, sinks, conf, logger)
	ctx := context.Background()
	if _, err := d.DeliverDue(ctx); err != nil {
		t.Fatal(err)
	}
	rows, err := pool.Query(ctx, `SELECT sink, status, coalesce(last_error, '') FROM notifications ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for rows.Next() {
		var sink, status, lastErr string
		if err := rows.Scan(&sink, &status, &lastErr); err != nil {
			t.Fatal(err)
		}
		n++
		if strings.Contains(lastErr, token) || !strings.Contains(lastErr, `credentials "Bearer [REDACTED]"`) {
			t.Errorf("%s (%s): last_error %q", sink, status, lastErr)
		}
	}
	if err := rows.Err(); err != nil || n != 4 {
		t.Fatalf("%d notifications read: %v", n, err)
	}
	if l := logs.String(); strings.Contains(l, token) || !strings.Contains(l, "[REDACTED]") {
		t.Errorf("logs hold the secret, or no redaction:\n%s", l)
	}
}

// TestSinkEgressPolicy: webhook and Slack sinks dial through lookout.yaml's
// egress policy: a receiver on loopback is reached by default and refused
// under deny_private, before anything is sent.
func TestSinkEgressPolicy(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	got := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got++
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	sinks := fmt.Sprintf("sinks:\n  hook: {type: webhook, url: %q}\n  chat: {type: slack, url: %q}\n", srv.URL+"/hook", srv.URL+"/chat")
	n := &Notification{ID: 1, DedupeKey: "k", Title: "t", Body: "b", Attempt: 1, DeliveryID: "1-1-x",
		Payload: Payload{DedupeKey: "k", Kind: KindSingle, CreatedAt: time.Now()}}
	for _, tc := range []struct {
		global string
		denied bool
	}{
		{"", false},
		{"egress: {deny_private: true}\n", true},
		{"egress: {deny_private: true, allow: [127.0.0.1]}\n", false},
	} {
		cfg := loadGlobal(t, tc.global+sinks)
		built, err := BuildSinks(&cfg.Global, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"hook", "chat"} {
			mu.Lock()
			before := got
			mu.Unlock()
			err := built[name].Deliver(context.Background(), n)
			var de *egress.DeniedError
			mu.Lock()
			sent := got - before
			mu.Unlock()
			if errors.As(err, &de) != tc.denied || (!tc.denied && err != nil) || (sent == 1) == tc.denied {
				t.Errorf("%q %s: %v, %d requests received; want denied %t", tc.global, name, err, sent, tc.denied)
			}
		}
		for _, s := range built {
			switch s := s.(type) {
			case *WebhookSink:
				s.client.CloseIdleConnections()
			case *SlackSink:
				s.client.CloseIdleConnections()
			}
		}
	}
}
