package imap_test

import (
	"strings"
	"testing"

	"github.com/lookout-dev/lookout/internal/connectors/conntest"
)

func TestBlockErrors(t *testing.T) {
	t.Parallel()
	const head = "name: s\nconnector: imap\n"
	cases := []struct{ block, want string }{
		{"imap:\n  username: u\n  password: p\n", "sources/s.yaml:3: imap.host is required"},
		{"imap:\n  host: a b\n  username: u\n  password: p\n", `sources/s.yaml:4: imap.host must be a host name or an address, not "a b"`},
		{"imap:\n  host: h\n  password: p\n", "sources/s.yaml:3: imap.username is required"},
		{"imap:\n  host: h\n  username: u\n", "sources/s.yaml:3: imap.password or imap.oauth_token or imap.oauth_token_file is required"},
		{"imap:\n  host: h\n  username: u\n  oauth_token: t\n  oauth_token_file: token\n", "sources/s.yaml:7: imap.oauth_token_file cannot be set together with imap.oauth_token"},
		{"imap:\n  host: h\n  username: u\n  password: p\n  oauth_token_file: token\n", "sources/s.yaml:7: imap.oauth_token_file cannot be set together with imap.password"},
		{"imap:\n  host: h\n  username: u\n  password: p\n  oauth_token: t\n", "sources/s.yaml:7: imap.oauth_token cannot be set together with imap.password"},
		{"imap:\n  host: h\n  username: u\n  password: p\n  security: ssl\n", `sources/s.yaml:7: imap.security must be tls, starttls or plain, not "ssl"`},
		{"imap:\n  host: h\n  username: u\n  password: p\n  port: 70000\n", "sources/s.yaml:7: imap.port must be between 1 and 65535, not 70000"},
		{"imap:\n  host: h\n  username: u\n  password: p\n  allow_plain: true\n", "sources/s.yaml:7: imap.allow_plain is only meaningful with security: plain"},
		{"imap:\n  host: h\n  username: u\n  password: p\n  mailboxes: [INBOX, INBOX]\n", `sources/s.yaml:7: imap.mailboxes[1] repeats mailbox "INBOX"`},
		{"imap:\n  host: h\n  username: u\n  password: p\n  batch_size: -1\n", "sources/s.yaml:7: imap.batch_size must be positive"},
		{"imap:\n  host: h\n  username: u\n  password: p\n  idle: 45m\n", "sources/s.yaml:7: imap.idle must be shorter than stuck_after (30m0s), or every idling run is reported stuck"},
		{"imap:\n  host: h\n  username: u\n  password: p\n  folder: x\n", "sources/s.yaml:7: imap.folder is not a known key"},
	}
	for _, tc := range cases {
		_, err := conntest.LoadSource(t, head+tc.block)
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("block\n%s\nerror = %v\nwant %q", tc.block, err, tc.want)
		}
	}
}

func TestBlockDefaults(t *testing.T) {
	t.Parallel()
	if _, err := conntest.LoadSource(t, "name: s\nconnector: imap\nimap:\n  host: imap.example.com\n  username: u\n  password: p\n  idle: 5m\n"); err != nil {
		t.Fatalf("valid block: %v", err)
	}
}
