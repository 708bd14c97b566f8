package api

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/lookout-dev/lookout/internal/control"
	"github.com/lookout-dev/lookout/internal/definitions"
)

// TestChannelResealedAfterRotation: a watch's own channel URL, sealed with
// k1, is sealed again with k2 by Reseal once the operator puts k2 first,
// and opens with k2 alone afterwards (as a webhook's secret does).
func TestChannelResealedAfterRotation(t *testing.T) {
	t.Parallel()
	k1, k2 := newKey(t, "k1"), newKey(t, "k2")
	s := setupSealed(t, ring(t, k1), true)
	const channelURL = "ntfy://alice:pass-rotate-0123@127.0.0.1:9/topic-rotate?scheme=http"
	body := `{"new_source": ` + s.newSourceJSON("alice-tickets") + `, "watch": {"name": "done", "when": "record.status == \"done\"", "channel": {"url": "` + channelURL + `"}}}`
	code, got, _ := s.raw(http.MethodPost, "/v1/watches", "alice", body)
	var created control.CreatedWatch
	if err := json.Unmarshal([]byte(got), &created); err != nil || code != http.StatusCreated || strings.Contains(got, "pass-rotate-0123") {
		t.Fatalf("create: %d %s", code, got)
	}
	rotated := ring(t, k2+","+k1)
	store := definitions.NewStore(s.pool, &definitions.Validator{Global: &s.cfg.Global, Keys: rotated})
	if n, err := store.Reseal(context.Background()); err != nil || n != 2 {
		t.Fatalf("Reseal: %d %v, want the source and the watch sealed with k1", n, err)
	}
	if u, err := definitions.OwnChannel(context.Background(), s.pool, ring(t, k2), "alice-tickets", "done"); err != nil || u != channelURL {
		t.Fatalf("with k2 only the channel: %q %v", u, err)
	}
}
