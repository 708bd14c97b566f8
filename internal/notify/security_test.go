package notify

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/lookout-dev/lookout/internal/config"
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
	// The sinks as the webhook sink type builds them (no sink type is
	// linked in this package's tests; notify/all's tests build them
	// through BuildSinks): Load expanded ${ENV} and noted the token.
	sinks := map[string]Sink{}
	for _, name := range []string{"hook", "busy"} {
		s, err := NewWebhookSink(WebhookOptions{URL: srv.URL + "/" + name, Headers: map[string]string{"Authorization": "Bearer " + token},
			Concurrency: cfg.Global.Sinks[name].Concurrency})
		if err != nil {
			t.Fatal(err)
		}
		sinks[name] = s
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
