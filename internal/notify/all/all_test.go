package all_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/egress"
	"github.com/lookout-dev/lookout/internal/notify"
	_ "github.com/lookout-dev/lookout/internal/notify/all"
)

// Every sink type lookout ships is registered by importing all.
func TestEverySinkTypeIsRegistered(t *testing.T) {
	want := []string{"command", "email", "log", "slack", "webhook"}
	if got := notify.Kinds(); !slices.Equal(got, want) {
		t.Errorf("registered %v, want %v", got, want)
	}
}

// loadGlobal writes lookout.yaml with an empty sources directory and loads
// it, as the evaluator does.
func loadGlobal(t *testing.T, global string) (*config.Config, error) {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, config.SourcesDir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, config.GlobalFile), []byte(global), 0o644); err != nil {
		t.Fatal(err)
	}
	return config.Load(dir)
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
	n := &notify.Notification{ID: 1, DedupeKey: "k", Title: "t", Body: "b", Attempt: 1, DeliveryID: "1-1-x",
		Payload: notify.Payload{DedupeKey: "k", Kind: notify.KindSingle, CreatedAt: time.Now()}}
	for _, tc := range []struct {
		global string
		denied bool
	}{
		{"", false},
		{"egress: {deny_private: true}\n", true},
		{"egress: {deny_private: true, allow: [127.0.0.1]}\n", false},
	} {
		cfg, err := loadGlobal(t, tc.global+sinks)
		if err != nil {
			t.Fatal(err)
		}
		built, err := notify.BuildSinks(&cfg.Global, slog.New(slog.DiscardHandler))
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
	}
}
