package channel_test

import (
	"strings"
	"testing"

	"github.com/lookout-dev/lookout/internal/notify/channel"
)

// TestParseRefusesWithoutSecrets: a URL that cannot be sent to is an error
// saying what is wrong, never quoting its credentials.
func TestParseRefusesWithoutSecrets(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ url, want string }{
		{"slackish://xoxb-secret-token@chan", `has scheme "slackish", which is not a channel of the url sink (known: discord, gotify, ntfy, telegram)`},
		{"ntfy.sh/topic-secret", "has no scheme"},
		{"discord://@1234567890", "is not a valid discord URL (discord://@[REDACTED]): "},
		{"discord://tok3n-secret-value@", "is not a valid discord URL (discord://[REDACTED]@): "},
		{"telegram://123456:AAF-secret-tok@telegram", "is not a valid telegram URL"},
		{"telegram://not-a-valid-token-secret@telegram?chats=1", "is not a valid telegram URL"},
		{"gotify://gotify.example", "has no application token"},
		{"ntfy://ntfy.sh", "is not a valid ntfy URL"},
		{"ntfy://u:pass-secret-1@ntfy.sh/topic?disabletlsverification=yes", "certificates are always verified"},
		{"gotify://gotify.example/Atoken-secret-1?insecureskipverify=yes", "certificates are always verified"},
	} {
		_, err := channel.Parse(tc.url)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q) = %v, want an error containing %q", tc.url, err, tc.want)
			continue
		}
		for _, sec := range []string{"secret", "1234567890", "AAF-"} {
			if strings.Contains(err.Error(), sec) {
				t.Errorf("Parse(%q): %q shows %q", tc.url, err, sec)
			}
		}
	}
	for _, ok := range []string{"ntfy://ntfy.sh/topic", "discord://token@1234", "telegram://123456:AAF-tok@telegram?chats=@ch,-100",
		"gotify://gotify.example/sub/Atoken", "ntfy://:tk_token@ntfy.example/t?priority=high"} {
		if _, err := channel.Parse(ok); err != nil {
			t.Errorf("Parse(%q): %v", ok, err)
		}
	}
}
