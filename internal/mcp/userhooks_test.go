package mcp_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/lookout-dev/lookout/internal/control"
	"github.com/lookout-dev/lookout/internal/definitions"
)

// Over MCP, through the SDK's client: create_watch with a webhook of the
// user's own answers its secret once (and to a retry with the same
// idempotency_key); get_watch and list_watches show it redacted;
// rotate_webhook_secret answers a new one; a metadata URL (refused even with api.allow_private) is a tool error
// naming /watch/webhook/url; a source's token is shown redacted.
func TestOwnWebhookOverMCP(t *testing.T) {
	t.Parallel()
	f := setup(t)
	cs := f.connect("alice", nil)
	args := map[string]any{"source": "releases", "idempotency_key": "hook-1",
		"watch": map[string]any{"name": "hooked", "when": "true", "webhook": map[string]any{"url": "https://hooks.example.com/lookout"}}}
	created := call[control.CreatedWatch](t, cs, "create_watch", args)
	secret := created.Watch.WebhookSecret
	if !strings.HasPrefix(secret, "whsec_") || strings.Contains(string(created.Watch.Definition), secret) {
		t.Fatalf("create_watch: %+v", created.Watch)
	}
	if again := call[control.CreatedWatch](t, cs, "create_watch", args); again.Watch.WebhookSecret != secret {
		t.Errorf("the retry with the same idempotency_key answered secret %q, want the first", again.Watch.WebhookSecret)
	}
	got := call[control.WatchView](t, cs, "get_watch", map[string]any{"source": "releases", "name": "hooked"})
	page := call[control.WatchPage](t, cs, "list_watches", map[string]any{})
	b, _ := json.Marshal([]any{got, page})
	if got.WebhookSecret != "" || strings.Contains(string(b), secret) || !strings.Contains(string(got.Definition), `"secret":"[redacted]"`) {
		t.Errorf("get_watch and list_watches: %s", b)
	}
	rotated := call[control.WatchView](t, cs, "rotate_webhook_secret", map[string]any{"source": "releases", "name": "hooked"})
	if !strings.HasPrefix(rotated.WebhookSecret, "whsec_") || rotated.WebhookSecret == secret {
		t.Errorf("rotate_webhook_secret: %+v", rotated)
	}
	if _, stored, err := definitions.OwnWebhook(context.Background(), f.pool, f.keys, "releases", "hooked"); err != nil || stored != rotated.WebhookSecret {
		t.Errorf("the stored secret after the rotation: %v", err)
	}
	msg := toolError(t, cs, "create_watch", map[string]any{"source": "releases",
		"watch": map[string]any{"name": "private", "webhook": map[string]any{"url": "http://169.254.169.254/latest/meta-data"}}})
	if !strings.Contains(msg, "/watch/webhook/url") || !strings.Contains(msg, "169.254.169.254") {
		t.Errorf("a metadata URL: %s", msg)
	}
	// A source's token is stored sealed and shown redacted.
	src := call[control.CreatedWatch](t, cs, "create_watch", map[string]any{
		"new_source": map[string]any{"name": "alice-gh", "connector": "github", "every": "1h",
			"github": map[string]any{"repo": "lookout-dev/lookout", "token": "ghp_aliceMcpToken123456", "base_url": "https://api.github.com"}},
		"watch": map[string]any{"name": "all", "when": "true"}})
	if src.Source == nil || strings.Contains(string(src.Source.Definition), "ghp_alice") || !strings.Contains(string(src.Source.Definition), `"token":"[redacted]"`) {
		t.Errorf("the created source: %+v", src.Source)
	}
	var n int
	if err := f.pool.QueryRow(context.Background(), `SELECT count(*) FROM source_definitions WHERE definition::text LIKE '%ghp_alice%'`).Scan(&n); err != nil || n != 0 {
		t.Errorf("the token is stored in clear (%d rows, %v)", n, err)
	}
}
