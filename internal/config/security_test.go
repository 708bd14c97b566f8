package config

import (
	"net/netip"
	"os"
	"strings"
	"testing"
)

func TestSecurityValidation(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ global, source, want string }{
		{"", fileSource + "follow_redirects: always\n",
			`sources/s.yaml:4: follow_redirects must be one of same_origin, any, none, not "always"`},
		{"egress:\n  allow: [10.0.0.0/8, not-an-ip]\n", fileSource,
			`lookout.yaml:2: egress.allow[1] must be an IP address or a CIDR prefix (10.1.2.0/24), not "not-an-ip"`},
		{"egress: {deny: true}\n", fileSource, `lookout.yaml:1: egress.deny is not a known key (known: allow, deny_private)`},
	} {
		_, err := Load(writeDir(t, tc.global, tc.source))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q / %q: got %v, want %s", tc.global, tc.source, err, tc.want)
		}
	}
}

func TestEgressPolicy(t *testing.T) {
	t.Parallel()
	cfg, err := Load(writeDir(t, "egress: {deny_private: true, allow: [10.1.2.0/24, 127.0.0.1]}\n", fileSource+"follow_redirects: any\n"))
	if err != nil {
		t.Fatal(err)
	}
	p := cfg.Global.Egress.Policy()
	want := []netip.Prefix{netip.MustParsePrefix("10.1.2.0/24"), netip.MustParsePrefix("127.0.0.1/32")}
	if !p.DenyPrivate || len(p.Allow) != 2 || p.Allow[0] != want[0] || p.Allow[1] != want[1] {
		t.Errorf("policy %+v", p)
	}
	if cfg.Sources[0].FollowRedirects != "any" {
		t.Errorf("follow_redirects %q", cfg.Sources[0].FollowRedirects)
	}
}

// TestRedactorCollectsEnvValues: the redactor knows the value of every
// ${ENV} reference of lookout.yaml and the source files (not the whole
// scalar it sits in), except values shorter than 4 bytes.
func TestRedactorCollectsEnvValues(t *testing.T) {
	// os.Setenv: names unique to this test, which does not run in parallel
	// with itself.
	for k, v := range map[string]string{"LOOKOUT_TEST_RCEV_HOOK": "hook-secret-1", "LOOKOUT_TEST_RCEV_KEY": "key-secret-2", "LOOKOUT_TEST_RCEV_PORT": "443"} {
		os.Setenv(k, v)
		t.Cleanup(func() { os.Unsetenv(k) })
	}
	global := "sinks:\n  ops: {type: webhook, url: 'https://hooks.example/${LOOKOUT_TEST_RCEV_HOOK}', headers: {X-Port: '${LOOKOUT_TEST_RCEV_PORT}'}}\n"
	src := "name: s\nconnector: http\nhttp: {url: 'https://api.example/items', headers: {X-Api-Key: '${LOOKOUT_TEST_RCEV_KEY}'}}\n"
	cfg, err := Load(writeDir(t, global, src))
	if err != nil {
		t.Fatal(err)
	}
	got := cfg.Global.Redactor().String("POST https://hooks.example/hook-secret-1 failed: key-secret-2 on port 443")
	if want := "POST https://hooks.example/[REDACTED] failed: [REDACTED] on port 443"; got != want {
		t.Errorf("redacted %q, want %q", got, want)
	}
}
