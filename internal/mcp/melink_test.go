package mcp_test

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/lookout-dev/lookout/internal/control"
)

// me_link mints a sign-in link of the caller's token: its path, its
// expiry within the ttl asked, its hash stored, the minting audited; a
// ttl past an hour is a tool error naming the field.
func TestMeLink(t *testing.T) {
	t.Parallel()
	f := setup(t)
	cs := f.connect("alice", nil)
	before := time.Now()
	l := call[control.SignInLink](t, cs, "me_link", map[string]any{"ttl": "15m"})
	if !strings.HasPrefix(l.Path, "/me/link?code=lkl_") || l.Owner != "alice" || l.URL != "" {
		t.Fatalf("me_link: %+v", l)
	}
	if d := l.ExpiresAt.Sub(before); d < 15*time.Minute-time.Second || d > 15*time.Minute+time.Minute {
		t.Errorf("expires in %v, want 15m", d)
	}
	code, _ := url.QueryUnescape(strings.TrimPrefix(l.Path, "/me/link?code="))
	var n int
	if err := f.pool.QueryRow(context.Background(), `SELECT count(*) FROM sign_in_links WHERE hash = sha256(convert_to($1, 'UTF8')) AND owner = 'alice' AND used_at IS NULL`, code).Scan(&n); err != nil || n != 1 {
		t.Errorf("stored links of the code: %d, %v", n, err)
	}
	if err := f.pool.QueryRow(context.Background(), `SELECT count(*) FROM audit_log WHERE kind = 'sign_in_link' AND action = 'create' AND via = 'mcp' AND owner = 'alice'`).Scan(&n); err != nil || n != 1 {
		t.Errorf("audited mints: %d, %v", n, err)
	}
	if msg := toolError(t, cs, "me_link", map[string]any{"ttl": "2h"}); !strings.Contains(msg, "/ttl: must be a duration between 1m and 1h") {
		t.Errorf("ttl 2h: %s", msg)
	}
}
