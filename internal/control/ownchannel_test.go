package control

import (
	"context"
	"encoding/json"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/lookout-dev/lookout/internal/definitions"
	"github.com/lookout-dev/lookout/internal/secrets"
)

// TestPrepareChannel: a watch's own channel is checked as the url sink
// checks it and, for the host it connects to, by the egress policy of
// untrusted URLs (as a webhook of its own); it is stored sealed and shown
// redacted; an update that sends it back as shown keeps it; errors are
// located and never quote the URL's secrets.
func TestPrepareChannel(t *testing.T) {
	k, _ := secrets.NewKey("k1")
	keys, _ := secrets.Parse(k)
	r := fakeResolver{
		"ntfy.example":    {netip.MustParseAddr("93.184.216.34")},
		"ntfy.internal":   {netip.MustParseAddr("10.0.0.5")},
		"discord.com":     {netip.MustParseAddr("162.159.135.232")},
		"gotify.metadata": {netip.MustParseAddr("169.254.169.254")},
	}
	s := &Service{conf: Config{Keys: keys}, resolver: r}
	ctx := context.Background()
	const password = "pass-0123-secret"
	def := `{"name": "w", "channel": {"url": "ntfy://alice:` + password + `@ntfy.example/alerts-7f3a"}}`
	out, err := s.prepareChannel(ctx, "src", json.RawMessage(def), nil, "/watch")
	if err != nil {
		t.Fatal(err)
	}
	var got struct{ Channel struct{ URL, Secret string } }
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), password) || strings.Contains(got.Channel.URL, "alerts-7f3a") ||
		got.Channel.URL != "ntfy://[REDACTED]@ntfy.example/[REDACTED]" || !definitions.IsSealed(got.Channel.Secret) {
		t.Fatalf("stored %s", out)
	}
	shown := string(definitions.RedactCredentials(out))
	if strings.Contains(shown, "sealed") || !strings.Contains(shown, `"secret":"[redacted]"`) {
		t.Errorf("shown %s", shown)
	}
	// Sent back as shown: the stored URL stays.
	again, err := s.prepareChannel(ctx, "src", json.RawMessage(shown), out, "")
	if err != nil || !strings.Contains(string(again), got.Channel.Secret) {
		t.Errorf("update as shown: %s %v", again, err)
	}
	for _, tc := range []struct{ def, pointer, want string }{
		{`{"channel": "ntfy://x"}`, "/watch/channel", "must be an object"},
		{`{"channel": {}}`, "/watch/channel/url", "is required"},
		{`{"channel": {"url": "ntfy://ntfy.example/t", "headers": {}}}`, "/watch/channel/headers", "is not a key"},
		{`{"channel": {"url": "ntfy://ntfy.example/t", "secret": "x"}}`, "/watch/channel/secret", "is set by lookout"},
		{`{"channel": {"url": "signal://u:` + password + `@m.example/room"}}`, "/watch/channel/url", `has scheme "signal"`},
		{`{"channel": {"url": "discord://@12345678901"}}`, "/watch/channel/url", "is not a valid discord URL"},
		{`{"channel": {"url": "ntfy://u:` + password + `@ntfy.internal/t"}}`, "/watch/channel/url", "a private address; lookout does not fetch such addresses for API users"},
		{`{"channel": {"url": "gotify://gotify.metadata/A` + password + `"}}`, "/watch/channel/url", "a cloud metadata address"},
		{`{"channel": {"url": "ntfy://ntfy.example:1/t?scheme=http"}}`, "", ""},
		{`{"channel": {"url": "discord://` + password + `@12345678901"}}`, "", ""},
	} {
		_, err := s.prepareChannel(ctx, "src", json.RawMessage(tc.def), nil, "/watch")
		var inv *InvalidError
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.def, err)
		case tc.want == "":
		case !errors.As(err, &inv) || inv.Errors[0].Pointer != tc.pointer || !strings.Contains(err.Error(), tc.want):
			t.Errorf("%s: %v, want %q at %s", tc.def, err, tc.want, tc.pointer)
		case strings.Contains(err.Error(), password) || strings.Contains(err.Error(), "12345678901"):
			t.Errorf("%s: the error shows a secret: %v", tc.def, err)
		}
	}
	if _, err := (&Service{resolver: r}).prepareChannel(ctx, "src", json.RawMessage(def), nil, "/watch"); err == nil || !strings.Contains(err.Error(), "LOOKOUT_SECRET_KEY") {
		t.Errorf("without keys: %v", err)
	}
}
