package channel_test

import (
	"strings"
	"testing"

	"github.com/lookout-dev/lookout/internal/notify"
	"github.com/lookout-dev/lookout/internal/notify/channel"
)

// TestParseRefusesWithoutSecrets: a URL that cannot be sent to is an error
// saying what is wrong, never quoting its credentials.
func TestParseRefusesWithoutSecrets(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ url, want string }{
		{"slackish://xoxb-secret-token@chan", `has scheme "slackish", which is not a channel of the url sink (known: discord, generic, googlechat, gotify, matrix, mattermost, ntfy, pushover, rocketchat, teams, telegram, zulip)`},
		{"ntfy.sh/topic-secret", "has no scheme"},
		{"discord://@1234567890", "is not a valid discord URL (discord://@[REDACTED]): "},
		{"discord://tok3n-secret-value@", "is not a valid discord URL (discord://[REDACTED]@): "},
		{"telegram://123456:AAF-secret-tok@telegram", "is not a valid telegram URL"},
		{"telegram://not-a-valid-token-secret@telegram?chats=1", "is not a valid telegram URL"},
		{"gotify://gotify.example", "has no application token"},
		{"ntfy://ntfy.sh", "is not a valid ntfy URL"},
		{"ntfy://u:pass-secret-1@ntfy.sh/topic?disabletlsverification=yes", "certificates are always verified"},
		{"gotify://gotify.example/Atoken-secret-1?insecureskipverify=yes", "certificates are always verified"},
		{"generic://hooks.example/in/hook-secret-123456?template=myform", "template=myform: only template=json"},
		{"generic://hooks.example/in/hook-secret-123456?method=GET", "method=GET: must be POST, PUT or PATCH"},
		{"generic:///in/hook-secret-123456", "has no host"},
		{"teams://11111111-2222-3333-4444-555555555555@66666666-7777-8888-9999-aaaaaaaaaaaa/0123456789abcdef0123456789abcdef/bbbbbbbb-cccc-dddd-eeee-ffffffffffff/extra-secret",
			"is not a valid teams URL (teams://[REDACTED]@[REDACTED]/[REDACTED]/[REDACTED]/[REDACTED]): "},
		{"teams://11111111-2222-3333-4444-555555555555@66666666-7777-8888-9999-aaaaaaaaaaaa/0123456789abcdef0123456789abcdef/bbbbbbbb-cccc-dddd-eeee-ffffffffffff/extra-secret?host=evil.example",
			"host=evil.example: must be your organization's <name>.webhook.office.com"},
		{"teams://group@tenant/short-secret/x/y?host=org.webhook.office.com", "is not a valid teams URL"},
		{"mattermost://chat.example", "is not a valid mattermost URL"},
		{"rocketchat://chat.example/only-a-secret-token", "is not a valid rocketchat URL (rocketchat://chat.example/[REDACTED])"},
		{"googlechat://chat.googleapis.com/v1/spaces/AAAA/messages?key=k-secret", "needs the webhook's key and token"},
		{"googlechat://chat.googleapis.com/v1/spaces/AAAA/messages?key=k-secret&token=", "is not a valid googlechat URL"},
		{"googlechat://chat.googleapis.com/elsewhere?key=k-secret&token=t-secret", "is not a space's webhook"},
		{"zulip://bot@zulip.example/?stream=a", "is not a valid zulip URL"},
		{"zulip://bot%40zulip.example:key-secret@zulip.example/", "has no stream"},
		{"pushover://shoutrrr@user-secret-key/", "is not a valid pushover URL (pushover://shoutrrr@[REDACTED]/)"},
		{"pushover://shoutrrr:tok-secret@user-secret-key/?priority=3", "priority=3: must be from -2 to 2"},
		{"matrix://bob:pw-secret@matrix.example/?rooms=!r:matrix.example", "a user and password (which need a login) are not supported"},
		{"matrix://:syt-secret@matrix.example/", "has no rooms"},
		{"matrix://:syt-secret@matrix.example/?rooms=ops", "rooms: #ops is a room alias"},
		{"matrix://matrix.example/?rooms=!r:matrix.example", "has no access token"},
		// Matrix's path is no credential: its words stay readable in the hint.
		{"matrix://u:pw-secret@m.example/room", "write matrix://:<access token>@<homeserver>/?rooms=!<room id>"},
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
		"gotify://gotify.example/sub/Atoken", "ntfy://:tk_token@ntfy.example/t?priority=high",
		"generic://hooks.example/api/hook", "generic://u:p@hooks.example/in?template=json&method=put&@Authorization=Bearer+x",
		"teams://11111111-2222-3333-4444-555555555555@66666666-7777-8888-9999-aaaaaaaaaaaa/0123456789abcdef0123456789abcdef/bbbbbbbb-cccc-dddd-eeee-ffffffffffff/V2x?host=org.webhook.office.com",
		"mattermost://chat.example/hooktoken", "rocketchat://chat.example:3000/a/b/@someone",
		"googlechat://chat.googleapis.com/v1/spaces/AAAA/messages?key=k&token=t",
		"zulip://bot%40zulip.example:key@zulip.example:8443/?stream=ops&topic=lookout", "pushover://shoutrrr:tok@user/?priority=2&devices=a",
		"matrix://:syt_tok@matrix.example:8448/?rooms=!a:matrix.example,!b:matrix.example", "mattermost://bot@chat.example:8065/hooktoken/town-square?icon=https://i.example/a.png"} {
		if _, err := channel.Parse(ok); err != nil {
			t.Errorf("Parse(%q): %v", ok, err)
		}
	}
}

// TestGenericRequest: a generic URL without a template sends the message
// as plain text, with its method, its @headers under shoutrrr's spelling
// and its user:password as basic auth (not in the URL it requests).
func TestGenericRequest(t *testing.T) {
	t.Parallel()
	c, err := channel.Parse("generic://hook:pw-secret@hooks.example:8443/in?method=put&@XApiKey=k-secret&disabletls=yes&keep=1")
	if err != nil {
		t.Fatal(err)
	}
	n := &notify.Notification{Title: "Price fell", Body: "to 12 €", Kind: notify.KindSingle,
		Payload: notify.Payload{Record: notify.PayloadRecord{URL: "https://shop.example/r1"}}}
	reqs, err := c.Requests(n, "")
	if err != nil || len(reqs) != 1 {
		t.Fatalf("Requests: %v, %d requests", err, len(reqs))
	}
	r := reqs[0]
	if r.Method != "PUT" || r.URL != "http://hooks.example:8443/in?keep=1" {
		t.Errorf("request %s %s, want PUT http://hooks.example:8443/in?keep=1", r.Method, r.URL)
	}
	if got := string(r.Body); got != "Price fell\n\nto 12 €\nhttps://shop.example/r1" {
		t.Errorf("body %q", got)
	}
	if r.Header.Get("X-Api-Key") != "k-secret" || !strings.HasPrefix(r.Header.Get("Content-Type"), "text/plain") ||
		r.Header.Get("Authorization") != "Basic aG9vazpwdy1zZWNyZXQ=" {
		t.Errorf("headers %v", r.Header)
	}
	if red := c.Redacted(); strings.Contains(red, "secret") {
		t.Errorf("Redacted() = %q", red)
	}
}
